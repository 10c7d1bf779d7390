/*
** pattern.c -- Lua pattern matching (string.find, match, gmatch, gsub) that orchestration
** code cannot use to hang the worker.
**
** The stock functions match in C, where the instruction-count hook never fires: a
** backtracking pattern (("a?"):rep(30) .. ("a"):rep(30)) or a quadratic plain find runs for
** minutes inside one call. These replacements implement the same patterns (Lua 5.4 manual
** §6.4.1, with the stock library's limits and error messages) but count their steps and
** charge them to the running turn's instruction budget (budget.c), raising the same sticky
** budget error when it runs out. They take over only while orchestration code runs
** (S->in_orchestration); activities and load-time code call the stock functions (through
** charged.c's wrappers). Arguments are checked here in both cases, so the errors name the
** function the same way.
*/
#include <ctype.h>
#include <string.h>

#include "dxlua.h"

#define MAX_CAPTURES 32 /* the stock library's limits (LUA_MAXCAPTURES, MAXCCALLS) */
#define MAX_DEPTH 200
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)
#define CHARGE_EVERY 4096 /* steps counted locally before they reach the budget */
#define BYTES_PER_STEP 64 /* memchr / memcmp work charged as one step */
#define SPECIALS "^$*+?.([%-"

typedef struct {
  lua_State *L;
  const char *s0, *s_end; /* the subject */
  const char *p_end;      /* end of the pattern */
  int depth_left;         /* nested matches left before "pattern too complex" */
  int ncap;
  struct {
    const char *at;
    ptrdiff_t len; /* or CAP_UNFINISHED / CAP_POSITION */
  } cap[MAX_CAPTURES];
  int64_t steps; /* not yet charged */
} matcher_t;

static int uc(char c) { return (unsigned char)c; }

/* {===== steps =====} */

static void flush(matcher_t *m) {
  int64_t n = m->steps;
  m->steps = 0;
  dxl_budget_charge(m->L, n);
}

static void charge(matcher_t *m, int64_t n) {
  m->steps += n;
  if (m->steps >= CHARGE_EVERY) flush(m);
}

static void matcher_init(matcher_t *m, lua_State *L, const char *s, size_t ls, const char *p_end) {
  m->L = L;
  m->s0 = s;
  m->s_end = s + ls;
  m->p_end = p_end;
  m->steps = 0;
  dxl_budget_charge(L, 0); /* an exhausted budget fails at once */
}

/* {===== single characters =====} */

/* The pattern byte at p, or 0 past its end (the stock library reads the terminator). */
static int pat(const matcher_t *m, const char *p) { return p < m->p_end ? uc(*p) : 0; }

/* c in the class %cl ("%a", "%S"...); any other letter stands for itself. */
static int class_matches(int c, int cl) {
  int r;
  switch (tolower(cl)) {
  case 'a': r = isalpha(c); break;
  case 'c': r = iscntrl(c); break;
  case 'd': r = isdigit(c); break;
  case 'g': r = isgraph(c); break;
  case 'l': r = islower(c); break;
  case 'p': r = ispunct(c); break;
  case 's': r = isspace(c); break;
  case 'u': r = isupper(c); break;
  case 'w': r = isalnum(c); break;
  case 'x': r = isxdigit(c); break;
  case 'z': r = c == 0; break; /* deprecated, still in 5.4 */
  default: return cl == c;
  }
  return isupper(cl) ? !r : r != 0;
}

/* c in the set from '[' at p to its closing ']' at close. */
static int set_matches(int c, const char *p, const char *close) {
  int in = 1;
  p++;
  if (*p == '^') {
    in = 0;
    p++;
  }
  for (; p < close; p++) {
    if (*p == '%') {
      p++;
      if (class_matches(c, uc(*p))) return in;
    } else if (p[1] == '-' && p + 2 < close) {
      if (uc(p[0]) <= c && c <= uc(p[2])) return in;
      p += 2;
    } else if (uc(*p) == c) {
      return in;
    }
  }
  return !in;
}

