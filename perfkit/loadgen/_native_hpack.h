/* HPACK decoding (RFC 7541) for the compiled gRPC sender: what a response's header block says
 * about the call (:status, grpc-status, grpc-message), with the server's dynamic table kept in
 * step (every field is decoded, and the literal-with-indexing ones are inserted). */
#ifndef PERFKIT_NATIVE_HPACK_H
#define PERFKIT_NATIVE_HPACK_H

#include <stddef.h>
#include <stdint.h>

#define HPACK_MESSAGE_BYTES 300 /* the most of a grpc-message kept (the ledger keeps 300) */
#define HPACK_DEFAULT_TABLE 4096 /* SETTINGS_HEADER_TABLE_SIZE: perfkit never advertises another */

typedef struct {
    char *name, *value;
    size_t name_len, value_len;
} hpack_field_t;

typedef struct {
    hpack_field_t *ring; /* dynamic table: ring[(head + i) % cap] is entry i, 0 the newest */
    size_t head, count, cap;
    size_t size, max_size, allowed; /* bytes (RFC 7541 4.1), the encoder's limit, ours */
    char *scratch; /* decoded name and value of the field at hand */
    size_t scratch_cap;
    void *inflater; /* built with PERFKIT_HPACK=nghttp2 (a measured prototype): libnghttp2's, in place of the above */
} hpack_t;

/* What a header block says; -1: the field was absent. */
typedef struct {
    int http_status;
    int grpc_status;
    int has_message;
    size_t message_len;
    char message[HPACK_MESSAGE_BYTES];
} hpack_result_t;

void hpack_setup(void); /* once, before any decoding: builds the Huffman decoding tree */
void hpack_init(hpack_t *h);
void hpack_free(hpack_t *h);
/* Called with every field decoded, in order (tests look at them all). */
typedef void (*hpack_each_fn)(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len);

/* Decode one complete header block; 0, or -1 with a reason in err (the connection is then
   unusable: the tables are out of step). `each` may be NULL. */
int hpack_decode(hpack_t *h, const uint8_t *p, size_t n, hpack_result_t *out, char *err, size_t err_len,
                 hpack_each_fn each, void *ctx);

#endif
