/* test_codec.c -- model helpers, MessagePack records and canonical JSON. */
#include <msgpack.h>

#include "codec.h"
#include "testlib.h"

/* {===== helpers =====} */

/* splitmix64: a seeded PRNG so failures reproduce. */
static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

/* NULL, empty, short binary (NUL-free) or occasionally long enough for str16/str32. */
static char *rnd_str(void) {
  size_t n, i;
  char *s;
  switch (rnd_below(8)) {
    case 0: case 1: return NULL;
    case 2: n = 0; break;
    case 3: n = 200 + rnd_below(70000); break;
    default: n = 1 + rnd_below(40); break;
  }
  s = malloc(n + 1);
  ASSERT(s);
  for (i = 0; i < n; i++) s[i] = (char)(1 + rnd_below(255));
  s[n] = '\0';
  return s;
}

/* Zero, small, or any 64-bit value (including the extremes). */
static uint64_t rnd_u64(void) {
  switch (rnd_below(5)) {
    case 0: return 0;
    case 1: return 1 + rnd_below(300);
    case 2: return UINT64_MAX - rnd_below(3);
    default: return rnd();
  }
}
static int64_t rnd_i64(void) {
  switch (rnd_below(5)) {
    case 0: return 0;
    case 1: return INT64_MIN + (int64_t)rnd_below(3);
    case 2: return INT64_MAX - (int64_t)rnd_below(3);
    case 3: return -(int64_t)rnd_below(100000);
    default: return (int64_t)rnd();
  }
}

static void rnd_failure(dx_failure_t *f) {
  if (rnd_below(3) == 0) return;
  f->category = (int)rnd_below(5);
  if (rnd_below(10) == 0) f->category = -7 - (int)rnd_below(1000); /* any int survives */
  f->kind = rnd_str();
  f->message = rnd_str();
  f->retryable = (int)rnd_below(2);
}

static void rnd_event(dx_event_t *e) {
  memset(e, 0, sizeof *e);
  e->kind = 1 + (int)rnd_below(DX_EV__COUNT - 1);
  e->event_id = rnd_u64();
  e->source_id = rnd_u64();
  e->timestamp_ms = rnd_i64();
  e->name = rnd_str();
  e->version = rnd_str();
  e->data = rnd_str();
  e->instance = rnd_str();
  e->session_id = rnd_str();
  e->reason = rnd_str();
  e->parent_id = rnd_u64();
  e->parent_execution_id = rnd_u64();
  e->fire_at_ms = rnd_i64();
  rnd_failure(&e->fail);
  e->worker_id = rnd_str();
}

static void rnd_work(dx_work_item_t *w) {
  memset(w, 0, sizeof *w);
  w->kind = 1 + (int)rnd_below(DX_WI__COUNT - 1);
  w->instance = rnd_str();
  w->execution_id = rnd_u64();
  w->id = rnd_u64();
  w->name = rnd_str();
  w->version = rnd_str();
  w->data = rnd_str();
  w->parent_instance = rnd_str();
  w->parent_id = rnd_u64();
  w->parent_execution_id = rnd_u64();
  w->session_id = rnd_str();
  w->reason = rnd_str();
  w->fire_at_ms = rnd_i64();
  rnd_failure(&w->fail);
  w->worker_id = rnd_str();
}

