/*
** live.c -- LMDB provider: worker liveness through OFD locks on <store>/workers.lock.
**
** Workers sharing an LMDB store are on one host, so the kernel can say whether a worker's
** process still lives. Each worker id maps to two bytes of workers.lock (offset 2h and 2h+1,
** h a 40-bit hash of the id, so no table of slots is needed and PIDs play no part):
**   - byte 2h: a shared (read) OFD lock, held by every handle that fetched session work or
**     registered as that id. A peer that can't get a write lock on it (F_OFD_GETLK) knows a
**     process holding the id lives; when the byte is free the owner is dead, and its live
**     lease no longer pins its sessions.
**   - byte 2h+1: an exclusive (write) OFD lock taken by worker_register: a second live
**     process with the same id fails to take it and is refused.
** OFD locks belong to the open file description, not the process: closing another descriptor
** of the file elsewhere in the process does not drop them (unlike POSIX F_SETLK), and the
** kernel drops them the moment the process dies. The descriptor is O_CLOEXEC and a fork()ed
** child closes it (pthread_atfork), so a child never keeps a dead parent looking alive.
** F_OFD_GETLK does not see locks of the caller's own description: ids held by this handle are
** remembered in a list and count as alive. On a network filesystem (NFS, SMB/CIFS, ...) lock
** state is not trustworthy: liveness stays off there (logged) and leases decide, as before.
*/
#include <sys/vfs.h>

#include "log.h"
#include "providers/lmdb/lmdb_int.h"

#define LIVE_HASH_BITS 40
#define LIVE_SWEEP_MS 250

typedef struct held_s {
  char *worker;
  int registered;    /* worker_register calls not undone yet (the write lock on 2h+1) */
  struct held_s *next;
} held_t;

struct lm_live_s {
  pthread_mutex_t mu;
  int fd;            /* workers.lock; -1: liveness off (network filesystem, or no file) */
  pid_t pid;         /* process that opened fd */
  held_t *held;
  int64_t swept_at;  /* caller-clock ms of the last dead-owner sweep */
  int64_t locks_swept_at; /* ... and of the last sweep of dead handles' locks */
  struct lm_live_s *next_all;
};

/* Every open liveness state of the process, so a fork child can close the descriptors. */
static pthread_mutex_t g_all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lm_live_s *g_all;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void atfork_child(void) {
  struct lm_live_s *l;
  /* single-threaded here; the parent keeps its locks (the description stays open there) */
  for (l = g_all; l; l = l->next_all)
    if (l->fd >= 0) {
      close(l->fd);
      l->fd = -1;
    }
}

static void atfork_install(void) { pthread_atfork(NULL, NULL, atfork_child); }

static off_t live_off(const char *worker, int which) {
  /* FNV-1a from this seed (not the standard basis): every process sharing the store computes
  ** the same offsets, so the seed stays as first shipped */
  uint64_t h = dx__fnv1a64(UINT64_C(1469598103934665603), worker);
  return (off_t)((h & ((1ull << LIVE_HASH_BITS) - 1)) * 2 + (uint64_t)which);
}

static int lock_op(int fd, int cmd, short type, off_t off, struct flock *out) {
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = off;
  fl.l_len = 1;
  if (fcntl(fd, cmd, &fl) != 0) return -errno;
  if (out) *out = fl;
  return 0;
}

/* Filesystems whose lock state a crash or a server restart can lose or fake. */
static const long NETWORK_FS[] = {
  0x6969,              /* NFS */
  0x517B,              /* SMB */
  (long)0xFF534D42,    /* CIFS */
  (long)0xFE534D42,    /* SMB2 */
  0x00c36400,          /* Ceph */
  0x01021997,          /* 9P */
  0x65735546,          /* FUSE (sshfs and the like) */
  0x0BD00BD0,          /* Lustre */
  0x47504653,          /* GPFS */
};

