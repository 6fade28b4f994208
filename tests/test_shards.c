/*
 * tests/test_shards.c: token shards (datasets/shards.c).
 *   - the format: the writer's bytes against llm.c's reader layout (a 256
 *     x int32 little-endian header: magic 20240520, version 1, count; then
 *     uint16 tokens) below 65,536 ids, and data_common.py's Llama 3 header
 *     (20240801, 7; uint32 tokens) from there, shards cut at
 *     shard_tokens, and read back by the loader token for token;
 *   - crafted shards: a wrong magic or version, a truncated file, a count
 *     past the end, trailing bytes, an id past the vocabulary, a FIFO, a
 *     directory, no match: each refused naming the shard (and the offset);
 *   - the loader: every window once per epoch, a new order each epoch, the
 *     same order for the same seed (with the prefetch thread or without),
 *     no shuffle = file order, a resume at any batch (across shard
 *     boundaries and epochs) giving the same batches as the straight run, a
 *     position from other shards refused, two ranks reading exactly the
 *     halves of one process's batches of 2B, the short last batch;
 *   - lt_trainer_lm_evaluate over validation shards: a model of zero logits
 *     costs log V a token on every window, again after a rewind; logits
 *     of the wrong shape are refused; lt_trainer_lm_batch_sums runs the
 *     model on slices of rows of at most 16 Mi logits with the whole
 *     batch's sums;
 *   - memory: the loader's resident memory does not grow with the corpus
 *     (a 64 MiB and a 512 MiB corpus of generated shards: the peak RSS
 *     after opening and reading 200 batches differs by less than 8 MiB, and
 *     stays under 16 MiB).
 */
#define _DEFAULT_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "datasets/datasets.h"
#include "test_util.h"
#include "util_ckpt.h"
#include "train/trainer.h"

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes n tokens (token i = (i * 7919 + salt) % vocab) as shards of at most
 * per tokens under prefix in ckpt_tmpdir. */
static void write_corpus(const char *prefix, int64_t n, int64_t vocab, int64_t per, int64_t salt) {
  lt_shard_writer *w = LT_NNP(lt_shard_writer_new(ckpt_tmpdir, prefix, vocab, per));
  int64_t buf[4096];
  for (int64_t i = 0; i < n;) {
    int64_t k = 0;
    for (; k < 4096 && i < n; k++, i++) buf[k] = (i * 7919 + salt) % vocab;
    LT_OK_OR_FAIL(lt_shard_writer_add(w, buf, k));
  }
  int64_t shards, total;
  LT_OK_OR_FAIL(lt_shard_writer_close(w, &shards, &total));
  ck_assert_int_eq(total, n);
  ck_assert_int_eq(shards, (n + per - 1) / per);
}

/* write_corpus, and the glob of its shards (a static buffer). */
static const char *corpus_glob(const char *prefix, int64_t n, int64_t vocab, int64_t per, int64_t salt) {
  static char pat[512];
  write_corpus(prefix, n, vocab, per, salt);
  snprintf(pat, sizeof pat, "%s/%s_*.bin", ckpt_tmpdir, prefix);
  return pat;
}

static int64_t tok(int64_t i, int64_t vocab, int64_t salt) { return (i * 7919 + salt) % vocab; }

