/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_info: what this threadwire build and machine offer -- version, build,
 * transports (and why one is unavailable), where progress threads run,
 * every TW_* environment variable with its default and help, and a warning
 * for each TW_* variable set in the environment that nothing reads.
 *   tw_info [-v]      -v: also the help text of every variable
 *   tw_info --markdown   only the variables, as README's Markdown table
 */
#include <stdio.h>
#include <string.h>

#include "core/tw_config.h"
#include "core/tw_crc32c.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "progress/tw_pe.h"
#include "runtime/tw_context_int.h"
#include "transports/base/tw_tl.h"

static void print_caps(uint32_t caps)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {{TW_TL_CAP_AM_SHORT, "am_short"}, {TW_TL_CAP_AM_ZCOPY, "am_zcopy"},
                 {TW_TL_CAP_RNDV, "rndv"},         {TW_TL_CAP_PUT, "put"},
                 {TW_TL_CAP_GET, "get"},           {TW_TL_CAP_FLUSH, "flush"},
                 {TW_TL_CAP_POLL, "poll"},         {TW_TL_CAP_MEM_REG, "mem_reg"}};
    for (size_t i = 0; i < TW_ARRAY_SIZE(names); i++) {
        if (caps & names[i].bit) {
            printf(" %s", names[i].name);
        }
    }
}

int main(int argc, char **argv)
{
    bool verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    const tw_cfg_table_t *tables[32];
    size_t ntables = tw_cfg_all_tables(tables, TW_ARRAY_SIZE(tables));
    int npkg;

    if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
        printf("| variable | default | meaning |\n|---|---|---|\n");
        for (size_t i = 0; i < ntables; i++) {
            tw_cfg_print_markdown(tables[i], stdout);
        }
        return 0;
    }
    if (argc > 2 || (argc > 1 && !verbose)) {
        fprintf(stderr, "usage: %s [-v | --markdown]\n", argv[0]);
        return 2;
    }
    npkg = tw_topo_num_packages();
    printf("threadwire %s (%s build)\n", TW_VERSION_STRING, TW_BUILD_TYPE);
    printf("  memory: %s; crc32c: %s\n\n", tw_mem_backend(), tw_crc32c_impl());

    printf("transports:\n");
    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        char why[256] = "";
        const tw_tl_ops_t *ops = tw_tl_all[i];
        tw_status_t st = ops->query(why, sizeof(why));
        printf("  %-6s %s", ops->name, st == TW_OK ? "available  " : "unavailable");
        if (st == TW_OK) {
            printf(" (");
            print_caps(ops->caps);
            printf(" )%s\n",
                   (ops->caps & TW_TL_CAP_OPT_IN) ? "  opt-in: name it in TW_TRANSPORTS" : "");
        } else {
            printf(" (%s)\n", why);
        }
    }
    printf("  %-6s available   (a wrapper: fault injection on the others, with TW_FAULT)\n\n",
           tw_tl_wrappers[0]->name);
    printf("reliability layer (TW_RELIABLE=1): checksums, acks, retransmission, failover between\n"
           "  the transports above, keepalive; TW_REL_* tune it\n\n");

    printf("progress threads (TW_PROGRESS_THREADS=-1): one per CPU socket, %d here\n", npkg);
    for (int p = 0; p < npkg; p++) {
        char cpus[256] = "?";
        tw_topo_package_cpus(p, cpus, sizeof(cpus));
        printf("  socket%d: cpus %s\n", p, cpus);
    }
    printf("\nenvironment variables:\n");
    for (size_t i = 0; i < ntables; i++) {
        const tw_cfg_table_t *t = tables[i];
        if (verbose) {
            tw_cfg_print(t, stdout);
            continue;
        }
        for (size_t k = 0; k < t->count; k++) {
            const tw_cfg_entry_t *e = &t->entries[k];
            const char *env = getenv(e->name);
            printf("  %-20s default %-10s %s", e->name,
                   e->defval[0] != '\0' ? e->defval : "(empty)", e->help);
            if (env != NULL) {
                printf("  [set: %s]", env);
            }
            printf("\n");
        }
    }
    fflush(stdout); /* the warnings go to stderr */
    int unknown = tw_cfg_warn_unknown(tables, ntables);
    printf("\n%d unknown TW_* variable(s) in the environment%s\n", unknown,
           unknown > 0 ? " (see the warnings above)" : "");
    return 0;
}
