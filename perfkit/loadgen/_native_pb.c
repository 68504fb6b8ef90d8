/* Protobuf fields of a ModelStreamInferResponse, see _native_pb.h. */
#include "_native_pb.h"

#include <string.h>

static int varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; *pos < n && shift < 64; shift += 7) {
        uint8_t b = p[(*pos)++];
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The protobuf field at p[*pos]: its number and wire type, a length-delimited one's bytes, a
   varint's value; -1 if malformed. */
static int next_field(const uint8_t *p, size_t n, size_t *pos, uint64_t *num, int *wt, const uint8_t **val,
                      size_t *vlen, uint64_t *vint) {
    uint64_t tag, len;
    if (varint(p, n, pos, &tag) < 0) return -1;
    *num = tag >> 3;
    *wt = (int)(tag & 7);
    switch (*wt) {
    case 0:
        return varint(p, n, pos, vint);
    case 1:
        if (n - *pos < 8) return -1;
        *pos += 8;
        return 0;
    case 5:
        if (n - *pos < 4) return -1;
        *pos += 4;
        return 0;
    case 2:
        if (varint(p, n, pos, &len) < 0 || len > n - *pos) return -1;
        *val = p + *pos;
        *vlen = (size_t)len;
        *pos += (size_t)len;
        return 0;
    default:
        return -1;
    }
}

/* ModelInferResponse.parameters entry {1: key, 2: InferParameter{1: bool}}: the final flag, if it is one. */
static int final_flag(const uint8_t *p, size_t n, int *final) {
    static const char key[] = "triton_final_response";
    size_t pos = 0, vlen = 0;
    const uint8_t *val = NULL, *value = NULL;
    size_t value_len = 0;
    uint64_t num, vint = 0;
    int wt, is_final = 0;
    while (pos < n) {
        if (next_field(p, n, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 2) is_final = vlen == sizeof key - 1 && memcmp(val, key, vlen) == 0;
        if (num == 2 && wt == 2) value = val, value_len = vlen;
    }
    if (!is_final) return 0;
    int flag = 0;
    for (pos = 0; value && pos < value_len;) {
        if (next_field(value, value_len, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 0) flag = vint != 0;
    }
    *final = flag;
    return 0;
}

int pb_scan_response(const uint8_t *m, size_t n, pb_response_t *s) {
    memset(s, 0, sizeof *s);
    size_t pos = 0, vlen = 0, rlen = 0;
    const uint8_t *val = NULL, *resp = NULL;
    uint64_t num, vint;
    int wt;
    while (pos < n) {
        if (next_field(m, n, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 1 && wt == 2) s->err = (const char *)val, s->err_len = vlen;
        if (num == 2 && wt == 2) resp = val, rlen = vlen;
    }
    for (pos = 0; resp && pos < rlen;) {
        if (next_field(resp, rlen, &pos, &num, &wt, &val, &vlen, &vint) < 0) return -1;
        if (num == 3 && wt == 2) { /* our ids are decimal counters: anything else matches no request */
            s->has_id = vlen > 0 && vlen < 20 && (vlen == 1 || val[0] != '0');
            s->id = 0;
            for (size_t i = 0; i < vlen && s->has_id; i++) {
                s->has_id = val[i] >= '0' && val[i] <= '9';
                s->id = s->id * 10 + (uint64_t)(val[i] - '0');
            }
        } else if (num == 5 && wt == 2) {
            s->outputs = 1;
        } else if (num == 4 && wt == 2) {
            if (final_flag(val, vlen, &s->final) < 0) return -1;
        }
    }
    return 0;
}
