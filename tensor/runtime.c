/*
 * tensor/runtime.c: process-wide runtime state: initialisation, the one
 * thread-count setting shared by BLIS and our OpenMP kernels, and the info call.
 */
#include "tensor/internal.h"

#include <omp.h>
#include <pthread.h>

#ifndef LT_VERSION_STRING
#define LT_VERSION_STRING "unknown"
#endif

/* Defined in blas.c (the file that includes blis.h). */
void lt__blas_init(void);
const char *lt__blas_arch(void);
const char *lt__blas_arch_why(void);
bool lt__blas_arch_from_user(void);

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int num_threads = 0;
static char init_note[256];

static void init_runtime(void) {
  int n = omp_get_num_procs();
  const char *env = getenv("LT_NUM_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 1 && v <= 4096)
      n = (int)v;
    else
      snprintf(init_note, sizeof init_note, "LT_NUM_THREADS=%s ignored (not an integer in 1..4096)", env);
  }
  if (n < 1) n = 1;
  lt__blas_init();
  num_threads = n;
  lt__blas_set_threads(n);
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
  lt__blas_set_threads(n);
  omp_set_num_threads(n);
  return LT_OK;
}

int lt_get_num_threads(void) {
  lt__ensure_init();
  return num_threads;
}

const char *lt_version(void) { return LT_VERSION_STRING; }

lt_status lt_runtime_get_info(lt_runtime_info *info) {
  if (!info) return lt__err(LT_ERR_NULL, "runtime_get_info: info is NULL");
  lt__ensure_init();
  info->version = LT_VERSION_STRING;
  info->blas_arch = lt__blas_arch();
  info->blas_arch_why = *init_note ? init_note : lt__blas_arch_why();
  info->num_threads = num_threads;
  info->blas_arch_from_user = lt__blas_arch_from_user();
  return LT_OK;
}
