/* HTTP/2 connections and frames for the compiled sender's two gRPC protocols (_native_h2_unary.c,
 * _native_h2_stream.c): opening, settling and retiring connections, frames in (one at a time, for
 * the protocol to act on) and out, SETTINGS, PING, header blocks and their HPACK meaning. It calls
 * the core's services and never a protocol: where a protocol must act (a connection settled, could
 * not open, was lost), these functions say so in what they return. */
#ifndef PERFKIT_NATIVE_H2_H
#define PERFKIT_NATIVE_H2_H

#include "_native_core.h"
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

/* An HTTP/2 connection; a protocol's connection begins with one (conn_bytes). */
typedef struct h2conn {
    conn_t k;
    uint64_t gen; /* which connection this is (1, 2, ...); 0: dial failed before it was set up */
    int settled, goaway, broken; /* broken: errno of a failed write */
    int in_rotation;
    int64_t settle_deadline;
    uint32_t next_sid;
    int64_t send_window, stream_window;
    uint32_t max_frame;
    uint64_t received;
    uint32_t long_sid; /* a long-lived stream whose window is topped up with the connection's; 0: none */
    size_t rpos;       /* frames in: k.buf[0, rpos) taken */
    int reading, more; /* reading: a read's bytes are being taken; more: that read filled the buffer */
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
} h2conn_t;

static inline h2conn_t *H2(conn_t *k) {
    return (h2conn_t *)k;
}

/* What every HTTP/2 protocol keeps: `c->proto` points at a struct that begins with one. */
typedef struct h2core {
    char *block; /* the request header block */
    size_t block_len;
    char intro[64]; /* preface, our SETTINGS, the connection window's top-up */
    size_t intro_len;
    int connections, want;
    uint32_t first_sid; /* 1; tests start near H2_LAST_SID */
    conn_t **usable;    /* in rotation: settled, no GOAWAY */
    size_t n_usable, cap_usable;
    size_t rr;
    uint64_t gen_next;
} h2core_t;

static inline h2core_t *H2CORE(Core *c) {
    return (h2core_t *)c->proto;
}

typedef struct {
    int type, flags;
    uint32_t sid;
    const uint8_t *p; /* the payload, in the connection's buffer until the next frame is asked for */
    size_t n;
} h2frame_t;

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

/* -- connections (_native_h2.c) -- */
int h2_core_init(h2core_t *g, const char *block, size_t block_len, int connections, uint32_t first_sid);
void h2_core_free(h2core_t *g);
void h2_conn_free(conn_t *k);
/* A new connection, dialled and set up, counted in c->opening; NULL when it cannot even start
   (c->open_error says why): the protocol then refuses what waits for it. */
conn_t *h2_open(Core *c);
/* The connect ended: 0 (the preface is written), -1 (it failed and is closed; open_error says why). */
int h2_connected(Core *c, conn_t *k);
/* The server's first SETTINGS: 1 when k joined the rotation (the protocol then sends what waits). */
int h2_settle(Core *c, conn_t *k);
/* Out of rotation (GOAWAY, lost, unusable): one perfkit did not close counts as lost and a
   replacement opens; -1 when that replacement could not even start. */
int h2_retire(Core *c, conn_t *k);
void h2_usable_remove(h2core_t *g, conn_t *k);
void h2_dropped(Core *c, conn_t *k); /* the protocols' ops->dropped */
/* Lost (the peer closed, a read or write failed), after h2_retire: dropped, `msg` says why (and
   open_error, when it had not settled). */
void h2_lose(Core *c, conn_t *k, int err, char *msg, size_t msg_size);
/* Connections whose SETTINGS did not come in time are given up: how many were. */
int h2_expire(Core *c);
int64_t h2_next_wake(Core *c); /* the protocols' ops->next_wake */

/* -- frames in (_native_h2.c) -- */
/* The next whole frame read off k: 1 (*f set), 0 (the socket is drained; the windows are topped up
   if due), -1 (lost: *err is the errno, 0 when the peer closed). */
