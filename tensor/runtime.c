/*
 * tensor/runtime.c: process-wide runtime state: initialisation (malloc
 * tuning, the thread count, BLIS: runtime -> BLIS, one way), the one
 * thread-count setting shared by BLIS and our OpenMP kernels, the automatic
 * choice between all cores and one thread for training loops
 * (lt_autothreads_*), and the info call (with every path of the path table,
 * tensor/paths.def, and whether this CPU runs it).
 *
 * What it is not: a selector (tensor/paths.c and the dispatch code choose
 * paths) nor the threading rules of kernels (tensor/threads.c).
 */
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/blis_internal.h"
#include "tensor/bf16dot_internal.h"
#include "tensor/dnnl_conv_internal.h"
#include "tensor/dnnl_internal.h"

#include <omp.h>
#include <pthread.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#endif

#ifndef LT_VERSION_STRING
#define LT_VERSION_STRING "unknown"
#endif

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int num_threads = 0;
static char init_note[256];

/* glibc serves blocks above its mmap threshold (128 KiB, rising to at most
 * 32 MiB as such blocks are freed) with fresh mmaps, and returns the top of
 * the heap to the system once 128 KiB of it are free. A training step
 * allocates and frees the same few hundred megabytes every step, so with the
 * defaults every step faults in and zeroes most of its memory again (15k page
 * faults, a tenth of a GPT-small step: docs/benchmarks.md). Raising both
 * keeps freed blocks in the heap for the next step; the peak RSS is that of
 * the largest step either way, plus some fragmentation. LT_MALLOC_TUNE=0
 * keeps glibc's defaults. (Blocks of 4 MiB and more also go through the
 * storage cache of tensor.c.) */
static void tune_malloc(void) {
#ifdef __GLIBC__
  const char *env = lt__setting_get(LT__SETTING_MALLOC_TUNE);
  if (env && !strcmp(env, "0")) return;
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

static void init_runtime(void) {
  tune_malloc();
  int n = omp_get_num_procs();
  const char *env = lt__setting_get(LT__SETTING_NUM_THREADS);
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 1 && v <= 4096)
      n = (int)v;
    else
      snprintf(init_note, sizeof init_note, "LT_NUM_THREADS=%s ignored (not an integer in 1..4096)", env);
  }
  if (n < 1) n = 1;
  lt__blis_init();
  num_threads = n;
  lt__blis_set_threads(n);
  omp_set_num_threads(n);
}

lt_status lt__ensure_init(void) {
  pthread_once(&init_once, init_runtime);
  return LT_OK;
}

lt_status lt_init(void) { return lt__ensure_init(); }

lt_status lt_set_num_threads(int n) {
  if (n < 1) return lt__err(LT_ERR_INVALID, "set_num_threads: %d threads: need at least 1", n);
  lt__ensure_init();
  num_threads = n;
  lt__blis_set_threads(n);
  omp_set_num_threads(n);
  return LT_OK;
}

int lt_get_num_threads(void) {
  lt__ensure_init();
  return num_threads;
}

/* ---- lt_autothreads: all cores or one, whichever is faster right now ---- */

enum { AT_PROBE_STEPS = 8, AT_PROBE_FIRST_STEP = 10 };
#define AT_PROBE_EVERY 20.0
#define AT_PROBE_MAX 320.0

double lt_monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int at_slot(const lt_autothreads *T, int threads) { return threads == T->max ? 0 : 1; }

void lt_autothreads_init(lt_autothreads *T, bool on, int max_threads) {
  memset(T, 0, sizeof *T);
  T->on = on;
  T->max = T->chosen = max_threads >= 1 ? max_threads : 1;
  T->interval = AT_PROBE_EVERY;
}

int lt_autothreads_next(lt_autothreads *T) {
  if (!T->on) return T->chosen;
  int other = T->chosen == T->max ? 1 : T->max;
  if (T->probe_left == 0 && T->steps >= AT_PROBE_FIRST_STEP && lt_monotonic_seconds() >= T->next_probe) {
    T->probe_left = AT_PROBE_STEPS;
    T->probe_work = T->probe_seconds = 0;
  }
  return T->probe_left > 0 ? other : T->chosen;
}

bool lt_autothreads_record(lt_autothreads *T, int threads, double work, double seconds) {
  if (!T->on) return false;
  T->steps++;
  if (seconds <= 0 || work <= 0) return false;
  double r = work / seconds, *cur = &T->rate[at_slot(T, T->chosen)];
  if (threads == T->chosen) {
    bool slow = *cur > 0 && r < *cur / 3;
    *cur = *cur > 0 ? *cur + 0.2 * (r - *cur) : r;
    if (slow && T->steps >= AT_PROBE_FIRST_STEP) T->next_probe = 0; /* something changed: probe now */
    return false;
  }
  T->probe_work += work, T->probe_seconds += seconds;
  bool bad = *cur > 0 && r < *cur / 3;
  if (--T->probe_left > 0 && !bad) return false;
  T->probe_left = 0;
  double p = T->probe_work / T->probe_seconds;
  T->rate[at_slot(T, threads)] = p;
  bool switched = false;
  if (p > 1.1 * *cur) {
    T->chosen = threads;
    T->interval = AT_PROBE_EVERY;
    switched = true;
  } else if (T->interval < AT_PROBE_MAX) {
    T->interval *= 2;
  }
  T->next_probe = lt_monotonic_seconds() + T->interval;
  return switched;
}

const char *lt_version(void) { return LT_VERSION_STRING; }

/* The path table as lt_runtime_path entries, filled once (static). */
static lt_runtime_path path_info[LT__PATH_COUNT];
static pthread_once_t path_info_once = PTHREAD_ONCE_INIT;

static void path_info_init(void) {
  for (int i = 0; i < LT__PATH_COUNT; i++) {
    const lt__path p = (lt__path)i;
    path_info[i] = (lt_runtime_path){.family = lt__path_family_name(lt__path_family_of(p)),
                                     .name = lt__path_name(p),
                                     .force = lt__path_switch(p),
                                     .supported = lt__path_supported(p)};
  }
}

static const lt_runtime_path *runtime_paths(void) {
  pthread_once(&path_info_once, path_info_init);
  return path_info;
}

lt_status lt_runtime_get_info(lt_runtime_info *info) {
  if (!info) return lt__err(LT_ERR_NULL, "runtime_get_info: info is NULL");
  lt__ensure_init();
  info->version = LT_VERSION_STRING;
  info->blas_arch = lt__blis_arch();
  info->blas_arch_why = *init_note ? init_note : lt__blis_arch_why();
  info->num_threads = num_threads;
  info->blas_arch_from_user = lt__blis_arch_from_user();
  info->bf16_gemm = lt__dnnl_bf16_path();
  info->bf16_native = lt__dnnl_bf16_native();
  info->bf16_conv = lt__dnnl_conv_bf16_path();
  info->bf16_attention = lt__bf16dot_path();
  info->num_paths = LT__PATH_COUNT;
  info->paths = runtime_paths();
  return LT_OK;
}