int dx__lm_live_open(lm_t *p, const char *dir) {
  struct lm_live_s *l = calloc(1, sizeof *l);
  struct statfs sf;
  char *path;
  size_t i;
  if (!l) return DX_ENOMEM;
  pthread_mutex_init(&l->mu, NULL);
  l->fd = -1;
  l->pid = getpid();
  l->swept_at = l->locks_swept_at = INT64_MIN / 2;
  p->live = l;
  if (statfs(dir, &sf) == 0)
    for (i = 0; i < sizeof NETWORK_FS / sizeof NETWORK_FS[0]; i++)
      if ((long)sf.f_type == NETWORK_FS[i]) {
        dx__log(DX_LOG_WARN, "store on a network filesystem: dead workers are found by lease "
                "only", "store=%s fs_type=0x%lx", dir, (unsigned long)sf.f_type);
        return 0;
      }
  if (!(path = malloc(strlen(dir) + 16))) return DX_ENOMEM;
  sprintf(path, "%s/workers.lock", dir);
  l->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (l->fd < 0)
    dx__log(DX_LOG_WARN, "cannot open the workers lock file: dead workers are found by lease "
            "only", "path=%s error=\"%s\"", path, strerror(errno));
  free(path);
  pthread_once(&g_atfork_once, atfork_install);
  pthread_mutex_lock(&g_all_mu);
  l->next_all = g_all;
  g_all = l;
  pthread_mutex_unlock(&g_all_mu);
  return 0;
}

void dx__lm_live_close(lm_t *p) {
  struct lm_live_s *l = p->live, **lp;
  held_t *h, *next;
  if (!l) return;
  pthread_mutex_lock(&g_all_mu);
  for (lp = &g_all; *lp; lp = &(*lp)->next_all)
    if (*lp == l) {
      *lp = l->next_all;
      break;
    }
  pthread_mutex_unlock(&g_all_mu);
  if (l->fd >= 0 && l->pid == getpid()) close(l->fd); /* drops every lock of this handle */
  for (h = l->held; h; h = next) {
    next = h->next;
    free(h->worker);
    free(h);
  }
  pthread_mutex_destroy(&l->mu);
  free(l);
  p->live = NULL;
}

static int usable(const struct lm_live_s *l) {
  return l && l->fd >= 0 && l->pid == dx__getpid();
}

static held_t *find_held(struct lm_live_s *l, const char *worker) {
  held_t *h;
  for (h = l->held; h; h = h->next)
    if (strcmp(h->worker, worker) == 0) return h;
  return NULL;
}

/* With l->mu held: `worker` in the held list, its shared byte locked (NULL: out of memory). */
static held_t *hold_locked(struct lm_live_s *l, const char *worker) {
  held_t *h = find_held(l, worker);
  int rc;
  if (h) return h;
  if (!(h = calloc(1, sizeof *h)) || !(h->worker = dx__strdup(worker))) {
    free(h);
    return NULL;
  }
  if ((rc = lock_op(l->fd, F_OFD_SETLK, F_RDLCK, live_off(worker, 0), NULL)) != 0)
    dx__log(DX_LOG_WARN, "worker liveness lock failed", "worker_id=%s error=\"%s\"", worker,
            strerror(-rc));
  h->next = l->held;
  l->held = h;
  return h;
}

void dx__lm_live_hold(lm_t *p, const char *worker) {
  struct lm_live_s *l = p->live;
  if (!usable(l)) return;
  pthread_mutex_lock(&l->mu);
  (void)hold_locked(l, worker);
  pthread_mutex_unlock(&l->mu);
}

int dx__lm_live_alive(lm_t *p, const char *owner) {
  struct lm_live_s *l = p->live;
  struct flock fl = {0};
  int alive = 1;
  if (!usable(l) || !owner || !*owner) return 1; /* no liveness: the lease decides */
  pthread_mutex_lock(&l->mu);
  if (!find_held(l, owner) &&
      lock_op(l->fd, F_OFD_GETLK, F_WRLCK, live_off(owner, 0), &fl) == 0)
    alive = fl.l_type != F_UNLCK;
  pthread_mutex_unlock(&l->mu);
  return alive;
}

int dx__lm_live_sweep_due(lm_t *p, int64_t now) {
  struct lm_live_s *l = p->live;
  int due;
  if (!usable(l)) return 0;
  pthread_mutex_lock(&l->mu);
  if ((due = now - l->swept_at >= LIVE_SWEEP_MS || now < l->swept_at)) l->swept_at = now;
  pthread_mutex_unlock(&l->mu);
  return due;
}

