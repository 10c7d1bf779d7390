/*
** test_lmdb_records.c -- the LMDB wrapper records' two decoders (core/src/providers/lmdb/
** records.c): the direct reader that takes records as they are written must give exactly what
** the general (msgpack-c) decoder gives, and leave the record untouched when it hands over.
** Every schema, random values in every integer width, older (shorter) and newer (longer)
** records, and single-bit flips of each.
*/
#include <msgpack.h>

#include "providers/lmdb/lmdb_int.h"
#include "testlib.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* A value stored in an integer field of the struct, or bytes for str/bin. */
typedef union {
  uint64_t u;
  int64_t i;
} num_t;

static num_t rnd_num(lm_field_type_t type) {
  num_t v;
  static const uint64_t edges[] = {0, 1, 127, 128, 255, 256, 65535, 65536, 0xffffffffull,
                                   0x100000000ull, INT64_MAX, (uint64_t)INT64_MAX + 1,
                                   UINT64_MAX};
  uint64_t r = rnd();
  v.u = r % 3 == 0 ? edges[rnd() % 13] : rnd() >> (rnd() % 64);
  if (type != RF_U64 && rnd() % 3 == 0) v.i = -(int64_t)(v.u >> 1) - 1; /* negatives */
  if (type == RF_I64 && v.i >= 0 && v.u > INT64_MAX) v.u >>= 1;
  if (type == RF_INT) v.i = (int64_t)(int)(v.i % 100000);
  return v;
}

/* Pack `nfields` fields (the schema's first ones, then extra ints) with varied encodings
** (smallest: msgpack-c's smallest form of every integer, as the provider writes them). */
static void pack_record(msgpack_packer *pk, const lm_schema_t *s, size_t nfields, int smallest) {
  size_t i;
  msgpack_pack_array(pk, nfields + 1);
  msgpack_pack_uint32(pk, LM_RECORD_FORMAT);
  for (i = 0; i < nfields; i++) {
    lm_field_type_t type = i < s->n ? s->f[i].type : RF_U64;
    if (type == RF_STR || type == RF_BIN) {
      char buf[300];
      size_t n = rnd() % 4 == 0 ? 0 : (size_t)(rnd() % (rnd() % 8 == 0 ? 300 : 20)), k;
      for (k = 0; k < n; k++) buf[k] = (char)('a' + rnd() % 26);
      if (type == RF_STR && !s->f[i].required && rnd() % 4 == 0) msgpack_pack_nil(pk);
      else if (type == RF_STR) msgpack_pack_str_with_body(pk, buf, n);
      else msgpack_pack_bin_with_body(pk, buf, n);
    } else {
      num_t v = rnd_num(type);
      int neg = type != RF_U64 && v.i < 0;
      switch (smallest ? 0 : rnd() % 3) { /* the smallest encoding, a fixed width, or a signed one */
        case 0: if (neg) msgpack_pack_int64(pk, v.i); else msgpack_pack_uint64(pk, v.u); break;
        case 1: if (neg) msgpack_pack_fix_int64(pk, v.i); else msgpack_pack_fix_uint64(pk, v.u); break;
        default:
          if (neg || v.u <= INT64_MAX) msgpack_pack_fix_int32(pk, (int32_t)v.i);
          else msgpack_pack_uint64(pk, v.u);
      }
    }
  }
}

/* Space for any record struct, zeroed. */
typedef struct { unsigned char b[512]; } any_rec_t;

static int is_zero(const any_rec_t *r) {
  size_t i;
  for (i = 0; i < sizeof r->b; i++) if (r->b[i]) return 0;
  return 1;
}

static void assert_same(const lm_schema_t *s, any_rec_t *a, any_rec_t *b) {
  size_t i;
  for (i = 0; i < s->n; i++) {
    const lm_field_t *f = &s->f[i];
    if (f->type == RF_STR || f->type == RF_BIN) {
      const char *x = *(char **)(void *)(a->b + f->off), *y = *(char **)(void *)(b->b + f->off);
      ASSERT((x == NULL) == (y == NULL));
      if (f->type == RF_BIN) {
        size_t lx = *(size_t *)(void *)(a->b + f->len_off), ly = *(size_t *)(void *)(b->b + f->len_off);
        ASSERT_EQ(lx, ly);
        ASSERT(!x || memcmp(x, y, lx) == 0);
      } else {
        ASSERT(!x || strcmp(x, y) == 0);
      }
    } else if (f->type == RF_INT) {
      ASSERT_EQ(*(int *)(void *)(a->b + f->off), *(int *)(void *)(b->b + f->off));
    } else {
      ASSERT(*(uint64_t *)(void *)(a->b + f->off) == *(uint64_t *)(void *)(b->b + f->off));
    }
  }
}

