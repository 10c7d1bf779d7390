/*
** json.c -- canonical JSON payloads (API.md §1) and small JSON builders, via jansson.
**
** Canonical form is jansson's dump with JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY:
** - keys sorted bytewise (jansson compares them like memcmp, which for UTF-8 is code point
**   order);
** - integers stay integers; reals are written with 17 significant digits and always carry a
**   '.' or an exponent ("1.0", "1e20", "0.10000000000000001"), so they parse back to the same
**   double and stay reals; -0.0 is kept as "-0.0";
** - strings are UTF-8 with only the required escapes; "\u0000" is allowed in values (Lua
**   strings may hold NUL bytes) but not in keys (jansson refuses them).
** NaN and infinity cannot be written in JSON, and jansson refuses numbers it cannot represent
** (integers outside int64, reals that overflow) as invalid JSON.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "codec.h"
#include "jsonout.h"
#include "util.h"

/* Parse flags shared by every reader of payloads; dump flags define the canonical form. */
#define LOAD_FLAGS (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)
#define DUMP_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)

/* jansson writes reals with 17 significant digits (0.1 -> 0.10000000000000001): exact but
** noisy. Rewrite each real token to the shortest text that reads back to the same double:
** plain decimals for exponents -6..16 ("0.1", "100.0", "0.00001"), else "1e20", "5e-324".
** The mapping is a function of the double alone, so output stays canonical. */
static size_t shortest_real(const char *tok, size_t n, char *out) {
  char buf[40], *e;
  double d;
  int p, exp10;
  size_t m;
  if (n >= sizeof buf) return 0;
  memcpy(buf, tok, n);
  buf[n] = 0;
  d = strtod(buf, NULL);
  for (p = 1; p < 17; p++) { /* fewest significant digits that read back exactly */
    snprintf(out, 40, "%.*e", p - 1, d);
    if (strtod(out, NULL) == d) break;
  }
  snprintf(out, 40, "%.*e", p - 1, d);
  e = strchr(out, 'e');
  exp10 = e ? atoi(e + 1) : 0;
  if (d == 0 || (exp10 >= -6 && exp10 <= 16)) {
    snprintf(out, 40, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, d);
    if (!strchr(out, '.')) strcat(out, ".0"); /* a real stays a real */
  } else {
    /* mantissa "d.ddd", exponent without '+' or leading zeros: "1e20", "2.5e-7" */
    char *w = e + 1, *r = e + 1;
    if (*r == '+') r++;
    else if (*r == '-') *w++ = *r++;
    while (*r == '0' && r[1]) r++;
    memmove(w, r, strlen(r) + 1);
  }
  m = strlen(out);
  return m <= n ? m : 0; /* never longer than jansson's form (keeps the size check valid) */
}

static void shorten_reals(char *s) {
  char *r = s, *w = s;
  int in_str = 0;
  while (*r) {
    if (in_str) {
      if (*r == '\\' && r[1]) *w++ = *r++;
      else if (*r == '"') in_str = 0;
      *w++ = *r++;
    } else if (*r == '"') {
      in_str = 1;
      *w++ = *r++;
    } else if (*r == '-' || (*r >= '0' && *r <= '9')) {
      size_t n = strspn(r, "-+0123456789.eE"), m = 0;
      char out[40];
      if (memchr(r, '.', n) || memchr(r, 'e', n) || memchr(r, 'E', n))
        m = shortest_real(r, n, out); /* a real; integers are kept as they are */
      if (m) memcpy(w, out, m), w += m;
      else memmove(w, r, n), w += n;
      r += n;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
}

/* jansson's text for a real (its dtostr: "%.17g", ".0" added when there is no '.' or
** exponent, the exponent without '+' or leading zeros). */
static size_t jansson_real(double d, char *out) {
  int n = snprintf(out, 40, "%.17g", d);
  char *start, *end;
  if (n < 0 || n >= 36) return 0;
  if (!strchr(out, '.') && !strchr(out, 'e')) {
    memcpy(out + n, ".0", 3);
    n += 2;
  }
  if ((start = strchr(out, 'e')) != NULL) {
    start++;
    end = start + 1;
    if (*start == '-') start++;
    while (*end == '0') end++;
    if (end != start) {
      memmove(start, end, (size_t)n - (size_t)(end - out) + 1);
      n -= (int)(end - start);
    }
  }
  return (size_t)n;
}

/* An integral double below 2^53 in magnitude: every shorter rounding of it is another
** integer that reads back as another double, so shortest_real ends at all its digits, in
** plain notation, plus ".0" ("100.0", "-0.0"): written here without printf/strtod. */
static size_t integral_real(double d, char out[40]) {
  char tmp[24], *q = tmp + sizeof tmp;
  unsigned long long u = (unsigned long long)(d < 0 ? -d : d);
  size_t n;
  do {
    *--q = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (signbit(d)) *--q = '-';
  n = (size_t)(tmp + sizeof tmp - q);
  memcpy(out, q, n);
  memcpy(out + n, ".0", 3);
  return n + 2;
}

size_t dx__json_real(double d, char out[40]) {
  char tok[40];
  size_t n, m, i;
  if (d > -9007199254740992.0 && d < 9007199254740992.0 && d == (double)(long long)d)
    return integral_real(d, out);
  if ((n = jansson_real(d, tok)) == 0) return 0;
  for (i = 0; i < n; i++) /* another locale's decimal point: leave it to jansson */
    if (!strchr("-0123456789.e", tok[i])) return 0;
  if ((m = shortest_real(tok, n, out)) != 0) return m;
  memcpy(out, tok, n + 1);
  return n;
}

char *dx__json_dump(const json_t *j) {
  char *s = json_dumps(j, DUMP_FLAGS);
  if (s) shorten_reals(s);
  return s;
}
/* Same limit as the Lua value codec (bindings/lua/value.h), so any accepted payload can be
** handed to Lua code and encoded back. */
#define MAX_DEPTH 100

/* Deepest container nesting of v (scalars are 0). Stops counting past `limit`. */
static int json_depth(json_t *v, int limit) {
  int d = 0;
  if (limit < 0) return 1;
  if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
      int c = json_depth(x, limit - 1);
      if (c > d) d = c;
      if (d > limit) break;
    }
    return d + 1;
  }
  if (json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
      int c = json_depth(x, limit - 1);
      if (c > d) d = c;
      if (d > limit) break;
    }
    return d + 1;
  }
  return 0;
}