/* The end of the single-character class starting at p ('.', "%x", "[set]" or a byte). */
static const char *class_end(matcher_t *m, const char *p) {
  int c = uc(*p++);
  if (c == '%') {
    if (p >= m->p_end) luaL_error(m->L, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c == '[') {
    if (pat(m, p) == '^') p++;
    do { /* the first byte is part of the set even when it is ']' */
      if (p >= m->p_end) luaL_error(m->L, "malformed pattern (missing ']')");
      c = uc(*p++);
      if (c == '%' && p < m->p_end) p++;
    } while (pat(m, p) != ']');
    return p + 1;
  }
  return p;
}

/* The subject byte at s is in the class p..ep. */
static int single_matches(const matcher_t *m, const char *s, const char *p, const char *ep) {
  int c;
  if (s >= m->s_end) return 0;
  c = uc(*s);
  switch (*p) {
  case '.': return 1;
  case '%': return class_matches(c, uc(p[1]));
  case '[': return set_matches(c, p, ep - 1);
  default: return uc(*p) == c;
  }
}

/* {===== matching =====} */

static const char *match(matcher_t *m, const char *s, const char *p);

/* Greedy repetition of p..ep from s, then the rest of the pattern after the quantifier. */
static const char *longest(matcher_t *m, const char *s, const char *p, const char *ep) {
  ptrdiff_t n = 0;
  while (single_matches(m, s + n, p, ep)) n++;
  charge(m, n);
  for (; n >= 0; n--) {
    const char *r = match(m, s + n, ep + 1);
    if (r) return r;
  }
  return NULL;
}

/* Lazy repetition ('-'). */
static const char *shortest(matcher_t *m, const char *s, const char *p, const char *ep) {
  for (;;) {
    const char *r = match(m, s, ep + 1);
    if (r) return r;
    if (!single_matches(m, s, p, ep)) return NULL;
    s++;
  }
}

static const char *capture_open(matcher_t *m, const char *s, const char *p, ptrdiff_t what) {
  const char *r;
  if (m->ncap >= MAX_CAPTURES) luaL_error(m->L, "too many captures");
  m->cap[m->ncap].at = s;
  m->cap[m->ncap].len = what;
  m->ncap++;
  if (!(r = match(m, s, p))) m->ncap--;
  return r;
}

static const char *capture_close(matcher_t *m, const char *s, const char *p) {
  const char *r;
  int i = m->ncap - 1;
  while (i >= 0 && m->cap[i].len != CAP_UNFINISHED) i--;
  if (i < 0) luaL_error(m->L, "invalid pattern capture");
  m->cap[i].len = s - m->cap[i].at;
  if (!(r = match(m, s, p))) m->cap[i].len = CAP_UNFINISHED;
  return r;
}

/* %bxy at s: p points at x. */
static const char *balanced(matcher_t *m, const char *s, const char *p) {
  const char *t;
  int depth = 1;
  if (p + 1 >= m->p_end) luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= m->s_end || *s != *p) return NULL;
  for (t = s + 1; t < m->s_end; t++) {
    if (*t == p[1]) {
      if (--depth == 0) break;
    } else if (*t == *p) {
      depth++;
    }
  }
  charge(m, t - s);
  return t < m->s_end ? t + 1 : NULL;
}

/* %1..%9 at s (k the digit). A position capture never matches. */
static const char *backref(matcher_t *m, const char *s, int k) {
  int i = k - '1';
  size_t len;
  if (i < 0 || i >= m->ncap || m->cap[i].len == CAP_UNFINISHED)
    luaL_error(m->L, "invalid capture index %%%d", i + 1);
  if (m->cap[i].len == CAP_POSITION) return NULL;
  len = (size_t)m->cap[i].len;
  charge(m, (int64_t)(len / BYTES_PER_STEP));
  if ((size_t)(m->s_end - s) >= len && memcmp(m->cap[i].at, s, len) == 0) return s + len;
  return NULL;
}

/* Match pattern p (up to m->p_end) at s: the end of the match, or NULL. Recursion (one level
** per capture and per quantifier tried) is bounded like the stock library's. */
static const char *match(matcher_t *m, const char *s, const char *p) {
  const char *r = NULL;
  if (m->depth_left-- == 0) luaL_error(m->L, "pattern too complex");
  for (;;) {
    const char *ep;
    int q;
    charge(m, 1);
    if (p == m->p_end) {
      r = s;
      break;
    }
    if (*p == '(') {
      r = pat(m, p + 1) == ')' ? capture_open(m, s, p + 2, CAP_POSITION)
                               : capture_open(m, s, p + 1, CAP_UNFINISHED);
      break;
    }
    if (*p == ')') {
      r = capture_close(m, s, p + 1);
      break;
    }
    if (*p == '$' && p + 1 == m->p_end) { /* '$' elsewhere is an ordinary byte */
      r = s == m->s_end ? s : NULL;
      break;
    }
    if (*p == '%') {
      int k = pat(m, p + 1);
      if (k == 'b') {
        if (!(s = balanced(m, s, p + 2))) break;
        p += 4;
        continue;
      }
      if (k == 'f') {
        const char *set = p + 2;
        int before, here;
        if (pat(m, set) != '[') luaL_error(m->L, "missing '[' after '%%f' in pattern");
        ep = class_end(m, set);
        before = s == m->s0 ? 0 : uc(s[-1]);
        here = s < m->s_end ? uc(*s) : 0;
        if (set_matches(before, set, ep - 1) || !set_matches(here, set, ep - 1)) break;
        p = ep;
        continue;
      }
      if (k >= '0' && k <= '9') {
        if (!(s = backref(m, s, k))) break;
        p += 2;
        continue;
      }
    }
    /* a single-character class, maybe followed by a quantifier */
    ep = class_end(m, p);
    q = pat(m, ep);
    if (!single_matches(m, s, p, ep)) {
      if (q != '*' && q != '?' && q != '-') break;
      p = ep + 1; /* zero repetitions */
      continue;
    }
    if (q == '?') {
      if ((r = match(m, s + 1, ep + 1))) break;
      p = ep + 1;
      continue;
    }
    if (q == '+' || q == '*') {
      r = longest(m, q == '+' ? s + 1 : s, p, ep);
      break;
    }
    if (q == '-') {
      r = shortest(m, s, p, ep);
      break;
    }
    s++;
    p = ep;
  }
  m->depth_left++;
  return r;
}