/* Both decoders on the same bytes: when the direct one decodes, the general one gives the same
** fields; when it hands over, it changed nothing. Returns 1 when the direct one decoded. */
static int compare(const lm_schema_t *s, const void *buf, size_t len) {
  shared_env_t se;
  tx_t t;
  any_rec_t d, g;
  MDB_val v;
  int rd, rg;
  memset(&se, 0, sizeof se);
  se.path = "test";
  memset(&t, 0, sizeof t);
  t.se = &se;
  t.err = &t.scratch;
  memset(&d, 0, sizeof d);
  memset(&g, 0, sizeof g);
  v.mv_data = (void *)buf;
  v.mv_size = len;
  rd = dx__lm_rec_decode_direct(s, &v, &d);
  rg = dx__lm_rec_decode_general(&t, s, &v, &g, "r");
  ASSERT(rd == 0 || rd == 1);
  if (rd == 0) {
    ASSERT_EQ(rg, 0);
    assert_same(s, &d, &g);
    dx__lm_rec_clear(s, &d);
  } else {
    ASSERT(is_zero(&d));
  }
  if (rg == 0) dx__lm_rec_clear(s, &g);
  return rd == 0;
}

DX_TEST(lmdb_records_direct_reader_agrees_with_general_decoder) {
  const lm_schema_t *schemas[] = {&dx__lm_inst_schema, &dx__lm_exec_schema, &dx__lm_msg_schema,
                                  &dx__lm_state_schema, &dx__lm_sess_schema, &dx__lm_row_schema,
                                  &dx__lm_kv_schema, &dx__lm_kv_delta_schema, &dx__lm_sev_schema};
  size_t si;
  int direct = 0, handed = 0;
  for (si = 0; si < sizeof schemas / sizeof schemas[0]; si++) {
    const lm_schema_t *s = schemas[si];
    int i;
    for (i = 0; i < 300; i++) {
      msgpack_sbuffer sb;
      msgpack_packer pk;
      size_t lo = s->n_min ? s->n_min : s->n, nf, bit;
      nf = lo + (size_t)(rnd() % (s->n - lo + 2)); /* older, current or newer records */
      msgpack_sbuffer_init(&sb);
      msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
      pack_record(&pk, s, nf, 0);
      if (compare(s, sb.data, sb.size)) direct++;
      else handed++;
      for (bit = 0; i < 20 && bit < sb.size * 8; bit++) {
        sb.data[bit / 8] ^= (char)(1 << (bit % 8));
        (void)compare(s, sb.data, sb.size);
        sb.data[bit / 8] ^= (char)(1 << (bit % 8));
      }
      (void)compare(s, sb.data, sb.size ? sb.size - 1 : 0); /* cut short */
      msgpack_sbuffer_destroy(&sb);
    }
  }
  ASSERT(direct > 1000); /* the common records do take the direct path */
  ASSERT(handed > 0);
}

/* The partial readers (a message without its item, a session without its strings: their
** RF_SKIP fields are checked, not kept) give the full reader's other fields and nothing for
** the skipped ones, and both of their decoders agree, on stored records and damaged ones. */
DX_TEST(lmdb_records_partial_readers_match_full_readers) {
  const lm_schema_t *pairs[][2] = {{&dx__lm_msg_schema, &dx__lm_msg_head_schema},
                                   {&dx__lm_sess_schema, &dx__lm_sess_time_schema}};
  size_t pi;
  for (pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
    const lm_schema_t *full = pairs[pi][0], *part = pairs[pi][1];
    int i, direct = 0;
    ASSERT_EQ(full->n, part->n);
    for (i = 0; i < 300; i++) {
      msgpack_sbuffer sb;
      msgpack_packer pk;
      shared_env_t se;
      tx_t t;
      any_rec_t a, b;
      MDB_val v;
      size_t bit, f;
      memset(&se, 0, sizeof se);
      se.path = "test";
      memset(&t, 0, sizeof t);
      t.se = &se;
      t.err = &t.scratch;
      msgpack_sbuffer_init(&sb);
      msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
      pack_record(&pk, full, full->n, 1); /* as the provider writes them */
      v.mv_data = sb.data;
      v.mv_size = sb.size;
      memset(&a, 0, sizeof a);
      memset(&b, 0, sizeof b);
      ASSERT_EQ(dx__lm_rec_decode(&t, full, &v, &a, "r"), 0);
      ASSERT_EQ(dx__lm_rec_decode(&t, part, &v, &b, "r"), 0);
      for (f = 0; f < full->n; f++) {
        const lm_field_t *ff = &full->f[f];
        if (part->f[f].type != RF_SKIP) {
          ASSERT_EQ(part->f[f].type, ff->type);
          ASSERT_EQ(part->f[f].off, ff->off);
        } else if (ff->type == RF_STR || ff->type == RF_BIN) { /* nothing allocated */
          ASSERT(*(char **)(void *)(b.b + ff->off) == NULL);
          *(char **)(void *)(b.b + ff->off) = *(char **)(void *)(a.b + ff->off);
          if (ff->type == RF_BIN)
            *(size_t *)(void *)(b.b + ff->len_off) = *(size_t *)(void *)(a.b + ff->len_off);
        }
      }
      assert_same(full, &a, &b); /* the skipped strings filled in from a */
      memset(&b, 0, sizeof b);
      direct += dx__lm_rec_decode_direct(part, &v, &b) == 0;
      dx__lm_rec_clear(full, &a);
      for (bit = 0; i < 20 && bit < sb.size * 8; bit++) {
        sb.data[bit / 8] ^= (char)(1 << (bit % 8));
        (void)compare(part, sb.data, sb.size);
        sb.data[bit / 8] ^= (char)(1 << (bit % 8));
      }
      (void)compare(part, sb.data, sb.size - 1); /* cut short */
      msgpack_sbuffer_destroy(&sb);
    }
    ASSERT(direct > 250); /* stored records take the direct path */
  }
}