START_TEST(test_format_bytes) {
  /* uint16: the bytes llm.c's dataloader reads (llmc/dataloader.h: header[0]
   * magic, header[1] version 1, header[2] ntok, then uint16 tokens; file
   * size 256 * 4 + ntok * 2). */
  write_corpus("a", 2500, 300, 1000, 0);
  for (int s = 0; s < 3; s++) {
    char name[64];
    snprintf(name, sizeof name, "a_%06d.bin", s);
    size_t n;
    unsigned char *b = ckpt_read_file(ckpt_path(name), &n);
    int64_t cnt = s < 2 ? 1000 : 500;
    ck_assert_uint_eq(n, 1024 + (size_t)cnt * 2);
    ck_assert_uint_eq(rd32(b), 20240520u);
    ck_assert_uint_eq(rd32(b + 4), 1);
    ck_assert_uint_eq(rd32(b + 8), (uint32_t)cnt);
    for (int k = 3; k < 256; k++) ck_assert_uint_eq(rd32(b + 4 * k), 0);
    for (int64_t i = 0; i < cnt; i++) {
      uint32_t v = (uint32_t)b[1024 + 2 * i] | (uint32_t)b[1024 + 2 * i + 1] << 8;
      ck_assert_uint_eq(v, (uint32_t)tok(s * 1000 + i, 300, 0));
    }
    lt_shard_info info;
    LT_OK_OR_FAIL(lt_shard_validate(b, n, 300, name, &info));
    ck_assert_int_eq(info.version, LT_SHARD_VERSION_U16);
    ck_assert_int_eq(info.n_tokens, cnt);
    free(b);
  }
  /* uint32 from 65,536 ids: llm.c's Llama 3 header (magic 20240801, version 7), 4 bytes a token */
  ck_assert_int_eq(lt_shard_version_for_vocab(65535), LT_SHARD_VERSION_U16);
  ck_assert_int_eq(lt_shard_version_for_vocab(65536), LT_SHARD_VERSION_U32);
  write_corpus("b", 100, 100000, 1000, 12345);
  size_t n;
  unsigned char *b = ckpt_read_file(ckpt_path("b_000000.bin"), &n);
  ck_assert_uint_eq(n, 1024 + 400);
  ck_assert_uint_eq(rd32(b), 20240801u);
  ck_assert_uint_eq(rd32(b + 4), 7);
  for (int64_t i = 0; i < 100; i++) ck_assert_uint_eq(rd32(b + 1024 + 4 * i), (uint32_t)tok(i, 100000, 12345));
  free(b);
  /* ids outside the vocabulary are refused by the writer */
  lt_shard_writer *w = LT_NNP(lt_shard_writer_new(ckpt_tmpdir, "c", 10, 5));
  LT_EXPECT_ERR(lt_shard_writer_add(w, (int64_t[]){1, 10}, 2), LT_ERR_INVALID, "id 10 at position 1");
  LT_EXPECT_ERR(lt_shard_writer_add(w, (int64_t[]){-1}, 1), LT_ERR_INVALID, "id -1");
  lt_shard_writer_free(w);
  LT_EXPECT_NULLP_ERR(lt_shard_writer_new(ckpt_tmpdir, "c", 0, 5), LT_ERR_INVALID, "vocab");
  LT_EXPECT_NULLP_ERR(lt_shard_writer_new(ckpt_tmpdir, "c", 10, 0), LT_ERR_INVALID, "shard_tokens");
}
END_TEST

/* Reads every batch of one epoch of a loader without shuffle and B = 1:
 * the windows follow the shards' tokens. */
START_TEST(test_round_trip_file_order) {
  const int64_t N = 2500, T = 16;
  const char *pat = corpus_glob("train", N, 300, 1000, 3);
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(1, T);
  o.shuffle = false, o.vocab = 300;
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
  ck_assert_int_eq(lt_shard_loader_num_shards(L), 3);
  ck_assert_int_eq(lt_shard_loader_num_tokens(L), N);
  int64_t per[3] = {999 / T, 999 / T, 499 / T};
  ck_assert_int_eq(lt_shard_loader_num_windows(L), per[0] + per[1] + per[2]);
  ck_assert_int_eq(lt_shard_loader_batches_per_epoch(L), per[0] + per[1] + per[2]);
  for (int s = 0; s < 3; s++)
    for (int64_t w = 0; w < per[s]; w++) {
      int64_t sh, off;
      lt_shard_loader_where(L, &sh, &off);
      ck_assert_int_eq(sh, s);
      ck_assert_int_eq(off, w * T);
      lt_tensor *x, *y;
      LT_OK_OR_FAIL(lt_shard_loader_next(L, &x, &y));
      LT_ASSERT_SHAPE(x, 1, T);
      const int64_t *xd = x->data, *yd = y->data;
      for (int64_t t = 0; t < T; t++) {
        ck_assert_int_eq(xd[t], tok(s * 1000 + w * T + t, 300, 3));
        ck_assert_int_eq(yd[t], tok(s * 1000 + w * T + t + 1, 300, 3));
      }
      lt_tensor_free(x), lt_tensor_free(y);
    }
  lt_loader_position p = lt_shard_loader_get_position(L);
  ck_assert_int_eq(p.epoch, 0);
  ck_assert_int_eq(p.index, lt_shard_loader_batches_per_epoch(L));
  lt_shard_loader_free(L);
}
END_TEST

