/* A seeded mutation fuzz of the compiled sender's response parsers, built and run under
 * AddressSanitizer and UndefinedBehaviorSanitizer by tests/test_native_sanitizers.py.
 *
 *   native_fuzz ITERATIONS SEED
 *
 * Targets, each fed mutations of a few well-formed seeds (deterministic: xorshift64 from SEED):
 *   http1-head   http1_head() on a response head
 *   hpack        hpack_decode() on a run of header blocks with one decoder (one dynamic table)
 *   http1        a whole HTTP/1.1 exchange through the protocol's ops (a real loopback socket)
 *   h2-unary     a unary gRPC call: the server's SETTINGS, then the fuzzed frames
 *   h2-stream    a ModelStreamInfer request: the server's SETTINGS, then the fuzzed frames
 * The socket targets drive the core and the protocol on this one thread (no sender thread): a
 * connection is dialled to a loopback listener, accepted here, written the bytes and shut, and
 * read until the sender gives it up. Each run must end its one request as exactly one record (the
 * ledger's invariant), and each unmutated seed must complete it (status 0): the fuzz reaches the
 * parsers. Any sanitizer report aborts; a broken invariant exits 1. */
#include "_native_core.h"
#include "_native_hpack.h"
#include "_native_protocols.h"

#include <arpa/inet.h>
#include <poll.h>

#define FUZZ_BYTES 8192

enum { P_HTTP1, P_UNARY, P_STREAM };

static uint64_t rng;

static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t below(size_t n) {
    return n ? (size_t)(next_rand() % n) : 0;
}

typedef struct {
    uint8_t b[FUZZ_BYTES];
    size_t n;
} input_t;

static void put(input_t *in, const void *p, size_t n) {
    if (in->n + n > FUZZ_BYTES) n = FUZZ_BYTES - in->n;
    memcpy(in->b + in->n, p, n);
    in->n += n;
}

