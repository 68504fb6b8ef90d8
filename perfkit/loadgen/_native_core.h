/* The compiled sender's core: the root every other file of it includes, and the only header they
 * share. It declares the event loop (_native_core.c), the connections and the ledger below it
 * (_native_conns.c), and the one table of functions (`proto_ops_t`) through which the core reaches
 * the protocol a sender speaks:
 *
 *     _native_core.h ── _native_core.c       the loop, loop modes, commands
 *        ├── _native_conns.c                 connections, the pending FIFO, the ledger
 *        ├── _native_control.c               the commands and their arguments, under `mu`
 *        ├── _native_http1.c                 protocol: HTTP/1.1
 *        ├── _native_h2.h                    HTTP/2 connections and frames, for the two below
 *        │     ├── _native_h2.c, _native_h2_write.c
 *        │     ├── _native_h2_unary.c        protocol: unary gRPC
 *        │     │     └── _native_h2_unary_flow.c      its calls waiting for window (_native_h2_unary.h)
 *        │     └── _native_h2_stream.c       protocol: streamed gRPC (ModelStreamInfer)
 *        │           └── _native_h2_stream_recv.c     its requests' ends, responses read (_native_h2_stream.h)
 *        └── _native.c                       the CPython type (picks the protocol, calls the core)
 *     _native_http1_head.h ── _native_http1_head.c   HTTP/1.1 response heads (a leaf: no sender types)
 *     _native_hpack.h ── _native_hpack.c     HPACK decoding (a leaf)
 *     _native_pb.h ── _native_pb.c           a ModelStreamInferResponse's fields (a leaf)
 *
 * Protocols call the core's services declared here and never each other; the core calls a
 * protocol only through `c->ops`. No Python here: the core runs on its own thread. */
#ifndef PERFKIT_NATIVE_CORE_H
#define PERFKIT_NATIVE_CORE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* vmsplice, splice, F_SETPIPE_SZ, pipe2 */
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NEVER INT64_MAX
#define EXAMPLE_BYTES 300
#define MAX_EXAMPLES 64
#define LARGE_SNDBUF_BYTES (4 << 20)
#define RECONNECT_BACKOFF_NS 50000000LL /* as _loops.RECONNECT_BACKOFF_S */
#define TAG_WAKE ((void *)1)
#define TAG_TIMER ((void *)2)

typedef struct {
    int64_t due, sent, done;
    int32_t status, model;
} record_t; /* 32 bytes; Python reads it as a structured numpy array */

enum { CMD_NONE, CMD_START, CMD_STOP, CMD_QUIT };
enum { MODE_IDLE, MODE_CLOSED, MODE_OPEN };

/* A connection as the core keeps it. A protocol's connection begins with one (dial allocates
   `ops->conn_bytes`, zeroed) and keeps its own state after it. */
typedef struct conn {
    int fd;
    int connecting; /* nonblocking connect not finished */
    int ours;       /* closed by us, not by the peer */
    int dead;
    int want_out; /* EPOLLOUT armed */
    char *buf;    /* bytes read and not yet taken */
    size_t len, cap;
    struct conn *next_dead;
} conn_t;

typedef struct {
    int32_t status;
    size_t len;
    char text[EXAMPLE_BYTES];
} example_t;

typedef struct core Core;

/* What the core asks of a protocol. Every entry is set. */
typedef struct proto_ops {
    size_t conn_bytes;       /* the size of the protocol's connection (a conn_t first) */
    int unavailable_retries; /* gRPC: a call ended UNAVAILABLE (14) is retried as a lost connection is */
    /* a request made due (`due` -1: closed loop, now) */
    void (*submit)(Core *c, int64_t due);
    /* a level starts (c->mode, c->arg_share, c->arg_warm set): 1 when it waits for connections
       (`c->opening` back at 0) before it is active, 0 when it is active at once */
    int (*prepare)(Core *c);
    void (*connected)(Core *c, conn_t *k);             /* a nonblocking connect ended (or failed) */
    void (*event)(Core *c, conn_t *k, uint32_t events); /* epoll events on a connected connection */
    void (*dropped)(Core *c, conn_t *k);               /* k leaves (conn_drop), its socket still open */
    void (*conn_free)(conn_t *k);                      /* what the protocol allocated for k */
    void (*abort_in_flight)(Core *c); /* a stop's drain ran out: what is owed ends unfinished */
    void (*tick)(Core *c);            /* after each batch of events */
    int64_t (*next_wake)(Core *c);    /* the protocol's next deadline, or NEVER */
    void (*teardown)(Core *c);        /* frees c->proto */
} proto_ops_t;

