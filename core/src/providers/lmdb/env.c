/*
** env.c -- LMDB provider: opening and closing stores: the per-process env registry, format
** upgrades, group commit (begin/commit/rollback) and the method table.
*/
#include "lmdb_int.h"

/* {===== environment registry =====} */

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_env_t *g_reg;

/* {===== methods: group commit =====} */

static int lm_begin(dx_provider_t *pp, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (dx__lm_thread_batch(p->se))
    return dx_error_set(err, DX_ESTATE, "a batch is already open on this thread");
  if ((rc = dx__lm_begin_tx(p, 1, &t, err))) return rc;
  pthread_mutex_lock(&p->se->batch_mu);
  p->se->batch = t.txn;
  p->se->batch_thread = pthread_self();
  p->se->batch_wrote = 0;
  p->se->batch_spoiled = 0;
  p->se->seq_held = 0;
  dx__lm_curs_forget(p->se);
  dx__lm_sess_batch_forget(p->se);
  dx__lm_inst_keep_begin(p->se, mdb_txn_id(t.txn));
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = 1;
  p->atomic = 0;
  p->claims_over[0] = 0;
  return 0;
}

/* A batch its caller rolls back whole when a call fails (provider.h begin_atomic): client
** enqueues run in the batch txn itself instead of a nested txn each (LMDB's nested txn
** allocates its bookkeeping and copies every page it touches: a client start took ~31k
** instructions, ~21k without). A call that fails after writing spoils the batch (txn.c
** spoil): commit refuses. */
static int lm_begin_atomic(dx_provider_t *pp, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  int rc = lm_begin(pp, err);
  if (!rc) p->atomic = 1;
  return rc;
}

/* keep: the batch commits next (the instance records it knows may outlive it). */
static MDB_txn *take_batch(lm_t *p, int keep) {
  MDB_txn *txn;
  pthread_mutex_lock(&p->se->batch_mu);
  txn = p->se->batch;
  p->se->batch = NULL;
  dx__lm_curs_forget(p->se); /* freed by LMDB with the txn */
  dx__lm_sess_batch_forget(p->se);
  dx__lm_pend_drop(p->se); /* written by commit before this, or dropped with the batch */
  if (keep && txn) {
    dx__lm_inst_keep_commit(p->se, mdb_txn_id(txn));
    p->se->ik_committing = 1;
  } else {
    dx__lm_inst_keep_drop(p->se);
  }
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = p->atomic = 0;
  p->claims_over[0] = 0;
  return txn;
}

/* The commit of the batch take_batch(p, 1) took ended (rc: LMDB's code). A failed one (ENOSPC,
** EIO) leaves its txn id to the next writer: the table kept for it goes, unless a batch that
** began since already dropped it (and keeps its own now). */
static void commit_seen(lm_t *p, int rc) {
  pthread_mutex_lock(&p->se->batch_mu);
  if (p->se->ik_committing && rc) dx__lm_inst_keep_drop(p->se);
  p->se->ik_committing = 0;
  pthread_mutex_unlock(&p->se->batch_mu);
}

