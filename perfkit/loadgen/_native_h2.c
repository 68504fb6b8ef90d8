/* Unary gRPC over HTTP/2 for the compiled sender: `_h2.H2Transport` in C.
 *
 * A few connections (`connections`, as _h2.H2_CONNECTIONS), each carrying many streams, requests
 * round-robin over those in rotation. Per call: one HEADERS frame with the prebuilt stateless
 * header block Python hands in (`_h2.header_block`: compression and metadata are in it), then the
 * gRPC message (framed by Python, `_h2.grpc_message`) in DATA frames, all in one sendmsg
 * (_native_h2_write.c); only frame headers are parsed on the way back, plus the trailers' grpc-status/grpc-message
 * (_native_hpack.c keeps the server's dynamic table in step; a block made of indexed fields only
 * changes no table state, so its meaning is cached).
 *
 * Flow control (RFC 9113 5.2, 6.9): we advertise huge receive windows and top up the connection's
 * every GiB. Sends honour the server's connection window, its initial stream window and its max
 * frame size: a request larger than the windows allow waits in a FIFO (`blocked`) and goes out in
 * pieces as WINDOW_UPDATEs arrive.
 *
 * Connections: one is in rotation once the server's first SETTINGS arrived (`c->opening` counts
 * those not yet settled; 5 s at most). GOAWAY takes it out of rotation at once: streams above
 * last-stream-id and requests still waiting for window end closed, the rest finish, then it
 * closes. A connection the server drops ends every stream it carried as closed. Either way
 * (perfkit did not close it) it counts as lost and a replacement opens; the replacement counts as
 * a reconnect once settled.
 *
 * Streaming (`h2core_t.stream`, _native_h2_stream.c): one connection whose one stream carries
 * every request; DATA on it goes to sx_data, and its end (trailers, RST_STREAM, GOAWAY, the
 * connection lost) fails what was written to it (h2_ended, fail_owed).
 *
 * Reentrancy: finishing a request may start the next one (closed loop) on any connection, this
 * one included; so a write error only marks the connection broken (its epoll event then ends
 * it), and owed requests are taken off a connection before they are recorded.
 */
#include "_native_h2.h"

#include <stdio.h>
#include <stdlib.h>

/* -- setup ------------------------------------------------------------------------------------ */
int h2_setup(Core *c, const char *block, size_t block_len, int connections, uint32_t first_sid,
             const char *suffix, size_t suffix_len) {
    h2core_t *g = calloc(1, sizeof(h2core_t));
    if (!g) return -1;
    if (suffix) { /* streaming: one connection, one stream on it; the suffix's id (empty) is cut off */
        g->stream = 1;
        connections = 1;
        g->suffix = malloc(suffix_len + 1);
        if (!g->suffix) {
            free(g);
            return -1;
        }
        memcpy(g->suffix, suffix, suffix_len);
        g->suffix_len = suffix_len;
        c->streaming = 1;
    }
    g->block = malloc(block_len ? block_len : 1);
    if (!g->block) {
        free(g);
        return -1;
    }
    memcpy(g->block, block, block_len);
    g->block_len = block_len;
    g->connections = g->want = connections > 0 ? connections : 1;
    g->first_sid = first_sid;
    /* as H2Conn.connection_made: no push, a huge initial stream window, the connection's topped up */
    uint8_t *p = (uint8_t *)g->intro;
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    memcpy(p, preface, sizeof preface - 1);
    p += sizeof preface - 1;
    frame_head(p, 12, F_SETTINGS, 0, 0);
    p += 9;
    p[0] = 0, p[1] = 2;
    put32(p + 2, 0);
    p[6] = 0, p[7] = SET_INITIAL_WINDOW;
    put32(p + 8, (uint32_t)BIG_WINDOW);
    p += 12;
    frame_head(p, 4, F_WINDOW, 0, 0);
    put32(p + 9, (uint32_t)(BIG_WINDOW - DEFAULT_WINDOW));
    p += 13;
    g->intro_len = (size_t)(p - (uint8_t *)g->intro);
    c->h2 = g;
    return 0;
}