struct core {
    /* set at creation, read-only after */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char **payloads;
    size_t *payload_lens;
    size_t n_payloads;
    size_t largest;
    int32_t st_closed, st_refused, st_protocol, st_unfinished, st_dropped;
    int32_t st_grpc_base;    /* GRPC_STATUS_BASE: a gRPC status code is recorded as this + code */
    int32_t st_stream_error; /* STATUS_STREAM_ERROR: a streamed request answered with an error message */
    int streaming;           /* records carry response times (resp_counts, resp_ns) */
    const proto_ops_t *ops;  /* the protocol */
    void *proto;             /* its state */
    pthread_t thread;
    int thread_started;
    int ep, wake_fd, timer_fd;
    pthread_mutex_t mu;
    pthread_cond_t cmd_done, hungry;

    /* everything below: under mu */
    int cmd;
    int cmd_busy;
    int quit;
    /* command arguments */
    int arg_mode, arg_share, arg_realtime, arg_warm;
    int64_t arg_t0, arg_drain_ns;
    /* records handed to Python by swap */
    record_t *recs;
    size_t n_recs, cap_recs;
    /* streaming: per record its count of timed responses, and their arrival times, flat, in order */
    uint32_t *resp_counts;
    size_t cap_counts;
    int64_t *resp_ns;
    size_t n_resp_ns, cap_resp_ns;
    uint32_t next_count; /* the times the next record takes: the last next_count of resp_ns */
    example_t examples[MAX_EXAMPLES];
    int n_examples;
    long reconnects, lost_unreplaced, in_flight;
    /* the level */
    int mode, active, starting, draining;
    int64_t t0, drain_deadline;
    int max_outstanding, spare_target;
    char drop_message[128];
    char unfinished_message[128];
    /* open loop due offsets, fed by Python */
    int64_t *dues;
    size_t due_head, due_len, due_cap;
    int dues_ended, low_water;
    /* closed-loop retries after a connection failure (times, ns) */
    int64_t *retries;
    size_t n_retries, cap_retries;
    /* connections */
    conn_t **conns;
    size_t n_conns, cap_conns;
    conn_t **idle;
    size_t n_idle, cap_idle;
    int opening;
    int64_t *pending; /* due times of requests waiting for a connection (ring) */
    size_t pend_head, pend_len, pend_cap;
    char open_error[160];
    size_t next_payload;
    conn_t *graveyard;
    int64_t armed_at;
};

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* -- the core's services, for the protocols (_native_conns.c unless said) -- */
int grow(void **ptr, size_t *cap, size_t need, size_t item);
size_t take_payload(Core *c); /* the next payload's index, in turn */
/* the ledger */
void note_example(Core *c, int32_t status, const char *text, size_t len);
void add_record(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status); /* one record, nothing else */
void record_end(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len);
/* the loop's (_native_core.c) */
void finish(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len);
void on_done(Core *c, int32_t status); /* the loop mode's turn after a request ended (finish: both) */
/* requests waiting for a connection */
void push_pending(Core *c, int64_t due);
int64_t pop_pending(Core *c);
void unfinish_pending(Core *c, int64_t now);
/* connections */
conn_t *dial(Core *c);
void set_events(Core *c, conn_t *k, int out);
void conn_drop(Core *c, conn_t *k);
void conn_close_ours(Core *c, conn_t *k, int abort_it);
void idle_push(Core *c, conn_t *k);
conn_t *idle_pop(Core *c); /* NULL: none idle */
/* for the loop only */
void conns_close_all(Core *c);
void conns_bury(Core *c);

/* -- the core's lifecycle (_native_core.c) and control (_native_control.c), for the CPython type
   (and test harnesses): each takes mu itself -- */
/* After addr, payloads, statuses and the protocol are set: the loop's descriptors and thread.
   0, or -1 with errno (EAGAIN: the thread could not start). */
int core_start(Core *c);
void core_command(Core *c, int cmd); /* run a command and wait for the loop to finish it (blocks) */
void core_set_closed(Core *c, int share);
void core_set_open(Core *c, int64_t t0, const int64_t *dues, size_t n, int ended, int warm, int spare, int max_out,
                   int realtime, int low_water, const char *drop_message);
void core_feed(Core *c, const int64_t *dues, size_t n, int ended);
int core_wait_hungry(Core *c, double timeout_s); /* 1 hungry, 0 no longer running, -1 timed out (blocks) */
void core_set_stop(Core *c, double drain_s, const char *unfinished_message);
void core_shutdown(Core *c); /* CMD_QUIT and join the thread (blocks) */
void core_free(Core *c);     /* after core_shutdown: everything the core and the protocol hold, connections too */

#endif