static void expect_refused(const char *name, int64_t vocab, lt_status st, const char *a, const char *b) {
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(1, 4);
  o.vocab = vocab;
  lt_shard_loader *L = lt_shard_loader_open(ckpt_path(name), &o);
  ck_assert_msg(L == NULL, "%s was accepted", name);
  ck_assert_msg(lt_last_status() == st, "%s: %s", name, lt_last_error());
  ck_assert_msg(strstr(lt_last_error(), name) != NULL, "the message does not name %s: %s", name, lt_last_error());
  ck_assert_msg(!a || strstr(lt_last_error(), a), "'%s' not in: %s", a, lt_last_error());
  ck_assert_msg(!b || strstr(lt_last_error(), b), "'%s' not in: %s", b, lt_last_error());
}

START_TEST(test_crafted_shards) {
  unsigned char good[1024 + 2 * 100] = {0};
  int32_t h[3] = {20240520, 1, 100};
  memcpy(good, h, sizeof h); /* little-endian host (x86-64, as the format) */
  for (int i = 0; i < 100; i++) good[1024 + 2 * i] = (unsigned char)(i % 50);
  ckpt_write_file(ckpt_path("good.bin"), good, sizeof good);
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(1, 4);
  o.vocab = 50;
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(ckpt_path("good.bin"), &o));
  lt_shard_loader_free(L);

  unsigned char bad[sizeof good];
  memcpy(bad, good, sizeof bad), bad[0] ^= 1;
  ckpt_write_file(ckpt_path("magic.bin"), bad, sizeof bad);
  expect_refused("magic.bin", 50, LT_ERR_FORMAT, "offset 0", "magic");
  memcpy(bad, good, sizeof bad), bad[4] = 3;
  ckpt_write_file(ckpt_path("version.bin"), bad, sizeof bad);
  expect_refused("version.bin", 50, LT_ERR_FORMAT, "offset 4", "version 3");
  memcpy(bad, good, sizeof bad), bad[4] = 7; /* the uint32 version under the uint16 magic */
  ckpt_write_file(ckpt_path("version7.bin"), bad, sizeof bad);
  expect_refused("version7.bin", 50, LT_ERR_FORMAT, "offset 4", "expected 1 for magic 20240520");
  ckpt_write_file(ckpt_path("short.bin"), good, 1000);
  expect_refused("short.bin", 50, LT_ERR_FORMAT, "shorter than the 1024-byte header", NULL);
  ckpt_write_file(ckpt_path("trunc.bin"), good, sizeof good - 1);
  expect_refused("trunc.bin", 50, LT_ERR_FORMAT, "truncated", "offset 1224");
  memcpy(bad, good, sizeof bad), bad[8] = 200; /* 200 tokens claimed, 100 there */
  ckpt_write_file(ckpt_path("count.bin"), bad, sizeof bad);
  expect_refused("count.bin", 50, LT_ERR_FORMAT, "past the end of the file", "offset 1424");
  memcpy(bad, good, sizeof bad), bad[11] = 0x80; /* negative count */
  ckpt_write_file(ckpt_path("negative.bin"), bad, sizeof bad);
  expect_refused("negative.bin", 50, LT_ERR_FORMAT, "offset 8", "negative");
  memcpy(bad, good, sizeof bad), bad[8] = 50; /* 50 tokens, 100 bytes left over */
  ckpt_write_file(ckpt_path("trailing.bin"), bad, sizeof bad);
  expect_refused("trailing.bin", 50, LT_ERR_FORMAT, "offset 1124", "100 bytes after");
  memcpy(bad, good, sizeof bad), bad[1024 + 2 * 77] = 50; /* token 77 = 50 */
  ckpt_write_file(ckpt_path("vocab.bin"), bad, sizeof bad);
  expect_refused("vocab.bin", 50, LT_ERR_FORMAT, "offset 1178", "token 77 of the shard is 50");
  /* the same shard with a vocabulary that holds it, or no check */
  o.vocab = 51;
  lt_shard_loader_free(LT_NNP(lt_shard_loader_open(ckpt_path("vocab.bin"), &o)));
  /* not regular files */
  ck_assert_int_eq(mkfifo(ckpt_path("fifo.bin"), 0600), 0);
  expect_refused("fifo.bin", 50, LT_ERR_IO, "FIFO", NULL);
  ck_assert_int_eq(mkdir(ckpt_path("dir.bin"), 0700), 0);
  expect_refused("dir.bin", 50, LT_ERR_IO, "directory", NULL);
  expect_refused("none_*.bin", 50, LT_ERR_INVALID, "no shard matches", NULL);
  /* too few windows for a global batch */
  o = LT_SHARD_LOADER_DEFAULTS(64, 4);
  LT_EXPECT_NULLP_ERR(lt_shard_loader_open(ckpt_path("good.bin"), &o), LT_ERR_INVALID, "fewer than a global batch");
  o = LT_SHARD_LOADER_DEFAULTS(0, 4);
  LT_EXPECT_NULLP_ERR(lt_shard_loader_open(ckpt_path("good.bin"), &o), LT_ERR_INVALID, "batch 0");
  /* the header check on memory */
  lt_shard_info info;
  LT_EXPECT_ERR(lt_shard_validate(good, 10, 0, "mem", &info), LT_ERR_FORMAT, "shorter");
}
END_TEST

