/*
 * procstat.h - the process's own figures for the standard process_*
 * metrics (Prometheus's process collector reads the same /proc files).
 */
#ifndef KLUA_PROCSTAT_H
#define KLUA_PROCSTAT_H

typedef struct kl_procstat {
    double cpu_seconds;      /* user + system time */
    double resident_bytes;
    double virtual_bytes;
    double open_fds;
    double max_fds;          /* the soft RLIMIT_NOFILE */
    double start_time;       /* seconds since the Unix epoch */
} kl_procstat;

/* Fills st from /proc/self; returns 0, or -1 when /proc cannot be read. */
int kl_procstat_read(kl_procstat *st);

#endif