void h2_teardown(Core *c) {
    h2core_t *g = c->h2;
    if (!g) return;
    free(g->block);
    free(g->usable);
    sx_teardown(g);
    free(g);
    c->h2 = NULL;
}

void h2_free(conn_t *k) {
    h2conn_t *h = k->h2;
    hpack_free(&h->hp);
    free(h->streams);
    free(h->blocked);
    free(h->cont);
    free(h->wbuf);
    free(h->parts);
    free(h->heads);
    free(h->iov);
    sx_conn_free(h);
    free(h);
    k->h2 = NULL;
}

/* -- streams ---------------------------------------------------------------------------------- */
static void add_stream(h2conn_t *h, uint32_t sid, int64_t due, int64_t sent) {
    if (grow((void **)&h->streams, &h->cap_streams, h->n_streams + 1, sizeof(stream_t)) < 0) {
        h->broken = ENOMEM;
        return;
    }
    h->streams[h->n_streams++] = (stream_t){sid, due, sent};
}

static int take_stream(h2conn_t *h, uint32_t sid, stream_t *out) {
    for (size_t i = 0; i < h->n_streams; i++)
        if (h->streams[i].sid == sid) {
            *out = h->streams[i];
            memmove(h->streams + i, h->streams + i + 1, (h->n_streams - i - 1) * sizeof(stream_t));
            h->n_streams--;
            return 1;
        }
    return 0;
}

size_t take_payload(Core *c) {
    size_t i = c->next_payload;
    c->next_payload = (i + 1) % (size_t)c->n_payloads;
    return i;
}

/* Send the blocked requests, head first, as far as the windows allow (H2Conn._pump). */
static void pump(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    h2core_t *g = c->h2;
    while (h->blk_len && !h->broken) {
        blocked_t *b = &h->blocked[h->blk_head];
        size_t size = c->payload_lens[b->payload];
        if (!b->sid) {
            if ((int64_t)size > h->send_window && h->send_window < (int64_t)h->max_frame)
                break; /* wait for connection window before opening the stream */
            b->sid = h->next_sid;
            h->next_sid += 2;
            b->window = h->stream_window;
            add_stream(h, b->sid, b->due, now_ns());
            out_head(h, g->block_len, F_HEADERS, FL_END_HEADERS, b->sid);
            out_ref(h, g->block, g->block_len);
        }
        int64_t n = (int64_t)(size - b->offset);
        if (h->send_window < n) n = h->send_window;
        if (b->window < n) n = b->window;
        if (n <= 0 && size > 0) break;
        int last = b->offset + (size_t)n == size;
        out_data(h, b->sid, c->payloads[b->payload] + b->offset, (size_t)n, last);
        b->offset += (size_t)n;
        h->send_window -= n;
        b->window -= n;
        if (!last) break;
        h->blk_head++;
        if (--h->blk_len == 0) h->blk_head = 0;
    }
    out_flush(c, k);
}

/* Start one call on k (H2Conn.send). */
static void h2_send(Core *c, conn_t *k, size_t payload, int64_t due) {
    h2conn_t *h = k->h2;
    size_t size = c->payload_lens[payload];
    if (h->blk_len || (int64_t)size > h->send_window || (int64_t)size > h->stream_window) {
        if (h->blk_head + h->blk_len == h->blk_cap && h->blk_head) {
            memmove(h->blocked, h->blocked + h->blk_head, h->blk_len * sizeof(blocked_t));
            h->blk_head = 0;
        }
        if (grow((void **)&h->blocked, &h->blk_cap, h->blk_head + h->blk_len + 1, sizeof(blocked_t)) < 0) {
            h->broken = ENOMEM; /* owed from now on: it ends closed with the connection */
            add_stream(h, h->next_sid, due, -1);
            return;
        }
        h->blocked[h->blk_head + h->blk_len++] = (blocked_t){payload, 0, due, 0, 0};
        pump(c, k);
        return;
    }
    uint32_t sid = h->next_sid;
    h->next_sid += 2;
    h->send_window -= (int64_t)size;
    add_stream(h, sid, due, now_ns());
    out_head(h, c->h2->block_len, F_HEADERS, FL_END_HEADERS, sid);
    out_ref(h, c->h2->block, c->h2->block_len);
    out_data(h, sid, c->payloads[payload], size, 1);
    out_flush(c, k);
}