/* Match at s from scratch (no captures yet). */
static const char *match_at(matcher_t *m, const char *s, const char *p) {
  m->ncap = 0;
  m->depth_left = MAX_DEPTH;
  return match(m, s, p);
}

/* {===== results =====} */

/* [-0, +(0|1), e] Capture i; with no captures, capture 0 is the whole match s..e. A position
** capture is pushed as an integer. */
static void push_capture(matcher_t *m, int i, const char *s, const char *e) {
  if (i >= m->ncap) {
    if (i != 0) luaL_error(m->L, "invalid capture index %%%d", i + 1);
    lua_pushlstring(m->L, s, (size_t)(e - s));
  } else if (m->cap[i].len == CAP_UNFINISHED) {
    luaL_error(m->L, "unfinished capture");
  } else if (m->cap[i].len == CAP_POSITION) {
    lua_pushinteger(m->L, (lua_Integer)(m->cap[i].at - m->s0) + 1);
  } else {
    lua_pushlstring(m->L, m->cap[i].at, (size_t)m->cap[i].len);
  }
}

/* All captures (the whole match when there are none and s is not NULL); their count. */
static int push_captures(matcher_t *m, const char *s, const char *e) {
  int i, n = (m->ncap == 0 && s) ? 1 : m->ncap;
  luaL_checkstack(m->L, n, "too many captures");
  for (i = 0; i < n; i++) push_capture(m, i, s, e);
  return n;
}

/* A 1-based start position (negative: from the end) as an offset; > len means past the end. */
static size_t start_offset(lua_Integer pos, size_t len) {
  if (pos > 0) return (size_t)pos - 1;
  if (pos == 0 || pos < -(lua_Integer)len) return 0;
  return len + (size_t)pos;
}

/* Plain substring search, charged by the bytes it compares. */
static const char *find_plain(matcher_t *m, const char *s, size_t ls, const char *p, size_t lp) {
  const char *last;
  if (lp == 0) return s;
  if (lp > ls) return NULL;
  last = s + (ls - lp);
  while (s <= last) {
    const char *hit = memchr(s, *p, (size_t)(last - s) + 1);
    if (!hit) break;
    charge(m, 1 + (int64_t)((size_t)(hit - s) + lp) / BYTES_PER_STEP);
    if (memcmp(hit + 1, p + 1, lp - 1) == 0) return hit;
    s = hit + 1;
  }
  return NULL;
}

static int has_specials(const char *p, size_t lp) {
  size_t i;
  for (i = 0; i < lp; i++)
    if (p[i] && strchr(SPECIALS, p[i])) return 1;
  return 0;
}

/* {===== the string functions =====} */

static int find_or_match(lua_State *L, int find) {
  size_t ls, lp, init;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  lua_Integer pos = luaL_optinteger(L, 3, 1);
  matcher_t m;
  if (!dxl_stock_sandboxed(L)) return dxl_call_stock(L);
  init = start_offset(pos, ls);
  matcher_init(&m, L, s, ls, p + lp);
  if (init > ls) {
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
    const char *hit = find_plain(&m, s + init, ls - init, p, lp);
    flush(&m);
    if (hit) {
      lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
      lua_pushinteger(L, (lua_Integer)(hit - s + (ptrdiff_t)lp));
      return 2;
    }
  } else {
    const char *t = s + init;
    int anchored = lp > 0 && *p == '^';
    if (anchored) p++;
    do {
      const char *e = match_at(&m, t, p);
      if (e) {
        flush(&m);
        if (!find) return push_captures(&m, t, e);
        lua_pushinteger(L, (lua_Integer)(t - s) + 1);
        lua_pushinteger(L, (lua_Integer)(e - s));
        return 2 + push_captures(&m, NULL, NULL);
      }
    } while (t++ < m.s_end && !anchored);
    flush(&m);
  }
  luaL_pushfail(L);
  return 1;
}

