/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Choosing the bootstrap backend from the environment, and refusing to run
 * alone when a launcher started several processes (tw_bootstrap.h). Each
 * check runs in a forked child with only the variables it names (every
 * launcher variable of the test's own environment removed first), its
 * stderr caught: the status it returns and the line it logs are checked,
 * and the line is echoed so the log rule sees it too.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/tw_bootstrap.h"
#include "runtime/tw_context_int.h"
#include "tw_test.h"

/* Variables a launcher sets: none reaches a child unless a check names it. */
static const char *const launcher_vars[] = {"TW_BOOT_ADDR",      "TW_RANK",
                                            "TW_SIZE",           "TW_LOCAL_RANK",
                                            "TW_LOCAL_SIZE",     "TW_JOB_KEY",
                                            "TW_NODE_ID",        "TW_BOOT_TIMEOUT",
                                            "PMIX_NAMESPACE",    "PMIX_RANK",
                                            "PMI_SIZE",          "SLURM_STEP_NUM_TASKS",
                                            "PMIX_SERVER_URI41", "OMPI_COMM_WORLD_SIZE",
                                            "PMIX_SERVER_URI4"};

typedef enum { DO_SELECT, DO_INIT } what_t;

/* In the child: "backend=<name>" (select) or "nodes=<n> local=<r>/<s>"
 * (init) on stderr; the exit code is -status. */
static void child(what_t what, const char *const *env)
{
    for (size_t i = 0; i < TWT_ARRAY_SIZE(launcher_vars); i++) {
        unsetenv(launcher_vars[i]);
    }
    for (; *env != NULL; env++) {
        putenv((char *)*env);
    }
    if (what == DO_SELECT) {
        tw_bootstrap_env_t e;
        tw_cfg_set_defaults(&tw_bootstrap_cfg_table, &e);
        (void)tw_cfg_apply_env(&tw_bootstrap_cfg_table, &e);
        const tw_bootstrap_ops_t *ops = tw_bootstrap_select(&e);
        fprintf(stderr, "backend=%s\n", ops != NULL ? ops->name : "none");
        fflush(stderr);
        _exit(ops != NULL ? 0 : -TW_ERR_BOOTSTRAP);
    }
    tw_context_t *ctx;
    tw_status_t st = tw_init(NULL, &ctx);
    if (st == TW_OK) {
        tw_ctx_impl_t *impl = tw_ctx_get(ctx, "test");
        fprintf(stderr, "nodes=%d local=%d/%d\n", impl->bs->nnodes, impl->local_rank,
                impl->local_size);
        st = tw_finalize(ctx);
    }
    fflush(stderr);
    _exit(-st);
}

/* Run @p what with @p env (NULL-terminated "K=V"); its stderr into @p out. */
static tw_status_t run(what_t what, const char *const *env, char *out, size_t len)
{
    int p[2], status;
    size_t n = 0;
    ssize_t r;
    pid_t pid;

    TWT_CHECK(pipe(p) == 0);
    fflush(stderr);
    pid = fork();
    TWT_CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], STDERR_FILENO);
        child(what, env);
    }
    close(p[1]);
    while (n + 1 < len && (r = read(p[0], out + n, len - 1 - n)) > 0) {
        n += (size_t)r;
    }
    out[n] = '\0';
    close(p[0]);
    TWT_CHECK(waitpid(pid, &status, 0) == pid);
    fputs(out, stderr); /* the log rule reads the test's own output */
    TWT_CHECKF(WIFEXITED(status), "the child died (status 0x%x):\n%s", status, out);
    return (tw_status_t)-WEXITSTATUS(status);
}

/* @p env gives status @p want and a log holding @p line. */
static void expect(what_t what, const char *const *env, tw_status_t want, const char *line)
{
    char out[8192];
    tw_status_t st = run(what, env, out, sizeof(out));

    TWT_CHECKF(st == want, "%s with %s...: status %d (%s), want %d; it logged:\n%s",
               what == DO_SELECT ? "select" : "tw_init", env[0] != NULL ? env[0] : "nothing",
               (int)st, tw_strerror(st), (int)want, out);
    TWT_CHECKF(strstr(out, line) != NULL, "with %s...: no '%s' in:\n%s",
               env[0] != NULL ? env[0] : "nothing", line, out);
}

#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* TW_BOOT_ADDR -> twrun (first, whatever else is set); PMIX_NAMESPACE and
 * PMIX_RANK -> PMIx; else a job of one, also when a launcher says 1. */