/* One epoch's batches (B rows of T) into out[nb * B * T]. */
static void read_batches(lt_shard_loader *L, int64_t nb, int64_t *out, int64_t B, int64_t T) {
  for (int64_t i = 0; i < nb; i++) {
    lt_tensor *x, *y;
    LT_OK_OR_FAIL(lt_shard_loader_next(L, &x, &y));
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(x->shape[0], B);
    memcpy(out + i * B * T, x->data, (size_t)(B * T) * sizeof *out);
    const int64_t *xd = x->data, *yd = y->data;
    for (int64_t k = 0; k + 1 < B * T; k++)
      if ((k + 1) % T) ck_assert_int_eq(yd[k], xd[k + 1]);
    lt_tensor_free(x), lt_tensor_free(y);
  }
}

START_TEST(test_order_and_determinism) {
  /* 5 shards of 600 tokens (the last shorter): windows of T + 1 = 9 tokens */
  const int64_t N = 2800, T = 8, B = 4;
  const char *pat = corpus_glob("train", N, 4099, 600, 0); /* 4099 is prime and > N: no two windows are equal */
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(B, T);
  o.seed = 42;
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
  const int64_t W = lt_shard_loader_num_windows(L), nb = lt_shard_loader_batches_per_epoch(L);
  ck_assert_int_eq(W, 4 * (599 / T) + 399 / T);
  ck_assert_int_eq(nb, W / B);
  int64_t *e0 = malloc(sizeof *e0 * (size_t)(nb * B * T)), *e1 = malloc(sizeof *e1 * (size_t)(nb * B * T));
  int64_t *again = malloc(sizeof *again * (size_t)(nb * B * T));
  read_batches(L, nb, e0, B, T);
  read_batches(L, nb, e1, B, T);
  /* each window of an epoch is a distinct window of the corpus: its first
   * token's index is recovered from (i * 7919) % 4099, with i = 600 * s + w * T */
  bool *seen = calloc((size_t)W, 1);
  int64_t shard_of[5] = {0};
  for (int64_t r = 0; r < nb * B; r++) {
    int64_t found = -1;
    for (int64_t s = 0, k = 0; s < 5 && found < 0; s++)
      for (int64_t w = 0; w < (s < 4 ? 599 : 399) / T; w++, k++) {
        bool eq = true;
        for (int64_t t = 0; t < T && eq; t++) eq = e0[r * T + t] == tok(600 * s + w * T + t, 4099, 0);
        if (eq) found = k, shard_of[s]++;
        if (eq) break;
      }
    ck_assert_msg(found >= 0, "row %lld is no window of the corpus", (long long)r);
    ck_assert_msg(!seen[found], "window %lld twice in an epoch", (long long)found);
    seen[found] = true;
  }
  free(seen);
  ck_assert_msg(memcmp(e0, e1, sizeof *e0 * (size_t)(nb * B * T)) != 0, "epoch 1 repeats epoch 0's order");
  lt_shard_loader_free(L);
  /* the same seed, without the prefetch thread: the same batches */
  o.prefetch = false;
  L = LT_NNP(lt_shard_loader_open(pat, &o));
  read_batches(L, nb, again, B, T);
  ck_assert_msg(memcmp(e0, again, sizeof *e0 * (size_t)(nb * B * T)) == 0, "not deterministic");
  lt_shard_loader_free(L);
  /* another seed: another order */
  o.seed = 43;
  L = LT_NNP(lt_shard_loader_open(pat, &o));
  read_batches(L, nb, again, B, T);
  ck_assert(memcmp(e0, again, sizeof *e0 * (size_t)(nb * B * T)) != 0);
  lt_shard_loader_free(L);
  free(e0), free(e1), free(again);
}
END_TEST

