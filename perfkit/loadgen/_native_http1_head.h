/* HTTP/1.1 response heads (_native_http1_head.c): a leaf parser, no sender types. */
#ifndef PERFKIT_NATIVE_HTTP1_HEAD_H
#define PERFKIT_NATIVE_HTTP1_HEAD_H

#include <stddef.h>
#include <sys/types.h>

/* A response head at the front of [p, p+n): 1 with its length up to the blank line, its body's
   length (Content-Length) and its status code; 0 while it is not whole; -1 when it is whole but
   unframed (no Content-Length, or too short for a status line). */
int http1_head(const char *p, size_t n, size_t *head, ssize_t *body, int *code);

#endif
