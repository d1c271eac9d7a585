/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The command line: usage text and option parsing into g_opts. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

perf_opts_t g_opts;
const char *const test_names[] = {"lat",    "bw",      "rate",   "put_lat",
                                  "put_bw", "get_lat", "get_bw", "overlap"};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: tw_perf [options]               a job of one: rank 0 is its own partner\n"
        "       twrun -n 2 tw_perf [options]    rank 0 measures against rank 1\n"
        "       twrun -n N tw_perf [options]    N even: N/2 pairs at once, rank i against\n"
        "                                       rank i + N/2 (as osu_mbw_mr); rows per pair\n"
        "                                       and 'all' (bandwidth and rate summed)\n"
        "       twrun -n N tw_perf --pair A,B [options]\n"
        "                                       rank A measures against rank B, the others\n"
        "                                       are bystanders\n"
        "\n"
        "Point-to-point benchmarks over threadwire's public API (after UCX's ucx_perftest).\n"
        "Thread i of one rank pairs with thread i of the other (tag i, exact receives);\n"
        "each thread has its own completion queue.\n"
        "\n"
        "Tests:\n"
        "  -x, --test LIST        one test or a comma-separated list of them (default lat):\n"
        "                           lat   ping-pong; half the round trip: median, average,\n"
        "                                 min, max of the per-iteration samples\n"
        "                           bw    streaming: a window of sends per iteration, the\n"
        "                                 receiver acks each window with a 0-byte message\n"
        "                           rate  as bw, for the message rate (M msgs/s)\n"
        "                           overlap  how much of a computation a transfer hides:\n"
        "                                 lat's ping-pong (default 1 MiB) timed alone, then\n"
        "                                 with as long a computation between the send and\n"
        "                                 the wait; the row is the round trip with it, and\n"
        "                                 a '# overlap' line the share hidden (progress\n"
        "                                 threads drive the transfer meanwhile; manual\n"
        "                                 mode cannot)\n"
        "                         one-sided, into / out of a window the responder registered:\n"
        "                           put_lat  one tw_put at a time, timed to its completion:\n"
        "                                    the bytes are in place at the target then, so\n"
        "                                    this is a round trip, reported whole (UCX's\n"
        "                                    ucp_put_lat reports half of a put ping-pong)\n"
        "                           put_bw   a window of puts and one tw_flush per iteration\n"
        "                           get_lat  one tw_get at a time, timed to its completion\n"
        "                           get_bw   a window of gets per iteration\n"
        "                         The responder only waits for a final message (its progress\n"
        "                         thread, or in manual mode its wait, serves the operations).\n"
        "Sizes and counts:\n"
        "  -s, --size SIZE|MIN:MAX message size in bytes, or a sweep doubling from MIN to MAX\n"
        "                         (MAX included); suffixes k, m, g = 2^10, 2^20, 2^30\n"
        "                         (default 8 for the latency tests and rate, 1m for the\n"
        "                         bandwidth tests)\n"
        "  -n, --iters N          measured iterations per size (default: by test and size,\n"
        "                         latency 10000 for small messages down to 20, others 5000\n"
        "                         windows down to 10: about a second per size or less)\n"
        "  -W, --warmup N         unmeasured iterations first (default iters/10, 1..1000)\n"
        "  -w, --window W         sends, puts or gets in flight per bw, rate, put_bw or\n"
        "                         get_bw iteration (default 32)\n"
        "  -t, --threads T        threads per process, 1..%d (default 1)\n"
        "      --split            in a job of one, run each pair as two threads, initiator\n"
        "                         and responder, as two processes would (default: one\n"
        "                         thread plays both roles); no effect with 2 processes\n"
        "      --pair A,B         in a job of 2 or more processes, rank A initiates and rank\n"
        "                         B responds (default 0,1; needed in an odd job beyond 2\n"
        "                         processes, and for one pair in an even one); the\n"
        "                         other ranks wait, in the loop -p, -m and -l say, until A\n"
        "                         releases them after the last run, and meanwhile do what\n"
        "                         the library gives them (a node leader passes frames on)\n"
        "      --inject           send messages of at most TW_INJECT_MAX (1 KiB) bytes with\n"
        "                         tw_send_inject: copied, no completion to poll (as a UCX\n"
        "                         send that completes in place)\n"
        "Library configuration (tw_config_t; TW_* environment variables override it):\n"
        "  -T, --transports LIST  tw_config_t.transports, e.g. self,shm (default: all usable)\n"
        "  -p, --progress-threads N\n"
        "                         -1 auto (default), 0 manual: the benchmark threads drive\n"
        "                         tw_progress while they wait, N: exactly N progress threads\n"
        "  -m, --wait-mode MODE   spin, block or adaptive (default adaptive): the library's\n"
        "                         wait mode; with spin tw_perf polls its CQs (tw_cq_poll),\n"
        "                         otherwise it waits in tw_cq_wait\n"
        "  -l, --loop wait|poll|compute[:US]\n"
        "                         how a thread waits for its completions: wait (default:\n"
        "                         as -m says), poll (spin on tw_cq_poll alone, as a code\n"
        "                         spinning on MPI_Test; tw_progress too in manual mode), or\n"
        "                         compute (poll, and after each empty poll US microseconds\n"
        "                         of the thread's own work, default 1)\n"
        "Output (rank 0; the other rank prints errors only):\n"
        "      --stats[=json]     each rank prints tw_stats_print (json: tw_stats_json) on stderr\n"
        "      --csv              CSV on stdout: a header line, then rows (tools/plot-perf.sh\n"
        "                         plots a sweep of them with gnuplot)\n"
        "      --timeout SEC      fail when a wait sees no completion for SEC seconds\n"
        "                         (default 10)\n"
        "  -h, --help             this text\n"
        "\n"
        "Each size gives one row per thread (with -t > 1) and a row 'all': bandwidth and rate\n"
        "summed over threads, latency median = the median of the thread medians. Columns:\n"
        "test, size (B), threads, thread, iterations (measured), window (1 for the latency\n"
        "tests), latency median/avg/min/max in us (lat: half round trip; put_lat, get_lat:\n"
        "one operation to its completion; the others: window time / window), bandwidth in\n"
        "MB/s (10^6 B/s), rate in M msgs (or operations)/s. The CSV also has the warm-up\n"
        "count. Payloads are checked on the first and the last iteration of each size (puts\n"
        "by the target, in its window after the run), and every completion for status,\n"
        "length, tag and source (one-sided: status, op, length and target).\n"
        "\n"
        "Exit status: 0 success; 1 an API error, a timeout, a lost or corrupted message, or a\n"
        "job of an odd number of processes beyond 2 without --pair (or a --pair beyond the\n"
        "job); 2 a usage error.\n",
        PERF_MAX_THREADS);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "tw_perf: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(tw_perf --help lists the options)\n");
    return EXIT_USAGE;
}

