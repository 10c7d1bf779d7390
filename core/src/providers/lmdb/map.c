/*
** map.c -- LMDB provider: the map and the store's files. Before each top-level transaction the
** files are checked (a truncated data.mdb would otherwise be read through the map and raise
** SIGBUS; a deleted lock.mdb would let new processes ignore the running ones' locks), and
** before each top-level write the map grows when it is nearly or actually full, up to the
** store's maximum size. Resizing needs every transaction of this process closed: it takes the
** remap lock as writer, every top-level transaction holds it as reader. A file shorter than
** its last page is fine when the missing pages are free ones LMDB never wrote (freelist.c).
** The lock file's identity is looked up again only when it changed since the last look
** passed (an inotify watch on it says so: "watching the lock file"). Durable writes keep
** data.mdb's written length ahead of the pages in use ("growing data.mdb ahead").
*/
#include <sys/inotify.h>
#include <sys/resource.h>

#include "lmdb_int.h"
#include "log.h"

/* {===== meta pages =====} */

/* LMDB 0.9's meta page (data format 1) on a 64-bit build: a 16-byte page header, then magic,
** version, address, mapsize, two 48-byte DB records (the free DB's md_pad is the page size,
** md_root is at +40), last_pg, txnid. LMDB trusts these fields: a flipped page size or page
** number makes it read past the end of data.mdb, which kills the process with SIGBUS. */
enum { META_AT = 16, META_MAGIC = 0, META_VERSION = 4, META_PSIZE = 24, META_FREE_ROOT = 64,
       META_MAIN_ROOT = 112, META_LAST_PG = 120, META_TXNID = 128, META_END = 136 };
#define LM_MDB_MAGIC 0xBEEFC0DEu
#define LM_P_INVALID UINT64_MAX

static uint64_t rd_le(const unsigned char *b, int n) {
  uint64_t v = 0;
  while (n--) v = v << 8 | b[n];
  return v;
}

/* 0 when this meta page is sound; else a reason. Its last page may lie past the end of the
** file: that is judged by tail_problem, for the meta page in use only. */
static const char *meta_problem(const unsigned char *m, uint64_t *txnid) {
  uint64_t psize = rd_le(m + META_PSIZE, 4), last = rd_le(m + META_LAST_PG, 8);
  uint64_t roots[2] = {rd_le(m + META_FREE_ROOT, 8), rd_le(m + META_MAIN_ROOT, 8)};
  int i;
  *txnid = rd_le(m + META_TXNID, 8);
  if (rd_le(m + META_MAGIC, 4) != LM_MDB_MAGIC) return "it is not a store file";
  if (rd_le(m + META_VERSION, 4) != 1) return "its data format is unknown";
  if (psize < 512 || psize > 65536 || (psize & (psize - 1))) return "its page size is invalid";
  if (last < 1) return "data.mdb ends before its last page: the file was truncated";
  for (i = 0; i < 2; i++)
    if (roots[i] != LM_P_INVALID && (roots[i] < 2 || roots[i] > last))
      return "a root page lies outside the store";
  return NULL;
}

/* 0 when the pages of sound meta page m are in data.mdb (fd, size bytes), or the missing ones
** are pages LMDB freed without writing them (freelist.c); else the reason. */
static const char *tail_problem(const unsigned char *m, int fd, uint64_t size) {
  uint64_t psize = rd_le(m + META_PSIZE, 4), last = rd_le(m + META_LAST_PG, 8);
  if (last < size / psize ||
      dx__lm_tail_is_free(fd, psize, size, rd_le(m + META_FREE_ROOT, 8), last))
    return NULL;
  return "data.mdb ends before its last page: the file was truncated";
}

/* Both meta pages of fd (m[i] from META_AT), then the file's size: read in that order, the size
** covers every page a commit wrote before its meta page (files only grow). 0, or -1 when the
** file is too short to hold them (left to LMDB: it reports it as not a store). */
static int read_metas(int fd, unsigned char m[2][META_END], struct stat *st) {
  uint64_t psize;
  if (pread(fd, m[0], META_END, META_AT) != META_END) return -1;
  psize = rd_le(m[0] + META_PSIZE, 4);
  if (psize < 512 || psize > 65536 || (psize & (psize - 1))) psize = 4096;
  if (pread(fd, m[1], META_END, (off_t)psize + META_AT) != META_END) return -1;
  if (fstat(fd, st) != 0 || (uint64_t)st->st_size < 2 * psize) return -1;
  return 0;
}