START_TEST(test_resume_anywhere) {
  const int64_t N = 2800, T = 8, B = 3;
  const char *pat = corpus_glob("train", N, 1000, 600, 5);
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(B, T);
  o.seed = 7;
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
  const int64_t nb = lt_shard_loader_batches_per_epoch(L), total = 2 * nb + 5;
  int64_t *straight = malloc(sizeof *straight * (size_t)(total * B * T));
  lt_loader_position *pos = malloc(sizeof *pos * (size_t)total);
  int64_t *where_shard = malloc(sizeof *where_shard * (size_t)total);
  for (int64_t i = 0; i < total; i++) {
    pos[i] = lt_shard_loader_get_position(L);
    lt_shard_loader_where(L, &where_shard[i], NULL);
    read_batches(L, 1, straight + i * B * T, B, T);
  }
  lt_shard_loader_free(L);
  /* a resume at each batch in a new loader (batch k's window is in a
   * different shard than batch k - 1's at some k: shard boundaries crossed) */
  int crossings = 0;
  int64_t *got = malloc(sizeof *got * (size_t)(B * T * 3));
  for (int64_t k = 1; k < total; k++) {
    crossings += where_shard[k] != where_shard[k - 1];
    L = LT_NNP(lt_shard_loader_open(pat, &o));
    LT_OK_OR_FAIL(lt_shard_loader_set_position(L, pos[k]));
    int64_t m = total - k < 3 ? total - k : 3;
    read_batches(L, m, got, B, T);
    ck_assert_msg(memcmp(got, straight + k * B * T, sizeof *got * (size_t)(m * B * T)) == 0,
                  "resumed at batch %lld: other batches", (long long)k);
    lt_shard_loader_free(L);
  }
  ck_assert_int_ge(crossings, 5);
  /* positions of other data or options are refused */
  L = LT_NNP(lt_shard_loader_open(corpus_glob("other", N + 100, 1000, 600, 5), &o));
  LT_EXPECT_ERR(lt_shard_loader_set_position(L, pos[3]), LT_ERR_STATE, "fingerprint");
  lt_loader_position p = lt_shard_loader_get_position(L);
  p.index = lt_shard_loader_batches_per_epoch(L) + 1;
  LT_EXPECT_ERR(lt_shard_loader_set_position(L, p), LT_ERR_INVALID, "index");
  p = lt_shard_loader_get_position(L);
  p.gen.seed ^= 1;
  LT_EXPECT_ERR(lt_shard_loader_set_position(L, p), LT_ERR_STATE, "generator state");
  lt_shard_loader_free(L);
  free(straight), free(pos), free(where_shard), free(got);
}
END_TEST