/* -- connections ------------------------------------------------------------------------------ */
static void usable_remove(h2core_t *g, conn_t *k) {
    for (size_t i = 0; i < g->n_usable; i++)
        if (g->usable[i] == k) {
            memmove(g->usable + i, g->usable + i + 1, (g->n_usable - i - 1) * sizeof(conn_t *));
            g->n_usable--;
            return;
        }
}

/* Every pending request is refused when no connection attempt is left to carry it. */
static void open_failed(Core *c) {
    if (c->opening > 0) return;
    size_t len = strlen(c->open_error);
    if (c->h2->stream) {
        sx_fail(c, SX_WAITING, c->st_refused, c->open_error, len);
        return;
    }
    while (c->pend_len) finish(c, pop_pending(c), -1, now_ns(), c->st_refused, c->open_error, len);
}

void h2_open(Core *c) {
    conn_t *k = dial(c);
    if (!k) {
        open_failed(c);
        return;
    }
    h2conn_t *h = calloc(1, sizeof(h2conn_t));
    if (!h) {
        conn_close_ours(c, k, 1);
        snprintf(c->open_error, sizeof c->open_error, "out of memory");
        open_failed(c);
        return;
    }
    hpack_init(&h->hp);
    h->next_sid = c->h2->first_sid;
    h->send_window = h->stream_window = DEFAULT_WINDOW;
    h->max_frame = DEFAULT_MAX_FRAME;
    h->settle_deadline = now_ns() + SETTINGS_WAIT_NS;
    h->gen = ++c->h2->gen_next;
    k->h2 = h;
    c->opening++;
}

void h2_prepare(Core *c, int closed_loop, int share) {
    h2core_t *g = c->h2;
    g->want = closed_loop ? (share < g->connections ? (share > 1 ? share : 1) : g->connections) : g->connections;
    if (g->stream) g->want = 1;
    while ((int)g->n_usable + c->opening < g->want) {
        int before = c->opening;
        h2_open(c);
        if (c->opening == before) break; /* it could not even start */
    }
}

void h2_connected(Core *c, conn_t *k) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    k->connecting = 0;
    if (err) {
        snprintf(c->open_error, sizeof c->open_error, "%s", strerror(err));
        conn_close_ours(c, k, 0);
        open_failed(c);
        return;
    }
    set_events(c, k, 0);
    out_bytes(c, k, c->h2->intro, c->h2->intro_len);
}

/* The server's first SETTINGS: the connection joins the rotation and takes what was waiting. */
static void settle(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    h2core_t *g = c->h2;
    h->settled = 1;
    c->opening--;
    if (c->lost_unreplaced > 0) {
        c->lost_unreplaced--;
        c->reconnects++;
    }
    if (h->goaway) return;
    if (grow((void **)&g->usable, &g->cap_usable, g->n_usable + 1, sizeof(conn_t *)) < 0) return;
    g->usable[g->n_usable++] = k;
    h->in_rotation = 1;
    if (g->stream) {
        sx_settled(c, k);
        return;
    }
    while (c->pend_len && !k->dead) h2_send(c, k, take_payload(c), pop_pending(c));
}

/* Out of rotation (GOAWAY, lost, unusable): a connection perfkit did not close counts as lost and
   a replacement opens (H2Transport.retire). */
void retire(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    h2core_t *g = c->h2;
    if (!h->in_rotation) return;
    h->in_rotation = 0;
    usable_remove(g, k);
    if (k->ours) return;
    c->lost_unreplaced++;
    if (c->opening == 0 && (int)g->n_usable < g->want) h2_open(c);
}

