/* HPACK decoding (RFC 7541), see _native_hpack.h. Runs on the sender thread; no Python here. */
#include "_native_hpack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_native_hpack_tables.h"

static int parse_status(const char *v, size_t n) {
    if (n == 0 || n > 9) return -2;
    int out = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -2;
        out = out * 10 + (v[i] - '0');
    }
    return out;
}

static int is(const char *name, size_t nl, const char *want) {
    size_t wl = strlen(want);
    return nl == wl && memcmp(name, want, wl) == 0;
}

static void note_field(hpack_result_t *out, const char *name, size_t nl, const char *value, size_t vl) {
    if (nl == 0 || (name[0] != ':' && name[0] != 'g')) return;
    if (is(name, nl, ":status")) {
        out->http_status = parse_status(value, vl);
    } else if (is(name, nl, "grpc-status")) {
        out->grpc_status = parse_status(value, vl);
    } else if (is(name, nl, "grpc-message")) {
        out->has_message = 1;
        out->message_len = vl < HPACK_MESSAGE_BYTES ? vl : HPACK_MESSAGE_BYTES;
        memcpy(out->message, value, out->message_len);
    }
}

#ifndef PERFKIT_HPACK_NGHTTP2
#define RING_ENTRIES (HPACK_DEFAULT_TABLE / 32 + 1) /* an entry costs at least 32 bytes (4.1) */

/* The Huffman code as a binary tree: tree[node][bit] is the next node (> 0), a symbol
   (-(symbol + 1)), or 0 where no code goes. Built once, read-only after. */
static int16_t tree[512][2];

void hpack_setup(void) {
    int nodes = 1;
    memset(tree, 0, sizeof tree);
    for (int sym = 0; sym < 257; sym++) {
        uint32_t code = hpack_huffman_code[sym];
        int bits = hpack_huffman_bits[sym];
        int node = 0;
        for (int i = bits - 1; i > 0; i--) {
            int bit = (code >> i) & 1;
            if (tree[node][bit] == 0) tree[node][bit] = (int16_t)nodes++;
            node = tree[node][bit];
        }
        tree[node][code & 1] = (int16_t)(-(sym + 1));
    }
}

void hpack_init(hpack_t *h) {
    memset(h, 0, sizeof *h);
    h->cap = RING_ENTRIES;
    h->ring = calloc(h->cap, sizeof(hpack_field_t));
    h->max_size = h->allowed = HPACK_DEFAULT_TABLE;
}

static void evict_to(hpack_t *h, size_t limit) {
    while (h->count && h->size > limit) {
        hpack_field_t *e = &h->ring[(h->head + h->count - 1) % h->cap];
        h->size -= e->name_len + e->value_len + 32;
        free(e->name);
        free(e->value);
        e->name = e->value = NULL;
        h->count--;
    }
}

void hpack_free(hpack_t *h) {
    if (h->ring) evict_to(h, 0);
    free(h->ring);
    free(h->scratch);
    h->ring = NULL;
    h->scratch = NULL;
}

static char *copy(const char *p, size_t n) {
    char *out = malloc(n ? n : 1);
    if (out && n) memcpy(out, p, n); /* an empty string may come from an unallocated scratch */
    return out;
}

/* 4.4: a new entry evicts the oldest until it fits; one larger than the table empties it. */
static int insert(hpack_t *h, const char *name, size_t nl, const char *value, size_t vl) {
    size_t cost = nl + vl + 32;
    if (cost > h->max_size) {
        evict_to(h, 0);
        return 0;
    }
    evict_to(h, h->max_size - cost);
    if (h->count == h->cap) return -1; /* cannot happen: max_size <= allowed bounds the count */
    char *n = copy(name, nl), *v = copy(value, vl);
    if (!n || !v) {
        free(n);
        free(v);
        return -1;
    }
    h->head = (h->head + h->cap - 1) % h->cap;
    h->ring[h->head] = (hpack_field_t){n, v, nl, vl};
    h->count++;
    h->size += cost;
    return 0;
}

