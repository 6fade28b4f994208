/*
 * dist/dist.c: the dist module of dist/dist.h over Open MPI, and its size-1
 * world when built without MPI (LT_HAVE_MPI undefined) or not started by
 * mpirun.
 *
 * What this is not: a transport (every byte goes through MPI) or a scheduler
 * of its own (buckets are reduced by MPI_Iallreduce, progressed by MPI).
 */
#include "dist/dist.h"

#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"
#include "autograd/autograd.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef LT_HAVE_MPI
#include <mpi.h>
#endif

#define MAX_SCALARS 4096

static struct {
  bool active;      /* MPI_Init was called by us and MPI_Finalize not yet */
  bool initialized; /* lt_dist_init ran */
  int rank, size, local_rank, local_size;
  double timeout;   /* seconds a collective may wait without completing (0: forever) */
  int64_t seq;      /* collectives waited for so far: the same sequence on every rank */
#ifdef LT_HAVE_MPI
  MPI_Comm world;   /* a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
  MPI_Comm notice;  /* another: "I am waiting in collective #seq" notices after a timeout */
#endif
} W = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .timeout = LT_DIST_TIMEOUT_DEFAULT};

#ifdef LT_HAVE_MPI
/* LT_ERR_IO with MPI's own words for rc. */
static lt_status mpi_err(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
  return lt__err(LT_ERR_IO, "dist: %s: %s", what, msg);
}
#define MPI_TRY(call, what)                     \
  do {                                          \
    int rc_ = (call);                           \
    if (rc_ != MPI_SUCCESS) return mpi_err(rc_, what); \
  } while (0)

/* Sleeps about us microseconds. */
static void nap(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* After a collective timed out on this rank. Every rank that waits tells
 * rank 0 which collective it waits in (a notice on W.notice); rank 0 gathers
 * notices for a moment and names the ranks that sent none (stopped, looping,
 * or far behind). The others give rank 0 that moment before their error ends
 * the job (a rank's exit makes mpirun end every rank, rank 0 included). */
static lt_status timed_out(const char *what, double waited) {
  enum { TAG = 17 };
  const double collect_s = 2.0, linger_s = 5.0;
  if (W.rank != 0) {
    MPI_Request r;
    static int64_t seq; /* the send may outlive this call */
    seq = W.seq;
    /* synchronous: complete only once rank 0 has taken it */
    bool pending = MPI_Issend(&seq, 1, MPI_INT64_T, 0, TAG, W.notice, &r) == MPI_SUCCESS, taken = false;
    for (double t0 = lt_monotonic_seconds(); lt_monotonic_seconds() - t0 < linger_s;) {
      int done = 0;
      if (pending) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done) pending = false, taken = true;
      nap(20000);
    }
    if (pending) MPI_Request_free(&r);
    return lt__err(LT_ERR_IO,
                   "dist: rank %d: %s (collective #%lld) made no progress for %.0f s (the timeout: --dist-timeout, "
                   "LT_DIST_TIMEOUT): %s",
                   W.rank, what, (long long)W.seq, waited,
                   taken ? "a rank is stopped, in an endless loop or far behind; rank 0's message names it"
                         : "rank 0 did not answer: rank 0 (at least) is stopped, in an endless loop or far behind");
  }
  char *here = calloc((size_t)W.size, 1);
  if (!here) return lt__err(LT_ERR_NOMEM, "dist: %s timed out after %.0f s (and no memory to say more)", what, waited);
  here[0] = 1;
  char other[256] = "";
  for (double t0 = lt_monotonic_seconds(); lt_monotonic_seconds() - t0 < collect_s;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG, W.notice, &flag, &st) != MPI_SUCCESS) break;
    if (!flag) {
      nap(20000);
      continue;
    }
    int64_t seq = -1;
    MPI_Recv(&seq, 1, MPI_INT64_T, st.MPI_SOURCE, TAG, W.notice, MPI_STATUS_IGNORE);
    if (seq == W.seq) here[st.MPI_SOURCE] = 1;
    else if (strlen(other) < sizeof other - 40) /* a rank waits in another collective: a program bug */
      snprintf(other + strlen(other), sizeof other - strlen(other), "; rank %d waits in collective #%lld",
               st.MPI_SOURCE, (long long)seq);
  }
  char late[256] = "";
  int n_late = 0;
  for (int r = 1; r < W.size; r++)
    if (!here[r] && strlen(late) < sizeof late - 16) {
      snprintf(late + strlen(late), sizeof late - strlen(late), "%s%d", n_late ? ", " : "", r);
      n_late++;
    }
  free(here);
  return lt__err(LT_ERR_IO,
                 "dist: %s (collective #%lld) made no progress for %.0f s (the timeout: --dist-timeout, "
                 "LT_DIST_TIMEOUT): %s%s%s%s",
                 what, (long long)W.seq, waited, n_late ? (n_late > 1 ? "ranks " : "rank ") : "",
                 n_late ? late : "every rank waits in it (a lost message?)",
                 n_late ? " did not reach it (stopped, in an endless loop, or far behind)" : "",
                 other);
}

/* Waits for a collective's request, polling (MPI makes progress inside
 * MPI_Test), for at most the timeout; then the ranks that did not reach it
 * are named (timed_out) and the request is left: the job must end. */
