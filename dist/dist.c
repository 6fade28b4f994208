/*
 * dist/dist.c: the dist module of dist/dist.h over Open MPI, and its size-1
 * world when built without MPI (LT_HAVE_MPI undefined) or not started by
 * mpirun.
 *
 * What this is not: a transport (every byte goes through MPI) or a scheduler
 * of its own (buckets are reduced by MPI_Iallreduce, progressed by MPI).
 */
#include "dist/dist_internal.h"

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

lt__dist_world lt__dist_W = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1,
                             .timeout = LT_DIST_TIMEOUT_DEFAULT};
/* The world has one home, lt__dist_W (dist/dist_internal.h); this file,
 * which owns it, calls it W. */
#define W lt__dist_W

#ifdef LT_HAVE_MPI
/* LT_ERR_IO with MPI's own words for rc. */
lt_status lt__dist_mpi_err(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
  return lt__err(LT_ERR_IO, "dist: %s: %s", what, msg);
}
#define MPI_TRY(call, what)                     \
  do {                                          \
    int rc_ = (call);                           \
    if (rc_ != MPI_SUCCESS) return lt__dist_mpi_err(rc_, what); \
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
lt_status lt__dist_wait_req(MPI_Request *req, const char *what) {
  W.seq++;
  const double t0 = lt_monotonic_seconds();
  for (long spins = 0;; spins++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return lt__dist_mpi_err(rc, what);
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
    if (rc_ != MPI_SUCCESS) return lt__dist_mpi_err(rc_, what); \
    lt_status s_ = lt__dist_wait_req(&req_, what);        \
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
lt_status lt__dist_bcast_tensor(lt_tensor *t, int root, const char *what) {
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  LT_CHECK(lt_is_contiguous(t)); /* the store's tensors are made contiguous */
  size_t bytes = (size_t)t->numel * lt_dtype_size(t->dtype);
  /* MPI counts are int: send in chunks of at most 1 GB */
  for (size_t off = 0; off < bytes && s == LT_OK; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    MPI_Request req;
    int rc = MPI_Ibcast((char *)t->data + off, (int)n, MPI_BYTE, root, W.world, &req);
    s = rc != MPI_SUCCESS ? lt__dist_mpi_err(rc, what) : lt__dist_wait_req(&req, what);
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
    s = lt__dist_bcast_tensor(q->value, 0, "broadcast of the parameters");
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
