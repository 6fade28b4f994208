/*
 * tests/test_shards_e2e.c: the tokenize and train programs on token shards,
 * end to end (the programs' paths come from tests/CMakeLists.txt).
 *   - tokenize --tokenizer byte: the train and val shards hold, in order,
 *     <bos> and the bytes of the text, every 1/F-th unit held out; the same
 *     bytes on 1 and 2 threads; JSON Lines records; DIR/tokenizer.json
 *     written; bad input refused with a message and a non-zero exit (a
 *     record without the field, a directory that holds shards, a missing
 *     tokenizer, --val-fraction on too little input);
 *   - tokenize killed (SIGKILL) while writing: every shard left is whole;
 *   - train --data / --val-data: N steps straight against N/2 steps, exit,
 *     and a new process resuming for N/2, with shards of 40 windows and
 *     8 windows a step, so both halves cross a shard boundary: the loss and
 *     the validation loss of every step and the final parameters bit for
 *     bit equal; validation loss and perplexity printed;
 *   - train refuses a shard holding ids past its tokenizer's vocabulary,
 *     naming the shard and the offset;
 *   - under mpirun -np 2 (Release build with MPI only): 2 ranks x --batch 4
 *     against 1 process x --batch 8: the same losses and validation losses
 *     (1e-5 relative), each rank reading its own rows.
 */
#define _DEFAULT_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "datasets/datasets.h"
#include "test_util.h"
#include "util_ckpt.h"
#include "util_run.h"
#include "util_tfckpt.h"

#if !defined(LT_TRAIN_EXE) || !defined(LT_TOKENIZE_EXE)
#error "LT_TRAIN_EXE and LT_TOKENIZE_EXE (the programs' paths) must be defined by the build"
#endif

#define TEXT "/usr/share/common-licenses/GPL-3"

/* Runs "exe args" with its output in <ckpt_tmpdir>/<log>; its exit status. */
static int run(const char *exe, const char *args, const char *log) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "%s %s > '%s' 2>&1", exe, args, ckpt_path(log));
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
  return WEXITSTATUS(st);
}

static void expect_exit(int got, int want, const char *log) {
  if (got == want) return;
  size_t n;
  char *s = (char *)ckpt_read_file(ckpt_path(log), &n);
  ck_abort_msg("exit %d, expected %d; the end of its output:\n%s", got, want, s + (n > 2000 ? n - 2000 : 0));
}

static void expect_in_log(const char *log, const char *needle) {
  size_t n;
  char *s = (char *)ckpt_read_file(ckpt_path(log), &n);
  ck_assert_msg(strstr(s, needle) != NULL, "'%s' not in the output:\n%s", needle, s);
  free(s);
}

/* The tokens of every shard prefix_*.bin in dir, in order (free with free()). */
static int64_t *read_split(const char *dir_, const char *prefix, int64_t vocab, int64_t *n, int *version) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", dir_); /* lt_test_join's buffers are reused */
  int64_t *all = NULL;
  *n = 0;
  for (int k = 0;; k++) {
    char name[64];
    snprintf(name, sizeof name, "%s_%06d.bin", prefix, k);
    char *path = lt_test_join(dir, name);
    struct stat st;
    if (stat(path, &st) != 0) break;
    size_t len;
    unsigned char *b = ckpt_read_file(path, &len);
    lt_shard_info info;
    LT_OK_OR_FAIL(lt_shard_validate(b, len, vocab, path, &info));
    if (version) *version = info.version;
    all = realloc(all, sizeof *all * (size_t)(*n + info.n_tokens + 1));
    for (int64_t i = 0; i < info.n_tokens; i++)
      all[*n + i] = info.token_bytes == 2 ? (int64_t)(b[1024 + 2 * i] | b[1024 + 2 * i + 1] << 8)
                                          : (int64_t)((uint32_t)b[1024 + 4 * i] | (uint32_t)b[1025 + 4 * i] << 8 |
                                                      (uint32_t)b[1026 + 4 * i] << 16 | (uint32_t)b[1027 + 4 * i] << 24);
    *n += info.n_tokens;
    free(b);
  }
  return all;
}

