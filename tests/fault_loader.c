/*
 * tests/fault_loader.c: a read error injected into the data sources of the
 * train program's hooks, for the test that a failing hook returns its status
 * through lt_trainer_fit (tests/test_train_e2e.c, "hooks"). Linked into a
 * copy of train (the target train_fault, tests/CMakeLists.txt) with
 * -Wl,--wrap=lt_seq2seq_loader_next,--wrap=lt_lm_loader_next: every call
 * that train_main.c makes to those loaders (the begin_step hook's pairs, the
 * micro_batch hook's language-model windows) comes here first. Call number
 * LT_FAULT_AT (environment, 1-based, counting both loaders) fails with
 * LT_ERR_IO as a failed read would; every other call goes to the real
 * loader. Without LT_FAULT_AT it is the real program.
 *
 * What this is not: part of the program or the library (the release train
 * has no such switch; the library's own calls are never wrapped).
 */
#include "datasets/datasets.h"

#include <stdlib.h>

lt_status __real_lt_seq2seq_loader_next(lt_seq2seq_loader *L, lt_seq2seq_batch *out);
lt_status __real_lt_lm_loader_next(lt_lm_loader *L, lt_tensor **x, lt_tensor **y);
lt_status __wrap_lt_seq2seq_loader_next(lt_seq2seq_loader *L, lt_seq2seq_batch *out);
lt_status __wrap_lt_lm_loader_next(lt_lm_loader *L, lt_tensor **x, lt_tensor **y);

/* True when this call is the one to fail (and the error is then set). */
static bool inject(const char *loader) {
  static long calls;
  const char *at = getenv("LT_FAULT_AT");
  if (!at || ++calls != atol(at)) return false;
  lt_error_set(LT_ERR_IO, "%s: read error injected at call %ld (LT_FAULT_AT)", loader, calls);
  return true;
}

lt_status __wrap_lt_seq2seq_loader_next(lt_seq2seq_loader *L, lt_seq2seq_batch *out) {
  return inject("seq2seq_loader_next") ? LT_ERR_IO : __real_lt_seq2seq_loader_next(L, out);
}

lt_status __wrap_lt_lm_loader_next(lt_lm_loader *L, lt_tensor **x, lt_tensor **y) {
  return inject("lm_loader_next") ? LT_ERR_IO : __real_lt_lm_loader_next(L, x, y);
}