static int lm_commit(dx_provider_t *pp, int sync, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  int rc, wrote, flush, fail = p->fail_commit;
  if (!p->in_batch) return dx_error_set(err, DX_ESTATE, "commit without begin");
  if (p->se->batch_spoiled) { /* a direct method failed part way (LM_WRITE_DIRECT) */
    dx__lm_top_finish(p->se, take_batch(p, 0), 0, LM_FLUSH_NONE, 0);
    if (err) *err = p->se->spoil_err;
    return p->se->spoil_err.code;
  }
  if ((rc = dx__lm_pend_flush(p->se, p->se->batch, err)) ||
      (rc = dx__lm_seq_flush(p->se, p->se->batch, err))) {
    dx__lm_top_finish(p->se, take_batch(p, 0), 0, LM_FLUSH_NONE, 0);
    return rc;
  }
  /* sync=0 (provider.h): a batch that only took locks is not flushed; one that wrote more (an
  ** activity's result) flushes its data, so a power cut may lose it but never damages the
  ** store (MDB_NOSYNC could: the meta page may reach the disk before the pages it names).
  ** Workers elsewhere hear of any work it queued. */
  wrote = p->se->batch_wrote;
  flush = p->no_sync || !(sync || wrote) ? LM_FLUSH_NONE : sync ? LM_FLUSH_FULL : LM_FLUSH_DATA;
  p->fail_commit = 0;
  rc = dx__lm_top_finish(p->se, take_batch(p, 1), !fail, flush, sync || wrote);
  if (fail) rc = EIO; /* (the test hook: aborted, as a failed commit ends) */
  commit_seen(p, rc);
  return rc ? dx__lm_mdb_error(p->se, rc, "commit", err) : 0;
}

static void lm_rollback(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (p->in_batch) dx__lm_top_finish(p->se, take_batch(p, 0), 0, LM_FLUSH_NONE, 0);
}

/* {===== store format =====} */

static int locked_elsewhere(int fd);

/* Format 1 indexed session rows in work_ready / work_lock under class byte 1; move them to the
** session indexes. Runs on raw (format 1) values. */
static int upgrade_from_1(tx_t *t) {
  static const int dbs[2] = {DB_WORK_READY, DB_WORK_LOCK};
  seq_list_t l = {NULL, 0, 0};
  dkey_t pre, k;
  size_t i;
  int d, rc = 0;
  k_init(&pre);
  k_u8(&pre, 1);
  for (d = 0; d < 2 && !rc; d++) rc = dx__lm_scan_prefix(t, dbs[d], &pre, dx__lm_ident_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    work_row_t r;
    rc = dx__lm_row_get(t, l.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) {
      key_work_idx(&k, 1, dx__lm_row_due(&r), r.seq);
      rc = dx__lm_db_del(t, r.token ? DB_WORK_LOCK : DB_WORK_READY, &k);
    }
    if (!rc && r.session_id && !(rc = dx__lm_row_index(t, &r, 1)))
      rc = dx__lm_squeue_refresh(t, r.session_id, 1);
    dx__lm_row_clear(&r);
  }
  free(l.v);
  return rc;
}

/* Format 2 -> 3: append the checksum to every value of every DB, in place. */
static int add_checksums(tx_t *t) {
  int db, rc = 0;
  for (db = 0; db < DB__COUNT && !rc; db++) {
    MDB_cursor *c;
    MDB_val k, v;
    int mrc = mdb_cursor_open(t->txn, t->se->dbi[db], &c);
    if (mrc) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && !rc;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
      /* copies: the put rewrites the page the cursor's key and value point into */
      char kb[LM_KEY_MAX];
      dkey_t key;
      char *val = malloc(v.mv_size ? v.mv_size : 1);
      if (!val || k.mv_size > sizeof kb) { free(val); rc = val ? DX_ECORRUPT : DX_ENOMEM; break; }
      memcpy(kb, k.mv_data, k.mv_size);
      memcpy(val, v.mv_data, v.mv_size);
      k_init(&key);
      k_bytes(&key, kb, k.mv_size);
      rc = dx__lm_db_put(t, db, &key, val, v.mv_size, 0);
      free(val);
      k = kval(&key);
      if (!rc && (mrc = mdb_cursor_get(c, &k, &v, MDB_SET)) != 0) /* back to this entry */
        break;
    }
    mdb_cursor_close(c);
    if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
    if (rc == DX_ECORRUPT) return dx__lm_corrupt(t, db, "key too long", "upgrade");
    if (!rc && mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  }
  return rc;
}