static int p_find(lua_State *L) { return find_or_match(L, 1); }
static int p_match(lua_State *L) { return find_or_match(L, 0); }

/* The state of a gmatch iterator: offsets into its subject (upvalue 1). */
typedef struct {
  size_t next;      /* where the next search starts */
  ptrdiff_t last;   /* end of the last match (-1: none): an empty match there is skipped */
} gmatch_state_t;

/* upvalues: subject, pattern, gmatch_state_t */
static int gmatch_next(lua_State *L) {
  size_t ls, lp;
  const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
  const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
  gmatch_state_t *g = lua_touserdata(L, lua_upvalueindex(3));
  const char *t;
  matcher_t m;
  matcher_init(&m, L, s, ls, p + lp);
  for (t = s + g->next; t <= m.s_end; t++) {
    const char *e = match_at(&m, t, p);
    if (e && e - s != g->last) {
      g->next = (size_t)(e - s);
      g->last = e - s;
      flush(&m);
      return push_captures(&m, t, e);
    }
  }
  g->next = ls + 1;
  flush(&m);
  return 0;
}

static int p_gmatch(lua_State *L) {
  size_t ls, init;
  gmatch_state_t *g;
  luaL_checklstring(L, 1, &ls);
  luaL_checkstring(L, 2);
  init = start_offset(luaL_optinteger(L, 3, 1), ls);
  if (!dxl_stock_sandboxed(L)) return dxl_call_stock(L);
  lua_settop(L, 2);
  g = lua_newuserdatauv(L, sizeof *g, 0);
  g->next = init > ls ? ls + 1 : init;
  g->last = -1;
  lua_pushcclosure(L, gmatch_next, 3);
  return 1;
}

/* Append the replacement string r for the match s..e ("%0".."%9", "%%"). */
static void add_template(matcher_t *m, luaL_Buffer *b, const char *s, const char *e,
                         const char *r, size_t rl) {
  const char *end = r + rl;
  while (r < end) {
    const char *pct = memchr(r, '%', (size_t)(end - r));
    int c;
    if (!pct) {
      luaL_addlstring(b, r, (size_t)(end - r));
      return;
    }
    luaL_addlstring(b, r, (size_t)(pct - r));
    r = pct + 1;
    c = r < end ? uc(*r) : 0;
    if (c == '%') {
      luaL_addchar(b, '%');
    } else if (c == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else if (c >= '1' && c <= '9') {
      push_capture(m, c - '1', s, e);
      luaL_addvalue(b); /* a position capture is an integer */
    } else {
      luaL_error(m->L, "invalid use of '%%' in replacement string");
    }
    r++;
  }
}

/* Append the replacement for the match s..e: the template, or what the table or function
** at index 3 gives (false or nil keeps the match). */
static void add_replacement(matcher_t *m, luaL_Buffer *b, const char *s, const char *e, int tr) {
  lua_State *L = m->L;
  if (tr == LUA_TSTRING || tr == LUA_TNUMBER) {
    size_t rl;
    const char *r = lua_tolstring(L, 3, &rl);
    add_template(m, b, s, e, r, rl);
    return;
  }
  if (tr == LUA_TFUNCTION) {
    int n;
    lua_pushvalue(L, 3);
    n = push_captures(m, s, e);
    lua_call(L, n, 1);
  } else {
    push_capture(m, 0, s, e);
    lua_gettable(L, 3);
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s));
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  } else {
    luaL_addvalue(b);
  }
}

static int p_gsub(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  int tr = lua_type(L, 3);
  lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1), n = 0;
  const char *t = s, *last = NULL, *p_end = p + lp;
  int anchored;
  matcher_t m;
  luaL_Buffer b;
  luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
                   tr == LUA_TTABLE, 3, "string/function/table");
  if (!dxl_stock_sandboxed(L)) return dxl_call_stock(L);
  anchored = lp > 0 && *p == '^';
  if (anchored) p++;
  matcher_init(&m, L, s, ls, p_end);
  luaL_buffinit(L, &b);
  while (n < max) {
    const char *e = match_at(&m, t, p);
    if (e && e != last) {
      n++;
      add_replacement(&m, &b, t, e, tr);
      t = last = e;
    } else if (t < m.s_end) {
      luaL_addchar(&b, *t++);
    } else {
      break;
    }
    if (anchored) break;
  }
  flush(&m);
  luaL_addlstring(&b, t, (size_t)(m.s_end - t));
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

void dxl_pattern_install(lua_State *L, dxl_state_t *S) {
  static const luaL_Reg fns[] = {
    {"find", p_find}, {"match", p_match}, {"gmatch", p_gmatch}, {"gsub", p_gsub}, {NULL, NULL}};
  dxl_wrap_stock(L, S, "string", fns);
}