static void case_select(void)
{
    expect(DO_SELECT, ENV("TW_SIZE=1"), TW_OK, "backend=single");
    expect(DO_SELECT, ENV("SLURM_STEP_NUM_TASKS=1", "OMPI_COMM_WORLD_SIZE=1", "PMI_SIZE=1"), TW_OK,
           "backend=single");
    expect(DO_SELECT, ENV("TW_BOOT_ADDR=/nonexistent/sock"), TW_OK, "backend=twrun");
    expect(DO_SELECT, ENV("TW_BOOT_ADDR=/nonexistent/sock", "PMIX_NAMESPACE=ns", "PMIX_RANK=0"),
           TW_OK, "backend=twrun");
#if TW_HAVE_PMIX
    expect(DO_SELECT, ENV("PMIX_NAMESPACE=ns", "PMIX_RANK=0", "OMPI_COMM_WORLD_SIZE=4"), TW_OK,
           "backend=pmix");
#else
    expect(DO_SELECT, ENV("PMIX_NAMESPACE=ns", "PMIX_RANK=0"), TW_ERR_BOOTSTRAP,
           "built without PMIx, but PMIX_NAMESPACE and PMIX_RANK say");
#endif
}

/* tw_init through each backend as far as this process can go alone. */
static void case_init(void)
{
    expect(DO_INIT, ENV("SLURM_STEP_NUM_TASKS=1"), TW_OK, "nodes=1 local=0/1");
    expect(DO_INIT,
           ENV("TW_BOOT_ADDR=/nonexistent/sock", "TW_RANK=0", "TW_SIZE=2", "TW_LOCAL_RANK=0",
               "TW_LOCAL_SIZE=2", "TW_JOB_KEY=00112233445566778899aabbccddeeff"),
           TW_ERR_BOOTSTRAP, "cannot reach the launcher at /nonexistent/sock");
    /* No server: the choice is made, and PMIx_Init's failure is an error. */
    expect(DO_INIT, ENV("PMIX_NAMESPACE=threadwire-test-ns", "PMIX_RANK=0"), TW_ERR_BOOTSTRAP,
           TW_HAVE_PMIX ? "PMIx_Init failed" : "built without PMIx");
}

/* A launcher we cannot join started N > 1 processes: say which variable
 * and what to do, instead of running N rank 0s. */
static void case_refuse(void)
{
    expect(DO_INIT, ENV("SLURM_STEP_NUM_TASKS=4"), TW_ERR_BOOTSTRAP,
           "SLURM_STEP_NUM_TASKS=4 but no PMIx in the environment: run srun --mpi=pmix");
    expect(DO_INIT, ENV("OMPI_COMM_WORLD_SIZE=3"), TW_ERR_BOOTSTRAP,
           "OMPI_COMM_WORLD_SIZE=3 but no PMIx in the environment: start the job with an mpirun "
           "that provides PMIx");
    expect(DO_INIT, ENV("PMI_SIZE=2"), TW_ERR_BOOTSTRAP,
           "PMI_SIZE=2 but no PMIx in the environment: PMI-1 and PMI-2 are not supported");
    expect(DO_INIT, ENV("PMIX_NAMESPACE=ns"), TW_ERR_BOOTSTRAP,
           "PMIX_NAMESPACE is set but PMIX_RANK is not");
    expect(DO_INIT, ENV("PMIX_RANK=3"), TW_ERR_BOOTSTRAP,
           "PMIX_RANK is set but PMIX_NAMESPACE is not");
    expect(DO_INIT, ENV("TW_SIZE=2"), TW_ERR_BOOTSTRAP, "TW_SIZE=2 but no TW_BOOT_ADDR");
}

/* TW_NODE_ID and TW_BOOT_TIMEOUT: good values are taken, bad ones refused
 * with the variable named. */
static void case_variables(void)
{
    expect(DO_INIT, ENV("TW_NODE_ID=7"), TW_OK, "nodes=1 local=0/1");
    expect(DO_INIT, ENV("TW_NODE_ID=3,4,5"), TW_OK, "nodes=1 local=0/1");
    expect(DO_INIT, ENV("TW_NODE_ID=node1"), TW_ERR_INVALID,
           "TW_NODE_ID='node1': want a node number, or a list of them by rank");
    expect(DO_INIT, ENV("TW_NODE_ID=-1"), TW_ERR_INVALID, "TW_NODE_ID='-1'");
    expect(DO_INIT, ENV("TW_BOOT_TIMEOUT=0"), TW_ERR_INVALID, "bad value '0' for TW_BOOT_TIMEOUT");
    expect(DO_INIT, ENV("TW_BOOT_TIMEOUT=5"), TW_OK, "nodes=1");
}

int main(int argc, char **argv)
{
    static const twt_case_t cases[] = {
        {"select", case_select},
        {"init", case_init},
        {"refuse", case_refuse},
        {"variables", case_variables},
    };
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
