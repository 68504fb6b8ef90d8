/* perfkit's compiled HTTP/1.1 sender: the hot path of `_native_engine.NativeEngine`.
 *
 * One thread of its own (no GIL, no interpreter) runs an epoll loop over keep-alive
 * HTTP/1.1 connections, one request in flight on each, exactly as `_http1.Http1Transport`
 * with `_loops.ClosedLoop` / `_loops.OpenLoop` do in Python, and writes one fixed-size
 * record per request into a buffer that Python takes over (`swap`). Why: the profile of
 * the Python sender (benchmarks/client_profile.py) put ~45% of its CPU per request in the
 * interpreter; here a request costs its system calls and nothing else.
 *
 * gRPC: a Core made with `grpc_block` carries unary gRPC calls over a few HTTP/2 connections
 * instead (_native_h2.c, hooked in where connections are opened, read, written and given up:
 * submit, the event loop, abort_in_flight, conn_drop); the loop modes and the ledger are shared.
 * With `stream_suffix` too it carries streamed requests on one ModelStreamInfer stream instead
 * (_native_h2_stream.c, on _native_h2.c's connections and frames); each record then comes with
 * its responses' arrival times (`resp_counts`, `resp_ns`, handed over by swap with the records).
 *
 * Threads: Python calls (start, feed, swap, stop, close) take `mu`, set a command and
 * wake the loop through an eventfd; the loop thread holds `mu` while it handles a batch of
 * events, so everything below is touched under `mu` only. Python waits for a command with
 * the GIL released.
 *
 * The accounting invariant (see `_ledger.py`) is the same: every request made due ends as
 * exactly one record: completed (0), an HTTP status, connection closed/refused, protocol
 * error, dropped (open loop, max outstanding), or unfinished (still owed when the drain ran
 * out). Status codes and messages are handed in by Python (`perfkit.records`), not defined
 * here.
 */
#include "_native.h"
#include "_native_hpack.h"

int grow(void **ptr, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *p = realloc(*ptr, n * item);
    if (!p) return -1;
    *ptr = p;
    *cap = n;
    return 0;
}

/* -- the ledger ------------------------------------------------------------------------------ */
void note_example(Core *c, int32_t status, const char *text, size_t len) {
    if (!status) return;
    for (int i = 0; i < c->n_examples; i++)
        if (c->examples[i].status == status) return;
    if (c->n_examples >= MAX_EXAMPLES) return;
    example_t *e = &c->examples[c->n_examples++];
    e->status = status;
    if (len > EXAMPLE_BYTES) len = EXAMPLE_BYTES;
    memcpy(e->text, text, len);
    e->len = (Py_ssize_t)len;
}

static void add_record(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status) {
    uint32_t count = c->next_count; /* streaming: its responses' times, the last `count` of resp_ns */
    c->next_count = 0;
    if (grow((void **)&c->recs, &c->cap_recs, c->n_recs + 1, sizeof(record_t)) < 0 ||
        (c->streaming && grow((void **)&c->resp_counts, &c->cap_counts, c->n_recs + 1, sizeof(uint32_t)) < 0)) {
        c->n_resp_ns -= count; /* out of memory: lost */
        return;
    }
    if (c->streaming) c->resp_counts[c->n_recs] = count;
    record_t *r = &c->recs[c->n_recs++];
    r->due = due;
    r->sent = sent;
    r->done = done;
    r->status = status;
    r->model = 0;
}

void on_done(Core *c, int32_t status);

/* A request handed over (in_flight counted) ends: its one record, and the message kept for its status. */
void record_end(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len) {
    c->in_flight--;
    add_record(c, due, sent, done, status);
    if (status) note_example(c, status, msg, len);
}

/* record_end, then the loop mode's turn. */
void finish(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len) {
    record_end(c, due, sent, done, status, msg, len);
    on_done(c, status);
}

/* -- connections ------------------------------------------------------------------------------ */
void set_events(Core *c, conn_t *k, int out) {
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = k};
    epoll_ctl(c->ep, EPOLL_CTL_MOD, k->fd, &ev);
    k->want_out = out;
}

static void idle_remove(Core *c, conn_t *k) {
    for (size_t i = 0; i < c->n_idle; i++)
        if (c->idle[i] == k) {
            c->idle[i] = c->idle[--c->n_idle];
            return;
        }
}

