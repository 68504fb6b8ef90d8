/* The compiled sender's shared types and the core functions its protocol files use:
 * _native.c (the loop, the Python type, HTTP/1.1) and _native_h2.c (gRPC over HTTP/2). */
#ifndef PERFKIT_NATIVE_H
#define PERFKIT_NATIVE_H

#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* vmsplice, splice, F_SETPIPE_SZ */
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NEVER INT64_MAX
#define EXAMPLE_BYTES 300
#define MAX_EXAMPLES 64
#define LARGE_SNDBUF_BYTES (4 << 20)
/* Requests this large go out through a pipe: vmsplice() hands the payload's pages to the pipe
   and splice() hands them on to the socket, so the kernel never copies the request (a 600 KB
   tensor's copy was a third of the sender's CPU per request); smaller ones are one send(). */
#define SPLICE_MIN_BYTES 65536
#define PIPE_BYTES (1 << 20)
/* A successful HTTP response's body this far past what one read brought is dropped by the kernel
   (recv MSG_TRUNC) instead of copied out: perfkit records a response's status and time, never its
   outputs, on this path. */
#define DISCARD_MIN_BYTES 65536
#define RECONNECT_BACKOFF_NS 50000000LL /* as _loops.RECONNECT_BACKOFF_S */
#define TAG_WAKE ((void *)1)
#define TAG_TIMER ((void *)2)

typedef struct {
    int64_t due, sent, done;
    int32_t status, model;
} record_t; /* 32 bytes; Python reads it as a structured numpy array */

enum { CMD_NONE, CMD_START, CMD_STOP, CMD_QUIT };
enum { MODE_IDLE, MODE_CLOSED, MODE_OPEN };

typedef struct conn {
    int fd;
    int connecting; /* nonblocking connect not finished */
    int ours;       /* closed by us, not by the peer */
    int dead;
    int want_out;   /* EPOLLOUT armed */
    int64_t due, sent; /* sent -1: no request owed */
    const char *out;
    size_t out_len, out_off; /* bytes of the request sent, or handed to the pipe */
    int pipe_r, pipe_w;      /* -1: no pipe (small requests, or splicing not possible) */
    size_t piped;            /* bytes in the pipe, not yet spliced to the socket */
    char *buf;
    size_t len, cap;
    ssize_t need;
    size_t skip; /* bytes of a response body still to drop (MSG_TRUNC), unread */
    int code;
    struct conn *next_dead;
    struct h2conn *h2; /* gRPC: the HTTP/2 state (_native_h2.c); NULL for HTTP/1.1 */
} conn_t;

typedef struct {
    int32_t status;
    Py_ssize_t len;
    char text[EXAMPLE_BYTES];
} example_t;

typedef struct {
    PyObject_HEAD
    /* set at creation, read-only after */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char **payloads;
    size_t *payload_lens;
    Py_ssize_t n_payloads;
    size_t largest;
    int32_t st_closed, st_refused, st_protocol, st_unfinished, st_dropped;
    int32_t st_grpc_base; /* GRPC_STATUS_BASE: a gRPC status code is recorded as this + code */
    int32_t st_stream_error; /* STATUS_STREAM_ERROR: a streamed request answered with an error message */
    int streaming;           /* ModelStreamInfer (_native_h2_stream.c): records carry response times */
    struct h2core *h2;    /* gRPC over HTTP/2 (_native_h2.c); NULL: HTTP/1.1 */
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
} Core;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* -- in _native.c, for the protocol files -- */
int grow(void **ptr, size_t *cap, size_t need, size_t item);
void note_example(Core *c, int32_t status, const char *text, size_t len);
void record_end(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len);
void finish(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len);
void unfinish_pending(Core *c, int64_t now);
void on_done(Core *c, int32_t status);
void set_events(Core *c, conn_t *k, int out);
void conn_drop(Core *c, conn_t *k);
void conn_close_ours(Core *c, conn_t *k, int abort_it);
void push_pending(Core *c, int64_t due);
int64_t pop_pending(Core *c);
conn_t *dial(Core *c);

/* -- in _native_h2.c: gRPC over HTTP/2 -- */
#define H2_LAST_SID (0x7fffffffu - (1u << 20)) /* past this a gRPC connection winds down (ids are 31 bits) */
int h2_setup(Core *c, const char *block, size_t block_len, int connections, uint32_t first_sid,
             const char *suffix, size_t suffix_len);
void h2_teardown(Core *c);
void h2_submit(Core *c, int64_t due);
void h2_prepare(Core *c, int closed_loop, int share);
void h2_connected(Core *c, conn_t *k);
void h2_event(Core *c, conn_t *k, uint32_t events);
void h2_dropped(Core *c, conn_t *k);
void h2_free(conn_t *k);
void h2_abort_in_flight(Core *c);
void h2_tick(Core *c);
int64_t h2_next_wake(Core *c);
PyObject *h2_hpack_decode_py(PyObject *module, PyObject *args);

#endif