START_TEST(tokenize_byte_round_trip) {
  size_t len;
  char *text = (char *)ckpt_read_file(TEXT, &len);
  char args[2048];
  /* no validation: <bos>, then the text's bytes + 4, in shards of 5000 */
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' --val-fraction 0 --shard-tokens 5000 --chunk-bytes 4096 "
           "--threads 2 " TEXT, ckpt_path("a"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "a.log"), 0, "a.log");
  int64_t n, nv;
  int version = 0;
  int64_t *t = read_split(ckpt_path("a"), "train", 260, &n, &version);
  ck_assert_int_eq(version, LT_SHARD_VERSION_U16);
  ck_assert_int_eq(n, (int64_t)len + 1);
  ck_assert_int_eq(t[0], LT_TOKEN_BOS);
  for (size_t i = 0; i < len; i++) ck_assert_int_eq(t[i + 1], (unsigned char)text[i] + 4);
  free(t);
  struct stat st;
  ck_assert_int_eq(stat(lt_test_join(ckpt_path("a"), "tokenizer.json"), &st), 0);
  ck_assert_int_eq(stat(lt_test_join(ckpt_path("a"), "val_000000.bin"), &st), -1);
  /* every 5th unit held out: train and val together are the units in order */
  for (int th = 1; th <= 2; th++) {
    char dir[8];
    snprintf(dir, sizeof dir, "v%d", th);
    snprintf(args, sizeof args, "--tokenizer byte --out '%s' --val-fraction 0.2 --shard-tokens 3000 --chunk-bytes 2000 "
             "--threads %d --doc-token none " TEXT, ckpt_path(dir), th);
    expect_exit(run(LT_TOKENIZE_EXE, args, "v.log"), 0, "v.log");
  }
  int64_t *tr = read_split(ckpt_path("v1"), "train", 260, &n, NULL);
  int64_t *va = read_split(ckpt_path("v1"), "val", 260, &nv, NULL);
  ck_assert_int_eq(n + nv, (int64_t)len);
  ck_assert_int_gt(nv, (int64_t)len / 10);
  ck_assert_int_lt(nv, (int64_t)len * 3 / 10);
  /* rebuild the text: the units are cut at "X\nY" points within 2000 bytes */
  int64_t a = 0, b = 0;
  for (int u = 0; a + b < n + nv; u++) {
    bool val = (u + 1) / 5 > u / 5;
    int64_t *src = val ? va : tr, *k = val ? &b : &a;
    /* the unit's end, by tokenize's rule: the last "X\nY" (X, Y not white
     * space) in [want / 2, want] of the unit, want = 2000 doubled until one is found */
    size_t at = (size_t)(a + b), end = 0;
    for (size_t want = 2000; !end; want *= 2) {
      if (at + want >= len) {
        end = len;
        break;
      }
      for (size_t p = want; p >= want / 2 && !end; p--)
        if (text[at + p - 1] == '\n' && !strchr(" \t\n\r\f\v", text[at + p]) && !strchr(" \t\n\r\f\v", text[at + p - 2]))
          end = at + p;
    }
    for (size_t i = at; i < end; i++)
      ck_assert_msg(src[(*k)++] == (unsigned char)text[i] + 4, "unit %d (%s) byte %zu", u, val ? "val" : "train", i);
  }
  free(tr), free(va);
  /* 1 and 2 threads: the same bytes */
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, k < 2 ? "train_%06d.bin" : "val_%06d.bin", k < 2 ? k : 0);
    size_t l1, l2;
    char *x = (char *)ckpt_read_file(lt_test_join(ckpt_path("v1"), name), &l1);
    char *y = (char *)ckpt_read_file(lt_test_join(ckpt_path("v2"), name), &l2);
    ck_assert_msg(l1 == l2 && !memcmp(x, y, l1), "%s differs between 1 and 2 threads", name);
    free(x), free(y);
  }
  free(text);
}
END_TEST