void conn_drop(Core *c, conn_t *k) {
    if (k->dead) return;
    k->dead = 1;
    if (c->h2) h2_dropped(c, k);
    idle_remove(c, k);
    for (size_t i = 0; i < c->n_conns; i++)
        if (c->conns[i] == k) {
            c->conns[i] = c->conns[--c->n_conns];
            break;
        }
    epoll_ctl(c->ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    k->fd = -1;
    if (k->pipe_r >= 0) {
        close(k->pipe_r);
        close(k->pipe_w);
        k->pipe_r = k->pipe_w = -1;
    }
    k->next_dead = c->graveyard; /* freed after the batch of events that may still name it */
    c->graveyard = k;
}

void conn_close_ours(Core *c, conn_t *k, int abort_it) {
    k->ours = 1;
    if (abort_it) {
        struct linger lg = {1, 0};
        setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    conn_drop(c, k);
}

static void conn_write(Core *c, conn_t *k);

static void conn_send(Core *c, conn_t *k, int64_t due) {
    size_t i = c->next_payload;
    c->next_payload = (i + 1) % (size_t)c->n_payloads;
    k->due = due;
    k->out = c->payloads[i];
    k->out_len = c->payload_lens[i];
    k->out_off = 0;
    k->piped = 0;
    k->sent = now_ns();
    conn_write(c, k);
}

/* The peer closed, or the socket failed: the request it carried (if any) ends closed. */
static void conn_lost(Core *c, conn_t *k, int err) {
    int owed = k->sent >= 0;
    int64_t due = k->due, sent = k->sent;
    if (!k->ours) c->lost_unreplaced++;
    conn_drop(c, k);
    if (owed) {
        char msg[160];
        int n = err ? snprintf(msg, sizeof msg, "%s", strerror(err))
                    : snprintf(msg, sizeof msg, "the server (or a proxy) closed the connection");
        finish(c, due, sent, now_ns(), c->st_closed, msg, (size_t)n);
    }
}

static int open_pipe(conn_t *k) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) return -1;
    fcntl(fds[1], F_SETPIPE_SZ, PIPE_BYTES); /* best effort: a smaller pipe takes the request in parts */
    k->pipe_r = fds[0];
    k->pipe_w = fds[1];
    return 0;
}

/* Write the request through the pipe; returns 0 when it is written or waits for the socket (or the
   connection was lost), -1 when splicing is not possible here (the caller then send()s the rest). */
static int splice_write(Core *c, conn_t *k) {
    for (;;) {
        if (k->piped) {
            int more = k->out_off < k->out_len ? SPLICE_F_MORE : 0;
            ssize_t n = splice(k->pipe_r, NULL, k->fd, NULL, k->piped, SPLICE_F_NONBLOCK | more);
            if (n > 0) {
                k->piped -= (size_t)n;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (!k->want_out) set_events(c, k, 1);
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
    if (k->want_out) set_events(c, k, 0);
    return 0;
}

static void conn_write(Core *c, conn_t *k) {
    if (k->out_len >= SPLICE_MIN_BYTES && (k->pipe_r >= 0 || (k->pipe_r == -1 && open_pipe(k) == 0))) {
        if (splice_write(c, k) == 0) return;
        close(k->pipe_r); /* this connection sends from user space from now on */
        close(k->pipe_w);
        k->pipe_r = k->pipe_w = -2;
    }
    while (k->out_off < k->out_len) {
        ssize_t n = send(k->fd, k->out + k->out_off, k->out_len - k->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            k->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!k->want_out) set_events(c, k, 1);
            return;
        }
        conn_lost(c, k, n < 0 ? errno : 0);
        return;
    }
    if (k->want_out) set_events(c, k, 0);
}

/* Requests waiting for a connection: [pend_head, pend_head + pend_len) of `pending`, FIFO. */
void push_pending(Core *c, int64_t due) {
    if (c->pend_head + c->pend_len == c->pend_cap && c->pend_head) {
        memmove(c->pending, c->pending + c->pend_head, c->pend_len * sizeof(int64_t));
        c->pend_head = 0;
    }
    if (grow((void **)&c->pending, &c->pend_cap, c->pend_head + c->pend_len + 1, sizeof(int64_t)) < 0) return;
    c->pending[c->pend_head + c->pend_len++] = due;
}

int64_t pop_pending(Core *c) {
    int64_t due = c->pending[c->pend_head++];
    if (--c->pend_len == 0) c->pend_head = 0;
    return due;
}

static void refuse_one_pending(Core *c);

static void free_conn_to_work(Core *c, conn_t *k) {
    if (c->pend_len) {
        conn_send(c, k, pop_pending(c));
    } else {
        grow((void **)&c->idle, &c->cap_idle, c->n_idle + 1, sizeof(conn_t *));
        c->idle[c->n_idle++] = k;
    }
}

/* A new nonblocking connection, connecting, in `conns` and the epoll set; NULL (open_error says
   why) if it cannot even start. */
conn_t *dial(Core *c) {
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(c->open_error, sizeof c->open_error, "%s", strerror(errno));
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (c->largest > 65536) {
        int size = (int)(2 * c->largest < LARGE_SNDBUF_BYTES ? 2 * c->largest : LARGE_SNDBUF_BYTES);
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    }
    conn_t *k = calloc(1, sizeof(conn_t));
    if (!k || grow((void **)&c->conns, &c->cap_conns, c->n_conns + 1, sizeof(conn_t *)) < 0) {
        free(k);
        close(fd);
        snprintf(c->open_error, sizeof c->open_error, "out of memory");
        return NULL;
    }
    k->fd = fd;
    k->pipe_r = k->pipe_w = -1;
    k->sent = -1;
    k->due = -1;
    k->need = -1;
    k->connecting = 1;
    c->conns[c->n_conns++] = k;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = k};
    epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev);
    k->want_out = 1;
    if (connect(fd, (struct sockaddr *)&c->addr, c->addrlen) < 0 && errno != EINPROGRESS) {
        snprintf(c->open_error, sizeof c->open_error, "%s", strerror(errno));
        k->ours = 1;
        conn_drop(c, k);
        return NULL;
    }
    return k;
}