/* Check the meta page LMDB will use (the one with the larger txnid) before LMDB maps the file.
** A file too short to hold both meta pages is left to LMDB (it reports it as not a store).
** Another process may commit meanwhile: a verdict of damage stands only when the meta pages
** did not change while it was reached (else it is looked at again, a few times). */
int dx__lm_check_meta(const char *data_path, dx_error_t *err) {
  unsigned char m[2][META_END], again[2][META_END];
  const char *why[2];
  uint64_t txn[2];
  struct stat st;
  int fd = open(data_path, O_RDONLY | O_CLOEXEC), i, use = 0, tries;
  if (fd < 0) return 0; /* a new store: LMDB creates it */
  for (tries = 0; tries < 5; tries++) {
    if (read_metas(fd, m, &st) != 0) {
      close(fd);
      return 0;
    }
    for (i = 0; i < 2; i++) why[i] = meta_problem(m[i], &txn[i]);
    use = txn[1] > txn[0];
    if (!why[use]) why[use] = tail_problem(m[use], fd, (uint64_t)st.st_size);
    /* the one in use must be sound; the older one only needs its magic (LMDB checks both) */
    if (!why[use] && (!why[!use] || rd_le(m[!use] + META_MAGIC, 4) == LM_MDB_MAGIC)) {
      close(fd);
      return 0;
    }
    if (read_metas(fd, again, &st) != 0 || memcmp(m, again, sizeof m) == 0) break;
  }
  close(fd);
  if (!why[use]) use = !use;
  return dx_error_set(err, DX_ECORRUPT,
                      "the store is damaged: data.mdb's meta page %d is inconsistent (%s)", use,
                      why[use]);
}

int dx__lm_can_grow(shared_env_t *se) {
  return !se->read_only && (se->max_size == 0 || se->map_size < se->max_size);
}

/* Bytes in use: pages up to the last one any committed transaction wrote. mdb_env_info reads
** the meta pages through the map, so it holds the remap lock as a reader: a resize in another
** thread would otherwise unmap them under it (SIGSEGV). Callers hold no remap lock. */
static size_t used_bytes(shared_env_t *se) {
  MDB_envinfo info;
  int rc;
  pthread_rwlock_rdlock(&se->remap);
  rc = mdb_env_info(se->env, &info);
  pthread_rwlock_unlock(&se->remap);
  return rc != 0 ? 0 : ((size_t)info.me_last_pgno + 1) * se->psize;
}

/* data.mdb ends before the last page of the newest snapshot: 1 when the missing pages are ones
** LMDB freed without writing them. A read transaction pins the snapshot (its freelist pages
** are not reused while it lasts); its meta page is the one carrying its txnid (looked for
** again when two commits replaced it meanwhile). */
static int short_of_free_pages_only(shared_env_t *se) {
  unsigned char m[2][META_END];
  struct stat st;
  MDB_txn *txn;
  int ok = 0, found = 0, tries, i;
  pthread_rwlock_rdlock(&se->remap);
  for (tries = 0; tries < 3 && !found; tries++) {
    uint64_t id, txnid;
    if (mdb_txn_begin(se->env, NULL, MDB_RDONLY, &txn) != 0) break;
    id = (uint64_t)mdb_txn_id(txn);
    if (read_metas(se->data_fd, m, &st) == 0)
      for (i = 0; i < 2 && !found; i++)
        if (!meta_problem(m[i], &txnid) && txnid == id) {
          found = 1;
          ok = !tail_problem(m[i], se->data_fd, (uint64_t)st.st_size);
        }
    mdb_txn_abort(txn);
  }
  pthread_rwlock_unlock(&se->remap);
  return ok;
}

static int lost_error(shared_env_t *se, dx_error_t *err) {
  return dx_error_set(err, DX_ECORRUPT,
                      "store %s is unsafe to use: its lock file lock.mdb was deleted or "
                      "replaced while the store was open; stop every process using the store, "
                      "then start them again",
                      se->path);
}

/* lock.mdb is still the file this process opened (ino 0: none to check). */
static int lock_check(shared_env_t *se, dx_error_t *err) {
  struct stat st;
  if (se->lock_ino && (stat(se->lock_path, &st) != 0 || st.st_ino != se->lock_ino ||
                       st.st_dev != se->lock_dev)) {
    __atomic_store_n(&se->lost, 1, __ATOMIC_RELAXED);
    return lost_error(se, err);
  }
  return 0;
}

