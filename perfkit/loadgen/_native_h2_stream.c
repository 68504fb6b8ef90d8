/* Streamed gRPC requests (decoupled models) for the compiled sender: `_stream_h2.H2StreamTransport`
 * in C, behind the core's `proto_ops_t`, on the connections and frames of _native_h2.c.
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
#include "_native_h2_stream.h"
#include "_native_protocols.h"

static void open_one(Core *c);
static void retire(Core *c, conn_t *k);
static void ended(Core *c, conn_t *k, int32_t status, const char *msg);

/* Room for one more id in the ring (it doubles, the live window keeping its places by id). */
static int ring_room(score_t *g) {
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

/* -- sending ---------------------------------------------------------------------------------- */
/* The request's fields after the payload: its id (field 3, decimal) and the suffix. */
static size_t put_suffix(score_t *g, uint64_t id, uint8_t *out) {
    char digits[24];
    int nd = snprintf(digits, sizeof digits, "%llu", (unsigned long long)id);
    out[0] = 0x1a;
    out[1] = (uint8_t)nd;
    memcpy(out + 2, digits, (size_t)nd);
    memcpy(out + 2 + nd, g->suffix, g->suffix_len);
    return 2 + (size_t)nd + g->suffix_len;
}

static void pump(Core *c, conn_t *k) {
    sconn_t *x = S(k);
    h2conn_t *h = &x->h;
    while (x->qoff < x->qlen && !h->broken) {
        int64_t n = (int64_t)(x->qlen - x->qoff);
        if (h->send_window < n) n = h->send_window;
        if (x->sx_window < n) n = x->sx_window;
        if (n > (int64_t)h->max_frame) n = h->max_frame;
        if (n <= 0) break;
        out_head(h, (size_t)n, F_DATA, 0, h->long_sid);
        out_ref(h, x->qbuf + x->qoff, (size_t)n);
        x->qoff += (size_t)n;
        h->send_window -= n;
        x->sx_window -= n;
    }
    out_flush(c, k); /* what the kernel does not take is copied: qbuf may move on */
    if (x->qoff == x->qlen) x->qoff = x->qlen = 0;
}

static void write_request(Core *c, conn_t *k, uint64_t id) {
    score_t *g = SCORE(c);
    sconn_t *x = S(k);
    h2conn_t *h = &x->h;
    sreq_t *r = slot_of(g, id);
    r->gen = h->gen;
    if (!h->long_sid) { /* the stream opens with its first request */
        h->long_sid = h->next_sid;
        h->next_sid += 2;
        x->sx_window = h->stream_window;
        out_head(h, g->g.block_len, F_HEADERS, FL_END_HEADERS, h->long_sid);
        out_ref(h, g->g.block, g->g.block_len);
    }
    uint8_t head[5], sfx[SUFFIX_ROOM];
    size_t slen = put_suffix(g, id, sfx);
    size_t plen = c->payload_lens[r->payload];
    const char *payload = c->payloads[r->payload];
    size_t total = 5 + plen + slen;
    head[0] = 0;
    put32(head + 1, (uint32_t)(plen + slen));
    if (x->qlen == x->qoff && (int64_t)total <= h->send_window && (int64_t)total <= x->sx_window &&
        total <= h->max_frame) { /* the common case: one DATA frame, one sendmsg, nothing copied */
        out_head(h, total, F_DATA, 0, h->long_sid);
        out_ref(h, (const char *)head, 5);
        out_ref(h, payload, plen);
        out_ref(h, (const char *)sfx, slen);
        h->send_window -= (int64_t)total;
        x->sx_window -= (int64_t)total;
        out_flush(c, k);
        return;
    }
    if (x->qoff) { /* no gathered part points into qbuf here: pump flushed what it gathered */
        memmove(x->qbuf, x->qbuf + x->qoff, x->qlen - x->qoff);
        x->qlen -= x->qoff;
        x->qoff = 0;
    }
    if (grow((void **)&x->qbuf, &x->qcap, x->qlen + total, 1) < 0) {
        h->broken = ENOMEM; /* it fails with the connection */
        out_flush(c, k);
        return;
    }
    memcpy(x->qbuf + x->qlen, head, 5);
    memcpy(x->qbuf + x->qlen + 5, payload, plen);
    memcpy(x->qbuf + x->qlen + 5 + plen, sfx, slen);
    x->qlen += total;
    pump(c, k);
}

static void sx_submit(Core *c, int64_t due) {
    score_t *g = SCORE(c);
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
    if (g->g.n_usable) {
        write_request(c, g->g.usable[0], id);
        return;
    }
    if (c->opening == 0) open_one(c); /* it refuses what waits if it cannot even start */
}

/* A connection settled: the requests waiting for a stream go out on it, in order. */
static void sx_settled(Core *c, conn_t *k) {
    score_t *g = SCORE(c);
    for (uint64_t id = g->base; id < g->next && !k->dead; id++) {
        sreq_t *r = slot_of(g, id);
        if (r->live && r->gen == SX_WAITING) write_request(c, k, id);
    }
}

/* A level's end with requests still in flight: they end unfinished and the stream is replaced
   (perfkit closes its connection), so that late responses cannot answer into the next level. */
static void sx_abort(Core *c) {
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        conn_t *k = c->conns[i];
        k->ours = 1; /* first: perfkit closed it, so it is no lost connection */
        retire(c, k);
        conn_close_ours(c, k, 1);
    }
    sx_fail(c, SX_ANY, c->st_unfinished, c->unfinished_message, strlen(c->unfinished_message));
}

