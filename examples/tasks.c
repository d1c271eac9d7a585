/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Task parallelism on active messages: every process hands out tasks to
 * every process (itself included), whose worker threads compute them and
 * send the answers back.
 *
 * The main thread of each process hands out its N tasks, task i to rank
 * (rank + i) % P: an active message whose header names the task (its id
 * and a parameter, how many rounds to compute) and whose data is its input
 * block. At the target the handler runs on a progress thread (or, in
 * manual mode, inside some thread's tw_cq_wait), so it neither computes
 * nor waits: it copies the task into the process's task queue and
 * returns. Each of the T worker threads takes tasks from that queue,
 * computes (a checksum of the block, several rounds), and sends the answer
 * to the task's origin as a tagged message; the main thread has a receive
 * posted for each task it handed out. It keeps a bounded window of tasks
 * unanswered, so no queue grows without bound.
 *
 * A post that answers TW_ERR_AGAIN (a ring toward the peer, or our CQ, is
 * full) is retried by the thread that made it, after it reaped its
 * completions -- never inside the handler (threadwire.h, tw_am_handler_t).
 *
 * At the end every process checks that each of its tasks was answered
 * exactly once, and each answer against a computation of its own.
 *
 *   twrun -n 2 tasks [-n TASKS (20000)] [-t THREADS (4)] [-b BYTES (1024)]
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <threadwire/threadwire.h>

#define MAX_THREADS 64
#define AM_TASK     1                /* active-message id of a task */
#define TAG_ANSWER  UINT64_C(0x7a5c) /* tag of the answers */
#define WINDOW      8                /* tasks unanswered per worker of the job */

static struct {
    int tasks, threads;
    size_t bytes;
} opt = {.tasks = 20000, .threads = 4, .bytes = 1024};

typedef struct task_hdr { /* the active message's header */
    uint64_t id;
    uint32_t rounds;
    uint32_t pad;
} task_hdr_t;

typedef struct answer { /* the tagged message back to the origin */
    uint64_t id, value;
} answer_t;

typedef struct task { /* a task in the queue, copied out of the message */
    struct task *next;
    task_hdr_t hdr;
    int origin;
    answer_t answer; /* sent from here: freed once the send completes */
    size_t len;
    unsigned char data[];
} task_t;

/* A thread that posts: its CQ and how many of its posts are outstanding. */
typedef struct poster {
    tw_cq_t *cq;
    int outstanding;
} poster_t;

typedef struct worker {
    poster_t p;
    pthread_t th;
    long computed;
} worker_t;

static tw_context_t *ctx;
static int rank, size;
static atomic_bool stop;
static atomic_int errors;

/* The task queue: the handler appends, the workers take. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static task_t *queue_head, **queue_tail = &queue_head;

/* The origin's record of its tasks (main thread only). */
typedef struct record {
    uint64_t value;
    int by;    /* the rank that computed it */
    int times; /* answers received */
} record_t;
static record_t *answers;
static long answered; /* tasks with an answer */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fail(const char *what, tw_status_t st)
{
    fprintf(stderr, "tasks: rank %d: %s: %s\n", rank, what, tw_strerror(st));
    atomic_fetch_add(&errors, 1);
}

/* Where this process sends its task @p id. */
static int target(uint64_t id)
{
    return (int)(((uint64_t)rank + id) % (uint64_t)size);
}

/* Task @p id of @p origin: its input block and its number of rounds. */
static void task_input(int origin, uint64_t id, unsigned char *block, task_hdr_t *hdr)
{
    uint64_t x = (uint64_t)origin << 40 ^ id ^ 0x9e3779b97f4a7c15u;

    for (size_t i = 0; i < opt.bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        block[i] = (unsigned char)x;
    }
    *hdr = (task_hdr_t){.id = id, .rounds = 1 + (uint32_t)(id % 4)}; /* uneven tasks */
}

/* The computation: FNV-1a over the block, @p rounds times over. */
static uint64_t compute(const unsigned char *block, size_t len, uint32_t rounds)
{
    uint64_t h = 0xcbf29ce484222325u;

    for (uint32_t r = 0; r < rounds; r++) {
        for (size_t i = 0; i < len; i++) {
            h = (h ^ block[i]) * 0x100000001b3u;
        }
    }
    return h;
}

/* The handler of AM_TASK: copy the task into the queue, nothing more. */
static void on_task(tw_context_t *c, int src, const void *hdr, size_t hdr_len, const void *data,
                    size_t len, void *arg)
{
    task_t *t;

    (void)c, (void)arg;
    if (hdr_len != sizeof(task_hdr_t) || (t = malloc(sizeof(*t) + len)) == NULL) {
        fprintf(stderr, "tasks: rank %d: a task from rank %d dropped\n", rank, src);
        atomic_fetch_add(&errors, 1);
        return;
    }
    memcpy(&t->hdr, hdr, sizeof(t->hdr));
    memcpy(t->data, data, len);
    t->origin = src;
    t->len = len;
    t->next = NULL;
    pthread_mutex_lock(&queue_lock);
    *queue_tail = t;
    queue_tail = &t->next;
    pthread_mutex_unlock(&queue_lock);
}

static task_t *queue_take(void)
{
    pthread_mutex_lock(&queue_lock);
    task_t *t = queue_head;
    if (t != NULL && (queue_head = t->next) == NULL) {
        queue_tail = &queue_head;
    }
    pthread_mutex_unlock(&queue_lock);
    return t;
}

/* An answer arrived (main thread): record it. */
static void on_answer(const tw_completion_t *c)
{
    answer_t *a = c->user;

    if (c->length != sizeof(*a) || a->id >= (uint64_t)opt.tasks) {
        fprintf(stderr, "tasks: rank %d: a malformed answer from rank %d\n", rank, c->peer);
        atomic_fetch_add(&errors, 1);
    } else if (answers[a->id].times++ == 0) {
        answers[a->id].value = a->value;
        answers[a->id].by = c->peer;
        answered++;
    }
}

/* Wait up to @p ms for completions of @p p's posts (in manual mode this
 * drives progress, and handlers may run in it). The user pointer of each
 * post is its memory: freed here. */
static void reap(poster_t *p, int ms)
{
    tw_completion_t c[16];
    int n = tw_cq_wait(p->cq, c, 16, ms);

    for (int k = 0; k < n; k++) {
        if (c[k].status != TW_OK) {
            fail(c[k].op == TW_OP_RECV ? "an answer" : "a send", c[k].status);
        } else if (c[k].op == TW_OP_RECV) {
            on_answer(&c[k]);
        }
        free(c[k].user);
    }
    p->outstanding -= n;
}

/* Post @p call; while it answers TW_ERR_AGAIN, reap and post again. */
#define POST(p, call)                            \
    ({                                           \
        tw_status_t st_;                         \
        while ((st_ = (call)) == TW_ERR_AGAIN) { \
            reap(p, 1);                          \
        }                                        \
        (p)->outstanding += st_ == TW_OK;        \
        st_;                                     \
    })

static void *worker_main(void *arg)
{
    worker_t *w = arg;

    while (!atomic_load(&stop) || w->p.outstanding > 0) {
        task_t *t = queue_take();
        if (t == NULL) {
            reap(&w->p, 1); /* nothing queued: look again within a millisecond */
            continue;
        }
        t->answer.id = t->hdr.id;
        t->answer.value = compute(t->data, t->len, t->hdr.rounds);
        tw_status_t st = POST(
            &w->p, tw_send(ctx, t->origin, TAG_ANSWER, &t->answer, sizeof(t->answer), w->p.cq, t));
        if (st != TW_OK) {
            fail("sending an answer", st);
            free(t);
        }
        w->computed++;
    }
    return NULL;
}

/* Post the receive of one answer and send task @p id. */
static tw_status_t hand_out(poster_t *p, uint64_t id)
{
    answer_t *a = malloc(sizeof(*a));
    task_t *t = malloc(sizeof(*t) + opt.bytes); /* only hdr and data are used here */
    int dst = target(id);
    tw_status_t st;

    if (a == NULL || t == NULL) {
        free(a);
        free(t);
        return TW_ERR_NOMEM;
    }
    task_input(rank, id, t->data, &t->hdr);
    st = POST(p, tw_recv(ctx, TW_ANY_SOURCE, TAG_ANSWER, 0, a, sizeof(*a), p->cq, a));
    if (st != TW_OK) {
        free(a);
        free(t);
        return st;
    }
    st = POST(p,
              tw_am_send(ctx, dst, AM_TASK, &t->hdr, sizeof(t->hdr), t->data, opt.bytes, p->cq, t));
    if (st != TW_OK) {
        free(t);
    }
    return st;
}

/* @return true when @p mine holds in every process (one allreduce). */
static bool everyone(bool mine)
{
    int32_t in = mine, all = 0;

    return tw_allreduce(tw_group_world(ctx), &in, &all, 1, TW_INT32, TW_MIN) == TW_OK && all == 1;
}

/* Hand out every task, at most @p window unanswered at a time, and take
 * in the answers; then a barrier: past it no task is in flight anywhere.
 * @return false after an error (reported). */
static bool run(poster_t *m, long window)
{
    uint64_t next = 0;
    tw_status_t st;

    while (answered < opt.tasks && errors == 0) {
        if (next < (uint64_t)opt.tasks && (long)next - answered < window) {
            if ((st = hand_out(m, next++)) != TW_OK) {
                fail("handing out a task", st);
            }
        } else {
            reap(m, 100); /* returns at the next answer */
        }
    }
    while (m->outstanding > 0 && errors == 0) {
        reap(m, 100);
    }
    if (errors == 0 && (st = tw_barrier(tw_group_world(ctx))) != TW_OK) {
        fail("the closing barrier", st);
    }
    return errors == 0;
}

/* Every answer came once, from the rank it was sent to, and matches. */
static int check(void)
{
    unsigned char *block = malloc(opt.bytes);
    int bad = 0;

    for (uint64_t id = 0; block != NULL && id < (uint64_t)opt.tasks && bad < 5; id++) {
        task_hdr_t hdr;
        task_input(rank, id, block, &hdr);
        uint64_t want = compute(block, opt.bytes, hdr.rounds);
        if (answers[id].times != 1 || answers[id].by != target(id) || answers[id].value != want) {
            fprintf(stderr,
                    "tasks: rank %d: task %" PRIu64 ": %d answers, by rank %d, 0x%016" PRIx64
                    ", want 0x%016" PRIx64 "\n",
                    rank, id, answers[id].times, answers[id].by, answers[id].value, want);
            bad++;
        }
    }
    free(block);
    return block == NULL || bad > 0;
}

/* After tw_finalize, which ended what was still outstanding after an
 * error: free the memory of those posts, and the CQ. */
static void close_cq(tw_cq_t *cq)
{
    tw_completion_t c[16];
    int n;

    while (cq != NULL && (n = tw_cq_poll(cq, c, 16)) > 0) {
        for (int k = 0; k < n; k++) {
            free(c[k].user);
        }
    }
    if (cq != NULL) {
        tw_cq_destroy(cq);
    }
}

static int parse(int argc, char **argv)
{
    int c;

    while ((c = getopt(argc, argv, "n:t:b:h")) != -1) {
        switch (c) {
        case 'n':
            opt.tasks = atoi(optarg);
            break;
        case 't':
            opt.threads = atoi(optarg);
            break;
        case 'b':
            opt.bytes = strtoull(optarg, NULL, 0);
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: twrun -n P tasks [-n TASKS (20000)] [-t THREADS (4)] "
                    "[-b BYTES (1024)]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (opt.tasks < 1 || opt.threads < 1 || opt.threads > MAX_THREADS || opt.bytes < 1 ||
        opt.bytes > (1u << 20)) {
        fprintf(stderr, "tasks: want 1 task or more, 1..%d threads, 1 B..1 MiB blocks\n",
                MAX_THREADS);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    tw_status_t st;
    worker_t w[MAX_THREADS] = {0};
    poster_t m = {0};
    int rc = parse(argc, argv), started = 0;

    if (rc >= 0) {
        return rc;
    }
    tw_config_init(&cfg);
    if ((st = tw_init(&cfg, &ctx)) != TW_OK) {
        fprintf(stderr, "tasks: tw_init: %s\n", tw_strerror(st));
        return 1;
    }
    rank = tw_rank(ctx);
    size = tw_size(ctx);
    long window = (long)WINDOW * opt.threads * size;
    answers = calloc((size_t)opt.tasks, sizeof(*answers));
    int64_t *by_rank = calloc((size_t)size, sizeof(*by_rank)); /* tasks computed, per rank */
    if (answers == NULL || by_rank == NULL) {
        fail("setting up", TW_ERR_NOMEM);
    } else if ((st = tw_am_register(ctx, AM_TASK, on_task, NULL)) != TW_OK ||
               (st = tw_cq_create(ctx, 2 * (unsigned)window, &m.cq)) != TW_OK) {
        fail("setting up", st);
    }
    for (; started < opt.threads && errors == 0; started++) {
        int err = 0;
        if ((st = tw_cq_create(ctx, 64, &w[started].p.cq)) != TW_OK) {
            fail("tw_cq_create", st);
            break;
        }
        if ((err = pthread_create(&w[started].th, NULL, worker_main, &w[started])) != 0) {
            fprintf(stderr, "tasks: rank %d: pthread_create of worker %d: %s\n", rank, started,
                    strerror(err));
            atomic_fetch_add(&errors, 1);
            break;
        }
    }
    /* Once every process has its handler and its workers, hand out. */
    uint64_t t0 = now_ns();
    bool ran = everyone(errors == 0) && run(&m, window);
    double secs = (double)(now_ns() - t0) / 1e9;
    atomic_store(&stop, true);
    for (int t = 0; t < started; t++) {
        pthread_join(w[t].th, NULL);
        by_rank[rank] += w[t].computed;
    }

    /* The verdict of every process, and what each computed. */
    task_t *left = queue_take(); /* none: every task was answered */
    int32_t bad = !ran || left != NULL || check(), any = bad;
    free(left);
    if (ran && (tw_allreduce(tw_group_world(ctx), &bad, &any, 1, TW_INT32, TW_MAX) != TW_OK ||
                tw_allreduce(tw_group_world(ctx), by_rank, by_rank, (size_t)size, TW_INT64,
                             TW_SUM) != TW_OK)) {
        any = 1;
    }
    if (ran && rank == 0) {
        printf("tasks: %d processes x %d workers, %d tasks from each, %zu B blocks\n", size,
               opt.threads, opt.tasks, opt.bytes);
        printf("  %.0f tasks/s; computed by rank:", (double)opt.tasks * size / secs);
        for (int r = 0; r < size; r++) {
            printf(" %" PRId64, by_rank[r]);
        }
        printf("\n  %s\n", any ? "FAIL: an answer is missing, repeated or wrong"
                               : "PASS: every task answered once, every answer right");
    }
    if ((st = tw_finalize(ctx)) != TW_OK) {
        fprintf(stderr, "tasks: tw_finalize: %s\n", tw_strerror(st));
        any = 1;
    }
    for (int t = 0; t < opt.threads; t++) {
        close_cq(w[t].p.cq);
    }
    close_cq(m.cq);
    free(answers);
    free(by_rank);
    return any != 0;
}
