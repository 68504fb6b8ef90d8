/* Frames out for the compiled gRPC sender (see _native_h2.h): a call's frames gathered as buffers
 * and written with one sendmsg; what the kernel does not take waits in wbuf, in order. */
#include "_native_h2.h"

void out_head(h2conn_t *h, size_t len, int type, int flags, uint32_t sid) {
    if (grow((void **)&h->heads, &h->cap_heads, h->n_heads + 9, 1) < 0 ||
        grow((void **)&h->parts, &h->cap_parts, h->n_parts + 1, sizeof(part_t)) < 0) {
        h->broken = ENOMEM;
        return;
    }
    frame_head((uint8_t *)h->heads + h->n_heads, len, type, flags, sid);
    h->parts[h->n_parts++] = (part_t){NULL, 9, h->n_heads};
    h->n_heads += 9;
}

void out_ref(h2conn_t *h, const char *ptr, size_t len) {
    if (!len) return;
    if (grow((void **)&h->parts, &h->cap_parts, h->n_parts + 1, sizeof(part_t)) < 0) {
        h->broken = ENOMEM;
        return;
    }
    h->parts[h->n_parts++] = (part_t){ptr, len, 0};
}

/* DATA frames for [ptr, ptr+n) in pieces of at most the server's max frame size. */
void out_data(h2conn_t *h, uint32_t sid, const char *ptr, size_t n, int last) {
    size_t step = h->max_frame;
    size_t at = 0;
    do {
        size_t piece = n - at < step ? n - at : step;
        out_head(h, piece, F_DATA, last && at + piece == n ? FL_END_STREAM : 0, sid);
        out_ref(h, ptr + at, piece);
        at += piece;
    } while (at < n);
}

static void keep_rest(Core *c, conn_t *k, struct iovec *iov, size_t n) {
    h2conn_t *h = H2(k);
    size_t more = 0;
    for (size_t i = 0; i < n; i++) more += iov[i].iov_len;
    if (!more) return;
    if (grow((void **)&h->wbuf, &h->wcap, h->wlen + more, 1) < 0) {
        h->broken = ENOMEM;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(h->wbuf + h->wlen, iov[i].iov_base, iov[i].iov_len);
        h->wlen += iov[i].iov_len;
    }
    if (!k->want_out) set_events(c, k, 1);
}

/* Write the parts gathered (in one sendmsg where the kernel takes them: the payload's bytes are
   not copied in user space); what the kernel does not take is kept in wbuf and sent on EPOLLOUT,
   in order. (vmsplice + splice through a pipe, as the HTTP/1.1 path does from 64 KB, measured
   x1.46 / x1.64 the client CPU of this for 600 KB gRPC requests at c1 / c4: not used here.) */
void out_flush(Core *c, conn_t *k) {
    h2conn_t *h = H2(k);
    size_t n = h->n_parts;
    h->n_parts = 0;
    h->n_heads = 0;
    if (!n || h->broken || k->dead) return;
    if (grow((void **)&h->iov, &h->cap_iov, n, sizeof(struct iovec)) < 0) {
        h->broken = ENOMEM;
        return;
    }
    struct iovec *iov = h->iov;
    for (size_t i = 0; i < n; i++) {
        part_t *p = &h->parts[i];
        iov[i].iov_base = (void *)(p->ptr ? p->ptr : h->heads + p->head);
        iov[i].iov_len = p->len;
    }
    size_t i = 0;
    if (h->wlen == h->woff) {
        while (i < n) {
            size_t m = n - i < IOV_BATCH ? n - i : IOV_BATCH, total = 0;
            for (size_t j = i; j < i + m; j++) total += iov[j].iov_len;
            struct msghdr mh = {.msg_iov = iov + i, .msg_iovlen = m};
            ssize_t w = sendmsg(k->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (w < 0) {
                h->broken = errno;
                if (!k->want_out) set_events(c, k, 1); /* its event ends it, outside this call */
                return;
            }
            size_t left = (size_t)w;
            while (i < n && left >= iov[i].iov_len) left -= iov[i++].iov_len;
            if (left) {
                iov[i].iov_base = (char *)iov[i].iov_base + left;
                iov[i].iov_len -= left;
            }
            if ((size_t)w < total) break; /* the socket buffer is full */
        }
    }
    keep_rest(c, k, iov + i, n - i);
}

void out_bytes(Core *c, conn_t *k, const void *p, size_t n) {
    out_ref(H2(k), p, n);
    out_flush(c, k);
}

void out_writable(Core *c, conn_t *k) {
    h2conn_t *h = H2(k);
    while (h->woff < h->wlen) {
        ssize_t n = send(k->fd, h->wbuf + h->woff, h->wlen - h->woff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            h->woff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        h->broken = n < 0 ? errno : EPIPE;
        return;
    }
    h->woff = h->wlen = 0;
    if (k->want_out) set_events(c, k, 0);
}
