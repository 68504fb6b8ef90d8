/* The compiled sender's protocols, as the CPython type (_native.c) picks one: each setup sets
 * `c->ops` and `c->proto`; 0, or -1 when out of memory. And the protocols' pure parsers, which the
 * fuzz harness (tests/native_fuzz.c) drives directly. */
#ifndef PERFKIT_NATIVE_PROTOCOLS_H
#define PERFKIT_NATIVE_PROTOCOLS_H

#include "_native_core.h"
#include "_native_http1_head.h"

/* HTTP/1.1 (_native_http1.c; its response heads: _native_http1_head.c) */
int http1_setup(Core *c);

/* unary gRPC over HTTP/2 (_native_h2_unary.c): `block` the request's HPACK header block, payloads
   gRPC messages, over `connections` connections; stream ids from first_sid (odd) */
#define H2_LAST_SID (0x7fffffffu - (1u << 20)) /* past this a gRPC connection winds down (ids are 31 bits) */
int h2_unary_setup(Core *c, const char *block, size_t block_len, int connections, uint32_t first_sid);

/* streamed gRPC (_native_h2_stream.c): one connection, one ModelStreamInfer stream; payloads are
   ModelInferRequests, each sent with its id and `suffix` after it */
int h2_stream_setup(Core *c, const char *block, size_t block_len, uint32_t first_sid, const char *suffix,
                    size_t suffix_len);

#endif
