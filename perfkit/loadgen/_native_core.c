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

/* record_end, then the loop mode's turn. */
void finish(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status, const char *msg, size_t len) {
    record_end(c, due, sent, done, status, msg, len);
    on_done(c, status);
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
        conns_close_all(c);
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
        if (c->mode == MODE_CLOSED) conns_close_all(c); /* closed-loop connections are per level */
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
        conns_bury(c);
    }
    conns_bury(c);
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
        conns_close_all(c);
        conns_bury(c);
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
