/* HTTP/1.1 response heads, for the compiled sender's HTTP/1.1 protocol (_native_http1.c): where a
 * head ends, its status code and its Content-Length. A leaf: no sender types, nothing called. */
#include "_native_http1_head.h"

#include <limits.h>

static const char *find_crlf2(const char *p, size_t n) {
    for (size_t i = 3; i < n; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') return p + i - 3;
    return NULL;
}

/* Content-Length's value in the header block [p, p+n), or -1. */
static ssize_t content_length(const char *p, size_t n) {
    static const char key[] = "\r\ncontent-length:";
    size_t kl = sizeof key - 1;
    for (size_t i = 0; i + kl <= n; i++) {
        size_t j = 0;
        while (j < kl) {
            char ch = p[i + j];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            if (ch != key[j]) break;
            j++;
        }
        if (j < kl) continue;
        size_t v = i + kl;
        while (v < n && p[v] == ' ') v++;
        ssize_t out = 0;
        int digits = 0;
        while (v < n && p[v] >= '0' && p[v] <= '9') {
            if (out > (SSIZE_MAX - 9) / 10) return -1; /* past any buffer: unframed */
            out = out * 10 + (p[v++] - '0');
            digits++;
        }
        return digits ? out : -1;
    }
    return -1;
}

int http1_head(const char *p, size_t n, size_t *head, ssize_t *body, int *code) {
    const char *end = find_crlf2(p, n);
    if (!end) return 0;
    *head = (size_t)(end - p);
    *body = content_length(p, *head);
    if (*body < 0 || *head < 12) return -1;
    *code = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    return 1;
}