START_TEST(tokenize_jsonl_and_errors) {
  FILE *f = fopen(ckpt_path("d.jsonl"), "w");
  fprintf(f, "{\"text\": \"hello\"}\n\n{\"text\": \"w\\u00f6rld\\nline 2\", \"id\": 2}\n{\"text\": \"\"}\n");
  fclose(f);
  char args[2048];
  snprintf(args, sizeof args, "--tokenizer char --jsonl-field text --out '%s' --val-fraction 0 '%s'", ckpt_path("j"),
           ckpt_path("d.jsonl"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "j.log"), 0, "j.log");
  expect_in_log("j.log", "3 documents");
  /* the char vocabulary of the records, saved for train */
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_load_hf(lt_test_join(ckpt_path("j"), "tokenizer.json")));
  int64_t n, *t = read_split(ckpt_path("j"), "train", lt_tokenizer_vocab_size(tok), &n, NULL);
  const char *docs[] = {"hello", "w\xc3\xb6rld\nline 2", ""};
  int64_t k = 0;
  for (int d = 0; d < 3; d++) {
    ck_assert_int_eq(t[k++], LT_TOKEN_BOS);
    int64_t *ids, m;
    LT_OK_OR_FAIL(lt_tokenizer_encode(tok, docs[d], strlen(docs[d]), &ids, &m));
    for (int64_t i = 0; i < m; i++) ck_assert_int_eq(t[k++], ids[i]);
    free(ids);
  }
  ck_assert_int_eq(k, n);
  free(t);
  lt_tokenizer_free(tok);
  /* a directory that holds shards */
  expect_exit(run(LT_TOKENIZE_EXE, args, "j2.log"), 1, "j2.log");
  expect_in_log("j2.log", "already holds shards");
  /* a record without the field, naming the file and line */
  f = fopen(ckpt_path("bad.jsonl"), "w");
  fprintf(f, "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
  fclose(f);
  snprintf(args, sizeof args, "--tokenizer byte --jsonl-field text --out '%s' '%s'", ckpt_path("b"), ckpt_path("bad.jsonl"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "b.log"), 1, "b.log");
  expect_in_log("b.log", "bad.jsonl' line 2: no field named by --jsonl-field");
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' '%s'", ckpt_path("c"), ckpt_path("d.jsonl"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "c.log"), 1, "c.log"); /* 1 unit: nothing to hold out */
  expect_in_log("c.log", "too few to hold one out");
  snprintf(args, sizeof args, "--out '%s' '%s'", ckpt_path("e"), ckpt_path("d.jsonl"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "e.log"), 2, "e.log");
  expect_in_log("e.log", "needs one of --tokenizer");
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' '%s'", ckpt_path("g"), ckpt_path("missing.txt"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "g.log"), 1, "g.log");
  expect_in_log("g.log", "missing.txt");
  /* a FIFO and a device are refused at once, before anything is read (a FIFO would block) */
  ck_assert_int_eq(mkfifo(ckpt_path("in.fifo"), 0600), 0);
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' '%s'", ckpt_path("h"), ckpt_path("in.fifo"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "h.log"), 2, "h.log");
  expect_in_log("h.log", "is a FIFO, not a regular file");
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' /dev/zero", ckpt_path("h"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "h2.log"), 2, "h2.log");
  expect_in_log("h2.log", "is a device, not a regular file");
}
END_TEST

/* SIGKILL while shards are being written: every shard left is whole (a
 * shard is written to a hidden temporary and renamed). */
START_TEST(tokenize_killed_leaves_whole_shards) {
  size_t len;
  char *text = (char *)ckpt_read_file(TEXT, &len);
  FILE *f = fopen(ckpt_path("big.txt"), "wb");
  for (int i = 0; i < 600; i++) ck_assert(fwrite(text, 1, len, f) == len); /* about 21 MB */
  fclose(f);
  free(text);
  char out[600];
  snprintf(out, sizeof out, "%s", ckpt_path("k"));
  pid_t pid = fork();
  if (pid == 0) {
    execl(LT_TOKENIZE_EXE, "tokenize", "--tokenizer", "byte", "--out", out, "--val-fraction", "0", "--shard-tokens",
          "200000", "--threads", "1", ckpt_path("big.txt"), (char *)NULL);
    _exit(127);
  }
  /* kill it once the first shards are there */
  char first[700];
  snprintf(first, sizeof first, "%s/train_000002.bin", out);
  struct stat st;
  int st_code = 0;
  for (int i = 0; i < 3000 && stat(first, &st) != 0; i++) usleep(2000);
  kill(pid, SIGKILL);
  waitpid(pid, &st_code, 0);
  int n = 0;
  for (int k = 0;; k++, n++) {
    char name[64];
    snprintf(name, sizeof name, "train_%06d.bin", k);
    char *p = lt_test_join(out, name);
    if (stat(p, &st) != 0) break;
    size_t sz;
    unsigned char *b = ckpt_read_file(p, &sz);
    lt_shard_info info;
    LT_OK_OR_FAIL(lt_shard_validate(b, sz, 260, p, &info));
    ck_assert_int_eq(info.n_tokens, 200000);
    free(b);
  }
  ck_assert_int_ge(n, 3);
  /* nothing else named like a shard */
  char pat[700];
  snprintf(pat, sizeof pat, "ls '%s' | grep -c '^train_' | grep -qx %d", out, n);
  ck_assert_msg(system(pat) == 0, "files named like shards besides the %d whole ones", n);
}
END_TEST

enum { COL_LOSS = 3, COL_VAL_LOSS = 10 };

/* The first n rows' loss and validation loss of the runs in directories a
 * and b: equal within rtol (0: bit for bit; both NAN counts as equal). */
