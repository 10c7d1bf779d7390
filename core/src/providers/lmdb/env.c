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
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = 1;
  return 0;
}

static MDB_txn *take_batch(lm_t *p) {
  MDB_txn *txn;
  pthread_mutex_lock(&p->se->batch_mu);
  txn = p->se->batch;
  p->se->batch = NULL;
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = 0;
  return txn;
}

static int lm_commit(dx_provider_t *pp, int sync, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  int rc;
  if (!p->in_batch) return dx_error_set(err, DX_ESTATE, "commit without begin");
  /* sync=0 marks a lock-only batch: nothing for other workers to pick up. */
  rc = dx__lm_commit_top(p->se, take_batch(p), sync && !p->no_sync, sync);
  return rc ? dx__lm_mdb_error(p->se, rc, "commit", err) : 0;
}

static void lm_rollback(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (p->in_batch) mdb_txn_abort(take_batch(p));
}


/* Format 1 indexed session rows in work_ready / work_lock under class byte 1; move them to the
** session indexes. */
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
      key_work_idx(&k, 1, r.token ? r.locked_until : r.visible_at, r.seq);
      rc = dx__lm_db_del(t, r.token ? DB_WORK_LOCK : DB_WORK_READY, &k);
    }
    if (!rc && r.session_id && !(rc = dx__lm_row_index(t, &r, 1)))
      rc = dx__lm_squeue_refresh(t, r.session_id, 1);
    dx__lm_row_clear(&r);
  }
  free(l.v);
  return rc;
}

/* {===== open / close =====} */

static void env_free(shared_env_t *se) {
  if (se->env) mdb_env_close(se->env);
  if (se->notify_fd >= 0) close(se->notify_fd);
  free(se->notify_path);
  pthread_mutex_destroy(&se->commit_mu);
  pthread_mutex_destroy(&se->batch_mu);
  free(se->path);
  free(se);
}

/* Open every named DB and check (or stamp) the store format, in one durable txn. */
static int env_init_dbs(shared_env_t *se, dx_error_t *err) {
  tx_t t;
  dkey_t k;
  MDB_val v;
  unsigned char fmt[4] = {0, 0, 0, LM_STORE_FORMAT};
  static const unsigned char fmt1[4] = {0, 0, 0, 1};
  int i, rc = dx__lm_tx_begin(se, 1, 1, &t, err);
  for (i = 0; i < DB__COUNT && !rc; i++) {
    int mrc = mdb_dbi_open(t.txn, dx__lm_db_names[i], MDB_CREATE, &se->dbi[i]);
    if (mrc) rc = dx__lm_tx_err(&t, mrc, dx__lm_db_names[i]);
  }
  if (rc) return dx__lm_tx_end(&t, rc);
  key_name(&k, "format");
  rc = dx__lm_db_get(&t, DB_META, &k, &v);
  if (rc == DX_ENOTFOUND) rc = dx__lm_db_put(&t, DB_META, &k, fmt, 4, 0);
  else if (!rc && v.mv_size == 4 && memcmp(v.mv_data, fmt1, 4) == 0) {
    if (!(rc = upgrade_from_1(&t))) rc = dx__lm_db_put(&t, DB_META, &k, fmt, 4, 0);
  } else if (!rc && (v.mv_size != 4 || memcmp(v.mv_data, fmt, 4) != 0))
    rc = dx_error_set(t.err, DX_ESTORE,
                      "store %s has an unknown format (this build reads format %u)", se->path,
                      LM_STORE_FORMAT);
  return dx__lm_tx_end(&t, rc);
}