/* The format recorded in meta: 0 for a new store. Formats 1 and 2 stored it as 4 raw bytes;
** from format 3 it carries a checksum like every value. */
static int read_format(tx_t *t, unsigned *fmt) {
  dkey_t k;
  MDB_val v;
  int rc;
  key_name(&k, "format");
  t->raw = 1;
  rc = dx__lm_db_get(t, DB_META, &k, &v);
  t->raw = 0;
  *fmt = 0;
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (v.mv_size == 4 + LM_SUM_BYTES) {
    MDB_val key = kval(&k);
    if ((rc = dx__lm_check_sum(t, DB_META, &key, &v))) return rc;
  }
  if (v.mv_size != 4) return dx__lm_corrupt(t, DB_META, "not 4 bytes", "format");
  {
    const unsigned char *b = v.mv_data;
    *fmt = (unsigned)b[0] << 24 | (unsigned)b[1] << 16 | (unsigned)b[2] << 8 | b[3];
  }
  return 0;
}

static int write_format(tx_t *t, unsigned want) {
  unsigned char fmt[4] = {0, 0, 0, (unsigned char)want};
  dkey_t k;
  key_name(&k, "format");
  return dx__lm_db_put(t, DB_META, &k, fmt, 4, 0);
}

/* Bring an older store to LM_STORE_FORMAT (or stamp a new one) -- but only to format 3 while
** another process has the store open: it may be a build that reads format 3 only and checked
** the format when it opened the store, long before. That store stays format 3, and this
** process writes what format 3 builds read (se->fmt3) until a later open finds the store
** alone. The check runs inside the open's write txn: a process that opens the store after it
** reads the format this txn commits. */
static int check_format(tx_t *t) {
  unsigned fmt, want = LM_STORE_FORMAT;
  int rc = read_format(t, &fmt);
  if (rc || fmt == LM_STORE_FORMAT) return rc;
  /* (a new store, format 0, is stamped 4 even so: a process that opened it too reads the
  ** format in its own first txn, after this one) */
  if (fmt != 0 && fmt <= 3 && !t->se->read_only &&
      (t->se->probe_fd < 0 || locked_elsewhere(t->se->probe_fd)))
    want = 3;
  t->se->fmt3 = want == 3;
  if (fmt == want) return 0;
  if (fmt > LM_STORE_FORMAT)
    return dx_error_set(t->err, DX_ESTORE,
                        "store %s has format %u; this build reads formats up to %u (use a newer "
                        "duroxide-lua)",
                        t->se->path, fmt, LM_STORE_FORMAT);
  if (fmt == 3 && t->se->read_only) return 0; /* format 4 only adds turn runs to history */
  if (t->se->read_only)
    return dx_error_set(t->err, DX_ESTORE,
                        "store %s is read-only and in the older format %u; open it once with "
                        "write access to upgrade it",
                        t->se->path, fmt);
  if (fmt == 1) {
    t->raw = 1;
    rc = upgrade_from_1(t);
    t->raw = 0;
  }
  if (!rc && fmt != 0 && fmt < 3) rc = add_checksums(t);
  return rc ? rc : write_format(t, want);
}

/* The store remembers its maximum size, so every process opening it (a CLI `start` too)
** stops at the same limit; an explicit max_size replaces the remembered one. */
static int sync_max_size(tx_t *t, size_t want) {
  unsigned char b[8];
  dkey_t k;
  MDB_val v;
  int rc;
  key_name(&k, "max_size");
  rc = dx__lm_db_get(t, DB_META, &k, &v);
  if (rc && rc != DX_ENOTFOUND) return rc;
  if (!rc && v.mv_size != 8) return dx__lm_corrupt(t, DB_META, "not 8 bytes", "max_size");
  if (want == 0) {
    t->se->max_size = rc ? 0 : (size_t)get_u64(v.mv_data);
    return 0;
  }
  t->se->max_size = want;
  if ((!rc && get_u64(v.mv_data) == want) || t->se->read_only) return 0;
  put_u64(b, want);
  return dx__lm_db_put(t, DB_META, &k, b, 8, 0);
}

