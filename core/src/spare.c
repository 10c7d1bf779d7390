/*
** spare.c -- recycled blocks of one size, for one thread (see spare.h).
*/
#include <stdlib.h>
#include <string.h>

#include "spare.h"

#if defined(__SANITIZE_ADDRESS__)
#define SPARE_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARE_OFF 1
#endif
#endif
#ifndef SPARE_OFF
#define SPARE_OFF 0
#endif

void dx__spare_init(dx__spare_t *s, size_t size, size_t max) {
  s->head = NULL;
  s->n = 0;
  s->max = SPARE_OFF ? 0 : max;
  s->size = size < sizeof(void *) ? sizeof(void *) : size;
}

void *dx__spare_calloc_head(dx__spare_t *s, size_t zeroed) {
  void *p = s->head;
  size_t n = zeroed < s->size ? zeroed : s->size;
  if (!p) {
    /* malloc and clear the head only: calloc clears the whole block (an activity record's
    ** tail is 1 KB of error texts) and took ~970 instructions on this path, malloc ~350 */
    if (n == s->size) return calloc(1, s->size);
    if ((p = malloc(s->size)) != NULL) memset(p, 0, n);
    return p;
  }
  memcpy(&s->head, p, sizeof p); /* the next kept block */
  s->n--;
  memset(p, 0, n);
  return p;
}

void *dx__spare_calloc(dx__spare_t *s) { return dx__spare_calloc_head(s, s->size); }

void dx__spare_free(dx__spare_t *s, void *p) {
  if (!p) return;
  if (s->n >= s->max) {
    free(p);
    return;
  }
  memcpy(p, &s->head, sizeof p);
  s->head = p;
  s->n++;
}

void dx__spare_drain(dx__spare_t *s) {
  while (s->head) {
    void *p = s->head;
    memcpy(&s->head, p, sizeof p);
    free(p);
  }
  s->n = 0;
}
