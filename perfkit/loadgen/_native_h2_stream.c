/* Streamed gRPC requests (decoupled models) for the compiled sender: `_stream_h2.H2StreamTransport`
 * in C, on the connections, frames and flow control of _native_h2.c.
 *
 * One connection (`connections` 1) carries one ModelStreamInfer stream, opened (HEADERS with the
 * prebuilt header block, no END_STREAM) by the first request written to it. A request is one gRPC
 * message: the prebuilt payload (a serialized ModelInferRequest without id) followed by its id (a
 * counter, field 3) and the suffix Python hands in (the final-response flag,
 * `_stream_parts.request_suffix`): exactly the bytes `_stream_grpc.grpc_stream_request` makes.
 * Sends honour the server's connection and stream windows and its max frame size; what does not
 * fit waits in `qbuf`, in order, and goes out as WINDOW_UPDATEs come.
 *
 * Responses are cut out of the DATA frames (a message may span frames) and read off their
 * protobuf fields as `_stream_grpc.scan_response` does: the id, whether it has outputs (its arrival
 * is then timed), the `triton_final_response` flag (the request's end); field 1 `error_message`
 * ends the request it names, or the oldest in flight when it names none (`on_stream_message`). A
 * message that cannot be read ends the oldest request in flight as a protocol error.
 *
 * Requests live in a ring indexed by id. Each remembers the connection it was written to (`gen`;
 * 0 while it waits for one): a stream the server ends (trailers, RST_STREAM, GOAWAY, the
 * connection lost) fails what was written to it (`_stream_ended`), the connection counts as lost
 * and a fresh one opens; requests waiting for it are written once it settles.
 */
#include "_native_h2.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_MESSAGE_BYTES (1u << 30) /* a length past this is no message of ours: the stream is out of step */
#define SUFFIX_ROOM 256

typedef struct {
    const char *err; /* error_message, when not empty */
    size_t err_len;
    int has_id;
    uint64_t id;
    int outputs, final;
} scan_t;

static inline sreq_t *slot_of(h2core_t *g, uint64_t id) {
    return &g->ring[id & (g->rcap - 1)];
}

static int is_live(h2core_t *g, uint64_t id) {
    return id >= g->base && id < g->next && slot_of(g, id)->live;
}

/* Room for one more id in the ring (it doubles, the live window keeping its places by id). */
static int ring_room(h2core_t *g) {
    if (g->next - g->base < g->rcap) return 0;
    size_t cap = g->rcap ? g->rcap * 2 : 64;
    sreq_t *ring = calloc(cap, sizeof(sreq_t));
    if (!ring) return -1;
    for (uint64_t id = g->base; id < g->next; id++) ring[id & (cap - 1)] = g->ring[id & (g->rcap - 1)];
    free(g->ring); /* full: every old slot was in the window, its buffer moved */
    g->ring = ring;
    g->rcap = cap;
    return 0;
}

void sx_teardown(h2core_t *g) {
    for (size_t i = 0; i < g->rcap; i++) free(g->ring[i].resp);
    free(g->ring);
    free(g->suffix);
}

void sx_conn_free(h2conn_t *h) {
    free(h->mbuf);
    free(h->qbuf);
}

/* -- sending ---------------------------------------------------------------------------------- */
/* The request's fields after the payload: its id (field 3, decimal) and the suffix. */
static size_t put_suffix(h2core_t *g, uint64_t id, uint8_t *out) {
    char digits[24];
    int nd = snprintf(digits, sizeof digits, "%llu", (unsigned long long)id);
    out[0] = 0x1a;
    out[1] = (uint8_t)nd;
    memcpy(out + 2, digits, (size_t)nd);
    memcpy(out + 2 + nd, g->suffix, g->suffix_len);
    return 2 + (size_t)nd + g->suffix_len;
}