int dx__json_canonical(const char *text, size_t len, char **out, dx_error_t *err) {
  json_error_t je;
  json_t *root;
  char *s;
  size_t n;
  *out = NULL;
  if (len > DX_MAX_PAYLOAD_BYTES)
    return dx_error_set(err, DX_ETOOBIG, "payload is %zu bytes; the limit is %d bytes", len,
                        DX_MAX_PAYLOAD_BYTES);
  root = json_loadb(text ? text : "", text ? len : 0, LOAD_FLAGS, &je);
  if (!root)
    return dx_error_set(err, DX_EJSON, "invalid JSON at line %d, column %d: %s", je.line,
                        je.column, je.text);
  if (json_depth(root, MAX_DEPTH) > MAX_DEPTH) {
    json_decref(root);
    return dx_error_set(err, DX_EJSON, "invalid JSON: nested deeper than %d levels", MAX_DEPTH);
  }
  s = dx__json_dump(root);
  json_decref(root);
  if (!s) return dx_error_set(err, DX_ENOMEM, "out of memory");
  /* Canonical text can be longer than the input ("1e2" -> "100.0"): check what is stored. */
  n = strlen(s);
  if (n > DX_MAX_PAYLOAD_BYTES) {
    free(s);
    return dx_error_set(err, DX_ETOOBIG, "payload is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_PAYLOAD_BYTES);
  }
  *out = s;
  return DX_OK;
}

/* A JSON string node for arbitrary C text: invalid UTF-8 bytes become U+FFFD, because
** these strings are often messages from outside (Lua errors may carry binary). */
json_t *dx__json_text(const char *s) {
  size_t n = strlen(s), o;
  char *fixed;
  json_t *j = json_stringn(s, n);
  if (j) return j;
  if (!(fixed = dx__utf8_fix(s, n, &o))) return NULL;
  j = json_stringn(fixed, o);
  free(fixed);
  return j;
}

static char *dump_and_free(json_t *j) {
  char *s;
  if (!j) return NULL;
  s = dx__json_dump(j);
  json_decref(j);
  return s;
}

char *dx__json_quote(const char *s) {
  return dump_and_free(s ? dx__json_text(s) : json_null());
}

char *dx__failure_to_json(const dx_failure_t *f) {
  json_t *o = json_object();
  int bad;
  if (!o) return NULL;
  bad = json_object_set_new(o, "category", json_string(dx__category_name(f->category)));
  if (f->kind) bad |= json_object_set_new(o, "kind", dx__json_text(f->kind));
  bad |= json_object_set_new(o, "message", dx__json_text(f->message ? f->message : ""));
  if (bad) { /* set_new consumes the value even on failure; only o is left */
    json_decref(o);
    return NULL;
  }
  return dump_and_free(o);
}

static const char *const category_names[] = {
  [DX_CAT_NONE] = "",
  [DX_CAT_APPLICATION] = "application",
  [DX_CAT_INFRASTRUCTURE] = "infrastructure",
  [DX_CAT_CONFIGURATION] = "configuration",
  [DX_CAT_POISON] = "poison",
};

const char *dx__category_name(int category) {
  if (category < 0 || (size_t)category >= sizeof category_names / sizeof category_names[0])
    return "";
  return category_names[category];
}

int dx__category_from_name(const char *name) {
  size_t i;
  if (!name || !*name) return DX_CAT_NONE;
  for (i = 1; i < sizeof category_names / sizeof category_names[0]; i++)
    if (strcmp(name, category_names[i]) == 0) return (int)i;
  return DX_CAT_NONE;
}