void h2_dropped(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    if (!h) return; /* dial failed before the HTTP/2 state was attached */
    if (h->in_rotation) {
        h->in_rotation = 0;
        usable_remove(c->h2, k);
    }
    if (!h->settled) {
        h->settled = 1; /* counted out once */
        c->opening--;
    }
}

/* Record every request k still owes with `status` (streams, and requests never sent), after
   taking them off k: recording may start new requests. */
static void fail_owed(Core *c, conn_t *k, int32_t status, const char *msg) {
    h2conn_t *h = k->h2;
    if (c->h2->stream) { /* what was written to its stream */
        sx_fail(c, h->gen, status, msg, strlen(msg));
        return;
    }
    stream_t *streams = h->streams;
    size_t n_streams = h->n_streams;
    blocked_t *blocked = h->blocked + h->blk_head;
    size_t n_blocked = h->blk_len;
    blocked_t *blocked_mem = h->blocked;
    h->streams = NULL;
    h->n_streams = h->cap_streams = 0;
    h->blocked = NULL;
    h->blk_head = h->blk_len = h->blk_cap = 0;
    size_t len = strlen(msg);
    for (size_t i = 0; i < n_streams; i++)
        finish(c, streams[i].due, streams[i].sent, now_ns(), status, msg, len);
    for (size_t i = 0; i < n_blocked; i++)
        if (!blocked[i].sid) finish(c, blocked[i].due, -1, now_ns(), status, msg, len);
    free(streams);
    free(blocked_mem);
}

static int owes(h2conn_t *h) {
    return h->n_streams > 0 || h->blk_len > 0;
}

/* The peer closed, the socket failed or a write did: every request it carried ends closed. */
static void h2_lost(Core *c, conn_t *k, int err) {
    h2conn_t *h = k->h2;
    int settled = h->settled;
    retire(c, k);
    conn_drop(c, k);
    char msg[160];
    if (err)
        snprintf(msg, sizeof msg, "%s", strerror(err));
    else
        snprintf(msg, sizeof msg, "the server (or a proxy) closed the HTTP/2 connection");
    if (!settled)
        snprintf(c->open_error, sizeof c->open_error, "the connection closed before the server's HTTP/2 SETTINGS arrived");
    fail_owed(c, k, c->st_closed, msg);
    if (!settled) open_failed(c);
}

/* The connection is unusable (a protocol error; streaming: its stream ended): what it owed ends with
   `status`; one perfkit did not close counts as lost, a replacement opens. */
void h2_ended(Core *c, conn_t *k, int32_t status, const char *msg) {
    if (status == c->st_protocol) note_example(c, status, msg, strlen(msg));
    retire(c, k);
    conn_close_ours(c, k, 1);
    fail_owed(c, k, status, msg);
}

static void h2_failed(Core *c, conn_t *k, const char *msg) {
    h2_ended(c, k, c->st_protocol, msg);
}

static void close_if_gone_away(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    if (h->goaway && !owes(h) && !k->dead) conn_close_ours(c, k, 0);
}

/* -- receiving -------------------------------------------------------------------------------- */
/* The status a stream's end gives its call: from the trailers (res; NULL when a DATA frame ended
   the stream), else `ok`: a non-200 HTTP status as is, a gRPC status as st_grpc_base + code, a
   status that is not a number a protocol error. */
static int32_t call_status(Core *c, const hpack_result_t *res, int32_t ok) {
    if (!res) return ok;
    if (res->http_status == -2 || res->grpc_status == -2) return c->st_protocol; /* not a number */
    if (res->http_status >= 0 && res->http_status != 200) return res->http_status;
    if (res->grpc_status > 0) return c->st_grpc_base + res->grpc_status;
    return ok;
}