void sx_pump(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    while (h->qoff < h->qlen && !h->broken) {
        int64_t n = (int64_t)(h->qlen - h->qoff);
        if (h->send_window < n) n = h->send_window;
        if (h->sx_window < n) n = h->sx_window;
        if (n > (int64_t)h->max_frame) n = h->max_frame;
        if (n <= 0) break;
        out_head(h, (size_t)n, F_DATA, 0, h->sx_sid);
        out_ref(h, h->qbuf + h->qoff, (size_t)n);
        h->qoff += (size_t)n;
        h->send_window -= n;
        h->sx_window -= n;
    }
    out_flush(c, k); /* what the kernel does not take is copied: qbuf may move on */
    if (h->qoff == h->qlen) h->qoff = h->qlen = 0;
}

static void write_request(Core *c, conn_t *k, uint64_t id) {
    h2core_t *g = c->h2;
    h2conn_t *h = k->h2;
    sreq_t *r = slot_of(g, id);
    r->gen = h->gen;
    if (!h->sx_sid) { /* the stream opens with its first request */
        h->sx_sid = h->next_sid;
        h->next_sid += 2;
        h->sx_window = h->stream_window;
        out_head(h, g->block_len, F_HEADERS, FL_END_HEADERS, h->sx_sid);
        out_ref(h, g->block, g->block_len);
    }
    uint8_t head[5], sfx[SUFFIX_ROOM];
    size_t slen = put_suffix(g, id, sfx);
    size_t plen = c->payload_lens[r->payload];
    const char *payload = c->payloads[r->payload];
    size_t total = 5 + plen + slen;
    head[0] = 0;
    put32(head + 1, (uint32_t)(plen + slen));
    if (h->qlen == h->qoff && (int64_t)total <= h->send_window && (int64_t)total <= h->sx_window &&
        total <= h->max_frame) { /* the common case: one DATA frame, one sendmsg, nothing copied */
        out_head(h, total, F_DATA, 0, h->sx_sid);
        out_ref(h, (const char *)head, 5);
        out_ref(h, payload, plen);
        out_ref(h, (const char *)sfx, slen);
        h->send_window -= (int64_t)total;
        h->sx_window -= (int64_t)total;
        out_flush(c, k);
        return;
    }
    if (h->qoff) { /* no gathered part points into qbuf here: pump flushed what it gathered */
        memmove(h->qbuf, h->qbuf + h->qoff, h->qlen - h->qoff);
        h->qlen -= h->qoff;
        h->qoff = 0;
    }
    if (grow((void **)&h->qbuf, &h->qcap, h->qlen + total, 1) < 0) {
        h->broken = ENOMEM; /* it fails with the connection */
        out_flush(c, k);
        return;
    }
    memcpy(h->qbuf + h->qlen, head, 5);
    memcpy(h->qbuf + h->qlen + 5, payload, plen);
    memcpy(h->qbuf + h->qlen + 5 + plen, sfx, slen);
    h->qlen += total;
    sx_pump(c, k);
}

void sx_submit(Core *c, int64_t due) {
    h2core_t *g = c->h2;
    if (ring_room(g) < 0) {
        static const char oom[] = "out of memory";
        finish(c, due, -1, now_ns(), c->st_refused, oom, sizeof oom - 1);
        return;
    }
    uint64_t id = g->next++;
    sreq_t *r = slot_of(g, id);
    r->due = due;
    r->sent = now_ns();
    r->gen = SX_WAITING;
    r->payload = take_payload(c);
    r->live = 1;
    r->n_resp = 0;
    if (g->n_usable) {
        write_request(c, g->usable[0], id);
        return;
    }
    if (c->opening == 0) h2_open(c); /* it refuses what waits if it cannot even start */
}

/* A connection settled: the requests waiting for a stream go out on it, in order. */
void sx_settled(Core *c, conn_t *k) {
    h2core_t *g = c->h2;
    for (uint64_t id = g->base; id < g->next && !k->dead; id++) {
        sreq_t *r = slot_of(g, id);
        if (r->live && r->gen == SX_WAITING) write_request(c, k, id);
    }
}