static void frame(input_t *in, int type, int flags, uint32_t sid, const void *p, size_t n) {
    uint8_t head[9] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, (uint8_t)type, (uint8_t)flags,
                       (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    put(in, head, 9);
    put(in, p, n);
}

/* -- seeds ------------------------------------------------------------------------------------ */
/* header blocks: :status 200 and content-type (indexed name, new entry); grpc-status 0 (new name,
   new entry); grpc-status 3 and a grpc-message; the same fields indexed from the dynamic table; a
   table size update; RFC 7541 C.4.1 (Huffman) */
static const uint8_t B_HEADERS[] = {0x88, 0x5f, 0x10, 'a', 'p', 'p', 'l', 'i', 'c', 'a', 't', 'i', 'o', 'n', '/',
                                    'g',  'r',  'p',  'c'};
static const uint8_t B_TRAILERS[] = {0x40, 0x0b, 'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's', 0x01, '0'};
static const uint8_t B_ERROR[] = {0x40, 0x0b, 'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's', 0x01, '3',
                                  0x40, 0x0c, 'g', 'r', 'p', 'c', '-', 'm', 'e', 's', 's', 'a', 'g', 'e', 0x03,
                                  'b',  'a',  'd'};
static const uint8_t B_INDEXED[] = {0x88, 0xbe, 0xbf};
static const uint8_t B_SIZE[] = {0x3f, 0xe1, 0x1f, 0x88};
static const uint8_t B_HUFFMAN[] = {0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5,
                                    0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff};

static const uint8_t GRPC_MESSAGE[] = {0, 0, 0, 0, 3, 0x0a, 0x01, 'x'};

/* a ModelStreamInferResponse for request "0": outputs, and triton_final_response true */
static const uint8_t STREAM_RESPONSE[] = {
    0x12, 0x22,                                                       /* 2: infer_response (34 bytes) */
    0x1a, 0x01, '0',                                                  /* 3: id "0" */
    0x2a, 0x00,                                                       /* 5: an output */
    0x22, 0x1b,                                                       /* 4: parameters entry (27) */
    0x0a, 0x15, 't', 'r', 'i', 't', 'o', 'n', '_', 'f', 'i', 'n', 'a', 'l', '_', 'r', 'e', 's', 'p', 'o', 'n', 's',
    'e',                                                              /* 1: key */
    0x12, 0x02, 0x08, 0x01,                                           /* 2: {1: true} */
};

static size_t seeds_for(int target, input_t *out) {
    size_t n = 0;
    memset(out, 0, 6 * sizeof(input_t));
    if (target == P_HTTP1) {
        static const char *texts[] = {
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nCONTENT-LENGTH:  11\r\n\r\n{\"error\":1}",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) put(&out[n++], texts[i], strlen(texts[i]));
        return n;
    }
    if (target == P_UNARY) {
        input_t *in = &out[n++]; /* headers, message, trailers */
        frame(in, 1, 4, 1, B_HEADERS, sizeof B_HEADERS);
        frame(in, 0, 0, 1, GRPC_MESSAGE, sizeof GRPC_MESSAGE);
        frame(in, 1, 5, 1, B_TRAILERS, sizeof B_TRAILERS);
        in = &out[n++]; /* padded and prioritised headers, trailers in a CONTINUATION, a PING, a WINDOW_UPDATE */
        uint8_t padded[1 + 5 + sizeof B_HEADERS + 3] = {3, 0, 0, 0, 0, 16};
        memcpy(padded + 6, B_HEADERS, sizeof B_HEADERS);
        frame(in, 1, 4 | 8 | 0x20, 1, padded, sizeof padded);
        frame(in, 6, 0, 0, "pingpong", 8);
        frame(in, 8, 0, 0, "\0\0\1\0", 4);
        frame(in, 1, 1, 1, B_ERROR, 10);
        frame(in, 9, 4, 1, B_ERROR + 10, sizeof B_ERROR - 10);
        in = &out[n++]; /* the dynamic table used: the same fields indexed, a size update */
        frame(in, 1, 4, 1, B_HEADERS, sizeof B_HEADERS);
        frame(in, 1, 4, 3, B_SIZE, sizeof B_SIZE);
        frame(in, 1, 5, 1, B_TRAILERS, sizeof B_TRAILERS);
        frame(in, 1, 5, 5, B_INDEXED, sizeof B_INDEXED);
        in = &out[n++]; /* Huffman-coded fields, then a GOAWAY above the stream and an RST */
        frame(in, 1, 4, 1, B_HUFFMAN, sizeof B_HUFFMAN);
        frame(in, 1, 5, 1, B_TRAILERS, sizeof B_TRAILERS);
        frame(in, 7, 0, 0, "\0\0\0\1\0\0\0\0", 8);
        frame(in, 3, 0, 1, "\0\0\0\x08", 4);
        return n;
    }
    input_t *in = &out[n++]; /* P_STREAM: headers, a response split over two DATA frames, trailers */
    uint8_t message[5 + sizeof STREAM_RESPONSE] = {0, 0, 0, 0, (uint8_t)sizeof STREAM_RESPONSE};
    memcpy(message + 5, STREAM_RESPONSE, sizeof STREAM_RESPONSE);
    frame(in, 1, 4, 1, B_HEADERS, sizeof B_HEADERS);
    frame(in, 0, 0, 1, message, 12);
    frame(in, 0, 0, 1, message + 12, sizeof message - 12);
    frame(in, 1, 5, 1, B_TRAILERS, sizeof B_TRAILERS);
    in = &out[n++]; /* padded DATA, a SETTINGS that moves the stream's window, an RST */
    uint8_t padded[1 + sizeof message + 2] = {2};
    memcpy(padded + 1, message, sizeof message);
    frame(in, 4, 0, 0, "\0\4\0\1\0\0", 6);
    frame(in, 0, 8, 1, padded, sizeof padded);
    frame(in, 3, 0, 1, "\0\0\0\x08", 4);
    return n;
}

/* -- mutations -------------------------------------------------------------------------------- */
static void mutate(input_t *in, const input_t *seeds, size_t n_seeds) {
    int rounds = 1 + (int)below(8);
    for (int r = 0; r < rounds; r++) {
        size_t at = below(in->n + 1);
        switch (below(9)) {
        case 0: /* flip a bit */
            if (in->n) in->b[below(in->n)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* a random byte */
            if (in->n) in->b[below(in->n)] = (uint8_t)next_rand();
            break;
        case 2: { /* an interesting byte */
            static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x3f, 0x40, 0x09, 0x04, 0x05};
            if (in->n) in->b[below(in->n)] = vals[below(sizeof vals)];
            break;
        }
        case 3: /* insert bytes */
            if (in->n < FUZZ_BYTES) {
                size_t k = 1 + below(FUZZ_BYTES - in->n < 8 ? FUZZ_BYTES - in->n : 8);
                memmove(in->b + at + k, in->b + at, in->n - at);
                for (size_t i = 0; i < k; i++) in->b[at + i] = (uint8_t)next_rand();
                in->n += k;
            }
            break;
        case 4: /* delete bytes */
            if (at < in->n) {
                size_t k = 1 + below(in->n - at < 16 ? in->n - at : 16);
                memmove(in->b + at, in->b + at + k, in->n - at - k);
                in->n -= k;
            }
            break;
        case 5: /* truncate */
            in->n = at;
            break;
        case 6: { /* a piece of another seed spliced in */
            const input_t *o = &seeds[below(n_seeds)];
            size_t from = below(o->n), k = below(o->n - from + 1);
            if (at + k > FUZZ_BYTES) k = FUZZ_BYTES - at;
            memmove(in->b + at, o->b + from, k);
            if (at + k > in->n) in->n = at + k;
            break;
        }
        case 7: /* a chunk repeated */
            if (in->n && in->n < FUZZ_BYTES / 2) {
                size_t from = below(in->n), k = 1 + below(in->n - from);
                memmove(in->b + in->n, in->b + from, k);
                in->n += k;
            }
            break;
        default: /* a big-endian length or id nudged */
            if (in->n >= 4) {
                size_t i = below(in->n - 3);
                in->b[i + 2] = (uint8_t)(in->b[i + 2] + (int)below(5) - 2);
            }
            break;
        }
    }
}

/* -- targets ---------------------------------------------------------------------------------- */
static void fail(const char *what, const char *target, uint64_t iteration) {
    fprintf(stderr, "native_fuzz: %s: %s at iteration %llu\n", target, what, (unsigned long long)iteration);
    exit(1);
}

static void each_field(void *ctx, const char *name, size_t nl, const char *value, size_t vl) {
    size_t *total = ctx;
    *total += nl + vl;
    if (nl && (name[0] == 0x7f)) *total += 1; /* read every byte handed out */
    if (vl && (value[vl - 1] == 0x7f)) *total += 1;
}

/* The input's first byte says where its first header block ends; the rest is the second. Both are
   decoded in turn by one decoder: how many were accepted. */
static int run_hpack(const input_t *in) {
    if (!in->n) return 0;
    hpack_t hp;
    hpack_init(&hp);
    hpack_result_t res;
    char err[120];
    size_t total = 0;
    int ok = 0;
    const uint8_t *data = in->b + 1;
    size_t m = in->n - 1, cut = in->b[0] % (m + 1);
    size_t bounds[3] = {0, cut, m};
    for (int i = 0; i < 2; i++) {
        if (hpack_decode(&hp, data + bounds[i], bounds[i + 1] - bounds[i], &res, err, sizeof err, each_field, &total) <
            0)
            break;
        ok++;
    }
    hpack_free(&hp);
    return ok;
}

static int listener(struct sockaddr_storage *addr, socklen_t *len) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 || listen(fd, 64) < 0) {
        perror("native_fuzz: listener");
        exit(1);
    }
    *len = sizeof(struct sockaddr_in);
    getsockname(fd, (struct sockaddr *)addr, len);
    return fd;
}

static void drain(int fd) {
    char sink[65536];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
}

/* One request through protocol `target`, answered with `in`; returns its record's status. */
static int32_t run_exchange(int target, const input_t *in, int lfd, const struct sockaddr_storage *addr, socklen_t alen,
                            uint64_t iteration) {
    static const char *names[] = {"http1", "h2-unary", "h2-stream"};
    static char http_request[] = "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    static const uint8_t block[] = {0x83, 0x86, 0x44, 0x01, '/'};
    static const char suffix[] = "\x22\x00";
    Core *c = calloc(1, sizeof(Core));
    if (!c) exit(1);
    memcpy(&c->addr, addr, alen);
    c->addrlen = alen;
    c->st_closed = -1, c->st_refused = -2, c->st_protocol = -3, c->st_unfinished = -4, c->st_dropped = -5;
    c->st_grpc_base = 1000, c->st_stream_error = -6;
    c->n_payloads = 1;
    c->payloads = calloc(1, sizeof(char *));
    c->payload_lens = calloc(1, sizeof(size_t));
    const void *payload = target == P_HTTP1 ? (const void *)http_request : (const void *)GRPC_MESSAGE;
    size_t plen = target == P_HTTP1 ? sizeof http_request - 1 : sizeof GRPC_MESSAGE;
    c->payloads[0] = malloc(plen);
    memcpy(c->payloads[0], payload, plen);
    c->payload_lens[0] = plen;
    c->largest = plen;
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    int rc = target == P_HTTP1    ? http1_setup(c)
             : target == P_UNARY ? h2_unary_setup(c, (const char *)block, sizeof block, 1, 1)
                                  : h2_stream_setup(c, (const char *)block, sizeof block, 1, suffix, 2);
    if (rc < 0 || c->ep < 0) exit(1);
    c->mode = MODE_CLOSED;
    c->arg_share = 1;
    c->ops->prepare(c);
    c->in_flight++;
    c->ops->submit(c, now_ns()); /* not active: its end starts no other request */
    if (c->n_conns != 1) fail("no connection was opened", names[target], iteration);
    conn_t *k = c->conns[0];
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    int s = poll(&pfd, 1, 5000) == 1 ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
    if (s < 0) fail("accept failed", names[target], iteration);
    c->ops->connected(c, k);
    if (target != P_HTTP1) { /* the server's SETTINGS: the connection settles, the request goes out */
        uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
        if (write(s, settings, sizeof settings) != sizeof settings) fail("write failed", names[target], iteration);
        c->ops->event(c, k, EPOLLIN);
    }
    drain(s);
    size_t off = 0;
    while (off < in->n) {
        ssize_t w = write(s, in->b + off, in->n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(s, SHUT_WR);
    for (int i = 0; !k->dead && i < 1000; i++) {
        c->ops->event(c, k, EPOLLIN | EPOLLOUT);
        drain(s);
    }
    if (!k->dead) fail("the connection was never given up", names[target], iteration);
    if (c->n_recs != 1 || c->in_flight != 0) {
        fprintf(stderr, "native_fuzz: %s: %zu records, %ld in flight\n", names[target], c->n_recs, c->in_flight);
        fail("one request did not end as exactly one record", names[target], iteration);
    }
    int32_t status = c->recs[0].status;
    close(s);
    core_free(c);
    free(c);
    for (int x; (x = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0;) close(x); /* replacements it dialled */
    return status;
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 1000;
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    if (!rng) rng = 1;
    signal(SIGPIPE, SIG_IGN);
    hpack_setup();
    struct sockaddr_storage addr;
    socklen_t alen;
    int lfd = listener(&addr, &alen);
    fcntl(lfd, F_SETFL, O_NONBLOCK);
    static input_t seeds[6], hseeds[8], cur;
    static const char *names[] = {"http1", "h2-unary", "h2-stream"};

    /* http1_head and HPACK on their own */
    size_t nh = seeds_for(P_HTTP1, seeds);
    long heads = 0, framed = 0;
    for (long i = 0; i < iterations * 20; i++) {
        cur = seeds[below(nh)];
        if (i >= (long)nh) mutate(&cur, seeds, nh);
        size_t head;
        ssize_t body;
        int code;
        int r = http1_head((const char *)cur.b, cur.n, &head, &body, &code);
        if (r > 0 && (head > cur.n || body < 0)) fail("a head past its input", "http1-head", (uint64_t)i);
        framed += r > 0;
        heads++;
    }
    const uint8_t *blocks[] = {B_HEADERS, B_TRAILERS, B_ERROR, B_INDEXED, B_SIZE, B_HUFFMAN};
    const size_t lens[] = {sizeof B_HEADERS, sizeof B_TRAILERS, sizeof B_ERROR, sizeof B_INDEXED, sizeof B_SIZE,
                           sizeof B_HUFFMAN};
    size_t nb = 0;
    for (size_t i = 0; i < 6; i++, nb++) { /* one block, or (the indexed one) two: the entries, then their indices */
        hseeds[nb].n = 0;
        uint8_t lead = (uint8_t)(i == 3 ? lens[0] + lens[1] : 0);
        put(&hseeds[nb], &lead, 1);
        if (i == 3) {
            put(&hseeds[nb], B_HEADERS, lens[0]);
            put(&hseeds[nb], B_TRAILERS, lens[1]);
        }
        put(&hseeds[nb], blocks[i], lens[i]);
    }
    for (size_t i = 0; i < nb; i++)
        if (run_hpack(&hseeds[i]) != 2) fail("a well-formed header block was rejected", "hpack", i);
    long decoded = 0;
    for (long i = 0; i < iterations * 20; i++) {
        cur = hseeds[below(nb)];
        mutate(&cur, hseeds, nb);
        decoded += run_hpack(&cur);
    }
    printf("http1-head: %ld heads, %ld framed\n", heads, framed);
    printf("hpack: %ld runs, %ld blocks decoded\n", iterations * 20, decoded);

    /* whole exchanges through each protocol */
    for (int target = P_HTTP1; target <= P_STREAM; target++) {
        size_t n = seeds_for(target, seeds);
        for (size_t i = 0; i < n; i++) {
            int32_t status = run_exchange(target, &seeds[i], lfd, &addr, alen, i);
            int want = target == P_HTTP1 && i == 1   ? 400   /* its status */
                       : target == P_HTTP1 && i >= 3 ? -3 /* unframed: a protocol error */
                       : target == P_UNARY && i == 1 ? 1003 /* grpc-status 3 */
                                                      : 0;
            if (status != want) {
                fprintf(stderr, "native_fuzz: %s seed %zu ended %d, not %d\n", names[target], i, status, want);
                fail("an unmutated seed did not end as it should", names[target], i);
            }
        }
        long ok = 0;
        for (long i = 0; i < iterations; i++) {
            cur = seeds[below(n)];
            mutate(&cur, seeds, n);
            ok += run_exchange(target, &cur, lfd, &addr, alen, (uint64_t)i) == 0;
        }
        printf("%s: %ld exchanges, %ld completed\n", names[target], iterations, ok);
    }
    close(lfd);
    return 0;
}