/* data.mdb holds every page in use; *used gets the bytes in use it read (0 when it did not get
** that far), *size the file's size it read (0: none). */
static int data_check(shared_env_t *se, size_t *used, size_t *size, dx_error_t *err) {
  struct stat st;
  size_t need;
  *used = *size = 0;
  /* the meta pages are read through the map, so they are checked to be in the file first */
  if (fstat(se->data_fd, &st) != 0)
    return dx_error_set(err, DX_EIO, "store %s: cannot check data.mdb: %s", se->path,
                        strerror(errno));
  *size = (size_t)st.st_size;
  if ((size_t)st.st_size >= 2 * se->psize) {
    *used = need = used_bytes(se);
    /* files only grow (short of damage): a size read before the pages in use covers them.
    ** Else a commit in another thread may have grown the file, then its meta page, since
    ** the size was read: a size read after them decides (used before size) */
    if ((size_t)st.st_size >= need) return 0;
    if (fstat(se->data_fd, &st) == 0 && (size_t)st.st_size >= need) return 0;
    if (short_of_free_pages_only(se)) return 0;
  }
  need = (size_t)st.st_size < 2 * se->psize ? 2 * se->psize : used_bytes(se);
  return dx_error_set(err, DX_ECORRUPT,
                      "store %s is damaged: data.mdb is %lld bytes but its pages reach %zu bytes "
                      "(the file was truncated)",
                      se->path, (long long)st.st_size, need);
}

/* {===== watching the lock file =====}
** The lock file check is a path lookup before every top-level txn (clients' reads too). The
** kernel reports through inotify every change that can fail it: lock.mdb unlinked or replaced
** (IN_ATTRIB: its link count changed), renamed (IN_MOVE_SELF), deleted (IN_DELETE_SELF), the
** watch gone (IN_IGNORED) or events lost (IN_Q_OVERFLOW). The event is queued before the call
** that caused it returns, so a check that drains the queue first (one non-blocking read) and
** finds it empty after a look that passed knows the file is still the one opened: it skips
** the lookup. Any event, or a failed read, means a look. Nothing writes lock.mdb with write(2)
** (LMDB changes it through its map), so the queue stays empty while nothing happens to it.
** data.mdb is not watched: every commit pwrites it, and queueing those events cost the
** committing thread more than the fstat they would save. */

int dx__lm_watch_files = 1;