static void stream_done(Core *c, conn_t *k, uint32_t sid, const hpack_result_t *res) {
    stream_t s;
    if (c->h2->stream) { /* the server ended the ModelStreamInfer stream (as _stream_h2.H2Stream._end) */
        if (sid != k->h2->sx_sid) return;
        int32_t status = call_status(c, res, c->st_closed);
        char msg[EXAMPLE_BYTES + 1];
        size_t len = res && res->has_message && res->message_len ? res->message_len : 0;
        if (len > EXAMPLE_BYTES) len = EXAMPLE_BYTES;
        if (len)
            memcpy(msg, res->message, len);
        else
            len = (size_t)snprintf(msg, sizeof msg, "%s", res ? "stream ended" : "the server ended the stream");
        msg[len] = 0;
        h2_ended(c, k, status, msg);
        return;
    }
    if (!take_stream(k->h2, sid, &s)) return;
    int64_t done = now_ns();
    int32_t status = call_status(c, res, 0);
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

static void headers_complete(Core *c, conn_t *k, uint32_t sid, const uint8_t *block, size_t n, int end_stream) {
    h2conn_t *h = k->h2;
    const hpack_result_t *res = NULL;
    for (int i = 0; i < h->n_cache; i++)
        if (h->cache[i].len == n && memcmp(h->cache[i].key, block, n) == 0) {
            res = &h->cache[i].res;
            break;
        }
    hpack_result_t fresh;
    if (!res) {
        char err[120];
        if (hpack_decode(&h->hp, block, n, &fresh, err, sizeof err, NULL, NULL) < 0) {
            h2_failed(c, k, err);
            return;
        }
        res = &fresh;
        int indexed_only = 1;
        for (size_t i = 0; i < n && indexed_only; i++) indexed_only = block[i] & 0x80;
        if (indexed_only && n <= CACHE_KEY_BYTES) { /* no table change: its meaning holds until one */
            cached_t *slot = &h->cache[h->next_cache];
            h->next_cache = (h->next_cache + 1) % CACHE_ENTRIES;
            if (h->n_cache < CACHE_ENTRIES) h->n_cache++;
            slot->len = n;
            memcpy(slot->key, block, n);
            slot->res = fresh;
        } else if (!indexed_only) { /* the dynamic table may have moved: cached indices may mean other fields */
            h->n_cache = h->next_cache = 0;
        }
    }
    if (end_stream) stream_done(c, k, sid, res);
}

static void on_headers(Core *c, conn_t *k, uint32_t sid, int flags, const uint8_t *p, size_t n) {
    h2conn_t *h = k->h2;
    size_t pad = 0;
    if (flags & FL_PADDED) { /* RFC 9113 6.2: pad length, priority fields and padding removed */
        if (n < 1) return;
        pad = p[0];
        p++, n--;
    }
    if (flags & FL_PRIORITY) {
        if (n < 5) return;
        p += 5, n -= 5;
    }
    if (pad > n) return;
    n -= pad;
    if (!(flags & FL_END_HEADERS)) {
        h->cont_sid = sid;
        h->cont_end = flags & FL_END_STREAM;
        h->cont_len = 0;
        if (grow((void **)&h->cont, &h->cont_cap, n, 1) == 0) {
            memcpy(h->cont, p, n);
            h->cont_len = n;
        }
        return;
    }
    headers_complete(c, k, sid, p, n, flags & FL_END_STREAM);
}

static void on_settings(Core *c, conn_t *k, const uint8_t *p, size_t n) {
    h2conn_t *h = k->h2;
    for (size_t i = 0; i + 6 <= n; i += 6) {
        int ident = (p[i] << 8) | p[i + 1];
        uint32_t value = get32(p + i + 2);
        if (ident == SET_INITIAL_WINDOW) {
            int64_t delta = (int64_t)value - h->stream_window;
            h->stream_window = value;
            if (h->sx_sid) h->sx_window += delta;
            for (size_t j = 0; j < h->blk_len; j++) /* RFC 9113 6.9.2: open streams' windows move by the change */
                if (h->blocked[h->blk_head + j].sid) h->blocked[h->blk_head + j].window += delta;
        } else if (ident == SET_MAX_FRAME && value >= DEFAULT_MAX_FRAME && value < (1u << 24)) {
            h->max_frame = value; /* RFC 9113 6.5.2's range; anything else is ignored */
        }
        /* SET_HEADER_TABLE bounds the server's decoder (our encoder: stateless), not our table */
    }
    uint8_t ack[9];
    frame_head(ack, 0, F_SETTINGS, FL_ACK, 0);
    out_bytes(c, k, ack, sizeof ack);
    if (!h->settled) settle(c, k);
    if (!k->dead) (c->h2->stream ? sx_pump : pump)(c, k);
}

static void on_goaway(Core *c, conn_t *k, const uint8_t *p, size_t n) {
    h2conn_t *h = k->h2;
    if (c->h2->stream) { /* as _stream_h2.H2Stream: the stream ends */
        h2_ended(c, k, c->st_closed, "server sent GOAWAY");
        return;
    }
    uint32_t last = n >= 4 ? get32(p) & 0x7fffffff : 0;
    h->goaway = 1;
    retire(c, k);
    /* streams the server will not process, and requests still waiting for window (they will never
       be sent whole here), taken off first: recording them may start new requests elsewhere */
    size_t kept = 0, gone = 0;
    stream_t *away = malloc((h->n_streams + h->blk_len + 1) * sizeof(stream_t));
    if (!away) {
        h2_lost(c, k, ENOMEM);
        return;
    }
    for (size_t i = 0; i < h->n_streams; i++) {
        stream_t *s = &h->streams[i];
        int waiting = 0;
        for (size_t j = 0; j < h->blk_len && !waiting; j++) waiting = h->blocked[h->blk_head + j].sid == s->sid;
        if (s->sid > last || waiting)
            away[gone++] = *s;
        else
            h->streams[kept++] = *s;
    }
    h->n_streams = kept;
    for (size_t j = 0; j < h->blk_len; j++)
        if (!h->blocked[h->blk_head + j].sid) away[gone++] = (stream_t){0, h->blocked[h->blk_head + j].due, -1};
    h->blk_head = h->blk_len = 0;
    int64_t now = now_ns();
    for (size_t i = 0; i < gone; i++) finish(c, away[i].due, away[i].sent, now, c->st_closed, MSG_GOAWAY, sizeof MSG_GOAWAY - 1);
    free(away);
    close_if_gone_away(c, k);
}

static void on_frame(Core *c, conn_t *k, int type, int flags, uint32_t sid, const uint8_t *p, size_t n) {
    h2conn_t *h = k->h2;
    switch (type) {
    case F_DATA:
        h->received += n;
        if (c->h2->stream && sid == h->sx_sid && sid) {
            sx_data(c, k, flags, p, n);
            if (k->dead) break;
        }
        if (flags & FL_END_STREAM) stream_done(c, k, sid, NULL);
        break;
    case F_HEADERS:
        on_headers(c, k, sid, flags, p, n);
        break;
    case F_CONT:
        if (grow((void **)&h->cont, &h->cont_cap, h->cont_len + n, 1) == 0) {
            memcpy(h->cont + h->cont_len, p, n);
            h->cont_len += n;
        }
        if (flags & FL_END_HEADERS) {
            size_t len = h->cont_len;
            h->cont_len = 0;
            headers_complete(c, k, h->cont_sid, (const uint8_t *)h->cont, len, h->cont_end);
        }
        break;
    case F_SETTINGS:
        if (!(flags & FL_ACK)) on_settings(c, k, p, n);
        break;
    case F_PING:
        if (!(flags & FL_ACK) && n == 8) {
            uint8_t pong[17];
            frame_head(pong, 8, F_PING, FL_ACK, 0);
            memcpy(pong + 9, p, 8);
            out_bytes(c, k, pong, sizeof pong);
        }
        break;
    case F_WINDOW:
        if (n >= 4) {
            int64_t inc = get32(p) & 0x7fffffff;
            if (sid == 0)
                h->send_window += inc;
            else if (c->h2->stream && sid == h->sx_sid)
                h->sx_window += inc;
            else if (h->blk_len && h->blocked[h->blk_head].sid == sid)
                h->blocked[h->blk_head].window += inc;
            (c->h2->stream ? sx_pump : pump)(c, k);
        }
        break;
    case F_RST: {
        uint32_t code = n >= 4 ? get32(p) : 0;
        stream_t s;
        if (c->h2->stream) {
            if (sid != h->sx_sid) break;
            char msg[80];
            snprintf(msg, sizeof msg, "stream reset by the server (HTTP/2 error %u)", code);
            h2_ended(c, k, c->st_closed, msg);
            break;
        }
        if (!take_stream(h, sid, &s)) break;
        if (h->blk_len && h->blocked[h->blk_head].sid == sid) {
            h->blk_head++;
            if (--h->blk_len == 0) h->blk_head = 0;
        }
        char msg[80];
        int len = snprintf(msg, sizeof msg, "stream reset by the server (HTTP/2 error %u)", code);
        finish(c, s.due, s.sent, now_ns(), c->st_closed, msg, (size_t)len);
        close_if_gone_away(c, k);
        break;
    }
    case F_GOAWAY:
        on_goaway(c, k, p, n);
        break;
    default: /* PRIORITY, PUSH_PROMISE (disabled), unknown types: nothing to do */
        break;
    }
}

static void readable(Core *c, conn_t *k) {
    h2conn_t *h = k->h2;
    for (;;) {
        size_t want = 65536;
        if (k->len >= 9) { /* room for the whole frame at the head of the buffer */
            const uint8_t *b = (const uint8_t *)k->buf;
            size_t frame = 9 + (((size_t)b[0] << 16) | ((size_t)b[1] << 8) | b[2]);
            if (frame > k->len && frame - k->len > want) want = frame - k->len;
        }
        if (grow((void **)&k->buf, &k->cap, k->len + want, 1) < 0) {
            h2_lost(c, k, ENOMEM);
            return;
        }
        size_t avail = k->cap - k->len;
        ssize_t n = recv(k->fd, k->buf + k->len, avail, MSG_DONTWAIT);
        if (n == 0) {
            h2_lost(c, k, 0);
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            h2_lost(c, k, errno);
            return;
        }
        k->len += (size_t)n;
        size_t pos = 0;
        const uint8_t *b = (const uint8_t *)k->buf;
        while (k->len - pos >= 9) {
            size_t flen = ((size_t)b[pos] << 16) | ((size_t)b[pos + 1] << 8) | b[pos + 2];
            if (k->len - pos < 9 + flen) break;
            int type = b[pos + 3], flags = b[pos + 4];
            uint32_t sid = get32(b + pos + 5) & 0x7fffffff;
            const uint8_t *payload = b + pos + 9;
            pos += 9 + flen;
            on_frame(c, k, type, flags, sid, payload, flen);
            if (k->dead) return;
        }
        k->len -= pos;
        if (k->len && pos) memmove(k->buf, k->buf + pos, k->len);
        if ((size_t)n < avail) break; /* the socket is drained */
    }
    if (h->received > RECEIVED_TOP_UP) { /* streaming: the one long-lived stream's window too */
        uint8_t up[26];
        frame_head(up, 4, F_WINDOW, 0, 0);
        put32(up + 9, (uint32_t)h->received);
        frame_head(up + 13, 4, F_WINDOW, 0, h->sx_sid);
        put32(up + 22, (uint32_t)h->received);
        h->received = 0;
        out_bytes(c, k, up, h->sx_sid ? sizeof up : 13);
    }
}

void h2_event(Core *c, conn_t *k, uint32_t events) {
    h2conn_t *h = k->h2;
    if (events & EPOLLOUT && h->wlen > h->woff) out_writable(c, k);
    if (!h->broken && events & (EPOLLIN | EPOLLERR | EPOLLHUP)) readable(c, k);
    if (!k->dead && h->broken) h2_lost(c, k, h->broken);
}

/* -- requests --------------------------------------------------------------------------------- */
/* A connection whose stream ids run out leaves the rotation as if the server had sent GOAWAY
   (its calls finish, then it closes), not counted as lost; a replacement opens. */
static void wind_down(Core *c, conn_t *k) {
    h2core_t *g = c->h2;
    k->h2->goaway = 1;
    k->h2->in_rotation = 0;
    usable_remove(g, k);
    if (c->opening == 0 && (int)g->n_usable < g->want) h2_open(c);
    close_if_gone_away(c, k);
}

void h2_submit(Core *c, int64_t due) {
    h2core_t *g = c->h2;
    if (g->stream) {
        sx_submit(c, due);
        return;
    }
    if (g->n_usable) {
        conn_t *k = g->usable[g->rr++ % g->n_usable];
        if (k->h2->next_sid > H2_LAST_SID) {
            wind_down(c, k);
            h2_submit(c, due);
            return;
        }
        h2_send(c, k, take_payload(c), due);
        return;
    }
    push_pending(c, due);
    if (c->opening == 0) h2_open(c);
}

void h2_abort_in_flight(Core *c) {
    if (c->h2->stream) {
        sx_abort(c);
        return;
    }
    unfinish_pending(c, now_ns());
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        conn_t *k = c->conns[i];
        if (!k->h2 || !owes(k->h2)) continue;
        k->ours = 1; /* first: perfkit closed it, so it is no lost connection */
        retire(c, k);
        conn_close_ours(c, k, 1);
        fail_owed(c, k, c->st_unfinished, c->unfinished_message);
    }
}

