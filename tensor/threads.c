/*
 * tensor/threads.c: per-thread resources released at thread exit
 * (lt__at_thread_exit, tensor/threads_internal.h).
 */
#include "tensor/threads_internal.h"

#include <pthread.h>

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool exit_key_made;
static _Thread_local void (*tl_exit_fn[LT__THREAD_EXIT_MAX])(void);
static _Thread_local int tl_exit_n;

/* The key's destructor: runs in the exiting thread, before its thread-local
 * storage is freed. A function that registers again (it allocated anew)
 * sets the key again, and POSIX runs the destructor once more. */
static void run_exit_fns(void *unused) {
  (void)unused;
  const int n = tl_exit_n;
  tl_exit_n = 0;
  for (int i = n - 1; i >= 0; i--) tl_exit_fn[i]();
}

static void make_exit_key(void) { exit_key_made = pthread_key_create(&exit_key, run_exit_fns) == 0; }

bool lt__at_thread_exit(void (*fn)(void)) {
  for (int i = 0; i < tl_exit_n; i++)
    if (tl_exit_fn[i] == fn) return true;
  pthread_once(&exit_once, make_exit_key);
  if (!exit_key_made || tl_exit_n == LT__THREAD_EXIT_MAX) return false;
  if (tl_exit_n == 0 && pthread_setspecific(exit_key, &exit_key) != 0) return false; /* any non-NULL value */
  tl_exit_fn[tl_exit_n++] = fn;
  return true;
}

/* When the library is unloaded (dlclose) before threads that ran products
 * exit, their exit must not call into unmapped code: the key goes with the
 * library (those threads' resources are then kept). */
__attribute__((destructor)) static void delete_exit_key(void) {
  if (exit_key_made) pthread_key_delete(exit_key);
}