/* The provider's own writer (dx__lm_rec_pack, no msgpack-c packer) writes exactly the bytes
** msgpack-c's packer writes for the same record: stores stay byte for byte as before. */
DX_TEST(lmdb_records_writer_matches_msgpack_c) {
  const lm_schema_t *schemas[] = {&dx__lm_inst_schema, &dx__lm_exec_schema, &dx__lm_msg_schema,
                                  &dx__lm_state_schema, &dx__lm_sess_schema, &dx__lm_row_schema,
                                  &dx__lm_kv_schema, &dx__lm_kv_delta_schema, &dx__lm_sev_schema,
                                  &dx__lm_wreg_schema};
  size_t si;
  for (si = 0; si < sizeof schemas / sizeof schemas[0]; si++) {
    const lm_schema_t *s = schemas[si];
    int i;
    for (i = 0; i < 500; i++) {
      msgpack_sbuffer sb;
      msgpack_packer pk;
      shared_env_t se;
      tx_t t;
      any_rec_t g;
      MDB_val v;
      unsigned char out[1024];
      size_t n;
      memset(&se, 0, sizeof se);
      se.path = "test";
      memset(&t, 0, sizeof t);
      t.se = &se;
      t.err = &t.scratch;
      memset(&g, 0, sizeof g);
      msgpack_sbuffer_init(&sb);
      msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
      pack_record(&pk, s, s->n, 1);
      v.mv_data = sb.data;
      v.mv_size = sb.size;
      ASSERT_EQ(dx__lm_rec_decode_general(&t, s, &v, &g, "r"), 0);
      n = dx__lm_rec_pack(s, &g, NULL);
      ASSERT_EQ(n, sb.size);
      ASSERT(n <= sizeof out);
      ASSERT_EQ(dx__lm_rec_pack(s, &g, out), n);
      ASSERT(memcmp(out, sb.data, n) == 0);
      dx__lm_rec_clear(s, &g);
      msgpack_sbuffer_destroy(&sb);
    }
  }
}

/* The writer's long forms (str16/bin16, str32/bin32) and every string length where the form
** changes, as msgpack-c writes them: a message record whose item and an instance record whose
** texts are 0 to 70000 bytes. */
DX_TEST(lmdb_records_writer_long_texts) {
  static const size_t lens[] = {0, 1, 31, 32, 255, 256, 65535, 65536, 70000};
  size_t li;
  char *text = malloc(70001);
  ASSERT(text);
  memset(text, 'q', 70000);
  for (li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    int si;
    for (si = 0; si < 2; si++) {
      const lm_schema_t *s = si ? &dx__lm_inst_schema : &dx__lm_msg_schema;
      msgpack_sbuffer sb;
      msgpack_packer pk;
      orch_msg_t m;
      inst_rec_t r;
      const void *rec;
      unsigned char *out;
      size_t n;
      text[lens[li]] = 0;
      msgpack_sbuffer_init(&sb);
      msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
      msgpack_pack_array(&pk, s->n + 1);
      msgpack_pack_uint32(&pk, LM_RECORD_FORMAT);
      if (si) {
        memset(&r, 0, sizeof r);
        r.name = text;
        r.custom_status = text;
        r.current_exec = 70000;
        r.created_at = -70000;
        rec = &r;
        msgpack_pack_str_with_body(&pk, text, lens[li]);                       /* name */
        msgpack_pack_nil(&pk);                                                 /* version */
        msgpack_pack_uint64(&pk, 70000);                                       /* current_exec */
        msgpack_pack_str_with_body(&pk, text, lens[li]);                       /* custom_status */
        msgpack_pack_uint64(&pk, 0);                                           /* cs_version */
        msgpack_pack_int64(&pk, -70000);                                       /* created_at */
        msgpack_pack_int64(&pk, 0);                                            /* updated_at */
        msgpack_pack_nil(&pk);                                                 /* parent */
        msgpack_pack_uint64(&pk, 0);                                           /* created_seq */
      } else {
        memset(&m, 0, sizeof m);
        m.visible_at = INT64_MIN;
        m.token = UINT64_MAX;
        m.item = text;
        m.item_len = lens[li];
        rec = &m;
        msgpack_pack_int64(&pk, INT64_MIN);
        msgpack_pack_uint64(&pk, UINT64_MAX);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_bin_with_body(&pk, text, lens[li]);
      }
      n = dx__lm_rec_pack(s, rec, NULL);
      ASSERT_EQ(n, sb.size);
      ASSERT(n <= dx__lm_rec_bound(s, rec));
      out = malloc(n);
      ASSERT(out);
      ASSERT_EQ(dx__lm_rec_pack(s, rec, out), n);
      ASSERT(memcmp(out, sb.data, n) == 0);
      free(out);
      msgpack_sbuffer_destroy(&sb);
      text[lens[li]] = 'q';
    }
  }
  free(text);
}