/* Equal strings, NULL only equal to NULL (so NULL vs "" is a difference). */
#define ASSERT_SAME_STR(a, b)                                                      \
  do {                                                                             \
    const char *_x = (a), *_y = (b);                                               \
    if ((_x == NULL) != (_y == NULL) || (_x && strcmp(_x, _y) != 0))               \
      DX_FAIL_AT("%s differs: %s vs %s", #a, _x ? "set" : "NULL", _y ? "set" : "NULL"); \
  } while (0)
#define ASSERT_SAME_U64(a, b)                                                      \
  do {                                                                             \
    if ((uint64_t)(a) != (uint64_t)(b))                                            \
      DX_FAIL_AT("%s: %" PRIu64 " != %" PRIu64, #a, (uint64_t)(a), (uint64_t)(b)); \
  } while (0)

static void assert_same_failure(const dx_failure_t *a, const dx_failure_t *b) {
  ASSERT_EQ(a->category, b->category);
  ASSERT_SAME_STR(a->kind, b->kind);
  ASSERT_SAME_STR(a->message, b->message);
  ASSERT_EQ(a->retryable, b->retryable);
}

static void assert_same_event(const dx_event_t *a, const dx_event_t *b) {
  ASSERT_EQ(a->kind, b->kind);
  ASSERT_SAME_U64(a->event_id, b->event_id);
  ASSERT_SAME_U64(a->source_id, b->source_id);
  ASSERT_SAME_U64(a->timestamp_ms, b->timestamp_ms);
  ASSERT_SAME_STR(a->name, b->name);
  ASSERT_SAME_STR(a->version, b->version);
  ASSERT_SAME_STR(a->data, b->data);
  ASSERT_SAME_STR(a->instance, b->instance);
  ASSERT_SAME_STR(a->session_id, b->session_id);
  ASSERT_SAME_STR(a->reason, b->reason);
  ASSERT_SAME_U64(a->parent_id, b->parent_id);
  ASSERT_SAME_U64(a->parent_execution_id, b->parent_execution_id);
  ASSERT_SAME_U64(a->fire_at_ms, b->fire_at_ms);
  assert_same_failure(&a->fail, &b->fail);
  ASSERT_SAME_STR(a->worker_id, b->worker_id);
}

static void assert_same_work(const dx_work_item_t *a, const dx_work_item_t *b) {
  ASSERT_EQ(a->kind, b->kind);
  ASSERT_SAME_STR(a->instance, b->instance);
  ASSERT_SAME_U64(a->execution_id, b->execution_id);
  ASSERT_SAME_U64(a->id, b->id);
  ASSERT_SAME_STR(a->name, b->name);
  ASSERT_SAME_STR(a->version, b->version);
  ASSERT_SAME_STR(a->data, b->data);
  ASSERT_SAME_STR(a->parent_instance, b->parent_instance);
  ASSERT_SAME_U64(a->parent_id, b->parent_id);
  ASSERT_SAME_U64(a->parent_execution_id, b->parent_execution_id);
  ASSERT_SAME_STR(a->session_id, b->session_id);
  ASSERT_SAME_STR(a->reason, b->reason);
  ASSERT_SAME_U64(a->fire_at_ms, b->fire_at_ms);
  assert_same_failure(&a->fail, &b->fail);
  ASSERT_SAME_STR(a->worker_id, b->worker_id);
}

static int is_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i;
  for (i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* Hand-built records for the error paths. */
typedef struct {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} mp_t;
static void mp_init(mp_t *m) {
  msgpack_sbuffer_init(&m->sb);
  msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}
static void mp_str(mp_t *m, const char *s) { msgpack_pack_str_with_body(&m->pk, s, strlen(s)); }
static void mp_kv_u(mp_t *m, const char *k, uint64_t v) { mp_str(m, k); msgpack_pack_uint64(&m->pk, v); }
static void mp_kv_s(mp_t *m, const char *k, const char *v) { mp_str(m, k); mp_str(m, v); }

/* Decode m as an event and expect DX_ECORRUPT with `msg` in the detail. */
static void expect_event_corrupt(mp_t *m, const char *msg) {
  dx_event_t e;
  dx_error_t err;
  memset(&err, 0, sizeof err);
  ASSERT_EQ(dx__event_decode(m->sb.data, m->sb.size, &e, &err), DX_ECORRUPT);
  ASSERT_EQ(err.code, DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, msg);
  ASSERT(is_zero(&e, sizeof e));
  msgpack_sbuffer_destroy(&m->sb);
}

/* {===== model =====} */

DX_TEST(model_clear_is_safe_on_zeroed_structs) {
  dx_failure_t f;
  dx_event_t e;
  dx_work_item_t w;
  dx_instance_info_t info;
  memset(&f, 0, sizeof f);
  memset(&e, 0, sizeof e);
  memset(&w, 0, sizeof w);
  memset(&info, 0, sizeof info);
  dx_failure_clear(&f);
  dx_event_clear(&e);
  dx_work_item_clear(&w);
  dx_instance_info_clear(&info);
  dx_failure_clear(NULL);
  dx_event_clear(NULL);
  dx_events_free(NULL, 3);
  dx_orch_item_free(NULL);
  ASSERT(is_zero(&e, sizeof e) && is_zero(&w, sizeof w) && is_zero(&info, sizeof info));
}

DX_TEST(model_copy_is_deep_and_clear_zeroes) {
  int i;
  rng_state = 11;
  for (i = 0; i < 500; i++) {
    dx_event_t e, c;
    dx_work_item_t w, cw;
    rnd_event(&e);
    rnd_work(&w);
    ASSERT_OK(dx_event_copy(&c, &e));
    ASSERT_OK(dx_work_item_copy(&cw, &w));
    assert_same_event(&c, &e);
    assert_same_work(&cw, &w);
    ASSERT(e.name == NULL || c.name != e.name); /* its own storage */
    ASSERT(e.fail.message == NULL || c.fail.message != e.fail.message);
    dx_event_clear(&e);
    dx_work_item_clear(&w);
    ASSERT(is_zero(&e, sizeof e) && is_zero(&w, sizeof w));
    dx_event_clear(&c);
    dx_work_item_clear(&cw);
  }
}

DX_TEST(model_orch_item_and_info_free_everything) {
  /* valgrind (or ASan) is what checks this one: every owned pointer must be released. */
  dx_orch_item_t *item = calloc(1, sizeof *item);
  dx_instance_info_t info;
  size_t i;
  rng_state = 12;
  ASSERT(item);
  item->instance = strdup("i");
  item->orchestration_name = strdup("n");
  item->history_len = 3;
  item->history = calloc(3, sizeof *item->history);
  for (i = 0; i < 3; i++) rnd_event(&item->history[i]);
  item->messages_len = 2;
  item->messages = calloc(2, sizeof *item->messages);
  for (i = 0; i < 2; i++) rnd_work(&item->messages[i]);
  item->history_error_msg = strdup("x");
  dx_orch_item_free(item);

  memset(&info, 0, sizeof info);
  info.instance_id = strdup("a");
  info.output = strdup("1");
  info.custom_status = strdup("{}");
  info.parent_instance = strdup("p");
  info.failure.message = strdup("m");
  info.created_at_ms = 5;
  dx_instance_info_clear(&info);
  ASSERT(is_zero(&info, sizeof info));
}

/* {===== records =====} */

DX_TEST(event_round_trip_random) {
  int i;
  rng_state = 1;
  for (i = 0; i < 4000; i++) {
    dx_event_t e, d;
    dx_error_t err;
    char *buf;
    size_t len;
    rnd_event(&e);
    ASSERT_OK(dx__event_encode(&e, &buf, &len));
    ASSERT_OK(dx__event_decode(buf, len, &d, &err));
    assert_same_event(&e, &d);
    free(buf);
    dx_event_clear(&e);
    dx_event_clear(&d);
  }
}

/* A decoded record holds its strings in one block (its arena), the failure's too; a copy owns
** its own strings, and a string the caller put in place of an arena one is still freed. */
DX_TEST(decoded_strings_share_one_arena) {
  dx_event_t e, d, c;
  dx_work_item_t w, dw;
  dx_error_t err;
  char *buf;
  size_t len;
  memset(&e, 0, sizeof e);
  e.kind = DX_EV_ACT_FAILED;
  e.event_id = 3;
  e.name = strdup("Charge");
  e.data = strdup("{\"a\":1}");
  e.fail.kind = strdup("Boom");
  e.fail.message = strdup("it broke");
  ASSERT_OK(dx__event_encode(&e, &buf, &len));
  ASSERT_OK(dx__event_decode(buf, len, &d, &err));
  free(buf);
  ASSERT(d.arena != NULL);
  ASSERT(dx__arena_owns(d.arena, d.name) && dx__arena_owns(d.arena, d.data));
  ASSERT(dx__arena_owns(d.arena, d.fail.kind) && dx__arena_owns(d.arena, d.fail.message));
  ASSERT(!dx__arena_owns(d.arena, e.name));
  ASSERT_OK(dx_event_copy(&c, &d));
  ASSERT(c.arena == NULL && !dx__arena_owns(d.arena, c.name));
  d.data = strdup("null"); /* a replacement the caller owns: clear frees it (LeakSanitizer) */
  dx_event_clear(&d);
  ASSERT(is_zero(&d, sizeof d));
  ASSERT_STR_EQ(c.name, "Charge");
  ASSERT_STR_EQ(c.fail.message, "it broke");
  dx_event_clear(&c);
  dx_event_clear(&e);

  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = strdup("i-1");
  w.name = strdup("Step");
  ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
  ASSERT_OK(dx__work_item_decode(buf, len, &dw, &err));
  free(buf);
  ASSERT(dx__arena_owns(dw.arena, dw.instance) && dx__arena_owns(dw.arena, dw.name));
  dx_work_item_clear(&dw);
  dx_work_item_clear(&w);
  /* a record without strings needs no block */
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_TIMER_FIRED;
  w.id = 4;
  ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
  ASSERT_OK(dx__work_item_decode(buf, len, &dw, &err));
  free(buf);
  ASSERT(dw.arena == NULL);
  dx_work_item_clear(&dw);
}

DX_TEST(work_item_round_trip_random) {
  int i;
  rng_state = 2;
  for (i = 0; i < 4000; i++) {
    dx_work_item_t w, d;
    dx_error_t err;
    char *buf;
    size_t len;
    rnd_work(&w);
    ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
    ASSERT_OK(dx__work_item_decode(buf, len, &d, &err));
    assert_same_work(&w, &d);
    free(buf);
    dx_work_item_clear(&w);
    dx_work_item_clear(&d);
  }
}

/* The encoder writes exactly what msgpack-c writes for the same map: unpacked and packed
** again by msgpack-c (which picks the smallest encoding of every value and header), a record
** comes back byte for byte, for every field and width (custom_status and tag included). */
static void assert_msgpack_c_bytes(const char *buf, size_t len) {
  msgpack_unpacked u;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  size_t off = 0;
  msgpack_unpacked_init(&u);
  ASSERT_EQ(msgpack_unpack_next(&u, buf, len, &off), MSGPACK_UNPACK_SUCCESS);
  ASSERT_EQ(off, len);
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  ASSERT_EQ(msgpack_pack_object(&pk, u.data), 0);
  ASSERT_EQ(sb.size, len);
  ASSERT(memcmp(sb.data, buf, len) == 0);
  msgpack_sbuffer_destroy(&sb);
  msgpack_unpacked_destroy(&u);
}

DX_TEST(records_encode_as_msgpack_c_would) {
  int i;
  rng_state = 21;
  for (i = 0; i < 3000; i++) {
    dx_event_t e;
    dx_work_item_t w;
    char *buf;
    size_t len;
    rnd_event(&e);
    e.custom_status = rnd_str();
    e.tag = rnd_str();
    ASSERT_OK(dx__event_encode(&e, &buf, &len));
    assert_msgpack_c_bytes(buf, len);
    free(buf);
    dx_event_clear(&e);
    rnd_work(&w);
    w.custom_status = rnd_str();
    w.tag = rnd_str();
    ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
    assert_msgpack_c_bytes(buf, len);
    free(buf);
    dx_work_item_clear(&w);
  }
}

/* Records small enough for one walk into a stack buffer and bigger ones (planned first) are
** written alike: data lengths across that bound give msgpack-c's bytes and decode back. */
DX_TEST(records_encode_alike_across_the_direct_bound) {
  size_t n;
  for (n = 560; n < 800; n++) {
    dx_event_t e, d;
    dx_error_t err;
    char *buf;
    size_t len;
    memset(&e, 0, sizeof e);
    e.kind = DX_EV_ACT_COMPLETED;
    e.event_id = 7;
    e.name = "Act";
    e.data = malloc(n + 1);
    memset(e.data, 'x', n);
    e.data[n] = '\0';
    e.fail.message = "m";
    e.fail.category = 2;
    ASSERT_OK(dx__event_encode(&e, &buf, &len));
    assert_msgpack_c_bytes(buf, len);
    ASSERT_OK(dx__event_decode(buf, len, &d, &err));
    ASSERT_EQ(strlen(d.data), n);
    ASSERT_STR_EQ(d.fail.message, "m");
    free(buf);
    free(e.data);
    dx_event_clear(&d);
  }
}

/* The kind read from the bytes without decoding agrees with the decoder on every record the
** encoder writes, and a valid record's bit flips give either -1 or the decoder's kind. */
DX_TEST(work_item_peek_kind_agrees_with_decode) {
  int i;
  rng_state = 7;
  for (i = 0; i < 4000; i++) {
    dx_work_item_t w, d;
    dx_error_t err;
    char *buf;
    size_t len, bit;
    rnd_work(&w);
    ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
    ASSERT_EQ(dx__work_item_peek_kind(buf, len), w.kind);
    for (bit = 0; i < 100 && len <= 300 && bit < len * 8; bit++) {
      int k;
      buf[bit / 8] ^= (char)(1 << (bit % 8));
      k = dx__work_item_peek_kind(buf, len);
      if (k != -1 && dx__work_item_decode(buf, len, &d, &err) == DX_OK) {
        ASSERT_EQ(k, d.kind);
        dx_work_item_clear(&d);
      }
      buf[bit / 8] ^= (char)(1 << (bit % 8));
    }
    free(buf);
    dx_work_item_clear(&w);
  }
  ASSERT_EQ(dx__work_item_peek_kind("", 0), -1);
  ASSERT_EQ(dx__work_item_peek_kind("\x82\xa1v\x01\xa1k", 6), -1); /* cut before the kind */
  ASSERT_EQ(dx__work_item_peek_kind("\x82\xa1v\x01\xa1k\x00", 7), -1); /* no such kind */
}

DX_TEST(records_write_only_present_fields) {
  dx_event_t e;
  dx_work_item_t w;
  char *buf;
  size_t len;
  memset(&e, 0, sizeof e);
  e.kind = DX_EV_TIMER_CREATED;
  e.event_id = 3;
  ASSERT_OK(dx__event_encode(&e, &buf, &len));
  /* {"v":1,"k":10,"id":3}: fixmap(3) + 2 + 1 + 2 + 1 + 3 + 1 */
  ASSERT_EQ(len, 11);
  ASSERT_EQ((unsigned char)buf[0], 0x83);
  ASSERT(memcmp(buf + 1, "\xa1v\x01", 3) == 0); /* version first */
  free(buf);

  memset(&w, 0, sizeof w);
  w.kind = DX_WI_CANCEL;
  w.instance = "abc";
  w.reason = "";
  ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
  ASSERT_EQ((unsigned char)buf[0], 0x84); /* v, k, i, r ("" is present, NULL is not) */
  free(buf);
}

DX_TEST(records_refuse_invalid_kind_on_encode) {
  dx_event_t e;
  dx_work_item_t w;
  char *buf = (char *)1;
  size_t len = 1;
  memset(&e, 0, sizeof e);
  memset(&w, 0, sizeof w);
  ASSERT_EQ(dx__event_encode(&e, &buf, &len), DX_EINVAL);
  ASSERT(buf == NULL && len == 0);
  e.kind = DX_EV__COUNT;
  ASSERT_EQ(dx__event_encode(&e, &buf, &len), DX_EINVAL);
  w.kind = DX_WI__COUNT;
  ASSERT_EQ(dx__work_item_encode(&w, &buf, &len), DX_EINVAL);
}

DX_TEST(decode_rejects_every_truncation) {
  int i;
  rng_state = 3;
  for (i = 0; i < 60; i++) {
    dx_event_t e, d;
    dx_work_item_t w, dw;
    dx_error_t err;
    char *buf;
    size_t len, cut;
    rnd_event(&e);
    ASSERT_OK(dx__event_encode(&e, &buf, &len));
    for (cut = 0; cut < len; cut += (len > 2000 ? 97 : 1)) {
      char *copy = malloc(cut ? cut : 1); /* exact size: an over-read shows under valgrind */
      memcpy(copy, buf, cut);
      ASSERT_EQ(dx__event_decode(copy, cut, &d, &err), DX_ECORRUPT);
      ASSERT(is_zero(&d, sizeof d));
      free(copy);
    }
    free(buf);
    dx_event_clear(&e);

    rnd_work(&w);
    ASSERT_OK(dx__work_item_encode(&w, &buf, &len));
    for (cut = 0; cut < len; cut += (len > 2000 ? 97 : 1)) {
      char *copy = malloc(cut ? cut : 1);
      memcpy(copy, buf, cut);
      ASSERT_EQ(dx__work_item_decode(copy, cut, &dw, &err), DX_ECORRUPT);
      free(copy);
    }
    free(buf);
    dx_work_item_clear(&w);
  }
}

DX_TEST(decode_survives_bit_flips_and_garbage) {
  int i, ok = 0, bad = 0;
  rng_state = 4;
  for (i = 0; i < 300; i++) {
    dx_event_t e, d;
    dx_error_t err;
    char *buf;
    size_t len, bit;
    for (;;) { /* small records only: the loop below is quadratic in the length */
      rnd_event(&e);
      ASSERT_OK(dx__event_encode(&e, &buf, &len));
      if (len <= 400) break;
      free(buf);
      dx_event_clear(&e);
    }
    for (bit = 0; bit < len * 8; bit++) {
      int rc;
      buf[bit / 8] ^= (char)(1 << (bit % 8));
      rc = dx__event_decode(buf, len, &d, &err);
      buf[bit / 8] ^= (char)(1 << (bit % 8));
      ASSERT(rc == DX_OK || rc == DX_ECORRUPT);
      if (rc == DX_OK) {
        ok++;
        dx_event_clear(&d);
      } else {
        bad++;
        ASSERT(is_zero(&d, sizeof d));
      }
    }
    free(buf);
    dx_event_clear(&e);
  }
  ASSERT(ok > 0 && bad > 0);
  for (i = 0; i < 20000; i++) { /* pure garbage, with a plausible first byte half the time */
    size_t len = (size_t)rnd_below(64), k;
    unsigned char *g = malloc(len ? len : 1);
    dx_work_item_t w;
    dx_error_t err;
    int rc;
    for (k = 0; k < len; k++) g[k] = (unsigned char)rnd();
    if (len && rnd_below(2)) g[0] = (unsigned char)(0x80 | rnd_below(16));
    rc = dx__work_item_decode(g, len, &w, &err);
    ASSERT(rc == DX_OK || rc == DX_ECORRUPT);
    dx_work_item_clear(&w);
    free(g);
  }
}

DX_TEST(decode_messages_name_the_problem) {
  mp_t m;
  dx_event_t e;
  dx_work_item_t w;
  dx_error_t err;
  static const unsigned char huge[] = {0x82, 0xa1, 'v', 0x01, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xf0};
  static const unsigned char bad_byte[] = {0x81, 0xa1, 'v', 0xc1};

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  mp_str(&m, "n"); msgpack_pack_int64(&m.pk, 5);
  expect_event_corrupt(&m, "event record: field 'n' is not a string");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 99);
  expect_event_corrupt(&m, "event record: unknown kind 99");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "id", 4);
  expect_event_corrupt(&m, "field 'k' (kind) is missing");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "k", 1); mp_kv_u(&m, "v", 1);
  expect_event_corrupt(&m, "format version 'v' is not the first field");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "v", 2); mp_kv_u(&m, "k", 1);
  expect_event_corrupt(&m, "unsupported format version");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 4);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1); mp_kv_s(&m, "n", "a"); mp_kv_s(&m, "n", "b");
  expect_event_corrupt(&m, "field 'n' appears twice");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  mp_str(&m, "id"); msgpack_pack_int64(&m.pk, -1);
  expect_event_corrupt(&m, "field 'id' is not an unsigned integer");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  mp_kv_u(&m, "ts", UINT64_MAX);
  expect_event_corrupt(&m, "field 'ts' is not a 64-bit signed integer");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  mp_str(&m, "n"); msgpack_pack_str_with_body(&m.pk, "a\0b", 3);
  expect_event_corrupt(&m, "field 'n' contains a NUL byte");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 3);
  mp_str(&m, "f"); msgpack_pack_map(&m.pk, 1); mp_kv_u(&m, "m", 7);
  expect_event_corrupt(&m, "event record: field 'f.m' is not a string");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 3);
  mp_str(&m, "f"); msgpack_pack_map(&m.pk, 1); mp_kv_u(&m, "rt", 1);
  expect_event_corrupt(&m, "field 'f.rt' is not a boolean");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 3); mp_kv_s(&m, "f", "x");
  expect_event_corrupt(&m, "field 'f' is not a map");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  msgpack_pack_int64(&m.pk, 7); msgpack_pack_int64(&m.pk, 1);
  expect_event_corrupt(&m, "key 3 is not a string");

  mp_init(&m);
  msgpack_pack_array(&m.pk, 1);
  mp_str(&m, "v");
  expect_event_corrupt(&m, "event record: not a map");

  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", 1);
  msgpack_pack_nil(&m.pk);
  expect_event_corrupt(&m, "1 trailing bytes after the record");

  ASSERT_EQ(dx__event_decode(huge, sizeof huge, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "runs past the end");
  ASSERT_EQ(dx__event_decode(bad_byte, sizeof bad_byte, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "invalid MessagePack byte 0xc1");
  ASSERT_EQ(dx__event_decode(NULL, 0, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "event record: empty");

  /* Work items name themselves; kinds are checked against the work item range. */
  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_kv_u(&m, "v", 1); mp_kv_u(&m, "k", DX_WI__COUNT);
  ASSERT_EQ(dx__work_item_decode(m.sb.data, m.sb.size, &w, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "work item record: unknown kind");
  msgpack_sbuffer_destroy(&m.sb);
}

/* The decoder reads in one pass and checks the framing as it goes; a record with a framing
** problem reports it as the framing scan does (dx__msgpack_check), before any problem of its
** fields, and unknown keys nest as deep as the scan allows. */
DX_TEST(decode_reports_framing_problems_first) {
  static const unsigned char deep7[] = {0x83, 0xa1, 'v', 0x01, 0xa1, 'k', 0x01, 0xa1, 'x',
                                        0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x90};
  static const unsigned char deep8[] = {0x83, 0xa1, 'v', 0x01, 0xa1, 'k', 0x01, 0xa1, 'x',
                                        0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x90};
  /* key 3 is not a string, and a byte trails the record: the trailing byte is named */
  static const unsigned char both[] = {0x82, 0xa1, 'v', 0x01, 0x01, 0x01, 0xc0};
  dx_event_t e;
  dx_error_t err, cerr;
  int i;
  ASSERT_OK(dx__event_decode(deep7, sizeof deep7, &e, &err));
  ASSERT_EQ(e.kind, 1);
  dx_event_clear(&e);
  ASSERT_EQ(dx__event_decode(deep8, sizeof deep8, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "nested too deeply");
  ASSERT_EQ(dx__event_decode(both, sizeof both, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "1 trailing bytes after the record");
  rng_state = 5;
  for (i = 0; i < 60; i++) {
    char *buf;
    size_t len, bit;
    for (;;) { /* small records only: the loop below is quadratic in the length */
      rnd_event(&e);
      ASSERT_OK(dx__event_encode(&e, &buf, &len));
      dx_event_clear(&e);
      if (len <= 400) break;
      free(buf);
    }
    for (bit = 0; bit < len * 8; bit++) {
      dx_event_t d;
      int rc;
      buf[bit / 8] ^= (char)(1 << (bit % 8));
      rc = dx__event_decode(buf, len, &d, &err);
      if (dx__msgpack_check(buf, len, "event record", &cerr) != DX_OK) {
        ASSERT_EQ(rc, DX_ECORRUPT);
        ASSERT_STR_EQ(err.msg, cerr.msg);
      }
      buf[bit / 8] ^= (char)(1 << (bit % 8));
      dx_event_clear(&d);
    }
    free(buf);
  }
}

DX_TEST(decode_skips_unknown_keys) {
  mp_t m;
  dx_work_item_t w;
  dx_error_t err;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 5);
  mp_kv_u(&m, "v", 1);
  mp_str(&m, "future"); msgpack_pack_array(&m.pk, 2); msgpack_pack_nil(&m.pk); msgpack_pack_double(&m.pk, 1.5);
  mp_kv_u(&m, "k", DX_WI_EXTERNAL);
  mp_kv_s(&m, "i", "inst");
  mp_str(&m, "zz"); msgpack_pack_map(&m.pk, 1); msgpack_pack_int64(&m.pk, 1); msgpack_pack_true(&m.pk);
  ASSERT_OK(dx__work_item_decode(m.sb.data, m.sb.size, &w, &err));
  ASSERT_EQ(w.kind, DX_WI_EXTERNAL);
  ASSERT_STR_EQ(w.instance, "inst");
  dx_work_item_clear(&w);
  msgpack_sbuffer_destroy(&m.sb);
}

/* Other writers may pick wider encodings than ours: every integer and string width decodes to
** the same value (non-negative signed formats count as unsigned), and unknown keys holding
** exts, bins and nested containers are skipped. */
DX_TEST(decode_reads_every_integer_and_string_width) {
  static const unsigned char rec[] = {
    0x8c, 0xa1, 'v', 0xd0, 0x01,                          /* "v": int8 1 */
    0xd9, 0x01, 'k', 0xcd, 0x00, 0x03,                    /* "k" (str8): uint16 3 */
    0xda, 0x00, 0x02, 'i', 'd', 0xd3, 0, 0, 0, 0, 0, 0, 0, 7, /* "id" (str16): int64 7 */
    0xa3, 's', 'r', 'c', 0xcf, 0, 0, 0, 1, 0, 0, 0, 0,    /* "src": uint64 2^32 */
    0xa2, 't', 's', 0xd2, 0xff, 0xff, 0xff, 0xfe,          /* "ts": int32 -2 */
    0xa2, 'f', 'a', 0xd1, 0x80, 0x00,                      /* "fa": int16 -32768 */
    0xa1, 'n', 0xdb, 0, 0, 0, 3, 'A', 'c', 't',            /* "n": str32 "Act" */
    0xa1, 'x', 0xc7, 0x02, 0x05, 0xaa, 0xbb,               /* unknown: ext8 */
    0xa1, 'y', 0x92, 0xc4, 0x01, 0x00, 0x81, 0xa1, 'q', 0xca, 0, 0, 0, 0, /* [bin, {q: f32}] */
    0xa1, 'f', 0x84, 0xa1, 'c', 0xff, 0xa1, 'm', 0xa2, 'h', 'i', /* f: c -1, m "hi", */
    0xa2, 'r', 't', 0xc3, 0xa2, 'z', 'z', 0xd4, 0x01, 0x02,    /* rt true, zz fixext1 */
    0xa1, 'd', 0xa4, 'n', 'u', 'l', 'l',                   /* "d": "null" */
    0xa3, 'p', 'e', 'x', 0xcc, 0xff,                       /* "pex": uint8 255 */
  };
  static const unsigned char bin_str[] = {0x83, 0xa1, 'v', 0x01, 0xa1, 'k', 0x01,
                                          0xa1, 'n', 0xc4, 0x01, 'a'};
  dx_event_t e;
  dx_error_t err;
  ASSERT_OK(dx__event_decode(rec, sizeof rec, &e, &err));
  ASSERT_EQ(e.kind, 3);
  ASSERT_EQ(e.event_id, 7);
  ASSERT_EQ(e.source_id, UINT64_C(1) << 32);
  ASSERT_EQ(e.timestamp_ms, -2);
  ASSERT_EQ(e.fire_at_ms, -32768);
  ASSERT_EQ(e.parent_execution_id, 255);
  ASSERT_STR_EQ(e.name, "Act");
  ASSERT_STR_EQ(e.data, "null");
  ASSERT_EQ(e.fail.category, -1);
  ASSERT_STR_EQ(e.fail.message, "hi");
  ASSERT_EQ(e.fail.retryable, 1);
  ASSERT(dx__arena_owns(e.arena, e.fail.message));
  dx_event_clear(&e);
  ASSERT_EQ(dx__event_decode(bin_str, sizeof bin_str, &e, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "field 'n' is not a string");
}

/* {===== JSON =====} */

static void expect_canonical(const char *in, const char *want) {
  char *out = NULL;
  dx_error_t err;
  int rc = dx__json_canonical(in, strlen(in), &out, &err);
  if (rc != DX_OK) DX_FAIL_AT("canonical(%s) failed: %s", in, err.msg);
  if (strcmp(out, want) != 0) DX_FAIL_AT("canonical(%s) = %s, want %s", in, out, want);
  /* idempotent */
  {
    char *again = NULL;
    ASSERT_OK(dx__json_canonical(out, strlen(out), &again, &err));
    ASSERT_STR_EQ(again, out);
    free(again);
  }
  free(out);
}

static void expect_json_error(const char *in, int code, const char *msg) {
  char *out = (char *)1;
  dx_error_t err;
  ASSERT_EQ(dx__json_canonical(in, strlen(in), &out, &err), code);
  ASSERT(out == NULL);
  ASSERT_CONTAINS(err.msg, msg);
}

DX_TEST(json_canonical_examples) {
  expect_canonical(" { \"b\" : 1 ,\n \"a\" : [ 1 , 2.5 , \"x\" ] } ", "{\"a\":[1,2.5,\"x\"],\"b\":1}");
  expect_canonical("1", "1");
  expect_canonical("1.0", "1.0");            /* a real stays a real */
  expect_canonical("1e2", "100.0");
  expect_canonical("1E+20", "1e20");
  expect_canonical("-0", "0");
  expect_canonical("-0.0", "-0.0");
  expect_canonical("0.1", "0.1"); /* shortest text that reads back to the same double */
  expect_canonical("1e300", "1e300");
  expect_canonical("0.30000000000000004", "0.30000000000000004");
  expect_canonical("1e-5", "0.00001");
  expect_canonical("2.5e-7", "2.5e-7");
  expect_canonical("[123.456,\"0.1e5\"]", "[123.456,\"0.1e5\"]"); /* strings untouched */
  expect_canonical("9223372036854775807", "9223372036854775807");
  expect_canonical("-9223372036854775808", "-9223372036854775808");
  expect_canonical("\"x\"", "\"x\"");
  expect_canonical("null", "null");
  expect_canonical("[]", "[]");
  expect_canonical("{}", "{}");
  expect_canonical("{\"z\":{\"b\":[{\"d\":1,\"c\":2}],\"a\":null},\"y\":true}",
                   "{\"y\":true,\"z\":{\"a\":null,\"b\":[{\"c\":2,\"d\":1}]}}");
  /* escapes collapse to UTF-8; control characters stay escaped */
  expect_canonical("\"\\u00e9\\/\\u0041\\n\\u0001\"", "\"\xc3\xa9/A\\n\\u0001\"");
  expect_canonical("\"a\\u0000b\"", "\"a\\u0000b\"");
  expect_canonical("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"");
  /* keys sorted bytewise: upper before lower, shorter prefix first, UTF-8 after ASCII */
  expect_canonical("{\"\xc3\xa9\":1,\"z\":2,\"\x7f\":3,\"ab\":4,\"a\":5,\"Z\":6,\"a b\":7}",
                   "{\"Z\":6,\"a\":5,\"a b\":7,\"ab\":4,\"z\":2,\"\x7f\":3,\"\xc3\xa9\":1}");
}

DX_TEST(json_invalid_reports_line_and_column) {
  expect_json_error("{\"a\":1,\n\"b\":x}", DX_EJSON, "invalid JSON at line 2, column 5: invalid token");
  expect_json_error("[1,2", DX_EJSON, "invalid JSON at line 1, column 4: ']' expected");
  expect_json_error("", DX_EJSON, "invalid JSON at line 1");
  expect_json_error("1 2", DX_EJSON, "end of file expected");
  expect_json_error("NaN", DX_EJSON, "invalid JSON at line 1");
  expect_json_error("[Infinity]", DX_EJSON, "invalid JSON at line 1");
  expect_json_error("1e400", DX_EJSON, "real number overflow");
  expect_json_error("9223372036854775808", DX_EJSON, "too big integer");
  expect_json_error("\"\xff\"", DX_EJSON, "unable to decode byte 0xff");
  expect_json_error("{\"\\u0000\":1}", DX_EJSON, "NUL byte in object key");
  expect_json_error("{'a':1}", DX_EJSON, "invalid JSON");
}

DX_TEST(json_duplicate_keys_are_errors) {
  expect_json_error("{\"a\":1,\"b\":2,\"a\":3}", DX_EJSON,
                    "invalid JSON at line 1, column 16: duplicate object key near '\"a\"'");
  expect_json_error("[{\"k\":{\"x\":1,\"x\":1}}]", DX_EJSON, "duplicate object key");
}

DX_TEST(json_size_and_depth_limits) {
  size_t n = DX_MAX_PAYLOAD_BYTES + 1, i;
  char *big = malloc(n + 1), *out = NULL, *deep;
  dx_error_t err;
  char want[128];
  ASSERT(big);
  big[0] = '"';
  memset(big + 1, 'a', n - 2);
  big[n - 1] = '"';
  big[n] = '\0';
  ASSERT_EQ(dx__json_canonical(big, n, &out, &err), DX_ETOOBIG);
  snprintf(want, sizeof want, "payload is %zu bytes; the limit is %d bytes", n, DX_MAX_PAYLOAD_BYTES);
  ASSERT_STR_EQ(err.msg, want);
  /* exactly at the limit is fine */
  big[n - 2] = '"';
  ASSERT_OK(dx__json_canonical(big, n - 1, &out, &err));
  free(out);
  /* within the limit as typed, over it once canonical */
  big[0] = '[';
  for (i = 1; i + 4 <= n - 1; i += 4) memcpy(big + i, "1e2,", 4); /* -> "100.0," */
  memcpy(big + i - 1, "]", 2);
  ASSERT(strlen(big) <= DX_MAX_PAYLOAD_BYTES);
  ASSERT_EQ(dx__json_canonical(big, strlen(big), &out, &err), DX_ETOOBIG);
  ASSERT_CONTAINS(err.msg, "the limit is");
  free(big);

  /* 100 nested containers are fine; 101 are not */
  deep = malloc(512);
  ASSERT(deep);
  for (i = 0; i < 100; i++) deep[i] = '[', deep[100 + i] = ']';
  deep[200] = '\0';
  ASSERT_OK(dx__json_canonical(deep, 200, &out, &err));
  free(out);
  memmove(deep + 5, deep, 201);
  memcpy(deep, "{\"a\":", 5);
  strcat(deep, "}");
  ASSERT_EQ(dx__json_canonical(deep, strlen(deep), &out, &err), DX_EJSON);
  ASSERT_STR_EQ(err.msg, "invalid JSON: nested deeper than 100 levels");
  free(deep);
}

DX_TEST(json_quote_and_failure) {
  char *s;
  dx_failure_t f;
  s = dx__json_quote("he said \"hi\"\n\xc3\xa9");
  ASSERT_STR_EQ(s, "\"he said \\\"hi\\\"\\n\xc3\xa9\"");
  free(s);
  s = dx__json_quote("bad \xff byte");
  ASSERT_STR_EQ(s, "\"bad \xef\xbf\xbd byte\"");
  free(s);
  s = dx__json_quote(NULL);
  ASSERT_STR_EQ(s, "null");
  free(s);

  memset(&f, 0, sizeof f);
  f.category = DX_CAT_APPLICATION;
  f.kind = "ActivityFailed";
  f.message = "boom \"x\"";
  s = dx__failure_to_json(&f);
  ASSERT_STR_EQ(s, "{\"category\":\"application\",\"kind\":\"ActivityFailed\",\"message\":\"boom \\\"x\\\"\"}");
  free(s);
  f.kind = NULL;
  f.message = NULL;
  f.category = DX_CAT_POISON;
  s = dx__failure_to_json(&f);
  ASSERT_STR_EQ(s, "{\"category\":\"poison\",\"message\":\"\"}");
  free(s);
}

DX_TEST(category_names_round_trip) {
  int c;
  for (c = DX_CAT_NONE; c <= DX_CAT_POISON; c++)
    ASSERT_EQ(dx__category_from_name(dx__category_name(c)), c);
  ASSERT_STR_EQ(dx__category_name(DX_CAT_APPLICATION), "application");
  ASSERT_STR_EQ(dx__category_name(DX_CAT_INFRASTRUCTURE), "infrastructure");
  ASSERT_STR_EQ(dx__category_name(DX_CAT_CONFIGURATION), "configuration");
  ASSERT_STR_EQ(dx__category_name(99), "");
  ASSERT_STR_EQ(dx__category_name(-1), "");
  ASSERT_EQ(dx__category_from_name("nope"), DX_CAT_NONE);
  ASSERT_EQ(dx__category_from_name(NULL), DX_CAT_NONE);
}
