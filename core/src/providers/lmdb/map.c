/*
** map.c -- LMDB provider: the map and the store's files. Before each top-level transaction the
** files are checked (a truncated data.mdb would otherwise be read through the map and raise
** SIGBUS; a deleted lock.mdb would let new processes ignore the running ones' locks), and
** before each top-level write the map grows when it is nearly or actually full, up to the
** store's maximum size. Resizing needs every transaction of this process closed: it takes the
** remap lock as writer, every top-level transaction holds it as reader.
*/
#include "lmdb_int.h"

int dx__lm_can_grow(shared_env_t *se) {
  return !se->read_only && (se->max_size == 0 || se->map_size < se->max_size);
}

/* Bytes in use: pages up to the last one any committed transaction wrote. */
static size_t used_bytes(shared_env_t *se) {
  MDB_envinfo info;
  if (mdb_env_info(se->env, &info) != 0) return 0;
  return ((size_t)info.me_last_pgno + 1) * se->psize;
}

int dx__lm_files_ok(shared_env_t *se, dx_error_t *err) {
  struct stat st;
  size_t need;
  if (__atomic_load_n(&se->lost, __ATOMIC_RELAXED))
    goto lost;
  if (se->lock_ino && (stat(se->lock_path, &st) != 0 || st.st_ino != se->lock_ino ||
                       st.st_dev != se->lock_dev)) {
    __atomic_store_n(&se->lost, 1, __ATOMIC_RELAXED);
    goto lost;
  }
  if (fstat(se->data_fd, &st) != 0)
    return dx_error_set(err, DX_EIO, "store %s: cannot check data.mdb: %s", se->path,
                        strerror(errno));
  /* the meta pages are read through the map too: check them before asking for last_pgno */
  if ((size_t)st.st_size < 2 * se->psize || (size_t)st.st_size < (need = used_bytes(se)))
    return dx_error_set(err, DX_ECORRUPT,
                        "store %s is damaged: data.mdb is %lld bytes but its pages reach "
                        "%zu bytes (the file was truncated)",
                        se->path, (long long)st.st_size,
                        (size_t)st.st_size < 2 * se->psize ? 2 * se->psize : need);
  return 0;
lost:
  return dx_error_set(err, DX_ECORRUPT,
                      "store %s is unsafe to use: its lock file lock.mdb was deleted or "
                      "replaced while the store was open; stop every process using the store, "
                      "then start them again",
                      se->path);
}

static void set_size(shared_env_t *se, size_t size) {
  MDB_envinfo info;
  pthread_rwlock_wrlock(&se->remap);
  if (size == 0 || size > se->map_size) mdb_env_set_mapsize(se->env, size);
  if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  pthread_rwlock_unlock(&se->remap);
}

void dx__lm_adopt_size(shared_env_t *se) { set_size(se, 0); }

/* Double the map (up to max_size) when a write found it full or it is three quarters used.
** LMDB only reserves address space for the map: the file grows as pages are written. */
int dx__lm_make_room(shared_env_t *se, dx_error_t *err) {
  size_t map = se->map_size, want;
  (void)err;
  if (!dx__lm_can_grow(se)) return 0; /* at the limit: a full map reports it */
  if (!__atomic_load_n(&se->grow_wanted, __ATOMIC_RELAXED) && used_bytes(se) <= map - map / 4)
    return 0;
  want = map > SIZE_MAX / 2 ? SIZE_MAX : map * 2;
  if (se->max_size && want > se->max_size) want = se->max_size;
  set_size(se, want);
  __atomic_store_n(&se->grow_wanted, 0, __ATOMIC_RELAXED);
  return 0;
}