int h2_next_frame(Core *c, conn_t *k, h2frame_t *f, int *err);
/* SETTINGS (not an ACK): applied and acknowledged; the change of the initial stream window. */
int64_t h2_settings(Core *c, conn_t *k, const uint8_t *p, size_t n);
void h2_ping(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n);
/* HEADERS or CONTINUATION: 1 when a header block is whole (*block, *n, *sid, *end_stream set). */
int h2_header_block(conn_t *k, const h2frame_t *f, const uint8_t **block, size_t *n, uint32_t *sid, int *end_stream);
/* What a whole header block says (cached while the dynamic table cannot have moved); NULL when
   it cannot be decoded (err says why: the connection is then unusable). */
const hpack_result_t *h2_block_meaning(conn_t *k, const uint8_t *block, size_t n, hpack_result_t *fresh, char *err,
                                       size_t err_size);
/* Both, for a HEADERS or CONTINUATION frame: 0 while its block is not whole, 1 with *res (in *fresh
   or the cache), *sid and *end_stream set, -1 when the block cannot be decoded (err says why). */
int h2_headers(conn_t *k, const h2frame_t *f, hpack_result_t *fresh, const hpack_result_t **res, uint32_t *sid,
               int *end_stream, char *err, size_t err_size);
/* The status a stream's end gives its call: from the trailers (res; NULL when a DATA frame ended
   the stream), else `ok`: a non-200 HTTP status as is, a gRPC status as st_grpc_base + code, a
   status that is not a number a protocol error. */
int32_t h2_call_status(Core *c, const hpack_result_t *res, int32_t ok);

/* -- frames out (_native_h2_write.c) -- */
/* Gather a write: a frame head, bytes that stay put until out_flush (a payload, the header block,
   a caller's buffer), a message's DATA frames; out_flush writes what was gathered, in order. */
void out_head(h2conn_t *h, size_t len, int type, int flags, uint32_t sid);
void out_ref(h2conn_t *h, const char *ptr, size_t len);
void out_data(h2conn_t *h, uint32_t sid, const char *ptr, size_t n, int last);
void out_flush(Core *c, conn_t *k);
void out_bytes(Core *c, conn_t *k, const void *p, size_t n); /* one frame's bytes, written now */
void out_writable(Core *c, conn_t *k);                        /* EPOLLOUT: what the kernel did not take */

/* -- what both protocols do alike, inlined into each (their functions called directly) -- */
typedef void (*h2_on_frame_fn)(Core *c, conn_t *k, const h2frame_t *f);
typedef void (*h2_lost_fn)(Core *c, conn_t *k, int err);

/* A protocol's ops->event: what waits goes out on EPOLLOUT; each whole frame read goes to on_frame
   until the socket is drained or k is gone; a connection lost on the way, or broken by a write,
   goes to lost. */
static inline void h2_event(Core *c, conn_t *k, uint32_t events, h2_on_frame_fn on_frame, h2_lost_fn lost) {
    h2conn_t *h = H2(k);
    if (events & EPOLLOUT && h->wlen > h->woff) out_writable(c, k);
    if (!h->broken && events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        h2frame_t f;
        int r, err = 0;
        while ((r = h2_next_frame(c, k, &f, &err)) > 0) {
            on_frame(c, k, &f);
            if (k->dead) return;
        }
        if (r < 0) {
            lost(c, k, err);
            return;
        }
    }
    if (!k->dead && h->broken) lost(c, k, h->broken);
}

/* Connections open until those in rotation and those opening make g->want; one that cannot even
   start ends the attempts (open_failed: the protocol refuses what waits, if nothing else opens). */
static inline void h2_open_wanted(Core *c, void (*open_failed)(Core *c)) {
    h2core_t *g = H2CORE(c);
    while ((int)g->n_usable + c->opening < g->want) {
        int before = c->opening;
        if (!h2_open(c)) open_failed(c);
        if (c->opening == before) break; /* it could not even start */
    }
}

#endif