START_TEST(test_ranks_and_short_batch) {
  const int64_t N = 2800, T = 8, B = 3;
  const char *pat = corpus_glob("train", N, 1000, 600, 9);
  /* one process with 2B rows against two ranks with B each: the same rows */
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(2 * B, T);
  o.seed = 11;
  lt_shard_loader *one = LT_NNP(lt_shard_loader_open(pat, &o));
  o.batch = B, o.world = 2;
  o.rank = 0;
  lt_shard_loader *r0 = LT_NNP(lt_shard_loader_open(pat, &o));
  o.rank = 1;
  lt_shard_loader *r1 = LT_NNP(lt_shard_loader_open(pat, &o));
  ck_assert_int_eq(lt_shard_loader_batches_per_epoch(one), lt_shard_loader_batches_per_epoch(r0));
  ck_assert_uint_eq(lt_shard_loader_get_position(one).fingerprint, lt_shard_loader_get_position(r0).fingerprint);
  int64_t a[2 * 3 * 8], b[2 * 3 * 8];
  for (int64_t i = 0; i < lt_shard_loader_batches_per_epoch(one) + 3; i++) {
    read_batches(one, 1, a, 2 * B, T);
    read_batches(r0, 1, b, B, T);
    read_batches(r1, 1, b + B * T, B, T);
    ck_assert_msg(memcmp(a, b, sizeof a) == 0, "batch %lld: the ranks' rows are not the one process's", (long long)i);
  }
  lt_shard_loader_free(one), lt_shard_loader_free(r0), lt_shard_loader_free(r1);
  /* without drop_last the last global batch is short: 347 windows, G = 2 x 50 */
  o = LT_SHARD_LOADER_DEFAULTS(50, T);
  o.shuffle = false, o.drop_last = false, o.world = 2;
  for (int rank = 0; rank < 2; rank++) {
    o.rank = rank;
    lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
    int64_t W = lt_shard_loader_num_windows(L), nb = lt_shard_loader_batches_per_epoch(L);
    ck_assert_int_eq(nb, (W + 99) / 100);
    int64_t rows = 0;
    for (int64_t i = 0; i < nb; i++) {
      lt_tensor *x, *y;
      LT_OK_OR_FAIL(lt_shard_loader_next(L, &x, &y));
      int64_t last = W - (nb - 1) * 100, want = i < nb - 1 ? 50 : (rank == 0 ? (last < 50 ? last : 50) : (last > 50 ? last - 50 : 0));
      if (want == 0) ck_assert_ptr_null(x);
      else ck_assert_int_eq(x->shape[0], want);
      rows += x ? x->shape[0] : 0;
      lt_tensor_free(x), lt_tensor_free(y);
    }
    ck_assert_int_eq(rows, rank == 0 ? 50 * (nb - 1) + ((W - (nb - 1) * 100) < 50 ? W - (nb - 1) * 100 : 50)
                                     : W - (50 * (nb - 1) + ((W - (nb - 1) * 100) < 50 ? W - (nb - 1) * 100 : 50)));
    lt_shard_loader_free(L);
  }
}
END_TEST

/* Logits of a model that knows nothing: zeros [b, T, V], so every target
 * costs log V. */
