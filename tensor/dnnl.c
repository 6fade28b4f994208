/*
 * tensor/dnnl.c: what the oneDNN files share (tensor/dnnl_common_internal.h):
 * the CPU engine made once, each thread's stream and buffers (released with
 * the thread), executing a primitive on the thread's stream, and what
 * oneDNN's dispatcher gives this CPU in bf16.
 *
 * What it is not: a product or a convolution (tensor/dnnl_matmul.c,
 * tensor/dnnl_conv.c). Those two and this file are the only ones of the
 * library that include dnnl.h (Debian's libdnnl-dev, oneDNN 2.6).
 */
#include "tensor/dnnl_common_internal.h"
#include "tensor/dnnl_internal.h"

#include "tensor/threads_internal.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- the engine, once ---------------------------------------------------- */

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_status_t engine_status = dnnl_runtime_error;

static void engine_init(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

dnnl_status_t lt__dnnl_engine_status(void) {
  pthread_once(&engine_once, engine_init);
  return engine_status;
}

dnnl_engine_t lt__dnnl_engine(void) {
  pthread_once(&engine_once, engine_init);
  return engine;
}

/* ---- per-thread stream and buffers --------------------------------------- */

static _Thread_local dnnl_stream_t tl_stream;
static _Thread_local void *tl_dense[LT__DNNL_NBUF];
static _Thread_local size_t tl_dense_cap[LT__DNNL_NBUF];

/* A thread's stream and buffers are released when the thread exits
 * (lt__at_thread_exit, registered by each allocation of any of them: tl_arm;
 * registering again is a no-op). */
static void tl_release(void) {
  for (int i = 0; i < LT__DNNL_NBUF; i++) {
    free(tl_dense[i]);
    tl_dense[i] = NULL;
    tl_dense_cap[i] = 0;
  }
  if (tl_stream) dnnl_stream_destroy(tl_stream);
  tl_stream = NULL;
}

static void tl_arm(void) { (void)lt__at_thread_exit(tl_release); }

dnnl_status_t lt__dnnl_thread_stream(void) {
  if (tl_stream) return dnnl_success;
  tl_arm();
  return dnnl_stream_create(&tl_stream, lt__dnnl_engine(), dnnl_stream_default_flags);
}

dnnl_stream_t lt__dnnl_stream(void) { return tl_stream; }

/* Executes primitive p with n args on this thread's stream and waits. Memory
 * objects are made around the user's pointers for the call. */
dnnl_status_t lt__dnnl_exec(dnnl_primitive_t p, int n, const int *arg, const dnnl_memory_desc_t *const *md,
                            void *const *ptr) {
  dnnl_memory_t mem[6] = {NULL};
  dnnl_exec_arg_t args[6] = {{0}};
  dnnl_status_t s = lt__dnnl_thread_stream();
  for (int i = 0; i < n && s == dnnl_success; i++) {
    s = dnnl_memory_create(&mem[i], md[i], lt__dnnl_engine(), ptr[i]);
    args[i] = (dnnl_exec_arg_t){arg[i], mem[i]};
  }
  if (s == dnnl_success) s = dnnl_primitive_execute(p, tl_stream, n, args);
  if (s == dnnl_success) s = dnnl_stream_wait(tl_stream);
  for (int i = 0; i < n; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  return s;
}

void *lt__dnnl_buf(int i, size_t bytes) {
  if (bytes <= tl_dense_cap[i]) return tl_dense[i];
  tl_arm();
  free(tl_dense[i]);
  const size_t sz = (bytes + 4095) & ~(size_t)4095;
  tl_dense[i] = aligned_alloc(64, sz);
  tl_dense_cap[i] = tl_dense[i] ? sz : 0;
  return tl_dense[i];
}

void *lt__dnnl_scratch(size_t n) { return lt__dnnl_buf(LT__DNNL_NBUF - 1, n); }

/* ---- what this CPU gets --------------------------------------------------- */

static const char *path_str = "unknown";
static bool native = false, available = false;
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

static void path_init(void) {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const unsigned u = (unsigned)isa;
  available = (u & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
  if ((u & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx) {
    native = true;
    path_str = "native (oneDNN, AMX)";
  } else if ((u & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
    native = true;
    path_str = "native (oneDNN, AVX512_BF16)";
  } else if ((u & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core) {
    path_str = "fallback (oneDNN emulates bf16 on AVX-512 without AVX512_BF16)";
  } else {
    path_str = "fallback (no oneDNN bf16 matmul on this CPU: operands widened to f32, BLIS)";
  }
}

const char *lt__dnnl_bf16_path(void) {
  pthread_once(&path_once, path_init);
  return path_str;
}
bool lt__dnnl_bf16_native(void) {
  pthread_once(&path_once, path_init);
  return native;
}
bool lt__dnnl_bf16_available(void) {
  pthread_once(&path_once, path_init);
  return available;
}