/* -- the connection --------------------------------------------------------------------------- */
/* What waits for a stream is refused when no connection attempt is left to carry it. */
static void open_failed(Core *c) {
    if (c->opening > 0) return;
    sx_fail(c, SX_WAITING, c->st_refused, c->open_error, strlen(c->open_error));
}

static void open_one(Core *c) {
    if (!h2_open(c)) open_failed(c);
}

static void retire(Core *c, conn_t *k) {
    if (h2_retire(c, k) < 0) open_failed(c);
}

static int sx_prepare(Core *c) {
    h2core_t *g = H2CORE(c);
    g->want = 1;
    h2_open_wanted(c, open_failed);
    return 1; /* the first requests wait for the server's SETTINGS */
}

static void sx_connected(Core *c, conn_t *k) {
    if (h2_connected(c, k) < 0) open_failed(c);
}

/* The connection is unusable (its stream ended, a protocol error): what was written to it ends
   with `status`; one perfkit did not close counts as lost, a replacement opens. */
static void ended(Core *c, conn_t *k, int32_t status, const char *msg) {
    if (status == c->st_protocol) note_example(c, status, msg, strlen(msg));
    retire(c, k);
    conn_close_ours(c, k, 1);
    sx_fail(c, H2(k)->gen, status, msg, strlen(msg));
}

/* The peer closed, the socket failed or a write did: what was written to it ends closed. */
static void lost(Core *c, conn_t *k, int err) {
    int settled = H2(k)->settled;
    retire(c, k);
    char msg[160];
    h2_lose(c, k, err, msg, sizeof msg);
    sx_fail(c, H2(k)->gen, c->st_closed, msg, strlen(msg));
    if (!settled) open_failed(c);
}

/* The server ended the ModelStreamInfer stream (as _stream_h2.H2Stream._end). */
static void stream_done(Core *c, conn_t *k, uint32_t sid, const hpack_result_t *res) {
    if (sid != H2(k)->long_sid) return;
    int32_t status = h2_call_status(c, res, c->st_closed);
    char msg[EXAMPLE_BYTES + 1];
    size_t len = res && res->has_message && res->message_len ? res->message_len : 0;
    if (len > EXAMPLE_BYTES) len = EXAMPLE_BYTES;
    if (len)
        memcpy(msg, res->message, len);
    else
        len = (size_t)snprintf(msg, sizeof msg, "%s", res ? "stream ended" : "the server ended the stream");
    msg[len] = 0;
    ended(c, k, status, msg);
}