static lt_status wait_req(MPI_Request *req, const char *what) {
  W.seq++;
  const double t0 = lt_monotonic_seconds();
  for (long spins = 0;; spins++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_err(rc, what);
    if (done) return LT_OK;
    /* Every 256 tests, the clock. No sleeping: MPI_Test progresses as
     * MPI_Wait does (and yields the core when oversubscribed, as MPI_Wait
     * does); a nap of even 50 us cost milliseconds per collective under load. */
    if ((spins & 255) == 255) {
      double waited = lt_monotonic_seconds() - t0;
      if (W.timeout > 0 && waited > W.timeout) return timed_out(what, waited);
    }
  }
}

/* Starts a non-blocking collective (call), then wait_req. */
#define MPI_COLLECTIVE(call, what)               \
  do {                                           \
    MPI_Request req_;                            \
    int rc_ = (call);                            \
    if (rc_ != MPI_SUCCESS) return mpi_err(rc_, what); \
    lt_status s_ = wait_req(&req_, what);        \
    if (s_ != LT_OK) return s_;                  \
  } while (0)

/* Started by mpirun (Open MPI sets these for every process it launches). */
static bool launched_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}
#endif

/* ======================================================================== */
/* The world                                                                */
/* ======================================================================== */

bool lt_dist_built_with_mpi(void) {
#ifdef LT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

lt_status lt_dist_init(int *argc, char ***argv) {
  if (W.initialized) return LT_OK;
  W.initialized = true;
  const char *env = lt__setting_get(LT__SETTING_DIST_TIMEOUT);
  if (env && *env) {
    char *end;
    double t = strtod(env, &end);
    if (*end || !(t >= 0) || t > 1e9)
      return lt__err(LT_ERR_INVALID, "dist: LT_DIST_TIMEOUT '%s': not a number of seconds in [0, 1e9]", env);
    W.timeout = t;
  }
#ifdef LT_HAVE_MPI
  if (!launched_by_mpirun()) return LT_OK;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return lt__err(LT_ERR_IO, "dist: MPI_Init_thread failed (error %d)", rc);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &W.world), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(W.world, MPI_ERRORS_RETURN);
  MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &W.notice), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(W.notice, MPI_ERRORS_RETURN);
  MPI_Comm_rank(W.world, &W.rank);
  MPI_Comm_size(W.world, &W.size);
  MPI_Comm local;
  MPI_TRY(MPI_Comm_split_type(W.world, MPI_COMM_TYPE_SHARED, W.rank, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type (the ranks of this machine)");
  MPI_Comm_rank(local, &W.local_rank);
  MPI_Comm_size(local, &W.local_size);
  MPI_Comm_free(&local);
  W.active = true;
#else
  (void)argc, (void)argv;
#endif
  return LT_OK;
}

void lt_dist_finalize(void) {
#ifdef LT_HAVE_MPI
  if (W.active) {
    MPI_Comm_free(&W.world);
    MPI_Comm_free(&W.notice);
    MPI_Finalize();
  }
#endif
  W.active = false;
  W.rank = 0, W.size = 1, W.local_rank = 0, W.local_size = 1;
}

_Noreturn void lt_dist_abort(int code) {
  fflush(stdout), fflush(stderr);
#ifdef LT_HAVE_MPI
  if (W.active) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  exit(code);
}

bool lt_dist_active(void) { return W.active; }

lt_status lt_dist_set_timeout(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9)
    return lt__err(LT_ERR_INVALID, "dist_set_timeout: %g seconds: must be in [0, 1e9] (0: no timeout)", seconds);
  W.timeout = seconds;
  return LT_OK;
}
double lt_dist_timeout(void) { return W.timeout; }
int lt_dist_rank(void) { return W.rank; }
int lt_dist_size(void) { return W.size; }
int lt_dist_local_rank(void) { return W.local_rank; }
int lt_dist_local_size(void) { return W.local_size; }

lt_status lt_dist_barrier(void) {
#ifdef LT_HAVE_MPI
  if (W.active) MPI_COLLECTIVE(MPI_Ibarrier(W.world, &req_), "barrier");
#endif
  return LT_OK;
}

/* ======================================================================== */
/* Scalars                                                                  */
/* ======================================================================== */

/* Gathers n 8-byte values of every rank into all[size * n] (rank order). */
static lt_status gather8(const void *v, int n, void *all) {
#ifdef LT_HAVE_MPI
  MPI_COLLECTIVE(MPI_Iallgather(v, n * 8, MPI_BYTE, all, n * 8, MPI_BYTE, W.world, &req_), "allgather");
#else
  memcpy(all, v, (size_t)n * 8); /* a world of one */
#endif
  return LT_OK;
}

static lt_status check_n(const char *what, const void *v, int n, lt_dist_op op) {
  if (n < 0 || n > MAX_SCALARS) return lt__err(LT_ERR_INVALID, "%s: n %d: must be in [0, %d]", what, n, MAX_SCALARS);
  if (n > 0 && !v) return lt__err_null(what, "v");
  if (op != LT_DIST_SUM && op != LT_DIST_MAX && op != LT_DIST_MIN)
    return lt__err(LT_ERR_INVALID, "%s: op %d is not an lt_dist_op", what, (int)op);
  return LT_OK;
}

/* Defines lt_dist_allreduce_<name>: an allgather, then op over the ranks in
 * rank order (so a SUM has one order, the same on every rank). */
