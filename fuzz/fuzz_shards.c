/*
 * fuzz/fuzz_shards.c: token shards (datasets/shards.c) on arbitrary bytes.
 * The first input byte chooses the vocabulary the tokens are checked against
 * (bits 0-3: 0 none, else 2^(bits + 2), so that ids past it occur) and the
 * window length T (bits 4-7: 1 + the value); the rest is a shard file, as
 * it is.
 *
 * Checked promises (datasets.h): a refusal has a message naming the shard;
 * lt_shard_validate on the bytes in memory and lt_shard_loader_open on the
 * same bytes written to a file agree on what they accept (apart from "too
 * few windows", which only the loader knows); an accepted shard's header
 * says a size equal to the file's; every batch the loader then returns has
 * the shard's tokens (x[t + 1] == y[t]) and ids below the vocabulary, and
 * its position restores.
 */
#include <string.h>

#include "datasets/datasets.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  fuzz_input in = {data, size};
  uint8_t mode = fuzz_u8(&in);
  int64_t vocab = (mode & 15) ? (int64_t)1 << ((mode & 15) + 2) : 0;
  int64_t T = 1 + (mode >> 4);

  lt_shard_info info;
  lt_status vs = fuzz_check_status(lt_shard_validate(in.p, in.n, vocab, "mem", &info), "shard_validate");
  if (vs != LT_OK) FUZZ_ASSERT(strstr(lt_last_error(), "mem") != NULL, "the message does not name the shard");
  if (vs == LT_OK)
    FUZZ_ASSERT(LT_SHARD_HEADER_BYTES + (uint64_t)info.n_tokens * (uint64_t)info.token_bytes == in.n,
                "accepted: header says %lld tokens of %d bytes, the shard has %zu bytes", (long long)info.n_tokens,
                info.token_bytes, in.n);

  const char *path = fuzz_temp_path("shard");
  fuzz_write_file(path, "", 0, in.p, in.n);
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(1, T);
  o.vocab = vocab, o.prefetch = (mode & 1) != 0;
  lt_shard_loader *L = lt_shard_loader_open(path, &o);
  if (!L) {
    lt_status s = fuzz_check_status(lt_last_status(), "shard_loader_open");
    bool few = strstr(lt_last_error(), "fewer than a global batch") != NULL;
    FUZZ_ASSERT(vs != LT_OK || (s == LT_ERR_INVALID && few), "validate accepted what the loader refused: %s",
                lt_last_error());
    return 0;
  }
  FUZZ_ASSERT(vs == LT_OK, "the loader accepted what validate refused");
  FUZZ_ASSERT(lt_shard_loader_num_tokens(L) == info.n_tokens, "token counts differ");
  int64_t nb = lt_shard_loader_batches_per_epoch(L);
  lt_loader_position p0 = lt_shard_loader_get_position(L);
  for (int64_t i = 0; i < nb + 1 && i < 64; i++) {
    lt_tensor *x, *y;
    FUZZ_ASSERT(lt_shard_loader_next(L, &x, &y) == LT_OK, "next: %s", lt_last_error());
    const int64_t *xd = x->data, *yd = y->data;
    for (int64_t t = 0; t < T; t++) {
      FUZZ_ASSERT(vocab <= 0 || (xd[t] < vocab && yd[t] < vocab), "an id past the vocabulary");
      if (t + 1 < T) FUZZ_ASSERT(xd[t + 1] == yd[t], "y is not x shifted by one");
    }
    lt_tensor_free(x), lt_tensor_free(y);
  }
  FUZZ_ASSERT(lt_shard_loader_set_position(L, p0) == LT_OK, "restore: %s", lt_last_error());
  lt_shard_loader_free(L);
  return 0;
}
