/* The unary-gRPC protocol's flow control (see _native_h2_unary.c): a request larger than the
 * server's windows allow waits in its connection's FIFO (`blocked`) and goes out in pieces, head
 * first, as WINDOW_UPDATEs arrive. Calls the core and the frame writer; never the protocol's own file.
 */
#include "_native_h2_unary.h"

void u_block(Core *c, conn_t *k, size_t payload, int64_t due) {
    uconn_t *u = U(k);
    h2conn_t *h = &u->h;
    if (u->blk_head + u->blk_len == u->blk_cap && u->blk_head) {
        memmove(u->blocked, u->blocked + u->blk_head, u->blk_len * sizeof(blocked_t));
        u->blk_head = 0;
    }
    if (grow((void **)&u->blocked, &u->blk_cap, u->blk_head + u->blk_len + 1, sizeof(blocked_t)) < 0) {
        h->broken = ENOMEM; /* owed from now on: it ends closed with the connection */
        add_stream(u, h->next_sid, due, -1);
        return;
    }
    u->blocked[u->blk_head + u->blk_len++] = (blocked_t){payload, 0, due, 0, 0};
    u_pump(c, k);
}

void u_pump(Core *c, conn_t *k) {
    uconn_t *u = U(k);
    h2conn_t *h = &u->h;
    h2core_t *g = H2CORE(c);
    while (u->blk_len && !h->broken) {
        blocked_t *b = &u->blocked[u->blk_head];
        size_t size = c->payload_lens[b->payload];
        if (!b->sid) {
            if ((int64_t)size > h->send_window && h->send_window < (int64_t)h->max_frame)
                break; /* wait for connection window before opening the stream */
            b->sid = h->next_sid;
            h->next_sid += 2;
            b->window = h->stream_window;
            add_stream(u, b->sid, b->due, now_ns());
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
        u->blk_head++;
        if (--u->blk_len == 0) u->blk_head = 0;
    }
    out_flush(c, k);
}