static lt_tensor *zero_logits(void *user, const lt_tensor *x) {
  int64_t V = *(const int64_t *)user;
  return lt_zeros(LT_DTYPE_F32, 3, (int64_t[]){x->shape[0], x->shape[1], V});
}
static lt_tensor *bad_logits(void *user, const lt_tensor *x) {
  (void)user;
  return lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){x->shape[0], x->shape[1]});
}

START_TEST(test_lm_evaluate) {
  const char *pat = corpus_glob("val", 1000, 300, 400, 1);
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(7, 16);
  o.shuffle = false, o.drop_last = false;
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
  int64_t V = 300;
  lt_trainer_lm_eval ev;
  for (int pass = 0; pass < 2; pass++) { /* rewound each time: the same figures */
    LT_OK_OR_FAIL(lt_trainer_lm_evaluate(L, zero_logits, &V, &ev));
    ck_assert_double_eq(ev.tokens, (double)(lt_shard_loader_num_windows(L) * 16));
    ck_assert_double_eq_tol(ev.loss, log(300.0), 1e-6);
    ck_assert_double_eq_tol(ev.perplexity, 300.0, 1e-3);
    ck_assert(!ev.interrupted);
  }
  LT_EXPECT_ERR(lt_trainer_lm_evaluate(L, bad_logits, &V, &ev), LT_ERR_SHAPE, "want [b, T, V]");
  lt_shard_loader_free(L);
}
END_TEST

/* One-hot logits [b, T, V]: 1 at the input id, 0 elsewhere, so a target
 * equal to its input costs log(e + V - 1) - 1 and is a hit, any other
 * log(e + V - 1); records the most rows of one call and the first call's. */
typedef struct onehot_hook {
  int64_t V, max_rows, first_rows, calls;
} onehot_hook;
static lt_tensor *onehot_logits(void *user, const lt_tensor *x) {
  onehot_hook *h = user;
  const int64_t b = x->shape[0], T = x->shape[1];
  if (h->calls++ == 0) h->first_rows = b;
  if (b > h->max_rows) h->max_rows = b;
  int64_t *ids = malloc(sizeof *ids * (size_t)(b * T));
  float *z = calloc((size_t)(b * T * h->V), sizeof *z);
  ck_assert(ids && z);
  ck_assert_int_eq(lt_tensor_read(x, LT_DTYPE_I64, ids, b * T), LT_OK);
  for (int64_t i = 0; i < b * T; i++) z[i * h->V + ids[i]] = 1.0f;
  lt_tensor *out = lt_tensor_from_copy(LT_DTYPE_F32, 3, (int64_t[]){b, T, h->V}, z);
  free(ids), free(z);
  return out;
}

/* lt_trainer_lm_batch_sums runs the hook on slices of rows holding at most
 * 16 Mi logits (one row first), with the sums of the whole batch. */
START_TEST(test_lm_batch_sums_in_row_slices) {
  enum { B = 25, T = 16 };
  onehot_hook h = {.V = 100000}; /* 1.6 Mi logits a row: 10 rows a slice */
  int64_t x[B * T], y[B * T], hits = 0;
  for (int64_t i = 0; i < B * T; i++) {
    x[i] = (i * 7919) % h.V;
    y[i] = i % 3 == 0 ? x[i] : (x[i] + 1) % h.V;
    hits += y[i] == x[i];
  }
  lt_tensor *X = LT_NNP(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, T}, x));
  lt_tensor *Y = LT_NNP(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, T}, y));
  double v[3] = {0, 0, 0};
  bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(lt_trainer_lm_batch_sums(onehot_logits, &h, X, Y, v));
  lt_set_grad_enabled(prev);
  ck_assert_int_eq(h.first_rows, 1);
  ck_assert_int_eq(h.max_rows, 10);
  ck_assert_int_eq(h.calls, 4); /* 1 + 10 + 10 + 4 rows */
  const double lse = log(exp(1.0) + (double)(h.V - 1));
  ck_assert_double_eq(v[1], (double)hits);
  ck_assert_double_eq(v[2], (double)(B * T));
  ck_assert_double_eq_tol(v[0] / (B * T * lse - (double)hits), 1.0, 1e-5);
  lt_tensor *Y2 = LT_NNP(lt_zeros(LT_DTYPE_I64, 2, (int64_t[]){B, T + 1}));
  LT_EXPECT_ERR(lt_trainer_lm_batch_sums(onehot_logits, &h, X, Y2, v), LT_ERR_SHAPE, "want the same [b, T]");
  lt_tensor_free(X), lt_tensor_free(Y), lt_tensor_free(Y2);
}
END_TEST