/* Index (2.3.3): 1-61 the static table, then the dynamic table from its newest entry. */
static int lookup(hpack_t *h, uint64_t index, const char **name, size_t *nl, const char **value, size_t *vl) {
    if (index == 0) return -1;
    if (index <= HPACK_STATIC_ENTRIES) {
        *name = hpack_static[index - 1][0];
        *nl = strlen(*name);
        *value = hpack_static[index - 1][1];
        *vl = strlen(*value);
        return 0;
    }
    uint64_t d = index - HPACK_STATIC_ENTRIES - 1;
    if (d >= h->count) return -1;
    hpack_field_t *e = &h->ring[(h->head + d) % h->cap];
    *name = e->name;
    *nl = e->name_len;
    *value = e->value;
    *vl = e->value_len;
    return 0;
}

/* 5.1: an integer with an N-bit prefix. */
static int decode_int(const uint8_t **pp, const uint8_t *end, int prefix, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p >= end) return -1;
    uint64_t max = (1u << prefix) - 1;
    uint64_t v = *p++ & max;
    if (v == max) {
        int shift = 0;
        for (;;) {
            if (p >= end || shift > 28) return -1;
            uint8_t b = *p++;
            v += (uint64_t)(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80)) break;
        }
    }
    *pp = p;
    *out = v;
    return 0;
}

static int reserve(hpack_t *h, size_t need) {
    if (need <= h->scratch_cap) return 0;
    size_t n = h->scratch_cap ? h->scratch_cap : 256;
    while (n < need) n *= 2;
    char *p = realloc(h->scratch, n);
    if (!p) return -1;
    h->scratch = p;
    h->scratch_cap = n;
    return 0;
}

/* 5.2: a string literal, decoded into scratch at offset `at`; its length in *len. */
static int decode_string(hpack_t *h, const uint8_t **pp, const uint8_t *end, size_t at, size_t *len, const char **why) {
    int huffman = **pp & 0x80;
    uint64_t n;
    if (decode_int(pp, end, 7, &n) < 0 || n > (uint64_t)(end - *pp)) {
        *why = "truncated string";
        return -1;
    }
    const uint8_t *p = *pp;
    *pp += n;
    if (!huffman) {
        if (reserve(h, at + n) < 0) return -1;
        if (n) memcpy(h->scratch + at, p, n); /* an empty string: scratch may not be allocated yet */
        *len = n;
        return 0;
    }
    if (reserve(h, at + n * 8 / 5 + 1) < 0) return -1; /* the shortest code is 5 bits */
    char *out = h->scratch + at;
    size_t o = 0;
    int node = 0, pad = 0, ones = 1;
    for (uint64_t i = 0; i < n; i++) {
        for (int b = 7; b >= 0; b--) {
            int bit = (p[i] >> b) & 1;
            int next = tree[node][bit];
            if (next < 0) {
                if (next == -257) {
                    *why = "EOS in a Huffman string";
                    return -1;
                }
                out[o++] = (char)(-next - 1);
                node = pad = 0;
                ones = 1;
            } else if (next == 0) {
                *why = "invalid Huffman code";
                return -1;
            } else {
                node = next;
                pad++;
                ones &= bit;
            }
        }
    }
    if (pad > 7 || !ones) { /* 5.2: padding is the EOS code's most significant bits, under 8 */
        *why = "invalid Huffman padding";
        return -1;
    }
    *len = o;
    return 0;
}