static void expect_same_metrics(const char *a, const char *b, int n, double rtol) {
  double va[64], vb[64];
  ck_assert_int_le(n, 64);
  for (int col = 0; col < 2; col++) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s/metrics.csv", ckpt_tmpdir, a);
    snprintf(pb, sizeof pb, "%s/%s/metrics.csv", ckpt_tmpdir, b);
    ck_assert_int_eq(lt_test_csv_column(pa, col ? COL_VAL_LOSS : COL_LOSS, va, n), n);
    ck_assert_int_eq(lt_test_csv_column(pb, col ? COL_VAL_LOSS : COL_LOSS, vb, n), n);
    for (int i = 0; i < n; i++)
      ck_assert_msg((isnan(va[i]) && isnan(vb[i])) || fabs(va[i] - vb[i]) <= rtol * fabs(va[i]),
                    "step %d: %s %.17g in %s, %.17g in %s", i + 1, col ? "validation loss" : "loss", va[i], a, vb[i], b);
  }
}

/* Shards of GPL-3 for T = 32: 1281 tokens (40 windows) a shard. */
static void make_shards(void) {
  char args[1024];
  snprintf(args, sizeof args, "--tokenizer byte --out '%s' --val-fraction 0.1 --chunk-bytes 2000 --shard-tokens 1281 "
           TEXT, ckpt_path("sh"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "tok.log"), 0, "tok.log");
}

#define TINY_LM                                                                                                   \
  "--arch decoder-only --tokenizer byte --d-model 32 --heads 2 --layers 1 --d-ff 64 --max-len 32 --seq-len 32 " \
  "--lr 3e-3 --gen-tokens 0 --eval-batch 16"

static void expect_same_params(const char *a, const char *b, double tol) {
  lt_transformer *ma = tfckpt_load_model(a), *mb = tfckpt_load_model(b);
  ck_assert_msg(ma && mb, "%s", lt_last_error());
  lt_params *pa = lt_transformer_params(ma), *pb = lt_transformer_params(mb);
  for (int i = 0; i < lt_params_count(pa); i++) {
    const lt_param *x = lt_params_at(pa, i), *y = lt_params_at(pb, i);
    if (tol == 0) ck_assert_msg(lt_equal(x->value, y->value), "parameter %s differs", x->name);
    else LT_ASSERT_CLOSE(x->value, y->value, tol, tol);
  }
  lt_transformer_free(ma), lt_transformer_free(mb);
}

START_TEST(train_resume_across_shard_boundary) {
  enum { N = 12, K = N / 2 };
  make_shards();
  char args[4096];
  const char *data = "--data '%s/sh/train_*.bin' --val-data '%s/sh/val_*.bin'";
  char d[1024];
  snprintf(d, sizeof d, data, ckpt_tmpdir, ckpt_tmpdir);
  /* dropout on (0.1): its generator is saved too */
  snprintf(args, sizeof args, TINY_LM " %s --batch 8 --steps %d --eval-every 3 --threads 2 --dropout 0.1 --ckpt-dir '%s'",
           d, N, ckpt_path("straight"));
  expect_exit(run(LT_TRAIN_EXE, args, "straight.log"), 0, "straight.log");
  expect_in_log("straight.log", "training tokens in");
  expect_in_log("straight.log", "(ppl ");
  snprintf(args, sizeof args, TINY_LM " %s --batch 8 --steps %d --eval-every 3 --threads 2 --dropout 0.1 --stop-after "
           "%d --ckpt-dir '%s'", d, N, K, ckpt_path("split"));
  expect_exit(run(LT_TRAIN_EXE, args, "split1.log"), 0, "split1.log");
  snprintf(args, sizeof args, "--resume '%s' --threads 1", ckpt_path("split"));
  expect_exit(run(LT_TRAIN_EXE, args, "split2.log"), 0, "split2.log");
  expect_in_log("split2.log", "resumed from");
  expect_same_metrics("straight", "split", N, 0);
  double v[N];
  lt_test_csv_column(lt_test_join(ckpt_path("straight"), "metrics.csv"), COL_VAL_LOSS, v, N);
  ck_assert(isfinite(v[K - 1]) && isfinite(v[N - 1])); /* evaluations happened on both sides */
  char pa[1024], pb[1024];
  snprintf(pa, sizeof pa, "%s/straight/ckpt-%012d.h5", ckpt_tmpdir, N);
  snprintf(pb, sizeof pb, "%s/split/ckpt-%012d.h5", ckpt_tmpdir, N);
  expect_same_params(pa, pb, 0);
  /* both halves crossed a shard boundary: 40 windows a shard, 8 a step */
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(8, 32);
  char pat[600];
  snprintf(pat, sizeof pat, "%s/sh/train_*.bin", ckpt_tmpdir);
  lt_shard_loader *L = LT_NNP(lt_shard_loader_open(pat, &o));
  ck_assert_int_ge(lt_shard_loader_num_shards(L), 20);
  lt_shard_loader_free(L);
}
END_TEST