/* Unsigned decimal, nothing after it. */
static bool parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;

    if (s == NULL || *s < '0' || *s > '9') {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return false;
    }
    *v_p = v;
    return true;
}

/* A size: decimal with an optional k, m or g (binary multiples). */
static bool parse_size(const char *s, size_t *v_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (*s < '0' || *s > '9') {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0) {
        return false;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        return false;
    }
    if (*end != '\0' && end[1] != '\0' && !((end[1] == 'b' || end[1] == 'B') && end[2] == '\0')) {
        return false;
    }
    if (v > PERF_MAX_SIZE >> shift) {
        return false;
    }
    *v_p = (size_t)(v << shift);
    return true;
}

static int parse_tests(const char *arg)
{
    char buf[256], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        return usage_error("-x: list too long");
    }
    strcpy(buf, arg);
    g_opts.ntests = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; i < (int)(sizeof(test_names) / sizeof(test_names[0])); i++) {
            if (strcmp(t, test_names[i]) == 0) {
                k = i;
            }
        }
        if (k < 0) {
            return usage_error("-x: unknown test '%s' (lat, bw, rate, put_lat, put_bw, get_lat "
                               "or get_bw)",
                               t);
        }
        bool dup = false;
        for (int i = 0; i < g_opts.ntests; i++) {
            dup = dup || g_opts.tests[i] == (perf_test_t)k;
        }
        if (!dup) { /* each test once: tests[] has room for every test */
            g_opts.tests[g_opts.ntests++] = (perf_test_t)k;
        }
    }
    if (g_opts.ntests == 0) {
        return usage_error("-x: no test named");
    }
    return EXIT_OK;
}

enum { OPT_CSV = 256, OPT_PLOT, OPT_TIMEOUT, OPT_SPLIT, OPT_STATS, OPT_INJECT, OPT_PAIR };