static void open_conn(Core *c) {
    if (dial(c))
        c->opening++;
    else
        refuse_one_pending(c); /* the request this connection was opened for cannot be sent */
}

static void refuse_one_pending(Core *c) {
    if (!c->pend_len) return;
    int64_t due = pop_pending(c);
    finish(c, due, -1, now_ns(), c->st_refused, c->open_error, strlen(c->open_error));
}

static void conn_connected(Core *c, conn_t *k) {
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
    free_conn_to_work(c, k);
}

static void submit(Core *c, int64_t due) {
    if (c->h2) {
        h2_submit(c, due);
        return;
    }
    if (c->n_idle) {
        conn_t *k = c->idle[--c->n_idle];
        conn_send(c, k, due);
    } else {
        push_pending(c, due);
        if (c->opening < (int)c->pend_len) open_conn(c);
    }
    if (c->spare_target && (int)c->n_idle + c->opening < c->spare_target) open_conn(c);
}

/* -- responses ------------------------------------------------------------------------------ */
static const char *find_crlf2(const char *p, size_t n) {
    for (size_t i = 3; i < n; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') return p + i - 3;
    return NULL;
}

/* Content-Length's value in the header block [p, p+n), or -1. */
static ssize_t content_length(const char *p, size_t n) {
    static const char key[] = "\r\ncontent-length:";
    size_t kl = sizeof key - 1;
    for (size_t i = 0; i + kl <= n; i++) {
        size_t j = 0;
        while (j < kl) {
            char ch = p[i + j];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            if (ch != key[j]) break;
            j++;
        }
        if (j < kl) continue;
        size_t v = i + kl;
        while (v < n && p[v] == ' ') v++;
        ssize_t out = 0;
        int digits = 0;
        while (v < n && p[v] >= '0' && p[v] <= '9') {
            out = out * 10 + (p[v++] - '0');
            digits++;
        }
        return digits ? out : -1;
    }
    return -1;
}

/* The responses whole in k->buf, each recorded and its connection put back to work. A 200 response
   whose body goes DISCARD_MIN_BYTES past what is buffered leaves the rest to conn_readable's discard
   (k->skip): its body is never read, so the kernel need not copy it out. */
static void take_responses(Core *c, conn_t *k) {
    while (!k->dead) {
        if (k->need < 0) {
            const char *end = find_crlf2(k->buf, k->len);
            if (!end) return;
            size_t head = (size_t)(end - k->buf);
            ssize_t body = content_length(k->buf, head);
            if (body < 0 || head < 12) {
                int64_t due = k->due, sent = k->sent;
                size_t show = head < 200 ? head : 200;
                char msg[200];
                memcpy(msg, k->buf, show);
                conn_close_ours(c, k, 1); /* the stream position is lost: the connection is unusable */
                if (sent >= 0) finish(c, due, sent, now_ns(), c->st_protocol, msg, show);
                return;
            }
            k->need = (ssize_t)(head + 4) + body;
            k->code = (k->buf[9] - '0') * 100 + (k->buf[10] - '0') * 10 + (k->buf[11] - '0');
            if (k->code == 200 && k->sent >= 0 && (size_t)k->need >= k->len + DISCARD_MIN_BYTES) {
                k->skip = (size_t)k->need - k->len; /* one request per connection: all of it is this body */
                k->need = (ssize_t)k->len;
            }
        }
        if (k->len < (size_t)k->need || k->skip) return;
        int64_t done = now_ns();
        size_t need = (size_t)k->need;
        int32_t status = k->code == 200 ? 0 : k->code;
        char msg[EXAMPLE_BYTES];
        size_t mlen = 0;
        if (status) {
            mlen = need < EXAMPLE_BYTES ? need : EXAMPLE_BYTES;
            memcpy(msg, k->buf + need - mlen, mlen);
        }
        k->len -= need;
        if (k->len) memmove(k->buf, k->buf + need, k->len);
        k->need = -1;
        int64_t due = k->due, sent = k->sent;
        if (sent < 0) { /* a response nobody asked for: the stream is out of step */
            conn_close_ours(c, k, 1);
            return;
        }
        k->sent = -1;
        record_end(c, due, sent, done, status, msg, mlen);
        if (k->out_off < k->out_len || k->piped)
            conn_close_ours(c, k, 1); /* answered before its request was written whole (an early
                                         error): what is left of it would be read as a request */
        else
            free_conn_to_work(c, k);
        on_done(c, status);
        if (k->dead || k->sent < 0) return; /* idle (or gone): nothing more to read now */
    }
}

static void conn_readable(Core *c, conn_t *k) {
    for (;;) {
        size_t avail;
        ssize_t n;
        if (k->skip) { /* MSG_TRUNC: TCP drops these bytes without copying them to user space */
            avail = k->skip;
            n = recv(k->fd, NULL, avail, MSG_DONTWAIT | MSG_TRUNC);
        } else {
            size_t want = k->need > 0 && (size_t)k->need > k->len ? (size_t)k->need - k->len : 65536;
            if (want < 65536) want = 65536;
            if (grow((void **)&k->buf, &k->cap, k->len + want, 1) < 0) {
                conn_lost(c, k, ENOMEM);
                return;
            }
            avail = k->cap - k->len;
            n = recv(k->fd, k->buf + k->len, avail, MSG_DONTWAIT);
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
            k->len += (size_t)n;
        take_responses(c, k);
        if (k->dead) return;
        if ((size_t)n < avail) return; /* the socket is drained */
    }
}

/* -- loop modes ------------------------------------------------------------------------------ */
static void issue(Core *c) {
    c->in_flight++;
    submit(c, -1);
}

void on_done(Core *c, int32_t status) {
    if (!c->active || c->mode != MODE_CLOSED) return;
    if (status == c->st_closed || status == c->st_refused || (c->h2 && status == c->st_grpc_base + 14)) {
        if (grow((void **)&c->retries, &c->cap_retries, c->n_retries + 1, sizeof(int64_t)) == 0)
            c->retries[c->n_retries++] = now_ns() + RECONNECT_BACKOFF_NS;
    } else {
        issue(c);
    }
}

static void dispatch(Core *c, int64_t due) {
    if (c->in_flight >= c->max_outstanding) {
        add_record(c, due, -1, now_ns(), c->st_dropped);
        note_example(c, c->st_dropped, c->drop_message, strlen(c->drop_message));
        return;
    }
    c->in_flight++;
    submit(c, due);
}

static void run_open_loop(Core *c) {
    int64_t now = now_ns();
    while (c->active && c->due_head < c->due_len) {
        int64_t due = c->t0 + c->dues[c->due_head];
        if (due > now) {
            now = now_ns();
            if (due > now) break;
        }
        c->due_head++;
        dispatch(c, due);
    }
    if (c->due_head > 0 && c->due_head == c->due_len) c->due_head = c->due_len = 0;
    if (c->active && !c->dues_ended && c->due_len - c->due_head < (size_t)c->low_water)
        pthread_cond_broadcast(&c->hungry);
}

static void run_retries(Core *c) {
    if (!c->n_retries) return;
    int64_t now = now_ns();
    size_t kept = 0;
    size_t n = c->n_retries;
    int due_count = 0;
    for (size_t i = 0; i < n; i++) {
        if (c->retries[i] <= now)
            due_count++;
        else
            c->retries[kept++] = c->retries[i];
    }
    c->n_retries = kept;
    for (int i = 0; i < due_count && c->active; i++) issue(c);
}

/* At a stop's end: the requests still waiting for a connection end unfinished. */
void unfinish_pending(Core *c, int64_t now) {
    while (c->pend_len)
        record_end(c, pop_pending(c), -1, now, c->st_unfinished, c->unfinished_message, strlen(c->unfinished_message));
}

static void abort_in_flight(Core *c) {
    if (c->h2) {
        h2_abort_in_flight(c);
        return;
    }
    int64_t now = now_ns();
    unfinish_pending(c, now);
    for (size_t i = c->n_conns; i-- > 0;) {
        conn_t *k = c->conns[i];
        if (k->sent >= 0) {
            record_end(c, k->due, k->sent, now, c->st_unfinished, c->unfinished_message,
                       strlen(c->unfinished_message));
            k->sent = -1;
            conn_close_ours(c, k, 1);
        }
    }
}

static void close_all(Core *c) {
    while (c->n_conns) conn_close_ours(c, c->conns[c->n_conns - 1], 0);
    c->n_idle = 0;
}

static void set_priority(int realtime) {
    pid_t tid = (pid_t)syscall(SYS_gettid);
    struct sched_param sp = {0};
    if (!realtime) {
        sched_setscheduler(tid, SCHED_OTHER, &sp);
    } else {
        sp.sched_priority = 1;
        if (sched_setscheduler(tid, SCHED_FIFO, &sp) == 0) return;
    }
    setpriority(PRIO_PROCESS, (id_t)tid, -10);
}

static void complete_cmd(Core *c) {
    c->cmd = CMD_NONE;
    c->cmd_busy = 0;
    pthread_cond_broadcast(&c->cmd_done);
}

static void handle_cmd(Core *c) {
    int64_t now = now_ns();
    if (c->cmd == CMD_QUIT) {
        c->active = 0;
        close_all(c);
        c->quit = 1;
        return;
    }
    if (c->cmd == CMD_START && !c->starting) {
        c->n_recs = 0;
        c->n_resp_ns = 0;
        c->next_count = 0;
        c->n_examples = 0;
        c->reconnects = 0;
        c->in_flight = 0;
        c->n_retries = 0;
        c->mode = c->arg_mode;
        c->t0 = c->arg_t0;
        set_priority(c->arg_realtime);
        if (c->mode == MODE_CLOSED && c->h2) { /* the first requests wait for the server's SETTINGS */
            c->spare_target = 0;
            c->starting = 1;
            h2_prepare(c, 1, c->arg_share);
        } else if (c->mode == MODE_CLOSED) {
            c->spare_target = 0;
            c->active = 1;
            for (int i = 0; i < c->arg_share; i++) issue(c);
            complete_cmd(c);
        } else {
            c->starting = 1;
            if (c->h2)
                h2_prepare(c, 0, 0);
            else
                for (int i = (int)c->n_idle; i < c->arg_warm; i++) open_conn(c);
        }
    }
    if (c->cmd == CMD_STOP && !c->draining) {
        c->active = 0;
        c->n_retries = 0;
        c->draining = 1;
        c->drain_deadline = now + c->arg_drain_ns;
    }
}

/* Commands that finish later: the open loop starts once its warm connections settled; a stop
   once nothing is owed or its drain time ran out. */
static void progress_cmd(Core *c) {
    if (c->starting && c->opening == 0) {
        c->starting = 0;
        c->active = 1;
        if (c->mode == MODE_CLOSED)
            for (int i = 0; i < c->arg_share; i++) issue(c);
        complete_cmd(c);
    }
    if (c->draining && (c->in_flight <= 0 || now_ns() >= c->drain_deadline)) {
        if (c->in_flight > 0) abort_in_flight(c);
        c->in_flight = 0;
        if (c->mode == MODE_CLOSED) close_all(c); /* closed-loop connections are per level */
        c->draining = 0;
        c->mode = MODE_IDLE;
        complete_cmd(c);
    }
}

static int64_t next_wake(Core *c) {
    int64_t at = NEVER;
    if (c->active && c->mode == MODE_OPEN && c->due_head < c->due_len) at = c->t0 + c->dues[c->due_head];
    for (size_t i = 0; i < c->n_retries; i++)
        if (c->retries[i] < at) at = c->retries[i];
    if (c->draining && c->drain_deadline < at) at = c->drain_deadline;
    if (c->h2) {
        int64_t h2_at = h2_next_wake(c);
        if (h2_at < at) at = h2_at;
    }
    return at;
}

static void arm(Core *c, int64_t at) {
    if (at == c->armed_at) return;
    struct itimerspec its = {0};
    if (at != NEVER) {
        if (at <= 0) at = 1;
        its.it_value.tv_sec = at / 1000000000LL;
        its.it_value.tv_nsec = at % 1000000000LL;
    }
    timerfd_settime(c->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
    c->armed_at = at;
}

static void bury(Core *c) {
    while (c->graveyard) {
        conn_t *k = c->graveyard;
        c->graveyard = k->next_dead;
        if (k->h2) h2_free(k);
        free(k->buf);
        free(k);
    }
}

static void *loop_main(void *arg) {
    Core *c = (Core *)arg;
    struct epoll_event evs[256];
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0); /* 1 us: Linux coalesces timer wake-ups by 50 us by default */
    prctl(PR_SET_NAME, "perfkit-sender", 0, 0, 0); /* its CPU, by name, in top -H and /proc/PID/task */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        arm(c, next_wake(c));
        pthread_mutex_unlock(&c->mu);
        int n = epoll_wait(c->ep, evs, 256, -1);
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == TAG_WAKE) {
                uint64_t v;
                if (read(c->wake_fd, &v, sizeof v) < 0) { /* nothing to read: another wake took it */
                }
                if (c->cmd != CMD_NONE) handle_cmd(c);
            } else if (tag == TAG_TIMER) {
                uint64_t v;
                if (read(c->timer_fd, &v, sizeof v) < 0) { /* not expired yet (re-armed): fine */
                }
                c->armed_at = 0; /* fired or re-armed: set it again */
            } else {
                conn_t *k = (conn_t *)tag;
                if (k->dead) continue;
                if (k->connecting) {
                    if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) (c->h2 ? h2_connected : conn_connected)(c, k);
                    continue;
                }
                if (c->h2) {
                    h2_event(c, k, evs[i].events);
                    continue;
                }
                if (evs[i].events & EPOLLOUT && (k->out_off < k->out_len || k->piped) && k->sent >= 0) conn_write(c, k);
                if (!k->dead && evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) conn_readable(c, k);
            }
        }
        if (c->quit) break;
        if (c->mode == MODE_OPEN) run_open_loop(c);
        if (c->h2) h2_tick(c);
        run_retries(c);
        progress_cmd(c);
        bury(c);
    }
    bury(c);
    complete_cmd(c);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* -- the Python type ------------------------------------------------------------------------ */