static void on_frame(Core *c, conn_t *k, const h2frame_t *f) {
    sconn_t *x = S(k);
    h2conn_t *h = &x->h;
    switch (f->type) {
    case F_DATA:
        h->received += f->n;
        if (f->sid == h->long_sid && f->sid) {
            const char *why = sx_data(c, k, f->flags, f->p, f->n);
            if (why) ended(c, k, c->st_protocol, why);
            if (k->dead) break;
        }
        if (f->flags & FL_END_STREAM) stream_done(c, k, f->sid, NULL);
        break;
    case F_HEADERS:
    case F_CONT: {
        hpack_result_t fresh;
        const hpack_result_t *res = NULL;
        uint32_t sid;
        int end, whole;
        char err[120];
        if (!(whole = h2_headers(k, f, &fresh, &res, &sid, &end, err, sizeof err))) break;
        if (whole < 0)
            ended(c, k, c->st_protocol, err);
        else if (end || (sid == h->long_sid && res->http_status >= 0 && res->http_status != 200))
            stream_done(c, k, sid, res); /* an answer other than 200 ends it at its head: its body is never read */
        break;
    }
    case F_SETTINGS:
        if (!(f->flags & FL_ACK)) {
            int64_t delta = h2_settings(c, k, f->p, f->n);
            if (h->long_sid) x->sx_window += delta; /* RFC 9113 6.9.2: the open stream's window moves */
            if (!h->settled && h2_settle(c, k)) sx_settled(c, k);
            if (!k->dead) pump(c, k);
        }
        break;
    case F_PING:
        h2_ping(c, k, f->flags, f->p, f->n);
        break;
    case F_WINDOW:
        if (f->n >= 4) {
            int64_t inc = get32(f->p) & 0x7fffffff;
            if (f->sid == 0)
                h->send_window += inc;
            else if (f->sid == h->long_sid)
                x->sx_window += inc;
            pump(c, k);
        }
        break;
    case F_RST: {
        uint32_t code = f->n >= 4 ? get32(f->p) : 0;
        if (f->sid != h->long_sid) break;
        char msg[80];
        snprintf(msg, sizeof msg, "stream reset by the server (HTTP/2 error %u)", code);
        ended(c, k, c->st_closed, msg);
        break;
    }
    case F_GOAWAY: /* as _stream_h2.H2Stream: the stream ends */
        ended(c, k, c->st_closed, "server sent GOAWAY");
        break;
    default: /* PRIORITY, PUSH_PROMISE (disabled), unknown types: nothing to do */
        break;
    }
}

static void sx_event(Core *c, conn_t *k, uint32_t events) {
    h2_event(c, k, events, on_frame, lost);
}

static void sx_tick(Core *c) {
    if (h2_expire(c)) open_failed(c);
}

static void sx_conn_free(conn_t *k) {
    free(S(k)->mbuf);
    free(S(k)->qbuf);
    h2_conn_free(k);
}

static void sx_teardown(Core *c) {
    score_t *g = SCORE(c);
    if (!g) return;
    for (size_t i = 0; i < g->rcap; i++) free(g->ring[i].resp);
    free(g->ring);
    free(g->suffix);
    h2_core_free(&g->g);
    free(g);
    c->proto = NULL;
}

static const proto_ops_t stream_ops = {
    .conn_bytes = sizeof(sconn_t),
    .unavailable_retries = 1,
    .submit = sx_submit,
    .prepare = sx_prepare,
    .connected = sx_connected,
    .event = sx_event,
    .dropped = h2_dropped,
    .conn_free = sx_conn_free,
    .abort_in_flight = sx_abort,
    .tick = sx_tick,
    .next_wake = h2_next_wake,
    .teardown = sx_teardown,
};

int h2_stream_setup(Core *c, const char *block, size_t block_len, uint32_t first_sid, const char *suffix,
                    size_t suffix_len) {
    score_t *g = calloc(1, sizeof(score_t));
    if (!g) return -1;
    g->suffix = malloc(suffix_len + 1);
    if (!g->suffix || h2_core_init(&g->g, block, block_len, 1, first_sid) < 0) {
        free(g->suffix);
        free(g);
        return -1;
    }
    memcpy(g->suffix, suffix, suffix_len);
    g->suffix_len = suffix_len;
    c->streaming = 1;
    c->ops = &stream_ops;
    c->proto = g;
    return 0;
}