/* Open every named DB, check or upgrade the format and settle the maximum size, in one durable
** txn (a read txn on a read-only store, committed so the DB handles stay open). */
static int env_init_dbs(shared_env_t *se, size_t max_size, dx_error_t *err) {
  tx_t t;
  int i, rc = dx__lm_tx_begin(se, 1, !se->read_only, 0, &t, err);
  if (rc) return rc;
  t.write = 1;
  for (i = 0; i < DB__COUNT && !rc; i++) {
    int mrc = mdb_dbi_open(t.txn, dx__lm_db_names[i], se->read_only ? 0 : MDB_CREATE,
                           &se->dbi[i]);
    if (mrc == MDB_NOTFOUND && i == DB_SESS_EVENTS) /* added later: a read-only old store */
      se->no_sess_events = 1;
    else if (mrc == MDB_NOTFOUND && i == DB_WORKERS)
      se->no_workers = 1;
    else if (mrc == MDB_NOTFOUND && (i == DB_INST_STATUS || i == DB_INST_NAME || i == DB_ORCH_STARTS))
      se->no_list_idx = 1;
    else if (mrc == MDB_NOTFOUND)
      rc = dx_error_set(err, DX_ECORRUPT, "store %s is damaged: its table %s is missing",
                        se->path, dx__lm_db_names[i]);
    else if (mrc)
      rc = dx__lm_tx_err(&t, mrc, dx__lm_db_names[i]);
  }
  if (!rc) rc = check_format(&t);
  if (!rc && !se->no_list_idx) rc = dx__lm_lidx_build(&t);
  if (!rc) rc = sync_max_size(&t, max_size);
  return dx__lm_tx_end(&t, rc);
}

/* {===== open / close =====} */

static void env_free(shared_env_t *se) {
  if (se->env) mdb_env_close(se->env);
  if (se->probe_fd >= 0) close(se->probe_fd); /* after the env: it drops LMDB's locks too */
  if (se->notify_fd >= 0) close(se->notify_fd);
  if (se->watch_fd >= 0) close(se->watch_fd);
  free(se->notify_path);
  dx__lm_pend_drop(se);
  dx__lm_inst_keep_drop(se);
  free(se->ik);
  free(se->ik_dirty);
  free(se->rk);
  free(se->pend);
  free(se->srow);
  free(se->kinst);
  free(se->kinst_ix.idx);
  free(se->kmsg);
  free(se->rpend);
  free(se->rpend_ix.idx);
  free(se->sq);
  free(se->sq_ix.idx);
  free(se->kh);
  free(se->lock_path);
  pthread_mutex_destroy(&se->commit_mu);
  pthread_mutex_destroy(&se->batch_mu);
  pthread_mutex_destroy(&se->files_mu);
  pthread_rwlock_destroy(&se->remap);
  free(se->path);
  free(se);
}

static char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, name);
  return s;
}

/* Why mdb_env_open failed, in words (the caller prefixes "cannot open store D: "). */
static int open_error(int mrc, dx_error_t *err) {
  switch (mrc) {
    case MDB_INVALID:
      return dx_error_set(err, DX_ECORRUPT, "the store is damaged: data.mdb is not a store file");
    case MDB_VERSION_MISMATCH:
      return dx_error_set(err, DX_ECORRUPT,
                          "lock.mdb was written by an incompatible LMDB version");
    case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND:
      return dx_error_set(err, DX_ECORRUPT, "the store is damaged: its pages are inconsistent");
    case ENOSPC: return dx_error_set(err, DX_EFULL, "no space left on device");
    case EDQUOT: return dx_error_set(err, DX_EFULL, "disk quota exceeded");
    case ENOMEM: return dx_error_set(err, DX_ENOMEM, "not enough memory to map the store");
    default: return dx_error_set(err, DX_ESTORE, "%s", strerror(mrc));
  }
}