void dx__lm_watch_open(shared_env_t *se, const char *lock_path) {
  int fd;
  if (!dx__lm_watch_files || !se->lock_ino) return;
  if ((fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) return; /* e.g. at the user's limit */
  if (inotify_add_watch(fd, lock_path, IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF) <
      0) {
    close(fd);
    return;
  }
  se->watch_fd = fd; /* lock_clean is 0: the first check looks */
}

/* Drain the watch's queue: 1 when it was empty (nothing happened since the last drain). */
static int quiet(shared_env_t *se) {
  union {
    struct inotify_event ev;
    char b[4096];
  } buf;
  ssize_t n;
  int calm = 1;
  while ((n = read(se->watch_fd, buf.b, sizeof buf.b)) > 0) calm = 0;
  return calm && n < 0 && errno == EAGAIN;
}

/* The lock file check, skipped while the watch says nothing happened since one passed. */
static int lock_ok(shared_env_t *se, dx_error_t *err) {
  int rc;
  if (se->watch_fd < 0) return lock_check(se, err);
  pthread_mutex_lock(&se->files_mu);
  if (quiet(se) && se->lock_clean) {
    pthread_mutex_unlock(&se->files_mu);
    return 0;
  }
  rc = lock_check(se, err);
  se->lock_clean = rc == 0;
  pthread_mutex_unlock(&se->files_mu);
  return rc;
}

/* The files check; *used and *size get the bytes in use and data.mdb's size it read (0 when
** it did not get that far). look: look the lock file up even when the watch saw nothing (at
** open). */
static int files_ok(shared_env_t *se, int look, size_t *used, size_t *size, dx_error_t *err) {
  int rc;
  *used = *size = 0;
  if (__atomic_load_n(&se->lost, __ATOMIC_RELAXED)) return lost_error(se, err);
  if ((rc = look ? lock_check(se, err) : lock_ok(se, err))) return rc;
  return data_check(se, used, size, err);
}

static void set_size(shared_env_t *se, size_t size) {
  MDB_envinfo info;
  pthread_rwlock_wrlock(&se->remap);
  if (size == 0 || size > se->map_size) mdb_env_set_mapsize(se->env, size);
  if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  pthread_rwlock_unlock(&se->remap);
}

void dx__lm_adopt_size(shared_env_t *se) { set_size(se, 0); }

/* Double the map (up to max_size) when a write found it full or it is three quarters used
** (`used` bytes). LMDB only reserves address space for the map: the file grows as pages are
** written. */
static void make_room(shared_env_t *se, size_t used) {
  size_t map = se->map_size, want;
  if (!dx__lm_can_grow(se)) return; /* at the limit: a full map reports it */
  if (!__atomic_load_n(&se->grow_wanted, __ATOMIC_RELAXED) && used <= map - map / 4) return;
  want = map > SIZE_MAX / 2 ? SIZE_MAX : map * 2;
  if (se->max_size && want > se->max_size) want = se->max_size;
  set_size(se, want);
  __atomic_store_n(&se->grow_wanted, 0, __ATOMIC_RELAXED);
}

/* {===== growing data.mdb ahead =====}
** A durable commit whose pages lie past the end of data.mdb pays for the file's new size: its
** fdatasync journals it (ext4 here: ~0.5 ms, against ~0.3 ms when the commit only overwrites
** blocks already written), and a growing store appends pages in most commits. So durable
** writes keep the file's written length ahead of the pages in use: zeros are written past its
** end and their writeback started (sync_file_range), not waited for: the txn's own work runs
** meanwhile, and the next durable commit's fdatasync makes the new size durable with its
** pages (a crash before that loses only zeros). Waiting (fdatasync) put ~1.3 ms per MiB on
** the store thread: chain runs, whose commits mostly reuse free pages, lost more than they
** saved. fallocate would not do: its unwritten extents are converted, journalled again, on
** the first write. The zeros go only past the file's size read while this txn holds LMDB's
** write lock, so no writer of any process can be writing there; they are pages past the last
** one in use, which nothing reads (a copy or a check stops at the last page). A 1 MiB fill
** costs the txn ~0.35 ms here. Stores using less than dx__lm_fill_from never fill (the tests
** create thousands; a small store cut in half stays truncated); then a fill writes
** max(FILL_MIN, 1/8 of the bytes in use) up to FILL_MAX when less than a quarter of that is
** left ahead, never past the map (the store's maximum size bounds it) nor the process's file
** size limit (RLIMIT_FSIZE: SIGXFSZ). A failed fill stops the env's fills quietly (LMDB
** appends as before); zeros it wrote stay, as unused pages. */

#define FILL_MIN ((size_t)1 << 20)
#define FILL_MAX ((size_t)4 << 20) /* (written under the write lock: other writers wait) */
size_t dx__lm_fill_from = (size_t)128 << 10;
int dx__lm_fill_fault;

static size_t fill_chunk(size_t used) {
  size_t chunk = used / 8;
  return chunk < FILL_MIN ? FILL_MIN : chunk > FILL_MAX ? FILL_MAX : chunk;
}

/* 1 when a durable write txn should fill: `used` bytes in use and a file of `size` bytes (read
** without LMDB's write lock: fill_ahead looks again under it). */
static int fill_due(shared_env_t *se, size_t used, size_t size) {
  return !se->read_only && used >= dx__lm_fill_from && used > 0 &&
         !__atomic_load_n(&se->fill_off, __ATOMIC_RELAXED) &&
         size < used + fill_chunk(used) / 4 && size < se->map_size;
}

static void fill_stop(shared_env_t *se, int e) {
  __atomic_store_n(&se->fill_off, 1, __ATOMIC_RELAXED);
  dx__log(DX_LOG_DEBUG, "store: data.mdb is no longer grown ahead", "store=%s error=\"%s\"",
          se->path, strerror(e));
}

void dx__lm_fill_ahead(shared_env_t *se) {
  static char zeros[1 << 16]; /* never written: in .bss, not 64 KiB of the binary */
  struct rlimit lim;
  MDB_envinfo info;
  struct stat st;
  size_t used, end, at, from;
  ssize_t n;
  if (mdb_env_info(se->env, &info) != 0 || fstat(se->data_fd, &st) != 0) return;
  used = ((size_t)info.me_last_pgno + 1) * se->psize;
  at = (size_t)st.st_size;
  if (!fill_due(se, used, at)) return; /* another writer filled meanwhile */
  end = (at > used ? at : used) + fill_chunk(used);
  if (end > se->map_size) end = se->map_size;
  if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      end > (size_t)lim.rlim_cur)
    end = (size_t)lim.rlim_cur;
  end -= end % se->psize;
  if (end <= at) return;
  from = at;
  for (; at < end; at += (size_t)n) {
    size_t len = end - at < sizeof zeros ? end - at : sizeof zeros;
    if (dx__lm_fill_fault) {
      errno = dx__lm_fill_fault;
      n = -1;
    } else {
      n = pwrite(se->data_fd, zeros, len, (off_t)at);
    }
    if (n <= 0) {
      fill_stop(se, n < 0 ? errno : ENOSPC);
      return;
    }
  }
  /* the zeros' writeback starts now, while the txn works; the next durable commit's fdatasync
  ** makes the new size durable with its own pages (a crash before it loses only zeros) */
  if (sync_file_range(se->data_fd, (off_t)from, (off_t)(end - from), SYNC_FILE_RANGE_WRITE))
    fill_stop(se, errno);
}

int dx__lm_files_ok(shared_env_t *se, dx_error_t *err) {
  size_t used, size;
  return files_ok(se, 1, &used, &size, err);
}

int dx__lm_top_check(shared_env_t *se, int write, int *fill, dx_error_t *err) {
  size_t used, size;
  int rc = files_ok(se, 0, &used, &size, err);
  *fill = 0;
  if (!rc && write) {
    make_room(se, used);
    *fill = fill_due(se, used, size);
  }
  return rc;
}