int hpack_decode(hpack_t *h, const uint8_t *p, size_t n, hpack_result_t *out, char *err, size_t err_len,
                 hpack_each_fn each, void *ctx) {
    const uint8_t *end = p + n;
    const char *why = "out of memory";
    out->http_status = out->grpc_status = -1;
    out->has_message = 0;
    out->message_len = 0;
    while (p < end) {
        uint8_t b = *p;
        uint64_t index;
        const char *name, *value;
        size_t nl, vl;
        if (b & 0x80) { /* 6.1 indexed field */
            if (decode_int(&p, end, 7, &index) < 0 || lookup(h, index, &name, &nl, &value, &vl) < 0) {
                why = "invalid index";
                goto fail;
            }
            note_field(out, name, nl, value, vl);
            if (each) each(ctx, name, nl, value, vl);
            continue;
        }
        if ((b & 0xe0) == 0x20) { /* 6.3 dynamic table size update */
            if (decode_int(&p, end, 5, &index) < 0 || index > h->allowed) {
                why = "table size update beyond SETTINGS_HEADER_TABLE_SIZE";
                goto fail;
            }
            h->max_size = (size_t)index;
            evict_to(h, h->max_size);
            continue;
        }
        /* 6.2 literals: with incremental indexing (01), without (0000) or never indexed (0001) */
        int indexing = (b & 0xc0) == 0x40;
        if (decode_int(&p, end, indexing ? 6 : 4, &index) < 0) {
            why = "truncated field";
            goto fail;
        }
        size_t name_at = 0, value_at;
        if (index) {
            const char *iv;
            size_t ivl;
            if (lookup(h, index, &name, &nl, &iv, &ivl) < 0) {
                why = "invalid index";
                goto fail;
            }
            if (reserve(h, nl) < 0) goto fail;
            if (nl) memcpy(h->scratch, name, nl);
        } else if (decode_string(h, &p, end, 0, &nl, &why) < 0) {
            goto fail;
        }
        value_at = nl;
        if (decode_string(h, &p, end, value_at, &vl, &why) < 0) goto fail;
        name = h->scratch + name_at;
        value = h->scratch + value_at;
        note_field(out, name, nl, value, vl);
        if (each) each(ctx, name, nl, value, vl);
        if (indexing && insert(h, name, nl, value, vl) < 0) goto fail;
    }
    return 0;
fail:
    snprintf(err, err_len, "HPACK: %s", why);
    return -1;
}
#else
/* The prototype measured against the decoder above (CONTRIBUTING: "HTTP/2 and HPACK: hand-written
   or library"): libnghttp2's inflater, built with PERFKIT_HPACK=nghttp2 pip install -e . */
#include <nghttp2/nghttp2.h>

void hpack_setup(void) {
}

void hpack_init(hpack_t *h) {
    memset(h, 0, sizeof *h);
    nghttp2_hd_inflater *inflater = NULL;
    if (nghttp2_hd_inflate_new(&inflater) == 0) h->inflater = inflater;
}

void hpack_free(hpack_t *h) {
    if (h->inflater) nghttp2_hd_inflate_del((nghttp2_hd_inflater *)h->inflater);
    h->inflater = NULL;
}

int hpack_decode(hpack_t *h, const uint8_t *p, size_t n, hpack_result_t *out, char *err, size_t err_len,
                 hpack_each_fn each, void *ctx) {
    nghttp2_hd_inflater *inflater = h->inflater;
    out->http_status = out->grpc_status = -1;
    out->has_message = 0;
    out->message_len = 0;
    if (!inflater) {
        snprintf(err, err_len, "HPACK: out of memory");
        return -1;
    }
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t used = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, p, n, 1);
        if (used < 0) {
            snprintf(err, err_len, "HPACK: %s", nghttp2_strerror((int)used));
            return -1;
        }
        p += used;
        n -= (size_t)used;
        if (flags & NGHTTP2_HD_INFLATE_EMIT) {
            note_field(out, (const char *)nv.name, nv.namelen, (const char *)nv.value, nv.valuelen);
            if (each) each(ctx, (const char *)nv.name, nv.namelen, (const char *)nv.value, nv.valuelen);
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inflater);
            return 0;
        }
        if (!used && !(flags & NGHTTP2_HD_INFLATE_EMIT)) {
            snprintf(err, err_len, "HPACK: the inflater stopped");
            return -1;
        }
    }
}
#endif
