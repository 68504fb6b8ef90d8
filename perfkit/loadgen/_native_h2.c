/* HTTP/2 connections and frames in, for the compiled sender's gRPC protocols (see _native_h2.h).
 *
 * A few connections (`connections`, as _h2.H2_CONNECTIONS), each carrying many streams. One is in
 * rotation once the server's first SETTINGS arrived (`c->opening` counts those not yet settled;
 * 5 s at most). A connection perfkit did not close that leaves the rotation (GOAWAY, lost,
 * unusable) counts as lost and a replacement opens; the replacement counts as a reconnect once
 * settled.
 *
 * Flow control (RFC 9113 5.2, 6.9): we advertise huge receive windows and top up the connection's
 * (and a long-lived stream's) every GiB; the server's windows and max frame size are the
 * protocols' to honour (h2conn_t keeps them).
 *
 * Frames in: only frame headers are parsed here, plus header blocks' HPACK meaning (_native_hpack.c
 * keeps the server's dynamic table in step; a block made of indexed fields only changes no table
 * state, so its meaning is cached).
 */
#include "_native_h2.h"

/* -- setup ------------------------------------------------------------------------------------ */
int h2_core_init(h2core_t *g, const char *block, size_t block_len, int connections, uint32_t first_sid) {
    g->block = malloc(block_len ? block_len : 1);
    if (!g->block) return -1;
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
    return 0;
}

void h2_core_free(h2core_t *g) {
    free(g->block);
    free(g->usable);
    g->block = NULL;
    g->usable = NULL;
}

void h2_conn_free(conn_t *k) {
    h2conn_t *h = H2(k);
    hpack_free(&h->hp);
    free(h->cont);
    free(h->wbuf);
    free(h->parts);
    free(h->heads);
    free(h->iov);
}

/* -- connections ------------------------------------------------------------------------------ */
void h2_usable_remove(h2core_t *g, conn_t *k) {
    for (size_t i = 0; i < g->n_usable; i++)
        if (g->usable[i] == k) {
            memmove(g->usable + i, g->usable + i + 1, (g->n_usable - i - 1) * sizeof(conn_t *));
            g->n_usable--;
            return;
        }
}

conn_t *h2_open(Core *c) {
    h2core_t *g = H2CORE(c);
    conn_t *k = dial(c);
    if (!k) return NULL;
    h2conn_t *h = H2(k);
    hpack_init(&h->hp);
    h->next_sid = g->first_sid;
    h->send_window = h->stream_window = DEFAULT_WINDOW;
    h->max_frame = DEFAULT_MAX_FRAME;
    h->settle_deadline = now_ns() + SETTINGS_WAIT_NS;
    h->gen = ++g->gen_next;
    c->opening++;
    return k;
}

int h2_connected(Core *c, conn_t *k) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    k->connecting = 0;
    if (err) {
        snprintf(c->open_error, sizeof c->open_error, "%s", strerror(err));
        conn_close_ours(c, k, 0);
        return -1;
    }
    set_events(c, k, 0);
    out_bytes(c, k, H2CORE(c)->intro, H2CORE(c)->intro_len);
    return 0;
}

int h2_settle(Core *c, conn_t *k) {
    h2conn_t *h = H2(k);
    h2core_t *g = H2CORE(c);
    h->settled = 1;
    c->opening--;
    if (c->lost_unreplaced > 0) {
        c->lost_unreplaced--;
        c->reconnects++;
    }
    if (h->goaway) return 0;
    if (grow((void **)&g->usable, &g->cap_usable, g->n_usable + 1, sizeof(conn_t *)) < 0) return 0;
    g->usable[g->n_usable++] = k;
    h->in_rotation = 1;
    return 1;
}

int h2_retire(Core *c, conn_t *k) {
    h2conn_t *h = H2(k);
    h2core_t *g = H2CORE(c);
    if (!h->in_rotation) return 0;
    h->in_rotation = 0;
    h2_usable_remove(g, k);
    if (k->ours) return 0;
    c->lost_unreplaced++;
    if (c->opening == 0 && (int)g->n_usable < g->want && !h2_open(c)) return -1;
    return 0;
}

void h2_dropped(Core *c, conn_t *k) {
    h2conn_t *h = H2(k);
    if (!h->gen) return; /* dial failed before the HTTP/2 state was set up */
    if (h->in_rotation) {
        h->in_rotation = 0;
        h2_usable_remove(H2CORE(c), k);
    }
    if (!h->settled) {
        h->settled = 1; /* counted out once */
        c->opening--;
    }
}

