/* The compiled sender's connections and ledger, below the loop (_native_core.c): the connections of
 * the running protocol (dialled, idle, dropped, freed after the batch of events that may still name
 * them), the FIFO of requests waiting for one, and the records and error examples every request
 * ends in. Calls nothing of the loop's: the loop and the protocols call it.
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

void add_record(Core *c, int64_t due, int64_t sent, int64_t done, int32_t status) {
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

/* Every connection closes (perfkit's own close); none idle. */
void conns_close_all(Core *c) {
    while (c->n_conns) conn_close_ours(c, c->conns[c->n_conns - 1], 0);
    c->n_idle = 0;
}

/* The connections dropped during a batch of events are freed, after it. */
void conns_bury(Core *c) {
    while (c->graveyard) {
        conn_t *k = c->graveyard;
        c->graveyard = k->next_dead;
        c->ops->conn_free(k);
        free(k->buf);
        free(k);
    }
}