/* Connections whose SETTINGS did not come in time are given up. */
void h2_tick(Core *c) {
    int64_t now = now_ns();
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        conn_t *k = c->conns[i];
        if (!k->h2 || k->h2->settled || k->h2->settle_deadline > now) continue;
        snprintf(c->open_error, sizeof c->open_error, "no HTTP/2 SETTINGS from the server in %d s",
                 (int)(SETTINGS_WAIT_NS / 1000000000LL));
        conn_close_ours(c, k, 1);
        open_failed(c);
    }
}

int64_t h2_next_wake(Core *c) {
    int64_t at = INT64_MAX;
    for (size_t i = 0; i < c->n_conns; i++) {
        conn_t *k = c->conns[i];
        if (k->h2 && !k->h2->settled && k->h2->settle_deadline < at) at = k->h2->settle_deadline;
    }
    return at;
}

/* -- for tests: the HPACK decoder on its own -------------------------------------------------- */
static void append_field(void *ctx, const char *name, size_t nl, const char *value, size_t vl) {
    PyObject *pair = Py_BuildValue("(y#y#)", name, (Py_ssize_t)nl, value, (Py_ssize_t)vl);
    if (pair) PyList_Append((PyObject *)ctx, pair);
    Py_XDECREF(pair);
}

/* hpack_decode(blocks) -> [[(name, value), ...] per block]: the blocks decoded in order with one
   decoder (one connection's dynamic table); ValueError on a block the decoder rejects. */
PyObject *h2_hpack_decode_py(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *blocks;
    if (!PyArg_ParseTuple(args, "O", &blocks)) return NULL;
    PyObject *seq = PySequence_Fast(blocks, "blocks must be a sequence of bytes");
    if (!seq) return NULL;
    hpack_t hp;
    hpack_init(&hp);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < PySequence_Fast_GET_SIZE(seq); i++) {
        char *data;
        Py_ssize_t len;
        PyObject *fields = PyList_New(0);
        if (!fields || PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &data, &len) < 0) {
            Py_XDECREF(fields);
            Py_CLEAR(out);
            break;
        }
        hpack_result_t res;
        char err[120];
        if (hpack_decode(&hp, (const uint8_t *)data, (size_t)len, &res, err, sizeof err, append_field, fields) < 0) {
            PyErr_Format(PyExc_ValueError, "block %zd: %s", i, err);
            Py_DECREF(fields);
            Py_CLEAR(out);
            break;
        }
        PyList_Append(out, fields);
        Py_DECREF(fields);
    }
    hpack_free(&hp);
    Py_DECREF(seq);
    return out;
}