void h2_lose(Core *c, conn_t *k, int err, char *msg, size_t msg_size) {
    int settled = H2(k)->settled;
    conn_drop(c, k);
    if (err)
        snprintf(msg, msg_size, "%s", strerror(err));
    else
        snprintf(msg, msg_size, "the server (or a proxy) closed the HTTP/2 connection");
    if (!settled)
        snprintf(c->open_error, sizeof c->open_error, "the connection closed before the server's HTTP/2 SETTINGS arrived");
}

int h2_expire(Core *c) {
    int64_t now = now_ns();
    int given_up = 0;
    for (size_t i = c->n_conns; i-- > 0;) {
        if (i >= c->n_conns) continue;
        h2conn_t *h = H2(c->conns[i]);
        if (!h->gen || h->settled || h->settle_deadline > now) continue;
        snprintf(c->open_error, sizeof c->open_error, "no HTTP/2 SETTINGS from the server in %d s",
                 (int)(SETTINGS_WAIT_NS / 1000000000LL));
        conn_close_ours(c, &h->k, 1);
        given_up++;
    }
    return given_up;
}

int64_t h2_next_wake(Core *c) {
    int64_t at = NEVER;
    for (size_t i = 0; i < c->n_conns; i++) {
        h2conn_t *h = H2(c->conns[i]);
        if (h->gen && !h->settled && h->settle_deadline < at) at = h->settle_deadline;
    }
    return at;
}

/* -- frames in -------------------------------------------------------------------------------- */
/* A read's frames are handed out one at a time from k->buf ([rpos, len) not yet taken); once no
   whole frame is left the rest moves to the front, and another read follows while the last one
   filled the buffer. */
int h2_next_frame(Core *c, conn_t *k, h2frame_t *f, int *err) {
    h2conn_t *h = H2(k);
    for (;;) {
        if (h->reading) {
            const uint8_t *b = (const uint8_t *)k->buf;
            size_t pos = h->rpos;
            if (k->len - pos >= 9) {
                size_t flen = ((size_t)b[pos] << 16) | ((size_t)b[pos + 1] << 8) | b[pos + 2];
                if (k->len - pos >= 9 + flen) {
                    f->type = b[pos + 3];
                    f->flags = b[pos + 4];
                    f->sid = get32(b + pos + 5) & 0x7fffffff;
                    f->p = b + pos + 9;
                    f->n = flen;
                    h->rpos = pos + 9 + flen;
                    return 1;
                }
            }
            k->len -= pos;
            if (k->len && pos) memmove(k->buf, k->buf + pos, k->len);
            h->rpos = 0;
            h->reading = 0;
            if (!h->more) break; /* the socket is drained */
        }
        size_t want = 65536;
        if (k->len >= 9) { /* room for the whole frame at the head of the buffer */
            const uint8_t *b = (const uint8_t *)k->buf;
            size_t frame = 9 + (((size_t)b[0] << 16) | ((size_t)b[1] << 8) | b[2]);
            if (frame > k->len && frame - k->len > want) want = frame - k->len;
        }
        if (grow((void **)&k->buf, &k->cap, k->len + want, 1) < 0) {
            *err = ENOMEM;
            return -1;
        }
        size_t avail = k->cap - k->len;
        ssize_t n = recv(k->fd, k->buf + k->len, avail, MSG_DONTWAIT);
        if (n == 0) {
            *err = 0;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            *err = errno;
            return -1;
        }
        k->len += (size_t)n;
        h->reading = 1;
        h->more = (size_t)n >= avail;
    }
    if (h->received > RECEIVED_TOP_UP) { /* streaming: the one long-lived stream's window too */
        uint8_t up[26];
        frame_head(up, 4, F_WINDOW, 0, 0);
        put32(up + 9, (uint32_t)h->received);
        frame_head(up + 13, 4, F_WINDOW, 0, h->long_sid);
        put32(up + 22, (uint32_t)h->received);
        h->received = 0;
        out_bytes(c, k, up, h->long_sid ? sizeof up : 13);
    }
    return 0;
}

int64_t h2_settings(Core *c, conn_t *k, const uint8_t *p, size_t n) {
    h2conn_t *h = H2(k);
    int64_t delta = 0;
    for (size_t i = 0; i + 6 <= n; i += 6) {
        int ident = (p[i] << 8) | p[i + 1];
        uint32_t value = get32(p + i + 2);
        if (ident == SET_INITIAL_WINDOW) {
            delta += (int64_t)value - h->stream_window;
            h->stream_window = value;
        } else if (ident == SET_MAX_FRAME && value >= DEFAULT_MAX_FRAME && value < (1u << 24)) {
            h->max_frame = value; /* RFC 9113 6.5.2's range; anything else is ignored */
        }
        /* SET_HEADER_TABLE bounds the server's decoder (our encoder: stateless), not our table */
    }
    uint8_t ack[9];
    frame_head(ack, 0, F_SETTINGS, FL_ACK, 0);
    out_bytes(c, k, ack, sizeof ack);
    return delta;
}