/* mdb_env_open with our flags; the env is closed again when it fails. */
static int open_env(shared_env_t *se, unsigned flags) {
  int mrc;
  if ((mrc = mdb_env_create(&se->env)) == 0 &&
      (mrc = mdb_env_set_maxdbs(se->env, LM_MAXDBS)) == 0 &&
      (mrc = mdb_env_set_mapsize(se->env, se->map_size)) == 0)
    mrc = mdb_env_open(se->env, se->path, flags, 0600);
  if (mrc && se->env) {
    mdb_env_close(se->env);
    se->env = NULL;
  }
  return mrc;
}

/* 1 when another process holds a lock on lock.mdb (fd): every process with an env on the
** store holds one (LMDB keeps a shared lock on its first byte); this process's own locks are
** not reported. */
static int locked_elsewhere(int fd) {
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  return fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

/* The store is in use by another process: a zero-length data.mdb is one that process is
** creating right now, not a damaged one. (This process has no env on the store yet, so
** closing the fd drops no lock of ours.) */
static int store_in_use(const char *lock_path) {
  int fd = open(lock_path, O_RDONLY | O_CLOEXEC), busy;
  if (fd < 0) return 0;
  busy = locked_elsewhere(fd);
  close(fd);
  return busy;
}

/* Open the env of directory `path`; a directory this process cannot write is opened
** read-only (without the lock file when that cannot be opened either: nobody can write). */
static int env_open(char *path, const dx_provider_opts_t *o, shared_env_t **out,
                    dx_error_t *err) {
  shared_env_t *se = calloc(1, sizeof *se);
  char *data = NULL;
  MDB_envinfo info;
  MDB_stat ms;
  struct stat st;
  /* MDB_NOMEMINIT: LMDB would zero every freshly allocated page buffer before filling it
  ** (about 5% of the store thread's time went to that memset); the bytes of a page no record
  ** covers are never read back, and the file is the owner's alone (0600). */
  unsigned flags = MDB_NOTLS | MDB_NOMEMINIT;
  int dead, rc = 0, mrc;
  if (!se) { free(path); return dx__lm_nomem(err); }
  se->path = path;
  se->pid = getpid();
  se->refs = 1;
  se->map_size = o->map_size;
  se->notify_fd = -1;
  se->rpend_lock_min = LM_NEVER;
  se->rpend_last_at = INT64_MIN;
  se->data_fd = -1;
  se->probe_fd = -1;
  se->watch_fd = -1;
  pthread_mutex_init(&se->commit_mu, NULL);
  pthread_mutex_init(&se->files_mu, NULL);
  pthread_mutex_init(&se->batch_mu, NULL);
  pthread_rwlock_init(&se->remap, NULL);
  if (!(data = path_in(path, "data.mdb")) || !(se->lock_path = path_in(path, "lock.mdb")) ||
      !(se->notify_path = path_in(path, "notify"))) {
    rc = dx__lm_nomem(err);
    goto done;
  }
  if (stat(data, &st) == 0 && st.st_size == 0 && !store_in_use(se->lock_path)) {
    rc = dx_error_set(err, DX_ECORRUPT,
                      "the store is damaged: data.mdb is empty (0 bytes); restore it from a "
                      "backup, or move the directory away to start an empty store");
    goto done;
  }
  if ((rc = dx__lm_check_meta(data, err))) goto done;
  se->read_only = access(path, W_OK) != 0;
  if (se->read_only) flags |= MDB_RDONLY;
  else se->notify_fd = open(se->notify_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  mrc = open_env(se, flags);
  if (se->read_only && (mrc == EACCES || mrc == EROFS || mrc == ENOENT))
    mrc = open_env(se, flags | MDB_NOLOCK);
  else if (mrc == 0 && stat(se->lock_path, &st) == 0) {
    se->lock_dev = st.st_dev;
    se->lock_ino = st.st_ino;
    se->probe_fd = open(se->lock_path, O_RDONLY | O_CLOEXEC); /* -1: taken as busy */
  }
  if (mrc) {
    rc = open_error(mrc, err);
    goto done;
  }
  if (!(flags & MDB_RDONLY) || se->lock_ino) mdb_reader_check(se->env, &dead); /* killed readers */
  mdb_env_get_fd(se->env, &se->data_fd);
  se->psize = mdb_env_stat(se->env, &ms) == 0 ? ms.ms_psize : 4096;
  dx__lm_watch_open(se, se->lock_path); /* before the first check: later changes are seen */
  if ((rc = dx__lm_files_ok(se, err))) goto done;
  if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  rc = env_init_dbs(se, o->max_size, err);
  if (!rc && se->max_size && se->map_size > se->max_size) {
    /* the remembered limit is below the map asked for: never map more than the limit */
    mdb_env_set_mapsize(se->env, se->max_size);
    if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  }
done:
  free(data);
  if (rc) env_free(se);
  else *out = se;
  return rc;
}

/* Find or open the env for `path` (realpath, owned by this call). */
static int registry_acquire(char *path, const dx_provider_opts_t *o, shared_env_t **out,
                            dx_error_t *err) {
  shared_env_t *se;
  int rc = 0;
  pthread_mutex_lock(&g_reg_mu);
  for (se = g_reg; se; se = se->next)
    if (se->pid == getpid() && strcmp(se->path, path) == 0) break;
  if (se) {
    tx_t t;
    se->refs++;
    free(path);
    /* a new explicit limit for an env already open here: remember it like an open would */
    if (o->max_size && o->max_size != se->max_size) {
      if (!(rc = dx__lm_tx_begin(se, 1, !se->read_only, 0, &t, err)))
        rc = dx__lm_tx_end(&t, sync_max_size(&t, o->max_size));
      if (rc) se->refs--;
    }
  } else if ((rc = env_open(path, o, &se, err)) == 0) {
    se->next = g_reg;
    g_reg = se;
  }
  pthread_mutex_unlock(&g_reg_mu);
  *out = se;
  return rc;
}

static void registry_release(shared_env_t *se) {
  shared_env_t **pp;
  pthread_mutex_lock(&g_reg_mu);
  if (--se->refs == 0) {
    for (pp = &g_reg; *pp; pp = &(*pp)->next)
      if (*pp == se) { *pp = se->next; break; }
    env_free(se);
  }
  pthread_mutex_unlock(&g_reg_mu);
}

/* Create the store directory (0700: the store holds every payload) and missing parents. */
static int mkdir_p(const char *path, dx_error_t *err) {
  char *buf = dx__strdup(path), *s;
  struct stat sb;
  int rc = 0;
  if (!buf) return dx__lm_nomem(err);
  for (s = buf + 1; ; s++) {
    if (*s != '/' && *s != 0) continue;
    char c = *s;
    *s = 0;
    if (mkdir(buf, c ? 0755 : 0700) != 0 && errno != EEXIST) {
      rc = dx_error_set(err, errno == ENOSPC ? DX_EFULL : DX_EIO,
                        "cannot create directory %s: %s", buf, strerror(errno));
      break;
    }
    *s = c;
    if (!c) break;
  }
  free(buf);
  if (!rc && (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    rc = dx_error_set(err, DX_EIO, "%s is not a directory", path);
  return rc;
}

static void lm_destroy(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (!p) return;
  lm_rollback(pp);
  dx__lm_live_close(p);
  registry_release(p->se);
  dx_fetch_filter_free(p->filter);
  free(p);
}

static int lm_set_fetch_filter(dx_provider_t *pp, const dx_fetch_filter_t *f, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  dx_fetch_filter_t *copy = NULL;
  int rc;
  if (f && (rc = dx_fetch_filter_copy(f, &copy, err))) return rc;
  dx_fetch_filter_free(p->filter);
  p->filter = copy;
  return 0;
}

static int lm_set_history_hint(dx_provider_t *pp, const dx_history_hint_t *h, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  (void)err;
  if (h) p->hint = *h;
  else memset(&p->hint, 0, sizeof p->hint);
  return 0;
}

static const char *lm_notify_path(dx_provider_t *pp) { return ((lm_t *)pp)->se->notify_path; }

static const dx_provider_methods_t lm_methods = {
  12,
  "lmdb",
  lm_destroy,
  lm_begin,
  lm_commit,
  lm_rollback,
  dx__lm_fetch_orch,
  dx__lm_ack_orch,
  dx__lm_abandon_orch,
  dx__lm_renew_orch,
  dx__lm_fetch_work,
  dx__lm_ack_work,
  dx__lm_abandon_work,
  dx__lm_renew_work,
  dx__lm_enqueue_orch,
  dx__lm_enqueue_work,
  dx__lm_read_history,
  dx__lm_append,
  dx__lm_get_info,
  dx__lm_list,
  dx__lm_depths,
  dx__lm_next_due,
  dx__lm_renew_sessions,
  dx__lm_release_sessions,
  dx__lm_cleanup_sessions,
  dx__lm_list_sessions,
  lm_notify_path,
  dx__lm_check,
  NULL, /* wake_fd: the notify file serves */
  NULL, /* wake_drain */
  &dx__lm_test_hooks,
  NULL, /* run_cycle: calls one by one cost no round trips on a local store */
  dx__lm_worker_register,
  dx__lm_worker_unregister,
  /* management (version 6) */
  dx__lm_list_page,
  dx__lm_list_executions,
  dx__lm_instance_queue,
  dx__lm_delete_instances,
  dx__lm_prune_executions,
  dx__lm_terminate,
  /* key-value state (version 7) */
  dx__lm_get_kv,
  dx__lm_list_kv,
  /* session history (version 8) */
  dx__lm_append_session_event,
  dx__lm_list_session_events,
  lm_set_fetch_filter, /* activity tags and rolling deployments (version 9) */
  dx__lm_list_workers, /* live workers (version 10) */
  lm_set_history_hint, /* cached orchestrations (version 11) */
  lm_begin_atomic, /* all-or-nothing batches (version 12) */
};

int dx__lmdb_open(const char *path, const dx_provider_opts_t *opts, dx_provider_t **out,
                  dx_error_t *err) {
  dx_provider_opts_t o;
  lm_t *p;
  char *real;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if (!path || !*path) return dx_error_set(err, DX_EINVAL, "store path is empty");
  if (opts && opts->version != 1)
    return dx_error_set(err, DX_EINVAL, "dx_provider_opts_t.version must be 1");
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  if (!o.map_size) o.map_size = LM_DEFAULT_MAP;
  if (o.max_size && o.max_size < (size_t)1 << 20)
    return dx_error_set(err, DX_EINVAL, "store maximum size %zu bytes is below the minimum of "
                        "1 MiB", o.max_size);
  if (o.max_size && o.map_size > o.max_size) o.map_size = o.max_size;
  if ((rc = mkdir_p(path, err))) return rc;
  if (!(real = realpath(path, NULL)))
    return dx_error_set(err, DX_EIO, "cannot resolve store path %s: %s", path, strerror(errno));
  if (!(p = calloc(1, sizeof *p))) { free(real); return dx__lm_nomem(err); }
  rc = registry_acquire(real, &o, &p->se, err);
  if (rc) { free(p); return rc; }
  p->base.methods = &lm_methods;
  p->no_sync = o.no_sync;
  p->tag = dx__random_u64() | 1; /* never 0 (unknown) */
  dx__lm_tag_name(p->tag, p->tag_name, sizeof p->tag_name);
  if ((rc = dx__lm_live_open(p, p->se->path))) {
    lm_destroy(&p->base);
    return dx__lm_nomem(err);
  }
  *out = &p->base;
  return 0;
}

