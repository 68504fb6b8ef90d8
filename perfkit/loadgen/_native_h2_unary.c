/* Unary gRPC over HTTP/2 for the compiled sender: `_h2.H2Transport` in C, behind the core's
 * `proto_ops_t`, on the connections and frames of _native_h2.c.
 *
 * Requests round-robin over the connections in rotation. Per call: one HEADERS frame with the
 * prebuilt stateless header block Python hands in (`_h2.header_block`: compression and metadata
 * are in it), then the gRPC message (framed by Python, `_h2.grpc_message`) in DATA frames, all in
 * one sendmsg (_native_h2_write.c); on the way back the trailers' grpc-status/grpc-message end it.
 *
 * Flow control: sends honour the server's connection window, its initial stream window and its
 * max frame size: a request larger than the windows allow waits in a FIFO (`blocked`) and goes out
 * in pieces as WINDOW_UPDATEs arrive.
 *
 * GOAWAY takes a connection out of rotation at once: streams above last-stream-id and requests
 * still waiting for window end closed, the rest finish, then it closes. A connection the server
 * drops ends every stream it carried as closed.
 *
 * Reentrancy: finishing a request may start the next one (closed loop) on any connection, this
 * one included; so a write error only marks the connection broken (its epoll event then ends
 * it), and owed requests are taken off a connection before they are recorded.
 */
#include "_native_h2_unary.h"
#include "_native_protocols.h"

/* Start one call on k (H2Conn.send). */
static void send_call(Core *c, conn_t *k, size_t payload, int64_t due) {
    uconn_t *u = U(k);
    h2conn_t *h = &u->h;
    h2core_t *g = H2CORE(c);
    size_t size = c->payload_lens[payload];
    if (u->blk_len || (int64_t)size > h->send_window || (int64_t)size > h->stream_window) {
        u_block(c, k, payload, due);
        return;
    }
    uint32_t sid = h->next_sid;
    h->next_sid += 2;
    h->send_window -= (int64_t)size;
    add_stream(u, sid, due, now_ns());
    out_head(h, g->block_len, F_HEADERS, FL_END_HEADERS, sid);
    out_ref(h, g->block, g->block_len);
    out_data(h, sid, c->payloads[payload], size, 1);
    out_flush(c, k);
}

/* -- connections ------------------------------------------------------------------------------ */
/* Every pending request is refused when no connection attempt is left to carry it. */
static void open_failed(Core *c) {
    if (c->opening > 0) return;
    size_t len = strlen(c->open_error);
    while (c->pend_len) finish(c, pop_pending(c), -1, now_ns(), c->st_refused, c->open_error, len);
}

static void open_one(Core *c) {
    if (!h2_open(c)) open_failed(c);
}

static int u_prepare(Core *c) {
    h2core_t *g = H2CORE(c);
    int share = c->arg_share;
    g->want = c->mode == MODE_CLOSED ? (share < g->connections ? (share > 1 ? share : 1) : g->connections)
                                     : g->connections;
    h2_open_wanted(c, open_failed);
    return 1; /* the first requests wait for the server's SETTINGS */
}

static void u_connected(Core *c, conn_t *k) {
    if (h2_connected(c, k) < 0) open_failed(c);
}

/* The server's first SETTINGS: the connection joins the rotation and takes what was waiting. */
static void settle(Core *c, conn_t *k) {
    if (!h2_settle(c, k)) return;
    while (c->pend_len && !k->dead) send_call(c, k, take_payload(c), pop_pending(c));
}

static void retire(Core *c, conn_t *k) {
    if (h2_retire(c, k) < 0) open_failed(c);
}

/* Record every request k still owes with `status` (streams, and requests never sent), after
   taking them off k: recording may start new requests. */
static void fail_owed(Core *c, conn_t *k, int32_t status, const char *msg) {
    uconn_t *u = U(k);
    stream_t *streams = u->streams;
    size_t n_streams = u->n_streams;
    blocked_t *blocked = u->blocked + u->blk_head;
    size_t n_blocked = u->blk_len;
    blocked_t *blocked_mem = u->blocked;
    u->streams = NULL;
    u->n_streams = u->cap_streams = 0;
    u->blocked = NULL;
    u->blk_head = u->blk_len = u->blk_cap = 0;
    size_t len = strlen(msg);
    for (size_t i = 0; i < n_streams; i++)
        finish(c, streams[i].due, streams[i].sent, now_ns(), status, msg, len);
    for (size_t i = 0; i < n_blocked; i++)
        if (!blocked[i].sid) finish(c, blocked[i].due, -1, now_ns(), status, msg, len);
    free(streams);
    free(blocked_mem);
}