#define DEFINE_ALLREDUCE(name, T)                                                               \
  lt_status lt_dist_allreduce_##name(T *v, int n, lt_dist_op op) {                              \
    lt_status s = check_n("dist_allreduce_" #name, v, n, op);                                   \
    if (s != LT_OK || W.size == 1 || n == 0) return s;                                          \
    T *all = malloc((size_t)W.size * (size_t)n * sizeof *all);                                  \
    if (!all) return lt__err(LT_ERR_NOMEM, "dist_allreduce_" #name ": out of memory");          \
    s = gather8(v, n, all);                                                                     \
    for (int i = 0; i < n && s == LT_OK; i++) {                                                 \
      T acc = all[i];                                                                           \
      for (int r = 1; r < W.size; r++) {                                                        \
        T x = all[(size_t)r * (size_t)n + (size_t)i];                                           \
        acc = op == LT_DIST_SUM ? acc + x : op == LT_DIST_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc); \
      }                                                                                         \
      v[i] = acc;                                                                               \
    }                                                                                           \
    free(all);                                                                                  \
    return s;                                                                                   \
  }
DEFINE_ALLREDUCE(f64, double)
DEFINE_ALLREDUCE(i64, int64_t)
#undef DEFINE_ALLREDUCE

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
#define FNV_START 1469598103934665603ull

/* The ranks (after rank 0) whose all[r] differs from all[0], as "1, 3" in buf. */
static int differing_ranks(const uint64_t *all, size_t stride, size_t i, char *buf, size_t size) {
  int count = 0;
  size_t len = 0;
  buf[0] = '\0';
  for (int r = 1; r < W.size; r++) {
    if (all[(size_t)r * stride + i] == all[i]) continue;
    if (len < size) len += (size_t)snprintf(buf + len, size - len, "%s%d", count ? ", " : "", r);
    count++;
  }
  return count;
}

/* The value text shown for each rank in a mismatch message: the first
 * VALUE_SHOWN - 1 bytes (the comparison itself hashes the whole value). */
#define VALUE_SHOWN 256

/* Appends to buf (size bytes, len used) as snprintf would, never past the end. */
static size_t append(char *buf, size_t size, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t size, size_t len, const char *fmt, ...) {
  if (len + 1 >= size) return len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, size - len, fmt, ap);
  va_end(ap);
  return n < 0 ? len : len + (size_t)n >= size ? size - 1 : len + (size_t)n;
}

/* One value of every rank, to be shown: each rank sends its first
 * VALUE_SHOWN - 1 bytes, so that the message names the value of every rank
 * that differs from rank 0. A collective call (every rank, the same value
 * index); text[size * VALUE_SHOWN] receives them in rank order. */
static lt_status gather_shown(const char *value, char *text) {
  char mine[VALUE_SHOWN] = {0};
  size_t n = strlen(value);
  memcpy(mine, value, n < VALUE_SHOWN - 1 ? n : VALUE_SHOWN - 1);
  return gather8(mine, VALUE_SHOWN / 8, text);
}

