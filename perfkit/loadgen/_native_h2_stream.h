/* The streamed-gRPC protocol's own types, shared by its two files: _native_h2_stream.c (the protocol:
 * sending, the connection, its frames) and _native_h2_stream_recv.c (what ends requests: their
 * records, and the responses read off DATA frames). Nothing else includes it. */
#ifndef PERFKIT_NATIVE_H2_STREAM_H
#define PERFKIT_NATIVE_H2_STREAM_H

#include "_native_h2.h"

#define MAX_MESSAGE_BYTES (1u << 30) /* a length past this is no message of ours: the stream is out of step */
#define SUFFIX_ROOM 256
#define SX_WAITING 0
#define SX_ANY UINT64_MAX

typedef struct { /* a streamed request, in the ring by its id */
    int64_t due, sent;
    uint64_t gen; /* the connection it was written to; 0: waiting for one */
    size_t payload;
    int live;
    int64_t *resp; /* arrival times of its responses with outputs (the buffer stays with the slot) */
    uint32_t n_resp, cap_resp;
} sreq_t;

typedef struct {
    h2core_t g;
    char *suffix; /* what follows a request's id: the final-response flag (_stream_parts.request_suffix) */
    size_t suffix_len;
    sreq_t *ring; /* requests by id: ids [base, next) at [id & (rcap - 1)]; ring[base] is live */
    size_t rcap;
    uint64_t base, next;
} score_t;

/* A connection: its one stream is h.long_sid (0 until its HEADERS went out). */
typedef struct {
    h2conn_t h;
    int64_t sx_window; /* the stream's send window */
    char *mbuf;        /* a response message cut across DATA frames, so far */
    size_t mlen, mcap;
    char *qbuf; /* request bytes waiting for flow-control window: [qoff, qlen) */
    size_t qlen, qoff, qcap;
} sconn_t;

static inline sconn_t *S(conn_t *k) {
    return (sconn_t *)k;
}

static inline score_t *SCORE(Core *c) {
    return (score_t *)c->proto;
}

static inline sreq_t *slot_of(score_t *g, uint64_t id) {
    return &g->ring[id & (g->rcap - 1)];
}

static inline int is_live(score_t *g, uint64_t id) {
    return id >= g->base && id < g->next && slot_of(g, id)->live;
}

/* -- what ends requests (_native_h2_stream_recv.c) -- */
/* Request id's one record, with its responses' times. */
void sx_end_request(Core *c, uint64_t id, int64_t done, int32_t status, const char *msg, size_t len);
/* Every live request written to connection `gen` (SX_WAITING: those waiting for one; SX_ANY: all)
   ends with `status`. */
void sx_fail(Core *c, uint64_t gen, int32_t status, const char *msg, size_t len);
/* A DATA frame of the stream: the gRPC messages it completes end or time their requests; NULL, or
   why the stream is out of step (the caller ends it as a protocol error). */
const char *sx_data(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n);

#endif