int64_t dx__lm_live_next_sweep(lm_t *p) {
  struct lm_live_s *l = p->live;
  int64_t at;
  if (!usable(l)) return LM_NEVER;
  pthread_mutex_lock(&l->mu);
  /* the later stamp: a handle that never fetches sessions never moves swept_at */
  at = (l->swept_at > l->locks_swept_at ? l->swept_at : l->locks_swept_at) + LIVE_SWEEP_MS;
  pthread_mutex_unlock(&l->mu);
  return at;
}

/* A handle's name as a liveness holder ("@handle:<tag hex>"). */
void dx__lm_tag_name(uint64_t tag, char *buf, size_t n) {
  snprintf(buf, n, "@handle:%016llx", (unsigned long long)tag);
}

int dx__lm_live_locks_due(lm_t *p, int64_t now) {
  struct lm_live_s *l = p->live;
  int due;
  if (!usable(l)) return 0;
  pthread_mutex_lock(&l->mu);
  (void)hold_locked(l, p->tag_name); /* the locks this handle takes are alive while it is */
  if ((due = now - l->locks_swept_at >= LIVE_SWEEP_MS || now < l->locks_swept_at))
    l->locks_swept_at = now;
  pthread_mutex_unlock(&l->mu);
  return due;
}

int dx__lm_live_locker_alive(lm_t *p, uint64_t locker) {
  char name[40];
  if (!locker || locker == p->tag) return 1;
  dx__lm_tag_name(locker, name, sizeof name);
  return dx__lm_live_alive(p, name);
}

int dx__lm_worker_register(dx_provider_t *pp, const char *worker, int64_t now,
                           dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  struct lm_live_s *l = p->live;
  held_t *h;
  int rc = 0;
  if ((rc = dx__check_worker_id(worker, err))) return rc;
  if (!usable(l)) return dx__lm_workers_put(p, worker, now, err); /* listed, never judged dead */
  pthread_mutex_lock(&l->mu);
  if (!(h = hold_locked(l, worker))) {
    pthread_mutex_unlock(&l->mu);
    return dx__lm_nomem(err);
  }
  if (h->registered) { /* this handle holds the id already: count it */
    h->registered++;
    pthread_mutex_unlock(&l->mu);
    return 0;
  }
  rc = lock_op(l->fd, F_OFD_SETLK, F_WRLCK, live_off(worker, 1), NULL);
  if (rc == -EAGAIN || rc == -EACCES) {
    pthread_mutex_unlock(&l->mu);
    return dx_error_set(err, DX_EEXIST, "worker_node_id '%s' is already in use by a live "
                        "process on store %s: give each worker process its own id", worker,
                        p->se->path);
  }
  if (rc) {
    dx__log(DX_LOG_WARN, "worker registration lock failed", "worker_id=%s error=\"%s\"",
            worker, strerror(-rc));
    rc = 0;
  }
  h->registered = 1;
  pthread_mutex_unlock(&l->mu);
  if ((rc = dx__lm_workers_put(p, worker, now, err))) return rc;
  return dx__lm_reap_own(p, worker, now, err);
}

void dx__lm_worker_unregister(dx_provider_t *pp, const char *worker) {
  lm_t *p = (lm_t *)pp;
  struct lm_live_s *l = p->live;
  held_t *h, **hp;
  int last;
  if (!worker) return;
  if (!usable(l)) {
    dx__lm_workers_del(p, worker);
    return;
  }
  pthread_mutex_lock(&l->mu);
  for (hp = &l->held; (h = *hp); hp = &h->next)
    if (strcmp(h->worker, worker) == 0) break;
  last = h && h->registered == 1;
  if (h && (!h->registered || --h->registered == 0)) { /* a hold fetches took goes too */
    /* both bytes go: peers see the id dead at once */
    lock_op(l->fd, F_OFD_SETLK, F_UNLCK, live_off(worker, 1), NULL);
    lock_op(l->fd, F_OFD_SETLK, F_UNLCK, live_off(worker, 0), NULL);
    *hp = h->next;
    free(h->worker);
    free(h);
  }
  pthread_mutex_unlock(&l->mu);
  /* outside l->mu: a write txn may wait for a batch whose thread asks for liveness */
  if (last) dx__lm_workers_del(p, worker);
}