static int owes(uconn_t *u) {
    return u->n_streams > 0 || u->blk_len > 0;
}

/* The peer closed, the socket failed or a write did: every request it carried ends closed. */
static void lost(Core *c, conn_t *k, int err) {
    int settled = H2(k)->settled;
    retire(c, k);
    char msg[160];
    h2_lose(c, k, err, msg, sizeof msg);
    fail_owed(c, k, c->st_closed, msg);
    if (!settled) open_failed(c);
}

/* The connection is unusable (a protocol error): what it owed ends with `status`; one perfkit did
   not close counts as lost, a replacement opens. */
static void failed(Core *c, conn_t *k, const char *msg) {
    note_example(c, c->st_protocol, msg, strlen(msg));
    retire(c, k);
    conn_close_ours(c, k, 1);
    fail_owed(c, k, c->st_protocol, msg);
}

static void close_if_gone_away(Core *c, conn_t *k) {
    if (H2(k)->goaway && !owes(U(k)) && !k->dead) conn_close_ours(c, k, 0);
}

/* -- receiving -------------------------------------------------------------------------------- */
static void stream_done(Core *c, conn_t *k, uint32_t sid, const hpack_result_t *res) {
    stream_t s;
    if (!take_stream(U(k), sid, &s)) return;
    int64_t done = now_ns();
    int32_t status = h2_call_status(c, res, 0);
    if (!status) {
        finish(c, s.due, s.sent, done, 0, NULL, 0);
    } else if (res->has_message && res->message_len) {
        finish(c, s.due, s.sent, done, status, res->message, res->message_len);
    } else {
        static const char fallback[] = "gRPC call failed";
        finish(c, s.due, s.sent, done, status, fallback, sizeof fallback - 1);
    }
    close_if_gone_away(c, k);
}

static void on_settings(Core *c, conn_t *k, const uint8_t *p, size_t n) {
    uconn_t *u = U(k);
    int64_t delta = h2_settings(c, k, p, n);
    for (size_t j = 0; j < u->blk_len; j++) /* RFC 9113 6.9.2: open streams' windows move by the change */
        if (u->blocked[u->blk_head + j].sid) u->blocked[u->blk_head + j].window += delta;
    if (!u->h.settled) settle(c, k);
    if (!k->dead) u_pump(c, k);
}

static void on_goaway(Core *c, conn_t *k, const uint8_t *p, size_t n) {
    uconn_t *u = U(k);
    uint32_t last = n >= 4 ? get32(p) & 0x7fffffff : 0;
    u->h.goaway = 1;
    retire(c, k);
    /* streams the server will not process, and requests still waiting for window (they will never
       be sent whole here), taken off first: recording them may start new requests elsewhere */
    size_t kept = 0, gone = 0;
    stream_t *away = malloc((u->n_streams + u->blk_len + 1) * sizeof(stream_t));
    if (!away) {
        lost(c, k, ENOMEM);
        return;
    }
    for (size_t i = 0; i < u->n_streams; i++) {
        stream_t *s = &u->streams[i];
        int waiting = 0;
        for (size_t j = 0; j < u->blk_len && !waiting; j++) waiting = u->blocked[u->blk_head + j].sid == s->sid;
        if (s->sid > last || waiting)
            away[gone++] = *s;
        else
            u->streams[kept++] = *s;
    }
    u->n_streams = kept;
    for (size_t j = 0; j < u->blk_len; j++)
        if (!u->blocked[u->blk_head + j].sid) away[gone++] = (stream_t){0, u->blocked[u->blk_head + j].due, -1};
    u->blk_head = u->blk_len = 0;
    int64_t now = now_ns();
    for (size_t i = 0; i < gone; i++) finish(c, away[i].due, away[i].sent, now, c->st_closed, MSG_GOAWAY, sizeof MSG_GOAWAY - 1);
    free(away);
    close_if_gone_away(c, k);
}