/* -- ending requests -------------------------------------------------------------------------- */
/* Request id's one record, with its responses' times (the record takes them: next_count). */
static void end_request(Core *c, uint64_t id, int64_t done, int32_t status, const char *msg, size_t len) {
    h2core_t *g = c->h2;
    sreq_t *r = slot_of(g, id);
    int64_t due = r->due, sent = r->sent;
    uint32_t n = r->n_resp;
    r->live = 0;
    r->n_resp = 0;
    if (n && grow((void **)&c->resp_ns, &c->cap_resp_ns, c->n_resp_ns + n, sizeof(int64_t)) == 0) {
        memcpy(c->resp_ns + c->n_resp_ns, r->resp, n * sizeof(int64_t));
        c->n_resp_ns += n;
        c->next_count = n;
    }
    while (g->base < g->next && !slot_of(g, g->base)->live) g->base++;
    finish(c, due, sent, done, status, msg, len); /* may start the next request: the ring may move */
}

/* Every live request written to connection `gen` (SX_WAITING: those waiting for one; SX_ANY: all)
   ends with `status`. */
void sx_fail(Core *c, uint64_t gen, int32_t status, const char *msg, size_t len) {
    h2core_t *g = c->h2;
    int64_t now = now_ns();
    for (uint64_t id = g->base; id < g->next; id++) {
        sreq_t *r = slot_of(g, id);
        if (r->live && (gen == SX_ANY || r->gen == gen)) end_request(c, id, now, status, msg, len);
    }
}

/* A level's end with requests still in flight: they end unfinished and the stream is replaced
   (perfkit closes its connection), so that late responses cannot answer into the next level. */
void sx_abort(Core *c) {
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        conn_t *k = c->conns[i];
        k->ours = 1; /* first: perfkit closed it, so it is no lost connection */
        retire(c, k);
        conn_close_ours(c, k, 1);
    }
    sx_fail(c, SX_ANY, c->st_unfinished, c->unfinished_message, strlen(c->unfinished_message));
}