void h2_ping(Core *c, conn_t *k, int flags, const uint8_t *p, size_t n) {
    if (!(flags & FL_ACK) && n == 8) {
        uint8_t pong[17];
        frame_head(pong, 8, F_PING, FL_ACK, 0);
        memcpy(pong + 9, p, 8);
        out_bytes(c, k, pong, sizeof pong);
    }
}

int h2_header_block(conn_t *k, const h2frame_t *f, const uint8_t **block, size_t *n_out, uint32_t *sid,
                    int *end_stream) {
    h2conn_t *h = H2(k);
    const uint8_t *p = f->p;
    size_t n = f->n;
    if (f->type == F_CONT) {
        if (n && grow((void **)&h->cont, &h->cont_cap, h->cont_len + n, 1) == 0) {
            memcpy(h->cont + h->cont_len, p, n);
            h->cont_len += n;
        }
        if (!(f->flags & FL_END_HEADERS)) return 0;
        *block = (const uint8_t *)h->cont;
        *n_out = h->cont_len;
        *sid = h->cont_sid;
        *end_stream = h->cont_end;
        h->cont_len = 0;
        return 1;
    }
    size_t pad = 0;
    if (f->flags & FL_PADDED) { /* RFC 9113 6.2: pad length, priority fields and padding removed */
        if (n < 1) return 0;
        pad = p[0];
        p++, n--;
    }
    if (f->flags & FL_PRIORITY) {
        if (n < 5) return 0;
        p += 5, n -= 5;
    }
    if (pad > n) return 0;
    n -= pad;
    if (!(f->flags & FL_END_HEADERS)) {
        h->cont_sid = f->sid;
        h->cont_end = f->flags & FL_END_STREAM;
        h->cont_len = 0;
        if (n && grow((void **)&h->cont, &h->cont_cap, n, 1) == 0) {
            memcpy(h->cont, p, n);
            h->cont_len = n;
        }
        return 0;
    }
    *block = p;
    *n_out = n;
    *sid = f->sid;
    *end_stream = f->flags & FL_END_STREAM;
    return 1;
}

const hpack_result_t *h2_block_meaning(conn_t *k, const uint8_t *block, size_t n, hpack_result_t *fresh, char *err,
                                       size_t err_size) {
    h2conn_t *h = H2(k);
    for (int i = 0; i < h->n_cache; i++)
        if (h->cache[i].len == n && (n == 0 || memcmp(h->cache[i].key, block, n) == 0)) return &h->cache[i].res;
    if (hpack_decode(&h->hp, block, n, fresh, err, err_size, NULL, NULL) < 0) return NULL;
    int indexed_only = 1;
    for (size_t i = 0; i < n && indexed_only; i++) indexed_only = block[i] & 0x80;
    if (indexed_only && n <= CACHE_KEY_BYTES) { /* no table change: its meaning holds until one */
        cached_t *slot = &h->cache[h->next_cache];
        h->next_cache = (h->next_cache + 1) % CACHE_ENTRIES;
        if (h->n_cache < CACHE_ENTRIES) h->n_cache++;
        slot->len = n;
        if (n) memcpy(slot->key, block, n);
        slot->res = *fresh;
    } else if (!indexed_only) { /* the dynamic table may have moved: cached indices may mean other fields */
        h->n_cache = h->next_cache = 0;
    }
    return fresh;
}

int h2_headers(conn_t *k, const h2frame_t *f, hpack_result_t *fresh, const hpack_result_t **res, uint32_t *sid,
               int *end_stream, char *err, size_t err_size) {
    const uint8_t *block;
    size_t n;
    if (!h2_header_block(k, f, &block, &n, sid, end_stream)) return 0;
    *res = h2_block_meaning(k, block, n, fresh, err, err_size);
    return *res ? 1 : -1;
}

int32_t h2_call_status(Core *c, const hpack_result_t *res, int32_t ok) {
    if (!res) return ok;
    if (res->http_status == -2 || res->grpc_status == -2) return c->st_protocol; /* not a number */
    if (res->http_status >= 0 && res->http_status != 200) return res->http_status;
    if (res->grpc_status > 0) return c->st_grpc_base + res->grpc_status;
    return ok;
}