lt_status lt_dist_check_same(const char *what, int n, const char *const *names, const char *const *values) {
  if (!what) what = "dist";
  if (n < 0 || n > MAX_SCALARS - 1) return lt__err(LT_ERR_INVALID, "%s: check_same: n %d: must be in [0, %d]", what, n, MAX_SCALARS - 1);
  if (n > 0 && (!names || !values)) return lt__err_null("dist_check_same", !names ? "names" : "values");
  for (int i = 0; i < n; i++)
    if (!names[i] || !values[i]) return lt__err_null("dist_check_same", !names[i] ? "names[i]" : "values[i]");
  if (W.size == 1) return LT_OK;
  /* [0]: the count, then one hash per value (name and value). */
  uint64_t *mine = malloc(((size_t)n + 1) * sizeof *mine);
  uint64_t *all = malloc((size_t)W.size * ((size_t)n + 1) * sizeof *all);
  if (!mine || !all) return free(mine), free(all), lt__err(LT_ERR_NOMEM, "%s: check_same: out of memory", what);
  mine[0] = (uint64_t)n;
  /* Every rank sends MAX(n) values: agree on the largest count first. */
  int64_t nmax = n;
  lt_status s = lt_dist_allreduce_i64(&nmax, 1, LT_DIST_MAX);
  if (s == LT_OK && nmax != n) {
    int64_t nmin = n;
    lt_dist_allreduce_i64(&nmin, 1, LT_DIST_MIN);
    s = lt__err(LT_ERR_INVALID, "%s: the configuration differs across ranks: %lld values on one rank, %lld on another%s",
                what, (long long)nmin, (long long)nmax, W.rank ? " (see rank 0's message)" : "");
  } else if (s == LT_OK) {
    int64_t nmin = n;
    s = lt_dist_allreduce_i64(&nmin, 1, LT_DIST_MIN);
    if (s == LT_OK && nmin != n)
      s = lt__err(LT_ERR_INVALID, "%s: the configuration differs across ranks: %lld values on one rank, %d on another%s",
                  what, (long long)nmin, n, W.rank ? " (see rank 0's message)" : "");
  }
  for (int i = 0; i < n; i++) {
    uint64_t h = fnv(FNV_START, names[i], strlen(names[i]) + 1);
    mine[i + 1] = fnv(h, values[i], strlen(values[i]));
  }
  if (s == LT_OK) s = gather8(mine, n + 1, all);
  /* the first value that differs (the names of the others listed), then its text on every rank */
  const size_t stride = (size_t)n + 1;
  int first = -1, more = 0;
  char others[512] = "";
  size_t olen = 0;
  for (int i = 1; i <= n && s == LT_OK; i++) {
    bool differs = false;
    for (int r = 1; r < W.size && !differs; r++) differs = all[(size_t)r * stride + (size_t)i] != all[i];
    if (!differs) continue;
    if (first < 0) first = i;
    else olen = append(others, sizeof others, olen, "%s'%s'", more++ ? ", " : "", names[i - 1]);
  }
  char *text = first >= 0 ? malloc((size_t)W.size * VALUE_SHOWN) : NULL;
  if (first >= 0 && !text) s = lt__err(LT_ERR_NOMEM, "%s: check_same: out of memory", what);
  if (text && (s = gather_shown(values[first - 1], text)) == LT_OK) {
    /* "'--batch' is '4' on rank 0, '3' on rank 1": every rank that differs from rank 0, with its value */
    char msg[4096];
    const char *cut = strlen(text) == VALUE_SHOWN - 1 ? "..." : "";
    size_t len = append(msg, sizeof msg, 0, "'%s' is '%s%s' on rank 0", names[first - 1], text, cut);
    int shown = 0, bad = 0;
    bool same_shown = true; /* all shown texts equal: the values differ past what is shown */
    for (int r = 1; r < W.size; r++) {
      if (all[(size_t)r * stride + (size_t)first] == all[first]) continue;
      const char *t = text + (size_t)r * VALUE_SHOWN;
      same_shown &= strcmp(t, text) == 0;
      if (bad++ < 16) {
        len = append(msg, sizeof msg, len, ", '%s%s' on rank %d", t, strlen(t) == VALUE_SHOWN - 1 ? "..." : "", r);
        shown++;
      }
    }
    if (bad > shown) len = append(msg, sizeof msg, len, " (and on %d more ranks)", bad - shown);
    if (same_shown) len = append(msg, sizeof msg, len, " (the values differ after byte %d)", VALUE_SHOWN - 1);
    s = lt__err(LT_ERR_INVALID, "%s: the configuration differs across ranks: %s%s%s%s", what, msg,
                more ? "; also " : "", others, more ? (more > 1 ? " differ" : " differs") : "");
  }
  free(text);
  free(mine), free(all);
  return s;
}

/* ======================================================================== */
/* Parameters                                                               */
/* ======================================================================== */

/* The hash of one tensor's name, shape and dtype (meta) or also its bits. */
static uint64_t tensor_hash(uint64_t h, const char *name, const lt_tensor *t, bool bits) {
  h = fnv(h, name, strlen(name) + 1);
  h = fnv(h, &t->dtype, sizeof t->dtype);
  h = fnv(h, &t->ndim, sizeof t->ndim);
  h = fnv(h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
  if (!bits) return h;
  lt_tensor *tmp = NULL;
  const lt_tensor *c = lt__as_contig(t, t->dtype, &tmp);
  if (c) h = fnv(h, c->data, (size_t)c->numel * lt_dtype_size(c->dtype));
  else h = fnv(h, "?", 1), lt_clear_error();
  lt_tensor_free(tmp);
  return h;
}

uint64_t lt_dist_params_hash(const lt_params *p) {
  uint64_t h = FNV_START;
  for (int i = 0; p && i < lt_params_count(p); i++) {
    const lt_param *q = lt_params_at(p, i);
    h = tensor_hash(h, q->name, q->value, true);
  }
  return h;
}

/* Every rank's hash of p (meta only or with bits); the ranks that differ
 * from rank 0 into ranks; the count. */
static lt_status compare_hashes(const lt_params *p, bool bits, int *bad, char *ranks, size_t size) {
  *bad = 0;
  ranks[0] = '\0';
  uint64_t h = FNV_START;
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *q = lt_params_at(p, i);
    h = tensor_hash(h, q->name, q->value, bits);
  }
  uint64_t *all = malloc((size_t)W.size * sizeof *all);
  if (!all) return lt__err(LT_ERR_NOMEM, "dist: out of memory");
  lt_status s = gather8(&h, 1, all);
  if (s == LT_OK) *bad = differing_ranks(all, 1, 0, ranks, size);
  free(all);
  return s;
}

lt_status lt_dist_check_params_same(const lt_params *p) {
  if (!p) return lt__err_null("dist_check_params_same", "p");
  if (W.size == 1) return LT_OK;
  char ranks[128];
  int bad;
  lt_status s = compare_hashes(p, true, &bad, ranks, sizeof ranks);
  if (s == LT_OK && bad)
    s = lt__err(LT_ERR_STATE, "dist: the model copies have diverged: the parameters of rank%s %s differ from rank 0's",
                bad > 1 ? "s" : "", ranks);
  return s;
}

/* root's bytes of the (contiguous) tensor t to every rank; t's version is
 * bumped. what names it in errors. */
