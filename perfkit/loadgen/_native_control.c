/* The compiled sender's control, for the CPython type (_native.c) and test harnesses: a level's
 * arguments set under `mu`, then a command that wakes the loop (an eventfd) and waits for it to
 * finish (_native_core.c handles it on the sender thread). Each function takes `mu` itself. */
#include "_native_core.h"

static void wake(Core *c) {
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof one) < 0) { /* the counter is saturated: the loop wakes anyway */
    }
}

void core_command(Core *c, int cmd) {
    pthread_mutex_lock(&c->mu);
    while (c->cmd_busy) pthread_cond_wait(&c->cmd_done, &c->mu);
    c->cmd = cmd;
    c->cmd_busy = 1;
    wake(c);
    while (c->cmd_busy) pthread_cond_wait(&c->cmd_done, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void core_set_closed(Core *c, int share) {
    pthread_mutex_lock(&c->mu);
    c->arg_mode = MODE_CLOSED;
    c->arg_share = share;
    c->arg_realtime = 0;
    c->arg_t0 = 0;
    c->due_head = c->due_len = 0;
    pthread_mutex_unlock(&c->mu);
}

void core_set_open(Core *c, int64_t t0, const int64_t *dues, size_t n, int ended, int warm, int spare, int max_out,
                   int realtime, int low_water, const char *drop_message) {
    pthread_mutex_lock(&c->mu);
    c->due_head = c->due_len = 0;
    if (grow((void **)&c->dues, &c->due_cap, n, sizeof(int64_t)) == 0) {
        if (n) memcpy(c->dues, dues, n * sizeof(int64_t));
        c->due_len = n;
    }
    c->dues_ended = ended;
    c->arg_mode = MODE_OPEN;
    c->arg_t0 = t0;
    c->arg_warm = warm;
    c->arg_realtime = realtime;
    c->spare_target = spare;
    c->max_outstanding = max_out;
    c->low_water = low_water;
    snprintf(c->drop_message, sizeof c->drop_message, "%s", drop_message);
    pthread_mutex_unlock(&c->mu);
}

void core_feed(Core *c, const int64_t *dues, size_t n, int ended) {
    pthread_mutex_lock(&c->mu);
    if (c->due_head) { /* compact: what was sent is gone */
        memmove(c->dues, c->dues + c->due_head, (c->due_len - c->due_head) * sizeof(int64_t));
        c->due_len -= c->due_head;
        c->due_head = 0;
    }
    if (grow((void **)&c->dues, &c->due_cap, c->due_len + n, sizeof(int64_t)) == 0) {
        if (n) memcpy(c->dues + c->due_len, dues, n * sizeof(int64_t));
        c->due_len += n;
    }
    c->dues_ended = ended;
    wake(c);
    pthread_mutex_unlock(&c->mu);
}

int core_wait_hungry(Core *c, double timeout_s) {
    int result;
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
    return result;
}

void core_set_stop(Core *c, double drain_s, const char *unfinished_message) {
    pthread_mutex_lock(&c->mu);
    c->arg_drain_ns = (int64_t)(drain_s * 1e9);
    snprintf(c->unfinished_message, sizeof c->unfinished_message, "%s", unfinished_message);
    pthread_cond_broadcast(&c->hungry);
    pthread_mutex_unlock(&c->mu);
}

void core_shutdown(Core *c) {
    if (!c->thread_started) return;
    core_command(c, CMD_QUIT);
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
}