static const struct option longopts[] = {
    {"test", required_argument, NULL, 'x'},
    {"size", required_argument, NULL, 's'},
    {"iters", required_argument, NULL, 'n'},
    {"warmup", required_argument, NULL, 'W'},
    {"window", required_argument, NULL, 'w'},
    {"threads", required_argument, NULL, 't'},
    {"transports", required_argument, NULL, 'T'},
    {"progress-threads", required_argument, NULL, 'p'},
    {"wait-mode", required_argument, NULL, 'm'},
    {"loop", required_argument, NULL, 'l'},
    {"split", no_argument, NULL, OPT_SPLIT},
    {"pair", required_argument, NULL, OPT_PAIR},
    {"inject", no_argument, NULL, OPT_INJECT},
    {"csv", no_argument, NULL, OPT_CSV},
    {"stats", optional_argument, NULL, OPT_STATS},
    {"plot", optional_argument, NULL, OPT_PLOT}, /* removed: says so */
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* -s SIZE or MIN:MAX. */
static int parse_sizes(char *arg)
{
    char *colon = strchr(arg, ':');
    bool ok;

    if (colon != NULL) {
        *colon = '\0';
        ok = parse_size(arg, &g_opts.size_min) && parse_size(colon + 1, &g_opts.size_max);
        *colon = ':';
        if (ok && (g_opts.size_min == 0 || g_opts.size_min > g_opts.size_max)) {
            return usage_error("-s %s: a sweep needs 1 <= MIN <= MAX", arg);
        }
    } else {
        ok = parse_size(arg, &g_opts.size_min);
        g_opts.size_max = g_opts.size_min;
    }
    if (!ok) {
        return usage_error("-s %s: not a size (e.g. 64, 4k, 1m, 1k:1m; at most 1g)", arg);
    }
    g_opts.size_set = true;
    return EXIT_OK;
}

/* -n, -W, -w, -t: counts. */
static int parse_count(int opt, const char *arg)
{
    uint64_t v;

    switch (opt) {
    case 'n':
        if (!parse_u64(arg, &g_opts.iters) || g_opts.iters < 1 ||
            g_opts.iters > UINT64_C(1) << 32) {
            return usage_error("-n %s: iterations must be 1..2^32", arg);
        }
        g_opts.iters_set = true;
        return EXIT_OK;
    case 'W':
        if (!parse_u64(arg, &g_opts.warmup) || g_opts.warmup > UINT64_C(1) << 32) {
            return usage_error("-W %s: warm-up iterations must be 0..2^32", arg);
        }
        g_opts.warmup_set = true;
        return EXIT_OK;
    case 'w':
        if (!parse_u64(arg, &v) || v < 1 || v > PERF_MAX_WINDOW) {
            return usage_error("-w %s: window must be 1..%d", arg, PERF_MAX_WINDOW);
        }
        g_opts.window = (unsigned)v;
        return EXIT_OK;
    case 't':
        if (!parse_u64(arg, &v) || v < 1 || v > PERF_MAX_THREADS) {
            return usage_error("-t %s: threads must be 1..%d", arg, PERF_MAX_THREADS);
        }
        g_opts.threads = (int)v;
        return EXIT_OK;
    }
    return EXIT_USAGE; /* not reached: parse_opt passes these options only */
}

/* -T, -p, -m: the library's configuration. */
static int parse_config(int opt, const char *arg)
{
    uint64_t v;

    switch (opt) {
    case 'T':
        if (*arg == '\0') {
            return usage_error("-T: empty transport list");
        }
        g_opts.transports = arg;
        return EXIT_OK;
    case 'p':
        if (strcmp(arg, "-1") == 0) {
            g_opts.progress_threads = -1;
        } else if (parse_u64(arg, &v) && v <= 1024) {
            g_opts.progress_threads = (int)v;
        } else {
            return usage_error("-p %s: progress threads must be -1 (auto), 0 (manual) or "
                               "1..1024",
                               arg);
        }
        return EXIT_OK;
    case 'm':
        if (strcmp(arg, "spin") == 0) {
            g_opts.wait_mode = TW_WAIT_SPIN;
        } else if (strcmp(arg, "block") == 0) {
            g_opts.wait_mode = TW_WAIT_BLOCK;
        } else if (strcmp(arg, "adaptive") == 0) {
            g_opts.wait_mode = TW_WAIT_ADAPTIVE;
        } else {
            return usage_error("-m %s: wait mode must be spin, block or adaptive", arg);
        }
        return EXIT_OK;
    }
    return EXIT_USAGE; /* not reached: parse_opt passes these options only */
}

/* -l wait|poll|compute[:US] */
static int parse_loop(const char *arg)
{
    uint64_t us = 1;

    if (strcmp(arg, "wait") == 0) {
        g_opts.loop = PERF_LOOP_WAIT;
    } else if (strcmp(arg, "poll") == 0) {
        g_opts.loop = PERF_LOOP_POLL;
    } else if (strncmp(arg, "compute", 7) == 0 &&
               (arg[7] == '\0' ||
                (arg[7] == ':' && parse_u64(arg + 8, &us) && us >= 1 && us <= 1000000))) {
        g_opts.loop = PERF_LOOP_COMPUTE;
        g_opts.compute_us = (unsigned)us;
    } else {
        return usage_error("-l %s: the loop must be wait, poll or compute[:US] (1..1000000 us)",
                           arg);
    }
    return EXIT_OK;
}

/* --pair A,B: two distinct ranks (tw_perf checks them against the job). */
static int parse_pair(const char *arg)
{
    char buf[64], *comma;
    uint64_t a, b;

    if (strlen(arg) >= sizeof(buf) || (comma = strchr(strcpy(buf, arg), ',')) == NULL) {
        return usage_error("--pair %s: two ranks, A,B", arg);
    }
    *comma = '\0';
    if (!parse_u64(buf, &a) || !parse_u64(comma + 1, &b) || a > INT32_MAX || b > INT32_MAX ||
        a == b) {
        return usage_error("--pair %s: two different ranks, A,B", arg);
    }
    g_opts.pair[0] = (int)a;
    g_opts.pair[1] = (int)b;
    g_opts.pair_set = true;
    return EXIT_OK;
}

/* --timeout SEC */
static int parse_timeout(const char *arg)
{
    char *end;

    errno = 0;
    g_opts.timeout_s = strtod(arg, &end);
    if (errno != 0 || end == arg || *end != '\0' || !(g_opts.timeout_s > 0) ||
        g_opts.timeout_s > 86400) {
        return usage_error("--timeout %s: seconds must be > 0 (at most 86400)", arg);
    }
    return EXIT_OK;
}

/* One option that getopt_long returned, except -h. @return EXIT_OK to go
 * on, or EXIT_USAGE (said why). */
static int parse_opt(int opt, char **argv)
{
    switch (opt) {
    case 'x':
        return parse_tests(optarg);
    case 's':
        return parse_sizes(optarg);
    case 'n':
    case 'W':
    case 'w':
    case 't':
        return parse_count(opt, optarg);
    case 'T':
    case 'p':
    case 'm':
        return parse_config(opt, optarg);
    case 'l':
        return parse_loop(optarg);
    case OPT_SPLIT:
        g_opts.split = true;
        return EXIT_OK;
    case OPT_PAIR:
        return parse_pair(optarg);
    case OPT_INJECT:
        g_opts.inject = true;
        return EXIT_OK;
    case OPT_CSV:
        g_opts.csv = true;
        return EXIT_OK;
    case OPT_STATS:
        if (optarg == NULL || strcmp(optarg, "text") == 0) {
            g_opts.stats = PERF_STATS_TEXT;
        } else if (strcmp(optarg, "json") == 0) {
            g_opts.stats = PERF_STATS_JSON;
        } else {
            return usage_error("--stats takes no value, or =json");
        }
        return EXIT_OK;
    case OPT_PLOT:
        return usage_error("--plot was removed: plot --csv output with tools/plot-perf.sh "
                           "(tw_perf -s 8:1m --csv >run.csv; tools/plot-perf.sh run.csv)");
    case OPT_TIMEOUT:
        return parse_timeout(optarg);
    case ':':
        return usage_error("option %s needs a value", argv[optind - 1]);
    default:
        if (optopt != 0) {
            return usage_error("unknown option -%c", optopt);
        }
        return usage_error("unknown option %s", argv[optind - 1]);
    }
}

int perf_parse_args(int argc, char **argv)
{
    int opt, rc;

    g_opts = (perf_opts_t){.tests = {TEST_LAT},
                           .ntests = 1,
                           .window = 32,
                           .threads = 1,
                           .pair = {0, 1},
                           .progress_threads = -1,
                           .wait_mode = TW_WAIT_ADAPTIVE,
                           .timeout_s = 10};
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":x:s:n:W:w:t:T:p:m:l:h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return EXIT_OK;
        }
        if ((rc = parse_opt(opt, argv)) != EXIT_OK) {
            return rc;
        }
    }
    if (optind < argc) {
        return usage_error("unexpected argument '%s'", argv[optind]);
    }
    return -1;
}