static lt_status bcast_tensor(lt_tensor *t, int root, const char *what) {
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  LT_CHECK(lt_is_contiguous(t)); /* the store's tensors are made contiguous */
  size_t bytes = (size_t)t->numel * lt_dtype_size(t->dtype);
  /* MPI counts are int: send in chunks of at most 1 GB */
  for (size_t off = 0; off < bytes && s == LT_OK; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    MPI_Request req;
    int rc = MPI_Ibcast((char *)t->data + off, (int)n, MPI_BYTE, root, W.world, &req);
    s = rc != MPI_SUCCESS ? mpi_err(rc, what) : wait_req(&req, what);
  }
  lt__bump_version(t);
#else
  (void)t, (void)root, (void)what;
#endif
  return s;
}

/* Rank 0's bytes of every tensor of p (or only its buffers) to every rank. */
static lt_status bcast_tensors(lt_params *p, bool buffers_only) {
  lt_status s = LT_OK;
  for (int i = 0; i < lt_params_count(p) && s == LT_OK; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (buffers_only && !(q->flags & LT_PARAM_BUFFER)) continue;
    s = bcast_tensor(q->value, 0, "broadcast of the parameters");
  }
  return s;
}

lt_status lt_dist_broadcast_params(lt_params *p) {
  if (!p) return lt__err_null("dist_broadcast_params", "p");
  if (W.size == 1) return LT_OK;
  char ranks[128];
  int bad;
  lt_status s = compare_hashes(p, false, &bad, ranks, sizeof ranks);
  if (s == LT_OK && bad)
    s = lt__err(LT_ERR_INVALID, "dist_broadcast_params: the parameter names, shapes or dtypes of rank%s %s differ from "
                "rank 0's (a different model configuration?)", bad > 1 ? "s" : "", ranks);
  return s == LT_OK ? bcast_tensors(p, false) : s;
}

lt_status lt_dist_broadcast_buffers(lt_params *p) {
  if (!p) return lt__err_null("dist_broadcast_buffers", "p");
  return W.size == 1 ? LT_OK : bcast_tensors(p, true);
}

/* ======================================================================== */
/* The sampler                                                              */
/* ======================================================================== */

void lt_dist_shard(int64_t n, int64_t *start, int64_t *count) {
  if (n < 0) n = 0;
  /* floor(r * n / N) without overflow for any n < 2^63 and N < 2^31 */
  int64_t N = W.size, r = W.rank;
  int64_t a = (n / N) * r + (n % N) * r / N;
  int64_t b = (n / N) * (r + 1) + (n % N) * (r + 1) / N;
  if (start) *start = a;
  if (count) *count = b - a;
}

uint64_t lt_dist_rank_seed(uint64_t seed) { return seed + (uint64_t)W.rank * 0x9E3779B97F4A7C15ull; }

/* ======================================================================== */
/* Gradient buckets                                                         */
/* ======================================================================== */

typedef struct bucket {
  int first, count;   /* entries [first, first + count) of g->params */
  lt_dtype dtype;
  int64_t numel;
  void *buf;          /* numel elements of dtype */
  int nready;         /* parameters whose gradient is final (post-accumulate hook) */
  bool started;       /* its MPI_Iallreduce was started this step */
#ifdef LT_HAVE_MPI
  MPI_Request req;
#endif
} bucket;

/* The user pointer of one parameter's post-accumulate hook. */
typedef struct slot {
  lt_dist_grads *g;
  int bucket;
  bool ready;         /* its gradient is final this step */
} slot;

struct lt_dist_grads {
  lt_params *store;
  lt_tensor **params;  /* the trainable parameters, in reverse store order (borrowed) */
  slot *slots;         /* per entry of params */
  int n_params;
  bucket *buckets;
  int n_buckets;
  int next;            /* the next bucket to start: they start in index order on every rank */
  bool sync;           /* the hooks start buckets (else no_sync: gradients accumulate locally) */
  bool started_all;    /* lt_dist_grads_start ran since the last finish */
  bool hooked;         /* the post-accumulate hooks are registered (size > 1) */
  lt_status hook_err;  /* the first error of a hook this step */
  double t_start, wait_s, total_s, hook_s;
  int64_t early;       /* buckets started by the hooks, during backward (all steps) */
#ifdef LT_HAVE_MPI
  MPI_Comm comm;       /* a duplicate of the world: buckets never interleave with scalar collectives */
#endif
};

void lt_dist_grads_free(lt_dist_grads *g) {
  if (!g) return;
#ifdef LT_HAVE_MPI
  if (W.active) {
    for (int b = 0; b < g->next; b++) MPI_Wait(&g->buckets[b].req, MPI_STATUS_IGNORE);
    if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
  }
#endif
  if (g->hooked)
    for (int i = 0; i < g->n_params; i++)
      if (g->params[i]->post_hook_user_ == &g->slots[i]) lt_tensor_set_post_accumulate_hook(g->params[i], NULL, NULL);
  for (int b = 0; b < g->n_buckets; b++) free(g->buckets[b].buf);
  free(g->buckets);
  free(g->params);
  free(g->slots);
  free(g);
}

static size_t g_bucket_bytes = LT_DIST_BUCKET_BYTES;
void lt_dist_set_bucket_bytes(size_t bytes) { g_bucket_bytes = bytes ? bytes : LT_DIST_BUCKET_BYTES; }
size_t lt_dist_bucket_bytes(void) { return g_bucket_bytes; }

static lt_status ready_hook(lt_tensor *t, void *user);

