/* The streamed-gRPC protocol's ending of requests (see _native_h2_stream.c): each request's one
 * record with its responses' arrival times, and the responses cut out of the stream's DATA frames
 * (a message may span frames) and read as `_stream_grpc.scan_response` reads them. Calls the core
 * and the protobuf leaf; never the protocol's own file.
 */
#include "_native_h2_stream.h"
#include "_native_pb.h"

/* Request id's one record, with its responses' times (the record takes them: next_count). */
void sx_end_request(Core *c, uint64_t id, int64_t done, int32_t status, const char *msg, size_t len) {
    score_t *g = SCORE(c);
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

void sx_fail(Core *c, uint64_t gen, int32_t status, const char *msg, size_t len) {
    score_t *g = SCORE(c);
    int64_t now = now_ns();
    for (uint64_t id = g->base; id < g->next; id++) {
        sreq_t *r = slot_of(g, id);
        if (r->live && (gen == SX_ANY || r->gen == gen)) sx_end_request(c, id, now, status, msg, len);
    }
}

/* -- receiving -------------------------------------------------------------------------------- */
static void on_message(Core *c, int compressed, const uint8_t *m, size_t n, int64_t now) {
    score_t *g = SCORE(c);
    pb_response_t s;
    if (compressed || pb_scan_response(m, n, &s) < 0) {
        if (g->base < g->next) {
            char msg[120];
            int len = snprintf(msg, sizeof msg, "a ModelStreamInferResponse perfkit cannot read (%zu bytes%s)", n,
                               compressed ? ", compressed" : "");
            sx_end_request(c, g->base, now, c->st_protocol, msg, (size_t)len);
        }
        return;
    }
    if (s.err_len) { /* an error ends the request it names, else the oldest in flight */
        uint64_t id = s.has_id && is_live(g, s.id) ? s.id : g->base;
        if (is_live(g, id)) sx_end_request(c, id, now, c->st_stream_error, s.err, s.err_len);
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
    if (s.final) sx_end_request(c, s.id, now, 0, NULL, 0);
}

/* A DATA frame of the stream: the gRPC messages it completes (a message may span frames). */
const char *sx_data(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n) {
    sconn_t *h = S(k);
    if (flags & FL_PADDED) {
        if (n < 1 || p[0] > n - 1) return NULL;
        n -= 1 + (size_t)p[0];
        p++;
    }
    int64_t now = now_ns();
    const uint8_t *b = p;
    size_t len = n;
    if (h->mlen) { /* a message begun in an earlier frame */
        if (grow((void **)&h->mbuf, &h->mcap, h->mlen + n, 1) < 0) {
            return "out of memory";
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
            return "a gRPC message length past 1 GiB: the stream is out of step";
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
            return "out of memory";
        }
        memcpy(h->mbuf, b + pos, rest);
        h->mlen = rest;
    }
    return NULL;
}
