/*
** freelist.c -- LMDB provider: is a data.mdb that ends before its last page truncated, or only
** short of pages LMDB never wrote? LMDB 0.9 does not write "loose" pages (allocated and freed
** again in one transaction), so after such a commit the meta page's last page can lie past the
** end of the file. Those pages are on the freelist and nothing reads them. This file walks
** the freelist B-tree with pread only (never through the map, which would raise SIGBUS past
** the end of the file) and answers whether every missing page is free. Anything it cannot
** read or make sense of counts as "not free": the caller then reports a truncated store.
*/
#include "lmdb_int.h"

/* LMDB 0.9's page and node layout on a 64-bit build (mdb.c: MDB_page, MDB_node, MDB_IDL). */
enum { PAGE_HDR = 16, PG_FLAGS = 10, PG_LOWER = 12, PG_UPPER = 14, PG_OVPAGES = 12,
       NODE_HDR = 8, NODE_FLAGS = 4, NODE_KSIZE = 6 };
enum { P_BRANCH = 0x01, P_LEAF = 0x02, P_OVERFLOW = 0x04, P_LEAF2 = 0x20 };
enum { F_BIGDATA = 0x01, F_SUBDATA = 0x02, F_DUPDATA = 0x04 };
#define MAX_DEPTH 32
#define MAX_VISITS 1000000 /* pages read in one walk: a freelist is far smaller */

typedef struct {
  int fd;
  uint64_t psize, file_pages; /* pages wholly inside the file */
  uint64_t from, last;        /* the missing pages */
  unsigned char *seen;        /* seen[pg - from]: pg is on the freelist */
  long visits;
} walk_t;

static uint64_t le(const unsigned char *b, int n) {
  uint64_t v = 0;
  while (n--) v = v << 8 | b[n];
  return v;
}

/* n pages from pgno into buf; 0 when they are wholly in the file and the first names itself */
static int read_pages(walk_t *w, uint64_t pgno, uint64_t n, unsigned char *buf) {
  size_t len = (size_t)(n * w->psize);
  if (pgno < 2 || n == 0 || pgno >= w->file_pages || n > w->file_pages - pgno) return -1;
  if (++w->visits > MAX_VISITS) return -1;
  if (pread(w->fd, buf, len, (off_t)(pgno * w->psize)) != (ssize_t)len) return -1;
  return le(buf, 8) == pgno ? 0 : -1;
}

/* One freelist record: an IDL (count, then page numbers). Marks the missing pages it holds. */
static int mark_idl(walk_t *w, const unsigned char *d, uint64_t size) {
  uint64_t count, j;
  if (size < 8) return -1;
  count = le(d, 8);
  if (count > (size - 8) / 8) return -1;
  for (j = 1; j <= count; j++) {
    uint64_t pg = le(d + 8 * j, 8);
    if (pg >= w->from && pg <= w->last) w->seen[pg - w->from] = 1;
  }
  return 0;
}

/* A leaf node's value (inline, or in overflow pages). */
static int leaf_value(walk_t *w, const unsigned char *node, const unsigned char *end) {
  uint64_t dsize = le(node, 4), ksize = le(node + NODE_KSIZE, 2), flags = le(node + NODE_FLAGS, 2);
  const unsigned char *data = node + NODE_HDR + ksize;
  if (flags & (F_SUBDATA | F_DUPDATA)) return -1; /* not in a freelist */
  if (flags & F_BIGDATA) {
    unsigned char *ov;
    uint64_t ovpg, pages;
    int rc;
    if (data + 8 > end) return -1;
    ovpg = le(data, 8);
    pages = (PAGE_HDR + dsize + w->psize - 1) / w->psize;
    if (pages > w->file_pages || !(ov = malloc((size_t)(pages * w->psize)))) return -1;
    rc = read_pages(w, ovpg, pages, ov);
    if (!rc && (!(le(ov + PG_FLAGS, 2) & P_OVERFLOW) || le(ov + PG_OVPAGES, 4) < pages)) rc = -1;
    if (!rc) rc = mark_idl(w, ov + PAGE_HDR, dsize);
    free(ov);
    return rc;
  }
  if (data + dsize > end) return -1;
  return mark_idl(w, data, dsize);
}

static int walk(walk_t *w, uint64_t pgno, int depth) {
  unsigned char *pg;
  uint64_t flags, lower, upper, n, i;
  int rc = 0;
  if (depth > MAX_DEPTH || !(pg = malloc((size_t)w->psize))) return -1;
  if (read_pages(w, pgno, 1, pg)) { free(pg); return -1; }
  flags = le(pg + PG_FLAGS, 2);
  lower = le(pg + PG_LOWER, 2);
  upper = le(pg + PG_UPPER, 2);
  if (lower < PAGE_HDR || lower > upper || upper > w->psize || (flags & P_LEAF2) ||
      !(flags & (P_BRANCH | P_LEAF))) {
    free(pg);
    return -1;
  }
  n = (lower - PAGE_HDR) / 2;
  for (i = 0; i < n && !rc; i++) {
    uint64_t off = le(pg + PAGE_HDR + 2 * i, 2);
    const unsigned char *node = pg + off;
    if (off < upper || off + NODE_HDR > w->psize) { rc = -1; break; }
    if (flags & P_BRANCH) /* child page number: lo, hi, then the flags field as bits 32-47 */
      rc = walk(w, le(node, 4) | le(node + NODE_FLAGS, 2) << 32, depth + 1);
    else
      rc = leaf_value(w, node, pg + w->psize);
  }
  free(pg);
  return rc;
}

int dx__lm_tail_is_free(int fd, uint64_t psize, uint64_t file_size, uint64_t free_root,
                        uint64_t last) {
  walk_t w;
  uint64_t i;
  int ok;
  memset(&w, 0, sizeof w);
  w.fd = fd;
  w.psize = psize;
  w.file_pages = file_size / psize;
  w.from = w.file_pages;
  w.last = last;
  /* a freelist that large is no LMDB leftover: a truncation */
  if (last < w.from || last - w.from >= (uint64_t)1 << 24 || free_root == UINT64_MAX) return 0;
  if (!(w.seen = calloc((size_t)(last - w.from + 1), 1))) return 0;
  ok = walk(&w, free_root, 0) == 0;
  for (i = 0; ok && i <= last - w.from; i++) ok = w.seen[i];
  free(w.seen);
  return ok;
}