lt_dist_grads *lt_dist_grads_new(lt_params *p, size_t bucket_bytes) {
  if (!p) return lt__err_null("dist_grads_new", "p"), NULL;
  if (bucket_bytes == 0) bucket_bytes = g_bucket_bytes;
  int np = lt_params_count(p);
  lt_dist_grads *g = calloc(1, sizeof *g);
#ifdef LT_HAVE_MPI
  if (g) g->comm = MPI_COMM_NULL;
#endif
  if (g) g->params = calloc((size_t)np + 1, sizeof *g->params);
  if (g) g->slots = calloc((size_t)np + 1, sizeof *g->slots);
  if (g) g->buckets = calloc((size_t)np + 1, sizeof *g->buckets);
  if (!g || !g->params || !g->slots || !g->buckets) {
    lt_dist_grads_free(g);
    return lt__err(LT_ERR_NOMEM, "dist_grads_new: out of memory"), NULL;
  }
  g->store = p;
  g->sync = true;
  /* Reverse store order: a model registers its parameters from input to
   * output, and backward makes their gradients final in about the reverse
   * order, so bucket 0 is ready first (PyTorch DDP does the same). */
  for (int i = np - 1; i >= 0; i--) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER || !q->value->requires_grad) continue;
    if (!lt_dtype_is_float(q->value->dtype)) continue;
    g->params[g->n_params++] = q->value;
  }
  /* Consecutive parameters of one dtype until a bucket holds bucket_bytes. */
  size_t bytes = 0;
  for (int i = 0; i < g->n_params; i++) {
    lt_tensor *t = g->params[i];
    bucket *cur = g->n_buckets ? &g->buckets[g->n_buckets - 1] : NULL;
    if (!cur || cur->dtype != t->dtype || bytes >= bucket_bytes) {
      cur = &g->buckets[g->n_buckets++];
      *cur = (bucket){.first = i, .dtype = t->dtype};
      bytes = 0;
    }
    cur->count++;
    cur->numel += t->numel;
    bytes += (size_t)t->numel * lt_dtype_size(t->dtype);
    g->slots[i] = (slot){g, g->n_buckets - 1, false};
  }
  for (int b = 0; b < g->n_buckets && W.size > 1; b++) {
    bucket *k = &g->buckets[b];
    if (k->numel > INT32_MAX) {
      lt_dist_grads_free(g);
      return lt__err(LT_ERR_OVERFLOW, "dist_grads_new: a bucket of %lld elements: MPI counts are int (at most %d); "
                     "split the parameter", (long long)k->numel, INT32_MAX), NULL;
    }
    k->buf = malloc((size_t)k->numel * lt_dtype_size(k->dtype) + 1);
    if (!k->buf) {
      lt_dist_grads_free(g);
      return lt__err(LT_ERR_NOMEM, "dist_grads_new: out of memory for a bucket of %lld elements", (long long)k->numel), NULL;
    }
  }
#ifdef LT_HAVE_MPI
  if (W.size > 1) {
    int rc = MPI_Comm_dup(W.world, &g->comm);
    if (rc != MPI_SUCCESS) {
      g->comm = MPI_COMM_NULL;
      lt_dist_grads_free(g);
      return mpi_err(rc, "dist_grads_new: MPI_Comm_dup"), NULL;
    }
    MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    for (int i = 0; i < g->n_params; i++)
      if (lt_tensor_set_post_accumulate_hook(g->params[i], ready_hook, &g->slots[i]) != LT_OK) {
        lt_dist_grads_free(g);
        return NULL;
      }
    g->hooked = true;
  }
#endif
  return g;
}

int lt_dist_grads_buckets(const lt_dist_grads *g) { return g ? g->n_buckets : 0; }

void lt_dist_grads_times(const lt_dist_grads *g, double *wait_seconds, double *total_seconds) {
  if (wait_seconds) *wait_seconds = g ? g->wait_s : 0;
  if (total_seconds) *total_seconds = g ? g->total_s : 0;
}

void lt_dist_grads_overlap(const lt_dist_grads *g, int64_t *early_buckets, double *hook_seconds) {
  if (early_buckets) *early_buckets = g ? g->early : 0;
  if (hook_seconds) *hook_seconds = g ? g->hook_s : 0;
}

void lt_dist_grads_set_sync(lt_dist_grads *g, bool sync) {
  if (g) g->sync = sync;
}

#ifdef LT_HAVE_MPI
/* Packs bucket b's gradients into its buffer and starts its MPI_Iallreduce. */
static lt_status start_bucket(lt_dist_grads *g, int b) {
  bucket *k = &g->buckets[b];
  size_t es = lt_dtype_size(k->dtype);
  char *dst = k->buf;
  if (g->next == 0) g->t_start = lt_monotonic_seconds();
  for (int i = k->first; i < k->first + k->count; i++) {
    lt_tensor *t = g->params[i];
    size_t n = (size_t)t->numel * es;
    if (!t->grad) {
      memset(dst, 0, n);
    } else {
      lt_tensor *tmp = NULL;
      const lt_tensor *c = lt__as_contig(t->grad, k->dtype, &tmp);
      if (!c) return lt_last_status(); /* this rank cannot go on: the job ends when the program exits */
      memcpy(dst, c->data, n);
      lt_tensor_free(tmp);
    }
    dst += n;
  }
  int rc = MPI_Iallreduce(MPI_IN_PLACE, k->buf, (int)k->numel, k->dtype == LT_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT,
                          MPI_SUM, g->comm, &k->req);
  if (rc != MPI_SUCCESS) return mpi_err(rc, "gradient allreduce (MPI_Iallreduce)");
  k->started = true;
  g->next = b + 1;
  return LT_OK;
}

