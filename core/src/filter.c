/*
** filter.c -- the fetch filter (provider.h dx_fetch_filter_t): what a worker takes from the
** queues (activity tags, orchestrations it can run). Every provider answers "may this worker
** take that?" through these helpers, so the rules live in one place.
*/
#include <stdlib.h>
#include <string.h>

#include "duroxide/provider.h"
#include "util.h"

int dx_fetch_filter_accepts_tag(const dx_fetch_filter_t *f, const char *tag) {
  size_t i;
  if (!tag) return !f || f->untagged;
  if (!f) return 0;
  for (i = 0; i < f->n_tags; i++)
    if (strcmp(f->tags[i], tag) == 0) return 1;
  return 0;
}

int dx_fetch_filter_accepts_orch(const dx_fetch_filter_t *f, const char *name,
                                 const char *version) {
  size_t i;
  if (!f || !f->capabilities_set || !name) return 1;
  for (i = 0; i < f->n_capabilities; i++)
    if (strcmp(f->capabilities[i].name, name) == 0 &&
        (!version || strcmp(f->capabilities[i].version, version) == 0))
      return 1;
  return 0;
}

void dx_orch_capabilities_free(dx_orch_capability_t *caps, size_t n) {
  size_t i;
  for (i = 0; caps && i < n; i++) {
    free((char *)caps[i].name);
    free((char *)caps[i].version);
  }
  free(caps);
}

void dx_fetch_filter_free(dx_fetch_filter_t *f) {
  size_t i;
  if (!f) return;
  for (i = 0; i < f->n_tags; i++) free((char *)f->tags[i]);
  free((void *)f->tags);
  dx_orch_capabilities_free((dx_orch_capability_t *)f->capabilities, f->n_capabilities);
  free(f);
}

int dx_fetch_filter_copy(const dx_fetch_filter_t *src, dx_fetch_filter_t **out,
                         dx_error_t *err) {
  dx_fetch_filter_t *f;
  const char **tags = NULL;
  dx_orch_capability_t *caps = NULL;
  size_t i;
  *out = NULL;
  if (src->n_tags > DX_MAX_WORKER_TAGS)
    return dx_error_set(err, DX_EINVAL, "a worker accepts at most %d tags, got %zu",
                        DX_MAX_WORKER_TAGS, src->n_tags);
  for (i = 0; i < src->n_tags; i++) {
    size_t n = src->tags[i] ? strlen(src->tags[i]) : 0;
    if (n == 0) return dx_error_set(err, DX_EINVAL, "worker tag %zu is empty", i + 1);
    if (n > DX_MAX_TAG_BYTES)
      return dx_error_set(err, DX_EINVAL, "worker tag %zu is %zu bytes; the limit is %d bytes",
                          i + 1, n, DX_MAX_TAG_BYTES);
  }
  for (i = 0; i < src->n_capabilities; i++)
    if (!src->capabilities[i].name || !src->capabilities[i].version)
      return dx_error_set(err, DX_EINVAL, "orchestration capability %zu lacks a name or a "
                          "version", i + 1);
  f = calloc(1, sizeof *f);
  if (f && src->n_tags) f->tags = tags = calloc(src->n_tags, sizeof *tags);
  if (f && src->n_capabilities)
    f->capabilities = caps = calloc(src->n_capabilities, sizeof *caps);
  if (!f || (src->n_tags && !tags) || (src->n_capabilities && !caps)) goto nomem;
  f->untagged = src->untagged;
  f->capabilities_set = src->capabilities_set;
  for (; f->n_tags < src->n_tags; f->n_tags++)
    if (!(tags[f->n_tags] = dx__strdup(src->tags[f->n_tags]))) goto nomem;
  for (; f->n_capabilities < src->n_capabilities; f->n_capabilities++) {
    const dx_orch_capability_t *c = &src->capabilities[f->n_capabilities];
    caps[f->n_capabilities].name = dx__strdup(c->name);
    caps[f->n_capabilities].version = dx__strdup(c->version);
    if (!caps[f->n_capabilities].name || !caps[f->n_capabilities].version) {
      f->n_capabilities++; /* freed with the rest */
      goto nomem;
    }
  }
  *out = f;
  return DX_OK;
nomem:
  dx_fetch_filter_free(f);
  return dx_error_set(err, DX_ENOMEM, "out of memory copying the fetch filter");
}
