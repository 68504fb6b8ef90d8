/* The fields of a ModelStreamInferResponse the compiled stream sender reads (_native_h2_stream.c),
 * as `_stream_grpc.scan_response` reads them: a leaf, no sender types. */
#ifndef PERFKIT_NATIVE_PB_H
#define PERFKIT_NATIVE_PB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *err; /* error_message, when not empty */
    size_t err_len;
    int has_id;
    uint64_t id;
    int outputs, final;
} pb_response_t;

/* Its error_message (field 1), and its infer_response's (field 2) id (3, a decimal counter: any
   other id matches no request), whether it has outputs (5) and its triton_final_response flag (a
   parameter, 4); 0, or -1 when the message is not protobuf. */
int pb_scan_response(const uint8_t *m, size_t n, pb_response_t *s);

#endif