/* Lets MPI move the buckets in flight (libnbc advances a schedule only inside
 * MPI calls): one MPI_Test per unfinished bucket. */
static void progress(lt_dist_grads *g) {
  for (int b = 0; b < g->next; b++) {
    if (g->buckets[b].req == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&g->buckets[b].req, &done, MPI_STATUS_IGNORE); /* done: req becomes MPI_REQUEST_NULL */
  }
}
#endif

/* The post-accumulate hook of every parameter (autograd.h): its gradient is
 * final; start every bucket, in index order, whose gradients all are. */
#ifndef LT_HAVE_MPI
__attribute__((unused)) /* registered only with several ranks, so only in a build with MPI */
#endif
static lt_status ready_hook(lt_tensor *t, void *user) {
  slot *sl = user;
  lt_dist_grads *g = sl->g;
  if (!g->sync || W.size == 1) return LT_OK;
  double t0 = lt_monotonic_seconds();
  lt_status s = LT_OK;
  if (sl->ready) {
    s = lt__err(LT_ERR_STATE, "dist_grads: the gradient of %s became final twice before lt_dist_grads_finish "
                "(a second backward: turn lt_dist_grads_set_sync off for the micro-batches before the last)",
                LT__D(t));
  } else {
    sl->ready = true;
    g->buckets[sl->bucket].nready++;
#ifdef LT_HAVE_MPI
    while (s == LT_OK && g->next < g->n_buckets && g->buckets[g->next].nready == g->buckets[g->next].count) {
      s = start_bucket(g, g->next);
      if (s == LT_OK) g->early++;
    }
    progress(g);
#endif
  }
  if (s != LT_OK && g->hook_err == LT_OK) g->hook_err = s;
  g->hook_s += lt_monotonic_seconds() - t0;
  return s;
}

lt_status lt_dist_grads_start(lt_dist_grads *g) {
  if (!g) return lt__err_null("dist_grads_start", "g");
  if (g->started_all) return lt__err(LT_ERR_STATE, "dist_grads_start: a reduction is already in flight (call finish)");
  if (W.size == 1) return LT_OK;
  g->started_all = true;
#ifdef LT_HAVE_MPI
  while (g->next < g->n_buckets) {
    lt_status s = start_bucket(g, g->next);
    if (s != LT_OK) return s;
  }
#endif
  return LT_OK;
}

lt_status lt_dist_grads_finish(lt_dist_grads *g) {
  if (!g) return lt__err_null("dist_grads_finish", "g");
  if (W.size == 1) return LT_OK;
  bool any_ready = false;
  for (int b = 0; b < g->n_buckets && !any_ready; b++) any_ready = g->buckets[b].nready > 0;
  if (!g->started_all && !any_ready)
    return lt__err(LT_ERR_STATE, "dist_grads_finish: no reduction in flight (call start, or run a backward first)");
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  double t0 = lt_monotonic_seconds();
  while (g->next < g->n_buckets && s == LT_OK) s = start_bucket(g, g->next); /* unused parameters, a skipped backward */
  for (int b = 0; b < g->next && s == LT_OK; b++) s = wait_req(&g->buckets[b].req, "gradient allreduce");
  g->wait_s += lt_monotonic_seconds() - t0;
  if (s == LT_OK && g->hook_err != LT_OK)
    s = lt__err(g->hook_err, "dist_grads_finish: a gradient hook failed during backward");
  for (int b = 0; b < g->n_buckets && s == LT_OK; b++) {
    bucket *k = &g->buckets[b];
    size_t es = lt_dtype_size(k->dtype);
    const char *src = k->buf;
    for (int i = k->first; i < k->first + k->count && s == LT_OK; i++) {
      lt_tensor *t = g->params[i];
      if (!t->grad || !lt_is_contiguous(t->grad) || t->grad->dtype != k->dtype || lt__storage_shared(t->grad)) {
        lt_tensor *z = lt_tensor_keep(lt_zeros(t->dtype, t->ndim, t->shape)); /* the leaf owns its .grad */
        if (!z) {
          s = lt_last_status();
          break;
        }
        lt_zero_grad(t);
        t->grad = z;
      }
      if (k->dtype == LT_DTYPE_F64) {
        const double *x = (const double *)src;
        double *y = t->grad->data;
        const double n = (double)W.size;
        for (int64_t j = 0; j < t->numel; j++) y[j] = x[j] / n;
      } else {
        const float *x = (const float *)src;
        float *y = t->grad->data;
        const float n = (float)W.size;
        for (int64_t j = 0; j < t->numel; j++) y[j] = x[j] / n;
      }
      lt__bump_version(t->grad);
      src += (size_t)t->numel * es;
    }
  }
  g->total_s += lt_monotonic_seconds() - g->t_start;
#endif
  /* The next step starts from scratch. */
  for (int b = 0; b < g->n_buckets; b++) g->buckets[b].nready = 0, g->buckets[b].started = false;
  for (int i = 0; i < g->n_params; i++) g->slots[i].ready = false;
  g->next = 0;
  g->started_all = false;
  g->hook_err = LT_OK;
  return s;
}

/* ======================================================================== */
/* ZeRO-1                                                                   */
/* ======================================================================== */