static int env_open(char *path, size_t map_size, shared_env_t **out, dx_error_t *err) {
  shared_env_t *se = calloc(1, sizeof *se);
  MDB_envinfo info;
  int dead, mrc;
  if (!se) { free(path); return dx__lm_nomem(err); }
  se->path = path;
  se->pid = getpid();
  se->refs = 1;
  se->map_size = map_size;
  se->notify_fd = -1;
  if ((se->notify_path = malloc(strlen(path) + 8)) != NULL) {
    sprintf(se->notify_path, "%s/notify", path);
    se->notify_fd = open(se->notify_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  pthread_mutex_init(&se->commit_mu, NULL);
  pthread_mutex_init(&se->batch_mu, NULL);
  if ((mrc = mdb_env_create(&se->env)) == 0 &&
      (mrc = mdb_env_set_maxdbs(se->env, LM_MAXDBS)) == 0 &&
      (mrc = mdb_env_set_mapsize(se->env, map_size)) == 0)
    mrc = mdb_env_open(se->env, path, MDB_NOTLS, 0644);
  if (mrc) {
    int code = mrc == MDB_INVALID || mrc == MDB_VERSION_MISMATCH ? DX_ECORRUPT : DX_ESTORE;
    int rc = dx_error_set(err, code, "cannot open store %s: %s", path, mdb_strerror(mrc));
    env_free(se);
    return rc;
  }
  mdb_reader_check(se->env, &dead); /* free reader slots left by killed processes */
  if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  if ((mrc = env_init_dbs(se, err))) {
    env_free(se);
    return mrc;
  }
  *out = se;
  return 0;
}

/* Find or open the env for `path` (realpath, owned by this call). */
static int registry_acquire(char *path, size_t map_size, shared_env_t **out, dx_error_t *err) {
  shared_env_t *se;
  int rc = 0;
  pthread_mutex_lock(&g_reg_mu);
  for (se = g_reg; se; se = se->next)
    if (se->pid == getpid() && strcmp(se->path, path) == 0) break;
  if (se) {
    se->refs++;
    free(path);
  } else if ((rc = env_open(path, map_size, &se, err)) == 0) {
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

static int mkdir_p(const char *path, dx_error_t *err) {
  char *buf = dx__strdup(path), *s;
  struct stat sb;
  int rc = 0;
  if (!buf) return dx__lm_nomem(err);
  for (s = buf + 1; ; s++) {
    if (*s != '/' && *s != 0) continue;
    char c = *s;
    *s = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
      rc = dx_error_set(err, DX_EIO, "cannot create directory %s: %s", buf, strerror(errno));
      break;
    }
    *s = c;
    if (!c) break;
  }
  free(buf);
  if (!rc && (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    rc = dx_error_set(err, DX_EIO, "store path %s is not a directory", path);
  return rc;
}

static void lm_destroy(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (!p) return;
  lm_rollback(pp);
  registry_release(p->se);
  free(p);
}

static const char *lm_notify_path(dx_provider_t *pp) { return ((lm_t *)pp)->se->notify_path; }

static const dx_provider_methods_t lm_methods = {
  3,
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
};

int dx_lmdb_open(const char *path, const dx_lmdb_opts_t *opts, dx_provider_t **out,
                 dx_error_t *err) {
  lm_t *p;
  char *real;
  size_t map_size;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if (!path || !*path) return dx_error_set(err, DX_EINVAL, "store path is empty");
  if (opts && opts->version < 1)
    return dx_error_set(err, DX_EINVAL, "dx_lmdb_opts_t.version must be 1");
  if ((rc = mkdir_p(path, err))) return rc;
  if (!(real = realpath(path, NULL)))
    return dx_error_set(err, DX_EIO, "cannot resolve store path %s: %s", path, strerror(errno));
  if (!(p = calloc(1, sizeof *p))) { free(real); return dx__lm_nomem(err); }
  map_size = opts && opts->map_size ? opts->map_size : LM_DEFAULT_MAP;
  rc = registry_acquire(real, map_size, &p->se, err);
  if (rc) { free(p); return rc; }
  p->base.methods = &lm_methods;
  p->no_sync = opts && opts->no_sync;
  *out = &p->base;
  return 0;
}

