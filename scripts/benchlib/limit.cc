// The `limit` row of scripts/bench (docs/benchmarks.md): how fast the watch stream could be read
// at all on this machine, measured in the same run as klua's rows. It parses every event line of
// the data set's events file with simdjson's DOM parser, the parser klua's decoder uses
// (src/wire/json.cc), and reads the three fields of handler-3-fields: no HTTP, no framing, no
// cache, no Lua.
//
//   bench-limit EVENTS_FILE COUNT ROUNDS
//
// The file is read into memory (padded as simdjson wants) before the clock starts. Each round
// parses the first COUNT lines once; prints `bench done seen=N best=S cpu=S bytes=B`, the fastest
// round's wall time (CLOCK_MONOTONIC) and CPU time (CLOCK_PROCESS_CPUTIME_ID), the protocol of
// the bench's other drivers. Bench-only code: nothing of klua is linked in.
#include <simdjson.h>

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

double clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// One round: every line parsed and its three fields read; the lines whose fields were all there.
size_t parse_round(simdjson::dom::parser &parser, const std::vector<std::string_view> &lines, size_t *sink) {
    size_t seen = 0;
    for (std::string_view line : lines) {
        // The buffer is padded past its end, so simdjson reads in place (no copy), as klua's blobs do.
        simdjson::dom::element event;
        if (parser.parse(line.data(), line.size(), false).get(event) != simdjson::SUCCESS) continue;
        std::string_view name, ns, phase;
        simdjson::dom::element object = event["object"];
        if (object["metadata"]["name"].get(name) || object["metadata"]["namespace"].get(ns) ||
            object["status"]["phase"].get(phase))
            continue;
        // Used, so that no compiler drops the reads.
        *sink += name.size() + ns.size() + phase.size();
        seen++;
    }
    return seen;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: bench-limit EVENTS_FILE COUNT ROUNDS\n");
        return 2;
    }
    size_t count = std::strtoul(argv[2], nullptr, 10);
    int rounds = std::atoi(argv[3]);
    simdjson::padded_string text;
    if (simdjson::padded_string::load(argv[1]).get(text)) {
        std::fprintf(stderr, "bench-limit: cannot read %s\n", argv[1]);
        return 1;
    }
    std::vector<std::string_view> lines;
    size_t bytes = 0;
    for (const char *p = text.data(), *end = p + text.size(); p < end && lines.size() < count;) {
        const char *nl = static_cast<const char *>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
        size_t len = nl ? static_cast<size_t>(nl - p) : static_cast<size_t>(end - p);
        lines.emplace_back(p, len);
        bytes += len + 1;
        p += len + 1;
    }
    simdjson::dom::parser parser;
    size_t sink = 0, seen = 0;
    double best = 0, best_cpu = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = clock_seconds(CLOCK_MONOTONIC), c0 = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
        seen = parse_round(parser, lines, &sink);
        double t = clock_seconds(CLOCK_MONOTONIC) - t0, c = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (r == 0 || t < best) best = t, best_cpu = c;
    }
    std::printf("bench done seen=%zu best=%.6f cpu=%.6f bytes=%zu sink=%zu\n", seen, best, best_cpu, bytes, sink);
    return seen == lines.size() ? 0 : 1;
}