struct lt_dist_zero {
  lt_optimizer *o;  /* borrowed */
  int *first;       /* [N + 1]: rank r owns parameters [first[r], first[r + 1]); first[N]: all of them */
};

lt_dist_zero *lt_dist_zero_new(lt_optimizer *o) {
  const char *op = "dist_zero_new";
  if (!o) return lt__err_null(op, "o"), NULL;
  const int n = lt_optimizer_param_count(o), N = W.size;
  lt_dist_zero *z = calloc(1, sizeof *z);
  int *first = calloc((size_t)N + 1, sizeof *first);
  if (!z || !first) {
    free(z), free(first);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %d ranks", op, N), NULL;
  }
  z->o = o, z->first = first;
  /* Parameter i (elements [a, a + m) of the total T) goes to the rank whose
   * 1/N of the elements holds its midpoint: floor(N (a + m/2) / T), which
   * never decreases with i, so every rank's parameters are contiguous. */
  double T = 0;
  for (int i = 0; i < n; i++) T += (double)lt_optimizer_param(o, i, NULL)->numel;
  double a = 0;
  int r = 0; /* the owner of parameter i */
  for (int i = 0; i < n; i++) {
    double m = (double)lt_optimizer_param(o, i, NULL)->numel;
    int own = T > 0 ? (int)((double)N * (a + m / 2) / T) : 0;
    if (own > N - 1) own = N - 1;
    while (r < own) first[++r] = i; /* ranks r+1 .. own start here (a rank may own nothing) */
    a += m;
  }
  while (r < N) first[++r] = n;
  lt_status s = lt_optimizer_set_shard(o, first[W.rank], first[W.rank + 1] - first[W.rank]);
  if (s != LT_OK) {
    lt_dist_zero_free(z);
    return NULL;
  }
  return z;
}

void lt_dist_zero_free(lt_dist_zero *z) {
  if (!z) return;
  lt_optimizer_set_shard(z->o, 0, z->first[W.size]); /* cannot fail: the whole range */
  free(z->first);
  free(z);
}

void lt_dist_zero_shard(const lt_dist_zero *z, int rank, int *first, int *count) {
  if (!z || rank < 0 || rank >= W.size) {
    *first = *count = 0;
    return;
  }
  *first = z->first[rank];
  *count = z->first[rank + 1] - z->first[rank];
}

lt_status lt_dist_zero_broadcast_params(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_broadcast_params", "z");
  lt_status s = LT_OK;
  for (int r = 0; r < W.size && W.size > 1; r++)
    for (int i = z->first[r]; i < z->first[r + 1] && s == LT_OK; i++)
      s = bcast_tensor(lt_optimizer_param(z->o, i, NULL), r, "ZeRO-1: broadcast of the updated parameters");
  return s;
}

#ifdef LT_HAVE_MPI
/* Point to point: owner's bytes into rank 0's buf (other ranks do not call
 * it). The collectives' count (W.seq, which the timeout's messages compare
 * across ranks) is left as it was: only two ranks take part. */
static lt_status to_root(void *buf, size_t bytes, int owner, const char *what) {
  enum { TAG = 18 };
  const int64_t seq = W.seq;
  lt_status s = LT_OK;
  for (size_t off = 0; off < bytes && s == LT_OK; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    MPI_Request req;
    int rc = W.rank == owner ? MPI_Isend((char *)buf + off, (int)n, MPI_BYTE, 0, TAG, W.world, &req)
                             : MPI_Irecv((char *)buf + off, (int)n, MPI_BYTE, owner, TAG, W.world, &req);
    s = rc != MPI_SUCCESS ? mpi_err(rc, what) : wait_req(&req, what);
  }
  W.seq = seq;
  return s;
}

/* The state names an optimizer may hold, in the order they are sent. */
static const char *const zero_states[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "step"};
#endif

lt_status lt_dist_zero_gather_state(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_gather_state", "z");
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  const char *what = "ZeRO-1: gathering the optimizer state to rank 0";
  for (int r = 1; r < W.size && s == LT_OK; r++) {
    if (W.rank != 0 && W.rank != r) continue; /* rank 0 and the owner only */
    for (int i = z->first[r]; i < z->first[r + 1] && s == LT_OK; i++) {
      const char *name;
      lt_optimizer_param(z->o, i, &name);
      int64_t has = 0; /* the owner made state for it (its first update came) */
      for (int k = 0; k < 4 && W.rank == r; k++) has |= lt_optimizer_state(z->o, name, zero_states[k]) != NULL;
      if ((s = to_root(&has, sizeof has, r, what)) != LT_OK || !has) continue;
      if (W.rank == 0 && (s = lt_optimizer_ensure_state(z->o, name)) != LT_OK) break;
      for (int k = 0; k < 4 && s == LT_OK; k++) {
        lt_tensor *t = lt_optimizer_state(z->o, name, zero_states[k]);
        if (!t) continue; /* the same kind, so the same set on rank 0 (ensure_state) as on the owner */
        s = to_root(t->data, (size_t)t->numel * lt_dtype_size(t->dtype), r, what);
      }
    }
  }
#endif
  return s;
}

lt_status lt_dist_zero_release_state(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_release_state", "z");
  return lt_optimizer_set_shard(z->o, z->first[W.rank], z->first[W.rank + 1] - z->first[W.rank]);
}
