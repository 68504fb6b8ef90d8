/* HTTP/1.1 for the compiled sender: `_http1.Http1Transport` in C, behind the core's `proto_ops_t`.
 *
 * Keep-alive connections, one request in flight on each: a request takes an idle connection, or
 * waits (the core's pending FIFO) for one this opens; open loops keep `warm` connections ready at
 * a level's start and `spare_target` idle ones ahead of need. A response is framed by its
 * Content-Length; one that is not (or answers a request not asked) puts the connection out of step,
 * which then closes (a protocol error).
 */
#include "_native_core.h"
#include "_native_protocols.h"

/* Requests this large go out through a pipe: vmsplice() hands the payload's pages to the pipe
   and splice() hands them on to the socket, so the kernel never copies the request (a 600 KB
   tensor's copy was a third of the sender's CPU per request); smaller ones are one send(). */
#define SPLICE_MIN_BYTES 65536
#define PIPE_BYTES (1 << 20)
/* A successful HTTP response's body this far past what one read brought is dropped by the kernel
   (recv MSG_TRUNC) instead of copied out: perfkit records a response's status and time, never its
   outputs, on this path. */
#define DISCARD_MIN_BYTES 65536
/* Any other response (an error, or one nobody asked for) is read whole, up to this: one whose
   Content-Length announces more ends its request with its status and why, unread, and its
   connection closes; nothing is allocated for it (a bogus length once ended in ENOMEM). */
#define ERROR_BODY_MAX_BYTES (1 << 20)

enum { PIPE_UNTRIED = 0, PIPE_OPEN, PIPE_IMPOSSIBLE };

typedef struct {
    conn_t k;
    int64_t due, sent; /* sent -1: no request owed */
    const char *out;
    size_t out_len, out_off; /* bytes of the request sent, or handed to the pipe */
    int pipe;                /* PIPE_OPEN: pipe_r, pipe_w (large requests go through it) */
    int pipe_r, pipe_w;
    size_t piped; /* bytes in the pipe, not yet spliced to the socket */
    ssize_t need;
    size_t skip; /* bytes of a response body still to drop (MSG_TRUNC), unread */
    int code;
} h1conn_t;

static inline h1conn_t *H1(conn_t *k) {
    return (h1conn_t *)k;
}

/* -- sending ---------------------------------------------------------------------------------- */
static void conn_write(Core *c, h1conn_t *k);

static void conn_send(Core *c, h1conn_t *k, int64_t due) {
    size_t i = take_payload(c);
    k->due = due;
    k->out = c->payloads[i];
    k->out_len = c->payload_lens[i];
    k->out_off = 0;
    k->piped = 0;
    k->sent = now_ns();
    conn_write(c, k);
}

/* The peer closed, or the socket failed: the request it carried (if any) ends closed. */
static void conn_lost(Core *c, h1conn_t *k, int err) {
    int owed = k->sent >= 0;
    int64_t due = k->due, sent = k->sent;
    if (!k->k.ours) c->lost_unreplaced++;
    conn_drop(c, &k->k);
    if (owed) {
        char msg[160];
        int n = err ? snprintf(msg, sizeof msg, "%s", strerror(err))
                    : snprintf(msg, sizeof msg, "the server (or a proxy) closed the connection");
        finish(c, due, sent, now_ns(), c->st_closed, msg, (size_t)n);
    }
}

static int open_pipe(h1conn_t *k) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) return -1;
    fcntl(fds[1], F_SETPIPE_SZ, PIPE_BYTES); /* best effort: a smaller pipe takes the request in parts */
    k->pipe_r = fds[0];
    k->pipe_w = fds[1];
    k->pipe = PIPE_OPEN;
    return 0;
}

static void close_pipe(h1conn_t *k, int next) {
    close(k->pipe_r);
    close(k->pipe_w);
    k->pipe_r = k->pipe_w = -1;
    k->pipe = next;
}

/* Write the request through the pipe; returns 0 when it is written or waits for the socket (or the
   connection was lost), -1 when splicing is not possible here (the caller then send()s the rest). */