static void wake(Core *c) {
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof one) < 0) { /* the counter is saturated: the loop wakes anyway */
    }
}

/* Run a command and wait for the loop to finish it, with the GIL released. */
static void run_cmd(Core *c, int cmd) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->mu);
    while (c->cmd_busy) pthread_cond_wait(&c->cmd_done, &c->mu);
    c->cmd = cmd;
    c->cmd_busy = 1;
    wake(c);
    while (c->cmd_busy) pthread_cond_wait(&c->cmd_done, &c->mu);
    pthread_mutex_unlock(&c->mu);
    Py_END_ALLOW_THREADS
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    static char *names[] = {"host", "port", "payloads", "statuses", "grpc_block", "h2_connections", "h2_first_sid",
                            "stream_suffix", NULL};
    const char *host;
    int port;
    PyObject *payloads, *statuses;
    Py_buffer block = {0};
    int h2_connections = 2;
    unsigned int h2_first_sid = 1; /* tests start near the last stream id */
    Py_buffer suffix = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "siOO|y*iIy*", names, &host, &port, &payloads, &statuses, &block,
                                     &h2_connections, &h2_first_sid, &suffix))
        return -1;
    if (suffix.buf && (!block.buf || suffix.len > 200)) {
        PyBuffer_Release(&block);
        PyBuffer_Release(&suffix);
        PyErr_SetString(PyExc_ValueError, "stream_suffix goes with grpc_block, at most 200 bytes");
        return -1;
    }
    if (block.buf) { /* gRPC: payloads are gRPC messages, block the request's HPACK header block;
                        streaming (stream_suffix): payloads are ModelInferRequests, framed per request */
        int rc = h2_setup(c, block.buf, (size_t)block.len, h2_connections, h2_first_sid | 1, suffix.buf,
                          (size_t)suffix.len);
        PyBuffer_Release(&block);
        PyBuffer_Release(&suffix);
        if (rc < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (!PyArg_ParseTuple(statuses, "iiiii|ii", &c->st_closed, &c->st_refused, &c->st_protocol, &c->st_unfinished,
                          &c->st_dropped, &c->st_grpc_base, &c->st_stream_error))
        return -1;
    PyObject *seq = PySequence_Fast(payloads, "payloads must be a sequence of bytes");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at least one payload is needed");
        return -1;
    }
    c->payloads = calloc((size_t)n, sizeof(char *));
    c->payload_lens = calloc((size_t)n, sizeof(size_t));
    c->n_payloads = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        char *data;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &data, &len) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        c->payloads[i] = malloc((size_t)len ? (size_t)len : 1);
        memcpy(c->payloads[i], data, (size_t)len);
        c->payload_lens[i] = (size_t)len;
        if ((size_t)len > c->largest) c->largest = (size_t)len;
    }
    Py_DECREF(seq);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = getaddrinfo(host, portstr, &hints, &res);
    Py_END_ALLOW_THREADS
    if (rc != 0 || !res) {
        PyErr_Format(PyExc_OSError, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
    c->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (c->ep < 0 || c->wake_fd < 0 || c->timer_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = TAG_WAKE};
    epoll_ctl(c->ep, EPOLL_CTL_ADD, c->wake_fd, &ev);
    ev.data.ptr = TAG_TIMER;
    epoll_ctl(c->ep, EPOLL_CTL_ADD, c->timer_fd, &ev);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cmd_done, NULL);
    pthread_cond_init(&c->hungry, NULL);
    c->armed_at = -1;
    c->max_outstanding = 1000;
    /* The sender thread blocks every signal (it inherits this mask): a Ctrl-C or SIGTERM sent to the
       process is then taken by a Python thread, whose handler runs the interpreter's own. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int started = pthread_create(&c->thread, NULL, loop_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the sender thread");
        return -1;
    }
    c->thread_started = 1;
    return 0;
}

static PyObject *Core_start_closed(Core *c, PyObject *args) {
    int share;
    if (!PyArg_ParseTuple(args, "i", &share)) return NULL;
    pthread_mutex_lock(&c->mu);
    c->arg_mode = MODE_CLOSED;
    c->arg_share = share;
    c->arg_realtime = 0;
    c->arg_t0 = 0;
    c->due_head = c->due_len = 0;
    pthread_mutex_unlock(&c->mu);
    run_cmd(c, CMD_START);
    Py_RETURN_NONE;
}

/* start_open(t0_ns, first_dues: bytes of int64, ended, warm, spare_target, max_outstanding,
              realtime, low_water, drop_message) */
static PyObject *Core_start_open(Core *c, PyObject *args) {
    long long t0;
    Py_buffer dues;
    int ended, warm, spare, max_out, realtime, low;
    const char *drop;
    if (!PyArg_ParseTuple(args, "Ly*piiipis", &t0, &dues, &ended, &warm, &spare, &max_out, &realtime, &low, &drop))
        return NULL;
    pthread_mutex_lock(&c->mu);
    size_t n = (size_t)dues.len / sizeof(int64_t);
    c->due_head = c->due_len = 0;
    if (grow((void **)&c->dues, &c->due_cap, n, sizeof(int64_t)) == 0) {
        memcpy(c->dues, dues.buf, n * sizeof(int64_t));
        c->due_len = n;
    }
    c->dues_ended = ended;
    c->arg_mode = MODE_OPEN;
    c->arg_t0 = t0;
    c->arg_warm = warm;
    c->arg_realtime = realtime;
    c->spare_target = spare;
    c->max_outstanding = max_out;
    c->low_water = low;
    snprintf(c->drop_message, sizeof c->drop_message, "%s", drop);
    pthread_mutex_unlock(&c->mu);
    PyBuffer_Release(&dues);
    run_cmd(c, CMD_START);
    Py_RETURN_NONE;
}

/* feed(dues: bytes of int64, ended): more due offsets for the open loop. */
static PyObject *Core_feed(Core *c, PyObject *args) {
    Py_buffer dues;
    int ended;
    if (!PyArg_ParseTuple(args, "y*p", &dues, &ended)) return NULL;
    size_t n = (size_t)dues.len / sizeof(int64_t);
    pthread_mutex_lock(&c->mu);
    if (c->due_head) { /* compact: what was sent is gone */
        memmove(c->dues, c->dues + c->due_head, (c->due_len - c->due_head) * sizeof(int64_t));
        c->due_len -= c->due_head;
        c->due_head = 0;
    }
    if (grow((void **)&c->dues, &c->due_cap, c->due_len + n, sizeof(int64_t)) == 0) {
        memcpy(c->dues + c->due_len, dues.buf, n * sizeof(int64_t));
        c->due_len += n;
    }
    c->dues_ended = ended;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    PyBuffer_Release(&dues);
    Py_RETURN_NONE;
}

/* wait_hungry(timeout_s) -> True when the open loop wants more dues, False when it no longer runs. */
static PyObject *Core_wait_hungry(Core *c, PyObject *args) {
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s)) return NULL;
    int result;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long add = (long long)(timeout_s * 1e9);
    until.tv_sec += add / 1000000000LL;
    until.tv_nsec += add % 1000000000LL;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    for (;;) {
        int running = (c->active || c->starting) && c->mode == MODE_OPEN && !c->dues_ended;
        if (!running) {
            result = 0;
            break;
        }
        if (c->due_len - c->due_head < (size_t)c->low_water) {
            result = 1;
            break;
        }
        if (pthread_cond_timedwait(&c->hungry, &c->mu, &until) == ETIMEDOUT) {
            result = -1;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    Py_END_ALLOW_THREADS
    if (result < 0) Py_RETURN_NONE;
    return PyBool_FromLong(result);
}

static PyObject *take(Core *c) {
    /* called with mu held */
    PyObject *recs = PyBytes_FromStringAndSize((const char *)c->recs, (Py_ssize_t)(c->n_recs * sizeof(record_t)));
    PyObject *examples = PyDict_New();
    for (int i = 0; examples && recs && i < c->n_examples; i++) {
        PyObject *key = PyLong_FromLong(c->examples[i].status);
        PyObject *val = PyUnicode_DecodeUTF8(c->examples[i].text, c->examples[i].len, "replace");
        if (key && val) PyDict_SetItem(examples, key, val);
        Py_XDECREF(key);
        Py_XDECREF(val);
    }
    long reconnects = c->reconnects;
    PyObject *counts = NULL, *times = NULL;
    if (c->streaming) {
        counts = PyBytes_FromStringAndSize((const char *)c->resp_counts, (Py_ssize_t)(c->n_recs * sizeof(uint32_t)));
        times = PyBytes_FromStringAndSize((const char *)c->resp_ns, (Py_ssize_t)(c->n_resp_ns * sizeof(int64_t)));
    }
    c->n_recs = 0;
    c->n_resp_ns = 0;
    c->n_examples = 0;
    c->reconnects = 0;
    if (!recs || !examples || (c->streaming && (!counts || !times))) {
        Py_XDECREF(recs);
        Py_XDECREF(examples);
        Py_XDECREF(counts);
        Py_XDECREF(times);
        return NULL;
    }
    if (c->streaming) return Py_BuildValue("(NNlNN)", recs, examples, reconnects, counts, times);
    return Py_BuildValue("(NNl)", recs, examples, reconnects);
}

static PyObject *Core_swap(Core *c, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->mu);
    Py_END_ALLOW_THREADS
    PyObject *out = take(c);
    pthread_mutex_unlock(&c->mu);
    return out;
}