/* The peak resident set of this process so far (kB; a forked child starts
 * from its parent's resident set at the fork). */
static long peak_rss_kb(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* The loader's memory on a corpus of `mib` MiB of generated uint16 shards (of
 * 32 MiB each), opened (every token checked) and read for 200 batches of
 * 8 x 1024, in a child process so that each measure starts afresh. Returns
 * the child's peak RSS growth in kB. */
static long loader_rss_kb(int64_t mib) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/rss%lld", ckpt_tmpdir, (long long)mib);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  const int64_t per = (32 << 20) / 2;
  int64_t *buf = malloc(sizeof *buf * 65536);
  lt_shard_writer *w = LT_NNP(lt_shard_writer_new(dir, "train", 50257, per));
  for (int64_t i = 0; i < mib * (1 << 20) / 2; i += 65536) {
    for (int64_t k = 0; k < 65536; k++) buf[k] = (i + k) * 31 % 50257;
    LT_OK_OR_FAIL(lt_shard_writer_add(w, buf, 65536));
  }
  LT_OK_OR_FAIL(lt_shard_writer_close(w, NULL, NULL));
  free(buf);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    long before = peak_rss_kb();
    char pat[600];
    snprintf(pat, sizeof pat, "%s/train_*.bin", dir);
    lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(8, 1024);
    o.vocab = 50257;
    lt_shard_loader *L = lt_shard_loader_open(pat, &o);
    long grow = -1;
    if (L) {
      for (int i = 0; i < 200; i++) {
        lt_tensor *x, *y;
        if (lt_shard_loader_next(L, &x, &y) != LT_OK) break;
        lt_tensor_free(x), lt_tensor_free(y);
      }
      grow = peak_rss_kb() - before;
      lt_shard_loader_free(L);
    }
    if (write(fds[1], &grow, sizeof grow) != sizeof grow) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  long grow = -1;
  ck_assert(read(fds[0], &grow, sizeof grow) == sizeof grow);
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  ck_assert_msg(grow >= 0, "the child could not open or read the shards");
  ckpt_rm_rf(dir);
  return grow;
}

START_TEST(test_flat_rss) {
  long small = loader_rss_kb(64), large = loader_rss_kb(512);
  fprintf(stderr, "shard loader peak RSS growth: %ld kB on 64 MiB of shards, %ld kB on 512 MiB\n", small, large);
  ck_assert_msg(large - small < 8 * 1024, "the loader's memory grows with the corpus: %ld kB on 64 MiB, %ld kB on "
                "512 MiB", small, large);
#ifdef __SANITIZE_ADDRESS__
  const long bound = 64 * 1024; /* ASan's shadow and quarantine */
#else
  const long bound = 16 * 1024;
#endif
  ck_assert_msg(large < bound, "the loader holds %ld kB", large);
}
END_TEST

int main(void) {
  Suite *s = suite_create("shards");
  TCase *tc = LT_TEST_CASE(s, "core", 300, test_format_bytes, test_round_trip_file_order, test_crafted_shards,
                           test_order_and_determinism, test_resume_anywhere, test_ranks_and_short_batch,
                           test_lm_evaluate, test_lm_batch_sums_in_row_slices, test_flat_rss);
  tcase_add_checked_fixture(tc, ckpt_tmpdir_make, ckpt_tmpdir_remove);
  return lt_test_run(s);
}