/* The orchestrator queue's own reader of message records (dx__lm_msg_decode_direct, with and
** without the item) decodes only what the table-driven direct reader decodes, to the same
** fields; anything else it hands over untouched. Stored records, older and newer ones, and
** single-bit flips and cuts of each. */
static int msg_compare(const void *buf, size_t len, int heads) {
  const lm_schema_t *s = heads ? &dx__lm_msg_head_schema : &dx__lm_msg_schema;
  orch_msg_t a, b;
  MDB_val v;
  int ra, rb;
  v.mv_data = (void *)buf;
  v.mv_size = len;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  ra = dx__lm_msg_decode_direct(&v, &a, heads);
  rb = dx__lm_rec_decode_direct(s, &v, &b);
  ASSERT(ra == 0 || ra == 1);
  if (ra == 0) {
    ASSERT_EQ(rb, 0);
    ASSERT_EQ(a.visible_at, b.visible_at);
    ASSERT_EQ(a.token, b.token);
    ASSERT_EQ(a.attempt, b.attempt);
    ASSERT_EQ(a.item_len, b.item_len);
    ASSERT((a.item == NULL) == (b.item == NULL));
    if (a.item) ASSERT(memcmp(a.item, b.item, a.item_len + 1) == 0);
  } else {
    ASSERT(a.item == NULL && a.visible_at == 0 && a.token == 0 && a.attempt == 0);
  }
  free(a.item);
  if (rb == 0) dx__lm_rec_clear(s, &b);
  return ra == 0;
}

DX_TEST(lmdb_records_message_reader_agrees_with_direct_reader) {
  const lm_schema_t *s = &dx__lm_msg_schema;
  int i, direct = 0;
  for (i = 0; i < 600; i++) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t nf = i % 3 == 0 ? s->n + (size_t)(rnd() % 2) : s->n, bit;
    int heads = i % 2;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_record(&pk, s, nf, i % 4 != 0); /* as the provider writes them, or other forms */
    direct += msg_compare(sb.data, sb.size, heads);
    for (bit = 0; i < 40 && bit < sb.size * 8; bit++) {
      sb.data[bit / 8] ^= (char)(1 << (bit % 8));
      (void)msg_compare(sb.data, sb.size, heads);
      sb.data[bit / 8] ^= (char)(1 << (bit % 8));
    }
    (void)msg_compare(sb.data, sb.size - 1, heads); /* cut short */
    msgpack_sbuffer_destroy(&sb);
  }
  ASSERT(direct > 200);
}

/* Each schema's mask of the fields that own memory (lm_schema_t.strs: what dx__lm_rec_clear
** frees) names exactly its RF_STR and RF_BIN fields. */
DX_TEST(lmdb_records_schema_masks) {
  const lm_schema_t *schemas[] = {
    &dx__lm_inst_schema, &dx__lm_exec_schema, &dx__lm_msg_schema, &dx__lm_msg_head_schema,
    &dx__lm_state_schema, &dx__lm_state3_schema, &dx__lm_sess_schema, &dx__lm_sess_time_schema,
    &dx__lm_row_schema, &dx__lm_kv_schema, &dx__lm_kv_delta_schema, &dx__lm_sev_schema,
    &dx__lm_wreg_schema};
  size_t si, i;
  for (si = 0; si < sizeof schemas / sizeof schemas[0]; si++) {
    uint32_t want = 0;
    ASSERT(schemas[si]->n <= 32);
    for (i = 0; i < schemas[si]->n; i++)
      if (schemas[si]->f[i].type == RF_STR || schemas[si]->f[i].type == RF_BIN) want |= 1u << i;
    ASSERT_EQ(schemas[si]->strs, want);
  }
}
