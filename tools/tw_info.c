/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_info: what this threadwire build and machine offer -- version, build,
 * transports (and why one is unavailable), where progress threads run,
 * every TW_* environment variable with its default and help, and a warning
 * for each TW_* variable set in the environment that nothing reads.
 *   tw_info [-v]      -v: also the help text of every variable
 *   tw_info --markdown   only the variables, as README's Markdown table
 *   tw_info --job     join the job (under twrun, mpirun or srun): rank 0
 *                     prints how, and the node map (which ranks on which node)
 */
#include <stdio.h>
#include <string.h>

#include "core/tw_config.h"
#include "core/tw_crc32c.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "progress/tw_pe.h"
#include "runtime/tw_bootstrap.h"
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

/* Which backend this environment selects (tw_bootstrap.h), and whether
 * PMIx is built in. */
static void print_bootstrap(void)
{
    tw_bootstrap_env_t env;
    const tw_bootstrap_ops_t *ops;

    tw_cfg_set_defaults(&tw_bootstrap_cfg_table, &env);
    (void)tw_cfg_apply_env(&tw_bootstrap_cfg_table, &env);
    fflush(stdout); /* a refusal is logged to stderr */
    ops = tw_bootstrap_select(&env);
    printf("bootstrap: twrun (TW_BOOT_ADDR), PMIx (PMIX_NAMESPACE and PMIX_RANK: %s), or a job "
           "of one\n  this environment: %s\n\n",
           TW_HAVE_PMIX ? "built in" : "not built: TW_WITH_PMIX",
           ops != NULL ? ops->name : "refused (above)");
}

/* tw_info --job: join, and rank 0 says how and where the ranks are. */
static int print_job(void)
{
    tw_context_t *ctx;
    tw_status_t st = tw_init(NULL, &ctx);
    tw_ctx_impl_t *impl;
    char nodes[1024];

    if (st != TW_OK) {
        fprintf(stderr, "tw_info: tw_init failed: %s\n", tw_strerror(st));
        return 1;
    }
    impl = tw_ctx_get(ctx, "tw_info");
    if (impl->rank == 0) {
        tw_bootstrap_node_text(impl->bs, nodes, sizeof(nodes));
        printf("job: %d rank(s), bootstrap %s; %s\n", impl->size, impl->bs->ops->name, nodes);
    }
    return tw_finalize(ctx) == TW_OK ? 0 : 1;
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
    if (argc == 2 && strcmp(argv[1], "--job") == 0) {
        return print_job();
    }
    if (argc > 2 || (argc > 1 && !verbose)) {
        fprintf(stderr, "usage: %s [-v | --markdown | --job]\n", argv[0]);
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

    print_bootstrap();
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