/* -- receiving -------------------------------------------------------------------------------- */
static int varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; *pos < n && shift < 64; shift += 7) {
        uint8_t b = p[(*pos)++];
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The protobuf field at p[*pos]: its number and wire type, a length-delimited one's bytes, a
   varint's value; -1 if malformed. */
static int next_field(const uint8_t *p, size_t n, size_t *pos, uint64_t *num, int *wt, const uint8_t **val,
                      size_t *vlen, uint64_t *vint) {
    uint64_t tag, len;
    if (varint(p, n, pos, &tag) < 0) return -1;
    *num = tag >> 3;
    *wt = (int)(tag & 7);
    switch (*wt) {
    case 0:
        return varint(p, n, pos, vint);
    case 1:
        if (n - *pos < 8) return -1;
        *pos += 8;
        return 0;
    case 5:
        if (n - *pos < 4) return -1;
        *pos += 4;
        return 0;
    case 2:
        if (varint(p, n, pos, &len) < 0 || len > n - *pos) return -1;
        *val = p + *pos;
        *vlen = (size_t)len;
        *pos += (size_t)len;
        return 0;
    default:
        return -1;
    }
}

/* ModelInferResponse.parameters entry {1: key, 2: InferParameter{1: bool}}: the final flag, if it is one. */
static int final_flag(const uint8_t *p, size_t n, int *final) {
    static const char key[] = "triton_final_response";
    size_t pos = 0, vlen = 0;
    const uint8_t *val = NULL, *value = NULL;
    size_t value_len = 0;
    uint64_t num, vint = 0;
    int wt, is_final = 0;
    while (pos < n) {
        if (next_field(p, n, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 2) is_final = vlen == sizeof key - 1 && memcmp(val, key, vlen) == 0;
        if (num == 2 && wt == 2) value = val, value_len = vlen;
    }
    if (!is_final) return 0;
    int flag = 0;
    for (pos = 0; value && pos < value_len;) {
        if (next_field(value, value_len, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 0) flag = vint != 0;
    }
    *final = flag;
    return 0;
}

/* A ModelStreamInferResponse's error_message, and its infer_response's id, outputs and final flag. */
static int scan(const uint8_t *m, size_t n, scan_t *s) {
    memset(s, 0, sizeof *s);
    size_t pos = 0, vlen = 0, rlen = 0;
    const uint8_t *val = NULL, *resp = NULL;
    uint64_t num, vint;
    int wt;
    while (pos < n) {
        if (next_field(m, n, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 2) s->err = (const char *)val, s->err_len = vlen;
        if (num == 2 && wt == 2) resp = val, rlen = vlen;
    }
    for (pos = 0; resp && pos < rlen;) {
        if (next_field(resp, rlen, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 3 && wt == 2) { /* our ids are decimal counters: anything else matches no request */
            s->has_id = vlen > 0 && vlen < 20 && (vlen == 1 || val[0] != '0');
            s->id = 0;
            for (size_t i = 0; i < vlen && s->has_id; i++) {
                s->has_id = val[i] >= '0' && val[i] <= '9';
                s->id = s->id * 10 + (uint64_t)(val[i] - '0');
            }
        } else if (num == 5 && wt == 2) {
            s->outputs = 1;
        } else if (num == 4 && wt == 2) {
            if (final_flag(val, vlen, &s->final) < 0) return -1;
        }
    }
    return 0;
}

static void on_message(Core *c, int compressed, const uint8_t *m, size_t n, int64_t now) {
    h2core_t *g = c->h2;
    scan_t s;
    if (compressed || scan(m, n, &s) < 0) {
        if (g->base < g->next) {
            char msg[120];
            int len = snprintf(msg, sizeof msg, "a ModelStreamInferResponse perfkit cannot read (%zu bytes%s)", n,
                               compressed ? ", compressed" : "");
            end_request(c, g->base, now, c->st_protocol, msg, (size_t)len);
        }
        return;
    }
    if (s.err_len) { /* an error ends the request it names, else the oldest in flight */
        uint64_t id = s.has_id && is_live(g, s.id) ? s.id : g->base;
        if (is_live(g, id)) end_request(c, id, now, c->st_stream_error, s.err, s.err_len);
        return;
    }
    if (!s.has_id || !is_live(g, s.id)) return; /* a request that already ended (or not ours) */
    sreq_t *r = slot_of(g, s.id);
    if (s.outputs) {
        if (r->n_resp == r->cap_resp) {
            uint32_t cap = r->cap_resp ? r->cap_resp * 2 : 16;
            int64_t *p = realloc(r->resp, cap * sizeof(int64_t));
            if (!p) return; /* out of memory: this response's time is lost */
            r->resp = p;
            r->cap_resp = cap;
        }
        r->resp[r->n_resp++] = now;
    }
    if (s.final) end_request(c, s.id, now, 0, NULL, 0);
}

/* A DATA frame of the stream: the gRPC messages it completes (a message may span frames). */
void sx_data(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n) {
    h2conn_t *h = k->h2;
    if (flags & FL_PADDED) {
        if (n < 1 || p[0] > n - 1) return;
        n -= 1 + (size_t)p[0];
        p++;
    }
    int64_t now = now_ns();
    const uint8_t *b = p;
    size_t len = n;
    if (h->mlen) { /* a message begun in an earlier frame */
        if (grow((void **)&h->mbuf, &h->mcap, h->mlen + n, 1) < 0) {
            h2_ended(c, k, c->st_protocol, "out of memory");
            return;
        }
        memcpy(h->mbuf + h->mlen, p, n);
        h->mlen += n;
        b = (const uint8_t *)h->mbuf;
        len = h->mlen;
    }
    size_t pos = 0;
    while (len - pos >= 5) {
        uint32_t m = get32(b + pos + 1);
        if (m > MAX_MESSAGE_BYTES) {
            h2_ended(c, k, c->st_protocol, "a gRPC message length past 1 GiB: the stream is out of step");
            return;
        }
        if (len - pos - 5 < m) break;
        on_message(c, b[pos], b + pos + 5, m, now);
        pos += 5 + m;
    }
    size_t rest = len - pos;
    if (b != p) { /* buffered: keep the rest at the front */
        if (pos) memmove(h->mbuf, h->mbuf + pos, rest);
        h->mlen = rest;
    } else if (rest) {
        if (grow((void **)&h->mbuf, &h->mcap, rest, 1) < 0) {
            h2_ended(c, k, c->st_protocol, "out of memory");
            return;
        }
        memcpy(h->mbuf, b + pos, rest);
        h->mlen = rest;
    }
}
