/* The compiled gRPC sender's HTTP/2 state, shared by _native_h2.c (connections, streams, frames
 * in) and _native_h2_write.c (frames out). */
#ifndef PERFKIT_NATIVE_H2_H
#define PERFKIT_NATIVE_H2_H

#include "_native.h" /* first: Python.h and _GNU_SOURCE come before any system header */

#include "_native_hpack.h"

enum { F_DATA = 0, F_HEADERS = 1, F_RST = 3, F_SETTINGS = 4, F_PING = 6, F_GOAWAY = 7, F_WINDOW = 8, F_CONT = 9 };
#define FL_END_STREAM 0x1
#define FL_ACK 0x1
#define FL_END_HEADERS 0x4
#define FL_PADDED 0x8
#define FL_PRIORITY 0x20
#define SET_HEADER_TABLE 0x1
#define SET_INITIAL_WINDOW 0x4
#define SET_MAX_FRAME 0x5
#define BIG_WINDOW 0x7fffffffLL
#define DEFAULT_WINDOW 65535 /* RFC 9113's initial values, until the server's SETTINGS say otherwise */
#define DEFAULT_MAX_FRAME 16384
#define SETTINGS_WAIT_NS 5000000000LL /* _h2.SETTINGS_WAIT_S */
#define RECEIVED_TOP_UP (1ULL << 30)
#define CACHE_ENTRIES 8
#define CACHE_KEY_BYTES 64
#define IOV_BATCH 1024 /* Linux's IOV_MAX */
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
    size_t len;
    uint8_t key[CACHE_KEY_BYTES];
    hpack_result_t res;
} cached_t;

typedef struct { /* one buffer of a write: a 9-byte frame head (kept in `heads`) or bytes elsewhere */
    const char *ptr;
    size_t len;
    size_t head; /* offset in heads when ptr is NULL */
} part_t;

typedef struct h2conn {
    int settled, goaway, broken; /* broken: errno of a failed write */
    int in_rotation;
    int64_t settle_deadline;
    uint32_t next_sid;
    int64_t send_window, stream_window;
    uint32_t max_frame;
    uint64_t received;
    stream_t *streams; /* in the order they were opened */
    size_t n_streams, cap_streams;
    blocked_t *blocked; /* FIFO [blk_head, blk_head + blk_len) */
    size_t blk_head, blk_len, blk_cap;
    uint32_t cont_sid; /* a header block continued in CONTINUATION frames */
    int cont_end;
    char *cont;
    size_t cont_len, cont_cap;
    char *wbuf; /* bytes the kernel did not take yet, sent in order before anything else */
    size_t wlen, woff, wcap;
    part_t *parts;
    size_t n_parts, cap_parts;
    char *heads;
    size_t n_heads, cap_heads;
    struct iovec *iov;
    size_t cap_iov;
    hpack_t hp;
    cached_t cache[CACHE_ENTRIES];
    int n_cache, next_cache;
    /* streaming (_native_h2_stream.c): the connection's one ModelStreamInfer stream */
    uint64_t gen;      /* which connection this is: requests written to it carry it */
    uint32_t sx_sid;   /* 0 until its HEADERS went out */
    int64_t sx_window; /* the stream's send window */
    char *mbuf;        /* a response message cut across DATA frames, so far */
    size_t mlen, mcap;
    char *qbuf; /* request bytes waiting for flow-control window: [qoff, qlen) */
    size_t qlen, qoff, qcap;
} h2conn_t;

typedef struct { /* a streamed request, in the ring by its id */
    int64_t due, sent;
    uint64_t gen; /* the connection it was written to; 0: waiting for one */
    size_t payload;
    int live;
    int64_t *resp; /* arrival times of its responses with outputs (the buffer stays with the slot) */
    uint32_t n_resp, cap_resp;
} sreq_t;

typedef struct h2core {
    char *block; /* the request header block */
    size_t block_len;
    char intro[64]; /* preface, our SETTINGS, the connection window's top-up */
    size_t intro_len;
    int connections, want;
    uint32_t first_sid; /* 1; tests start near H2_LAST_SID */
    conn_t **usable; /* in rotation: settled, no GOAWAY */
    size_t n_usable, cap_usable;
    size_t rr;
    /* streaming (_native_h2_stream.c) */
    int stream;
    uint64_t gen_next;
    char *suffix; /* what follows a request's id: the final-response flag (_stream_parts.request_suffix) */
    size_t suffix_len;
    sreq_t *ring; /* requests by id: ids [base, next) at [id & (rcap - 1)]; ring[base] is live */
    size_t rcap;
    uint64_t base, next;
} h2core_t;

static inline void put24(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 16);
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void frame_head(uint8_t *p, size_t len, int type, int flags, uint32_t sid) {
    put24(p, (uint32_t)len);
    p[3] = (uint8_t)type;
    p[4] = (uint8_t)flags;
    put32(p + 5, sid);
}

/* -- in _native_h2.c, for the streaming file -- */
void h2_open(Core *c);
void retire(Core *c, conn_t *k);
void h2_ended(Core *c, conn_t *k, int32_t status, const char *msg);
size_t take_payload(Core *c);

/* -- in _native_h2_stream.c: one ModelStreamInfer stream per connection -- */
void sx_submit(Core *c, int64_t due);
void sx_settled(Core *c, conn_t *k);
void sx_data(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n);
void sx_pump(Core *c, conn_t *k);
void sx_fail(Core *c, uint64_t gen, int32_t status, const char *msg, size_t len);
void sx_abort(Core *c);
void sx_teardown(h2core_t *g);
void sx_conn_free(h2conn_t *h);
#define SX_WAITING 0
#define SX_ANY UINT64_MAX

/* -- in _native_h2_write.c: frames out -- */
/* Gather a write: a frame head, bytes that stay put until out_flush (a payload, the header block,
   a caller's buffer), a message's DATA frames; out_flush writes what was gathered, in order. */
void out_head(h2conn_t *h, size_t len, int type, int flags, uint32_t sid);
void out_ref(h2conn_t *h, const char *ptr, size_t len);
void out_data(h2conn_t *h, uint32_t sid, const char *ptr, size_t n, int last);
void out_flush(Core *c, conn_t *k);
void out_bytes(Core *c, conn_t *k, const void *p, size_t n); /* one frame's bytes, written now */
void out_writable(Core *c, conn_t *k);                        /* EPOLLOUT: what the kernel did not take */

#endif