static int splice_write(Core *c, h1conn_t *k) {
    for (;;) {
        if (k->piped) {
            int more = k->out_off < k->out_len ? SPLICE_F_MORE : 0;
            ssize_t n = splice(k->pipe_r, NULL, k->k.fd, NULL, k->piped, SPLICE_F_NONBLOCK | more);
            if (n > 0) {
                k->piped -= (size_t)n;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (!k->k.want_out) set_events(c, &k->k, 1);
                return 0;
            }
            conn_lost(c, k, n < 0 ? errno : 0);
            return 0;
        }
        if (k->out_off == k->out_len) break;
        struct iovec iov = {(void *)(k->out + k->out_off), k->out_len - k->out_off};
        ssize_t n = vmsplice(k->pipe_w, &iov, 1, SPLICE_F_NONBLOCK);
        if (n > 0) {
            k->out_off += (size_t)n;
            k->piped += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return -1; /* the pipe is empty here, so this is not "full": splicing does not work */
    }
    if (k->k.want_out) set_events(c, &k->k, 0);
    return 0;
}

static void conn_write(Core *c, h1conn_t *k) {
    if (k->out_len >= SPLICE_MIN_BYTES && (k->pipe == PIPE_OPEN || (k->pipe == PIPE_UNTRIED && open_pipe(k) == 0))) {
        if (splice_write(c, k) == 0) return;
        close_pipe(k, PIPE_IMPOSSIBLE); /* this connection sends from user space from now on */
    }
    while (k->out_off < k->out_len) {
        ssize_t n = send(k->k.fd, k->out + k->out_off, k->out_len - k->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            k->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!k->k.want_out) set_events(c, &k->k, 1);
            return;
        }
        conn_lost(c, k, n < 0 ? errno : 0);
        return;
    }
    if (k->k.want_out) set_events(c, &k->k, 0);
}

/* -- connections ------------------------------------------------------------------------------ */
static void refuse_one_pending(Core *c) {
    if (!c->pend_len) return;
    int64_t due = pop_pending(c);
    finish(c, due, -1, now_ns(), c->st_refused, c->open_error, strlen(c->open_error));
}

static void free_conn_to_work(Core *c, h1conn_t *k) {
    if (c->pend_len)
        conn_send(c, k, pop_pending(c));
    else
        idle_push(c, &k->k);
}

static void open_conn(Core *c) {
    conn_t *k = dial(c);
    if (!k) {
        refuse_one_pending(c); /* the request this connection was opened for cannot be sent */
        return;
    }
    H1(k)->sent = -1;
    H1(k)->due = -1;
    H1(k)->need = -1;
    c->opening++;
}

static void h1_connected(Core *c, conn_t *k) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    k->connecting = 0;
    c->opening--;
    if (err) {
        snprintf(c->open_error, sizeof c->open_error, "%s", strerror(err));
        k->ours = 1;
        conn_drop(c, k);
        refuse_one_pending(c); /* the request this connection was opened for cannot be sent */
        return;
    }
    set_events(c, k, 0);
    if (c->lost_unreplaced > 0) {
        c->lost_unreplaced--;
        c->reconnects++;
    }
    free_conn_to_work(c, H1(k));
}

static void h1_submit(Core *c, int64_t due) {
    conn_t *k = idle_pop(c);
    if (k) {
        conn_send(c, H1(k), due);
    } else {
        push_pending(c, due);
        if (c->opening < (int)c->pend_len) open_conn(c);
    }
    if (c->spare_target && (int)c->n_idle + c->opening < c->spare_target) open_conn(c);
}

/* A closed loop starts at once (its connections open with its requests); an open loop once its
   warm connections are ready. */
static int h1_prepare(Core *c) {
    if (c->mode == MODE_CLOSED) return 0;
    for (int i = (int)c->n_idle; i < c->arg_warm; i++) open_conn(c);
    return 1;
}

static void h1_dropped(Core *c, conn_t *k) {
    (void)c;
    if (H1(k)->pipe == PIPE_OPEN) close_pipe(H1(k), PIPE_UNTRIED);
}

/* -- responses -------------------------------------------------------------------------------- */
/* An answer whose announced body is past ERROR_BODY_MAX_BYTES: its request (if one is owed) ends with
   the answer's status and a message saying so; the connection, whose stream position is lost, closes. */
static void oversized_answer(Core *c, h1conn_t *k, int code, ssize_t body) {
    int64_t due = k->due, sent = k->sent;
    char msg[200];
    int n = snprintf(msg, sizeof msg,
                     "HTTP %d answer announcing a %zd-byte body, past the %d bytes perfkit reads of an answer"
                     " other than 200: not read, connection closed",
                     code, body, ERROR_BODY_MAX_BYTES);
    conn_close_ours(c, &k->k, 1);
    if (sent >= 0) finish(c, due, sent, now_ns(), code ? code : c->st_protocol, msg, (size_t)n);
}

/* Take responses whole in k->buf, each recorded and its connection put back to work. A 200 response
   whose body goes DISCARD_MIN_BYTES past what is buffered leaves the rest to conn_readable's discard
   (k->skip): its body is never read, so the kernel need not copy it out. */