static void on_frame(Core *c, conn_t *k, const h2frame_t *f) {
    uconn_t *u = U(k);
    h2conn_t *h = &u->h;
    switch (f->type) {
    case F_DATA:
        h->received += f->n;
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
            failed(c, k, err);
        else if (end)
            stream_done(c, k, sid, res);
        break;
    }
    case F_SETTINGS:
        if (!(f->flags & FL_ACK)) on_settings(c, k, f->p, f->n);
        break;
    case F_PING:
        h2_ping(c, k, f->flags, f->p, f->n);
        break;
    case F_WINDOW:
        if (f->n >= 4) {
            int64_t inc = get32(f->p) & 0x7fffffff;
            if (f->sid == 0)
                h->send_window += inc;
            else if (u->blk_len && u->blocked[u->blk_head].sid == f->sid)
                u->blocked[u->blk_head].window += inc;
            u_pump(c, k);
        }
        break;
    case F_RST: {
        uint32_t code = f->n >= 4 ? get32(f->p) : 0;
        stream_t s;
        if (!take_stream(u, f->sid, &s)) break;
        if (u->blk_len && u->blocked[u->blk_head].sid == f->sid) {
            u->blk_head++;
            if (--u->blk_len == 0) u->blk_head = 0;
        }
        char msg[80];
        int len = snprintf(msg, sizeof msg, "stream reset by the server (HTTP/2 error %u)", code);
        finish(c, s.due, s.sent, now_ns(), c->st_closed, msg, (size_t)len);
        close_if_gone_away(c, k);
        break;
    }
    case F_GOAWAY:
        on_goaway(c, k, f->p, f->n);
        break;
    default: /* PRIORITY, PUSH_PROMISE (disabled), unknown types: nothing to do */
        break;
    }
}

static void u_event(Core *c, conn_t *k, uint32_t events) {
    h2_event(c, k, events, on_frame, lost);
}

/* -- requests --------------------------------------------------------------------------------- */
/* A connection whose stream ids run out leaves the rotation as if the server had sent GOAWAY
   (its calls finish, then it closes), not counted as lost; a replacement opens. */
static void wind_down(Core *c, conn_t *k) {
    h2core_t *g = H2CORE(c);
    H2(k)->goaway = 1;
    H2(k)->in_rotation = 0;
    h2_usable_remove(g, k);
    if (c->opening == 0 && (int)g->n_usable < g->want) open_one(c);
    close_if_gone_away(c, k);
}

static void u_submit(Core *c, int64_t due) {
    h2core_t *g = H2CORE(c);
    if (g->n_usable) {
        conn_t *k = g->usable[g->rr++ % g->n_usable];
        if (H2(k)->next_sid > H2_LAST_SID) {
            wind_down(c, k);
            u_submit(c, due);
            return;
        }
        send_call(c, k, take_payload(c), due);
        return;
    }
    push_pending(c, due);
    if (c->opening == 0) open_one(c);
}

static void u_abort_in_flight(Core *c) {
    unfinish_pending(c, now_ns());
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        conn_t *k = c->conns[i];
        if (!H2(k)->gen || !owes(U(k))) continue;
        k->ours = 1; /* first: perfkit closed it, so it is no lost connection */
        retire(c, k);
        conn_close_ours(c, k, 1);
        fail_owed(c, k, c->st_unfinished, c->unfinished_message);
    }
}

static void u_tick(Core *c) {
    if (h2_expire(c)) open_failed(c);
}

static void u_conn_free(conn_t *k) {
    free(U(k)->streams);
    free(U(k)->blocked);
    h2_conn_free(k);
}

static void u_teardown(Core *c) {
    h2core_t *g = H2CORE(c);
    if (!g) return;
    h2_core_free(g);
    free(g);
    c->proto = NULL;
}

static const proto_ops_t unary_ops = {
    .conn_bytes = sizeof(uconn_t),
    .unavailable_retries = 1,
    .submit = u_submit,
    .prepare = u_prepare,
    .connected = u_connected,
    .event = u_event,
    .dropped = h2_dropped,
    .conn_free = u_conn_free,
    .abort_in_flight = u_abort_in_flight,
    .tick = u_tick,
    .next_wake = h2_next_wake,
    .teardown = u_teardown,
};

int h2_unary_setup(Core *c, const char *block, size_t block_len, int connections, uint32_t first_sid) {
    h2core_t *g = calloc(1, sizeof(h2core_t));
    if (!g || h2_core_init(g, block, block_len, connections, first_sid) < 0) {
        free(g);
        return -1;
    }
    c->ops = &unary_ops;
    c->proto = g;
    return 0;
}