static PyObject *Core_stop(Core *c, PyObject *args) {
    double drain_s;
    const char *message;
    if (!PyArg_ParseTuple(args, "ds", &drain_s, &message)) return NULL;
    pthread_mutex_lock(&c->mu);
    c->arg_drain_ns = (int64_t)(drain_s * 1e9);
    snprintf(c->unfinished_message, sizeof c->unfinished_message, "%s", message);
    pthread_cond_broadcast(&c->hungry);
    pthread_mutex_unlock(&c->mu);
    run_cmd(c, CMD_STOP);
    return Core_swap(c, NULL);
}

static void shutdown_core(Core *c) {
    if (!c->thread_started) return;
    run_cmd(c, CMD_QUIT);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(c->thread, NULL);
    Py_END_ALLOW_THREADS
    c->thread_started = 0;
}

static PyObject *Core_close(Core *c, PyObject *Py_UNUSED(ignored)) {
    shutdown_core(c);
    Py_RETURN_NONE;
}

static void Core_dealloc(Core *c) {
    shutdown_core(c);
    for (Py_ssize_t i = 0; i < c->n_payloads; i++) free(c->payloads[i]);
    free(c->payloads);
    free(c->payload_lens);
    free(c->recs);
    free(c->resp_counts);
    free(c->resp_ns);
    free(c->dues);
    free(c->retries);
    free(c->conns);
    free(c->idle);
    free(c->pending);
    h2_teardown(c);
    if (c->ep > 0) close(c->ep);
    if (c->wake_fd > 0) close(c->wake_fd);
    if (c->timer_fd > 0) close(c->timer_fd);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Core_methods[] = {
    {"start_closed", (PyCFunction)Core_start_closed, METH_VARARGS, "start_closed(share): a closed loop of share slots"},
    {"start_open", (PyCFunction)Core_start_open, METH_VARARGS, "start an open loop (see _native_engine)"},
    {"feed", (PyCFunction)Core_feed, METH_VARARGS, "feed(dues, ended): more due offsets (int64 ns) for the open loop"},
    {"wait_hungry", (PyCFunction)Core_wait_hungry, METH_VARARGS,
     "wait_hungry(timeout_s): True when the open loop wants more dues, False when it stopped, None on timeout"},
    {"swap", (PyCFunction)Core_swap, METH_NOARGS, "swap() -> (records bytes, examples, reconnects[, uint32 response counts per record, int64 "
     "response times]) since the last swap"},
    {"stop", (PyCFunction)Core_stop, METH_VARARGS, "stop(drain_s, unfinished_message) -> swap() after the drain"},
    {"close", (PyCFunction)Core_close, METH_NOARGS, "close every connection and end the sender thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "perfkit.loadgen._native.Http1Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HTTP/1.1 keep-alive (or, with grpc_block, gRPC over HTTP/2) sender on a thread of its own (see the "
              "module's source)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static PyMethodDef module_functions[] = {
    {"hpack_decode", h2_hpack_decode_py, METH_VARARGS,
     "hpack_decode(blocks) -> the fields of each header block, decoded in order by one HPACK decoder"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_native",
                                    .m_doc = "perfkit's compiled HTTP/1.1 and gRPC sender", .m_size = -1,
                                    .m_methods = module_functions};

PyMODINIT_FUNC PyInit__native(void) {
    hpack_setup();
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Http1Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "RECORD_BYTES", (long)sizeof(record_t));
    PyModule_AddIntConstant(m, "H2_LAST_SID", (long)H2_LAST_SID);
    return m;
}