static void take_responses(Core *c, h1conn_t *k) {
    conn_t *b = &k->k;
    while (!b->dead) {
        if (k->need < 0) {
            size_t head;
            ssize_t body;
            int code;
            int framed = http1_head(b->buf, b->len, &head, &body, &code);
            if (framed == 0) return;
            if (framed < 0) {
                int64_t due = k->due, sent = k->sent;
                size_t show = head < 200 ? head : 200;
                char msg[200];
                memcpy(msg, b->buf, show);
                conn_close_ours(c, b, 1); /* the stream position is lost: the connection is unusable */
                if (sent >= 0) finish(c, due, sent, now_ns(), c->st_protocol, msg, show);
                return;
            }
            if (!(code == 200 && k->sent >= 0) && body > ERROR_BODY_MAX_BYTES) {
                oversized_answer(c, k, code, body);
                return;
            }
            k->need = (ssize_t)(head + 4) + body;
            k->code = code;
            if (k->code == 200 && k->sent >= 0 && (size_t)k->need >= b->len + DISCARD_MIN_BYTES) {
                k->skip = (size_t)k->need - b->len; /* one request per connection: all of it is this body */
                k->need = (ssize_t)b->len;
            }
        }
        if (b->len < (size_t)k->need || k->skip) return;
        int64_t done = now_ns();
        size_t need = (size_t)k->need;
        int32_t status = k->code == 200 ? 0 : k->code;
        char msg[EXAMPLE_BYTES];
        size_t mlen = 0;
        if (status) {
            mlen = need < EXAMPLE_BYTES ? need : EXAMPLE_BYTES;
            memcpy(msg, b->buf + need - mlen, mlen);
        }
        b->len -= need;
        if (b->len) memmove(b->buf, b->buf + need, b->len);
        k->need = -1;
        int64_t due = k->due, sent = k->sent;
        if (sent < 0) { /* a response nobody asked for: the stream is out of step */
            conn_close_ours(c, b, 1);
            return;
        }
        k->sent = -1;
        record_end(c, due, sent, done, status, msg, mlen);
        if (k->out_off < k->out_len || k->piped)
            conn_close_ours(c, b, 1); /* answered before its request was written whole (an early
                                         error): what is left of it would be read as a request */
        else
            free_conn_to_work(c, k);
        on_done(c, status);
        if (b->dead || k->sent < 0) return; /* idle (or gone): nothing more to read now */
    }
}

static void conn_readable(Core *c, h1conn_t *k) {
    conn_t *b = &k->k;
    for (;;) {
        size_t avail;
        ssize_t n;
        if (k->skip) { /* MSG_TRUNC: TCP drops these bytes without copying them to user space */
            avail = k->skip;
            n = recv(b->fd, NULL, avail, MSG_DONTWAIT | MSG_TRUNC);
        } else {
            size_t want = k->need > 0 && (size_t)k->need > b->len ? (size_t)k->need - b->len : 65536;
            if (want < 65536) want = 65536;
            if (grow((void **)&b->buf, &b->cap, b->len + want, 1) < 0) {
                conn_lost(c, k, ENOMEM);
                return;
            }
            avail = b->cap - b->len;
            n = recv(b->fd, b->buf + b->len, avail, MSG_DONTWAIT);
        }
        if (n == 0) {
            conn_lost(c, k, 0);
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_lost(c, k, errno);
            return;
        }
        if (k->skip)
            k->skip -= (size_t)n;
        else
            b->len += (size_t)n;
        take_responses(c, k);
        if (b->dead) return;
        if ((size_t)n < avail) return; /* the socket is drained */
    }
}

static void h1_event(Core *c, conn_t *k, uint32_t events) {
    h1conn_t *h = H1(k);
    if (events & EPOLLOUT && (h->out_off < h->out_len || h->piped) && h->sent >= 0) conn_write(c, h);
    if (!k->dead && events & (EPOLLIN | EPOLLERR | EPOLLHUP)) conn_readable(c, h);
}

static void h1_abort_in_flight(Core *c) {
    int64_t now = now_ns();
    unfinish_pending(c, now);
    for (size_t i = c->n_conns; i-- > 0;) {
        h1conn_t *k = H1(c->conns[i]);
        if (k->sent >= 0) {
            record_end(c, k->due, k->sent, now, c->st_unfinished, c->unfinished_message,
                       strlen(c->unfinished_message));
            k->sent = -1;
            conn_close_ours(c, &k->k, 1);
        }
    }
}

static void h1_conn_free(conn_t *k) {
    (void)k;
}

static void h1_tick(Core *c) {
    (void)c;
}

static int64_t h1_next_wake(Core *c) {
    (void)c;
    return NEVER;
}

static void h1_teardown(Core *c) {
    c->proto = NULL;
}

static const proto_ops_t http1_ops = {
    .conn_bytes = sizeof(h1conn_t),
    .unavailable_retries = 0,
    .submit = h1_submit,
    .prepare = h1_prepare,
    .connected = h1_connected,
    .event = h1_event,
    .dropped = h1_dropped,
    .conn_free = h1_conn_free,
    .abort_in_flight = h1_abort_in_flight,
    .tick = h1_tick,
    .next_wake = h1_next_wake,
    .teardown = h1_teardown,
};

int http1_setup(Core *c) {
    c->ops = &http1_ops;
    c->proto = NULL;
    return 0;
}