START_TEST(train_refuses_ids_past_the_vocabulary) {
  make_shards();
  /* a char tokenizer of a few letters: the byte shards' ids exceed it */
  FILE *f = fopen(ckpt_path("abc.txt"), "w");
  fputs("abc\n", f);
  fclose(f);
  char args[4096];
  snprintf(args, sizeof args, "--tokenizer char --val-fraction 0 --out '%s' '%s'", ckpt_path("abc"), ckpt_path("abc.txt"));
  expect_exit(run(LT_TOKENIZE_EXE, args, "abc.log"), 0, "abc.log");
  snprintf(args, sizeof args, "--arch decoder-only --tokenizer-file '%s/abc/tokenizer.json' --data '%s/sh/train_*.bin' "
           "--val-data '%s/sh/val_*.bin' --steps 1", ckpt_tmpdir, ckpt_tmpdir, ckpt_tmpdir);
  expect_exit(run(LT_TRAIN_EXE, args, "v.log"), 1, "v.log");
  expect_in_log("v.log", "train_000000.bin': offset 1026: token 1 of the shard is");
  expect_in_log("v.log", "outside the vocabulary of 8 ids");
  /* --data without --val-data, or with char and no tokenizer file */
  snprintf(args, sizeof args, "--arch decoder-only --data '%s/sh/train_*.bin' --steps 1", ckpt_tmpdir);
  expect_exit(run(LT_TRAIN_EXE, args, "nv.log"), 2, "nv.log");
  expect_in_log("nv.log", "--data needs --val-data");
  snprintf(args, sizeof args, "--arch decoder-only --tokenizer char --data '%s/sh/train_*.bin' --val-data "
           "'%s/sh/val_*.bin' --steps 1", ckpt_tmpdir, ckpt_tmpdir);
  ck_assert_int_ne(run(LT_TRAIN_EXE, args, "c.log"), 0);
  expect_in_log("c.log", "give --tokenizer byte, or --tokenizer-file");
}
END_TEST

#ifdef LT_MPIEXEC
#define MPIRUN LT_MPIEXEC " --allow-run-as-root --oversubscribe --bind-to none"
START_TEST(mpi_two_ranks_read_their_rows) {
  enum { N = 8 };
  make_shards();
  char d[1024], args[4096];
  snprintf(d, sizeof d, "--data '%s/sh/train_*.bin' --val-data '%s/sh/val_*.bin'", ckpt_tmpdir, ckpt_tmpdir);
  const char *sgd = "--optim sgd --lr 0.1 --momentum 0.9 --dropout 0 --threads 1";
  snprintf(args, sizeof args, TINY_LM " %s %s --batch 8 --steps %d --eval-every 4 --ckpt-dir '%s'", d, sgd, N,
           ckpt_path("one"));
  expect_exit(run(LT_TRAIN_EXE, args, "one.log"), 0, "one.log");
  snprintf(args, sizeof args, "-np 2 '%s' " TINY_LM " %s %s --batch 4 --steps %d --eval-every 4 --ckpt-dir '%s'",
           LT_TRAIN_EXE, d, sgd, N, ckpt_path("two"));
  expect_exit(run(MPIRUN, args, "two.log"), 0, "two.log");
  expect_in_log("two.log", "2 ranks x --batch 4");
  expect_same_metrics("one", "two", N, 1e-5);
  char pa[1024], pb[1024];
  snprintf(pa, sizeof pa, "%s/one/ckpt-%012d.h5", ckpt_tmpdir, N);
  snprintf(pb, sizeof pb, "%s/two/ckpt-%012d.h5", ckpt_tmpdir, N);
  expect_same_params(pa, pb, 1e-5);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("shards_e2e");
  TCase *tc = LT_TEST_CASE(s, "programs", 600, tokenize_byte_round_trip, tokenize_jsonl_and_errors,
                           tokenize_killed_leaves_whole_shards, train_resume_across_shard_boundary,
                           train_refuses_ids_past_the_vocabulary);
#ifdef LT_MPIEXEC
  tcase_add_test(tc, mpi_two_ranks_read_their_rows);
#endif
  tcase_add_checked_fixture(tc, ckpt_tmpdir_make, ckpt_tmpdir_remove);
  return lt_test_run(s);
}
