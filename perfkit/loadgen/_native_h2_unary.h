/* The unary-gRPC protocol's own types, shared by its two files: _native_h2_unary.c (the protocol:
 * calls, the connections, their frames) and _native_h2_unary_flow.c (requests waiting for
 * flow-control window). Nothing else includes it. */
#ifndef PERFKIT_NATIVE_H2_UNARY_H
#define PERFKIT_NATIVE_H2_UNARY_H

#include "_native_h2.h"

#define MSG_GOAWAY "server sent GOAWAY; request not processed"

typedef struct {
    uint32_t sid;
    int64_t due, sent;
} stream_t;

typedef struct { /* a request waiting for flow-control window; sid 0 until its HEADERS are written */
    size_t payload, offset;
    int64_t due, window;
    uint32_t sid;
} blocked_t;

typedef struct {
    h2conn_t h;
    stream_t *streams; /* in the order they were opened */
    size_t n_streams, cap_streams;
    blocked_t *blocked; /* FIFO [blk_head, blk_head + blk_len) */
    size_t blk_head, blk_len, blk_cap;
} uconn_t;

static inline uconn_t *U(conn_t *k) {
    return (uconn_t *)k;
}

/* -- a connection's streams, in the order they were opened -- */
static inline void add_stream(uconn_t *u, uint32_t sid, int64_t due, int64_t sent) {
    if (grow((void **)&u->streams, &u->cap_streams, u->n_streams + 1, sizeof(stream_t)) < 0) {
        u->h.broken = ENOMEM;
        return;
    }
    u->streams[u->n_streams++] = (stream_t){sid, due, sent};
}

static inline int take_stream(uconn_t *u, uint32_t sid, stream_t *out) {
    for (size_t i = 0; i < u->n_streams; i++)
        if (u->streams[i].sid == sid) {
            *out = u->streams[i];
            memmove(u->streams + i, u->streams + i + 1, (u->n_streams - i - 1) * sizeof(stream_t));
            u->n_streams--;
            return 1;
        }
    return 0;
}

/* -- flow control (_native_h2_unary_flow.c) -- */
/* A call the windows do not let go now waits in k's FIFO, behind any waiting already; then u_pump. */
void u_block(Core *c, conn_t *k, size_t payload, int64_t due);
/* Send the blocked requests, head first, as far as the windows allow (H2Conn._pump). */
void u_pump(Core *c, conn_t *k);

#endif
