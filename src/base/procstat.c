/*
 * procstat.c - process_* figures from /proc/self, as Prometheus's process
 * collector computes them (stat's utime, stime, vsize, rss and starttime;
 * the entries of /proc/self/fd; RLIMIT_NOFILE).
 */
#include "base/procstat.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The system's boot time, for starttime, which counts ticks since boot. */
static double boot_time(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    char line[256];
    double btime = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "btime %lf", &btime) == 1) break;
    }
    fclose(f);
    return btime;
}

static double count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    double n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] != '.') n++;
    }
    closedir(d);
    return n - 1; /* the descriptor opendir holds */
}

int kl_procstat_read(kl_procstat *st) {
    memset(st, 0, sizeof *st);
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields start after
     * the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long utime, stime, vsize;
    unsigned long long starttime;
    long rss;
    if (sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d "
               "%llu %lu %ld",
               &utime, &stime, &starttime, &vsize, &rss) != 5)
        return -1;
    double ticks = (double)sysconf(_SC_CLK_TCK);
    st->cpu_seconds = (double)(utime + stime) / ticks;
    st->virtual_bytes = (double)vsize;
    st->resident_bytes = (double)rss * (double)sysconf(_SC_PAGESIZE);
    st->start_time = boot_time() + (double)starttime / ticks;
    st->open_fds = count_fds();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) st->max_fds = (double)rl.rlim_cur;
    return 0;
}
