/* The compiled sender's core: the hot path of `_native_engine.NativeEngine`, whatever the protocol.
 *
 * One thread of its own (no GIL, no interpreter) runs an epoll loop over the connections of one
 * protocol (`c->ops`: HTTP/1.1, unary gRPC or streamed gRPC), exactly as `_engine.Engine` with
 * `_loops.ClosedLoop` / `_loops.OpenLoop` does in Python, and writes one fixed-size record per
 * request into a buffer that Python takes over (`swap`, _native.c). Why: the profile of the Python
 * sender (benchmarks/client_profile.py) put ~45% of its CPU per request in the interpreter; here a
 * request costs its system calls and nothing else.
 *
 * Threads: the control calls (core_set_*, core_feed, core_command) take `mu`, set a command and
 * wake the loop through an eventfd; the loop thread holds `mu` while it handles a batch of events,
 * so everything below is touched under `mu` only.
 *
 * The accounting invariant (see `_ledger.py`) is the same: every request made due ends as exactly
 * one record: completed (0), an HTTP status, connection closed/refused, protocol error, dropped
 * (open loop, max outstanding), or unfinished (still owed when the drain ran out). Status codes
 * and messages are handed in by Python (`perfkit.records`), not defined here.
 */
#include "_native_core.h"

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

size_t take_payload(Core *c) {
    size_t i = c->next_payload;
    c->next_payload = (i + 1) % c->n_payloads;
    return i;
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
    if (len) memcpy(e->text, text, len);
    e->len = len;
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

void idle_push(Core *c, conn_t *k) {
    grow((void **)&c->idle, &c->cap_idle, c->n_idle + 1, sizeof(conn_t *));
    c->idle[c->n_idle++] = k;
}

conn_t *idle_pop(Core *c) {
    return c->n_idle ? c->idle[--c->n_idle] : NULL;
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
    c->ops->dropped(c, k);
    idle_remove(c, k);
    for (size_t i = 0; i < c->n_conns; i++)
        if (c->conns[i] == k) {
            c->conns[i] = c->conns[--c->n_conns];
            break;
        }
    epoll_ctl(c->ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    k->fd = -1;
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

/* At a stop's end: the requests still waiting for a connection end unfinished. */
void unfinish_pending(Core *c, int64_t now) {
    while (c->pend_len)
        record_end(c, pop_pending(c), -1, now, c->st_unfinished, c->unfinished_message, strlen(c->unfinished_message));
}

/* A new nonblocking connection (the protocol's size, zeroed), connecting, in `conns` and the epoll
   set; NULL (open_error says why) if it cannot even start. */
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
    conn_t *k = calloc(1, c->ops->conn_bytes);
    if (!k || grow((void **)&c->conns, &c->cap_conns, c->n_conns + 1, sizeof(conn_t *)) < 0) {
        free(k);
        close(fd);
        snprintf(c->open_error, sizeof c->open_error, "out of memory");
        return NULL;
    }
    k->fd = fd;
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

static void close_all(Core *c) {
    while (c->n_conns) conn_close_ours(c, c->conns[c->n_conns - 1], 0);
    c->n_idle = 0;
}

static void bury(Core *c) {
    while (c->graveyard) {
        conn_t *k = c->graveyard;
        c->graveyard = k->next_dead;
        c->ops->conn_free(k);
        free(k->buf);
        free(k);
    }
}

/* -- loop modes ------------------------------------------------------------------------------ */
static void issue(Core *c) {
    c->in_flight++;
    c->ops->submit(c, -1);
}

void on_done(Core *c, int32_t status) {
    if (!c->active || c->mode != MODE_CLOSED) return;
    if (status == c->st_closed || status == c->st_refused ||
        (c->ops->unavailable_retries && status == c->st_grpc_base + 14)) {
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
    c->ops->submit(c, due);
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

/* -- commands -------------------------------------------------------------------------------- */
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
        if (c->mode == MODE_CLOSED) c->spare_target = 0;
        c->starting = 1; /* the protocol's connections first (prepare says whether to wait for them) */
        if (!c->ops->prepare(c)) {
            c->starting = 0;
            c->active = 1;
            for (int i = 0; i < c->arg_share; i++) issue(c);
            complete_cmd(c);
        }
    }
    if (c->cmd == CMD_STOP && !c->draining) {
        c->active = 0;
        c->n_retries = 0;
        c->draining = 1;
        c->drain_deadline = now + c->arg_drain_ns;
    }
}

/* Commands that finish later: a level starts once its connections settled; a stop once nothing is
   owed or its drain time ran out. */
static void progress_cmd(Core *c) {
    if (c->starting && c->opening == 0) {
        c->starting = 0;
        c->active = 1;
        if (c->mode == MODE_CLOSED)
            for (int i = 0; i < c->arg_share; i++) issue(c);
        complete_cmd(c);
    }
    if (c->draining && (c->in_flight <= 0 || now_ns() >= c->drain_deadline)) {
        if (c->in_flight > 0) c->ops->abort_in_flight(c);
        c->in_flight = 0;
        if (c->mode == MODE_CLOSED) close_all(c); /* closed-loop connections are per level */
        c->draining = 0;
        c->mode = MODE_IDLE;
        complete_cmd(c);
    }
}

/* -- the loop -------------------------------------------------------------------------------- */
static int64_t next_wake(Core *c) {
    int64_t at = NEVER;
    if (c->active && c->mode == MODE_OPEN && c->due_head < c->due_len) at = c->t0 + c->dues[c->due_head];
    for (size_t i = 0; i < c->n_retries; i++)
        if (c->retries[i] < at) at = c->retries[i];
    if (c->draining && c->drain_deadline < at) at = c->drain_deadline;
    int64_t proto_at = c->ops->next_wake(c);
    if (proto_at < at) at = proto_at;
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
                    if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) c->ops->connected(c, k);
                    continue;
                }
                c->ops->event(c, k, evs[i].events);
            }
        }
        if (c->quit) break;
        if (c->mode == MODE_OPEN) run_open_loop(c);
        c->ops->tick(c);
        run_retries(c);
        progress_cmd(c);
        bury(c);
    }
    bury(c);
    complete_cmd(c);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* -- lifecycle (the commands and their arguments: _native_control.c) ------------------------- */
int core_start(Core *c) {
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (c->ep < 0 || c->wake_fd < 0 || c->timer_fd < 0) return -1;
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
        errno = EAGAIN;
        return -1;
    }
    c->thread_started = 1;
    return 0;
}

void core_free(Core *c) {
    if (c->ops) { /* connections still open (none once the thread quit): closed, then freed */
        close_all(c);
        bury(c);
    }
    if (c->payloads)
        for (size_t i = 0; i < c->n_payloads; i++) free(c->payloads[i]);
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
    if (c->ops) c->ops->teardown(c);
    if (c->ep > 0) close(c->ep);
    if (c->wake_fd > 0) close(c->wake_fd);
    if (c->timer_fd > 0) close(c->timer_fd);
    c->payloads = NULL;
    c->payload_lens = NULL;
    c->recs = NULL;
    c->resp_counts = NULL;
    c->resp_ns = NULL;
    c->dues = NULL;
    c->retries = NULL;
    c->conns = NULL;
    c->idle = NULL;
    c->pending = NULL;
    c->ops = NULL;
    c->ep = c->wake_fd = c->timer_fd = 0;
}
