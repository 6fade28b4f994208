/*
 * tests/test_batch.c: the text sources and batching of datasets/: TSV parallel
 * corpora (and every bad-data case), the hash train/validation split, the
 * built-in tasks (correct examples, number words, dates, reproducibility,
 * disjoint splits), token-id pairs with the over-long policies, seq2seq
 * collation (shapes, padding, masks, the teacher-forcing shift), the seq2seq
 * and language-modelling loaders (epochs, shuffling, bucketing) and resuming
 * from a saved position.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/datasets.h"
#include "test_util.h"

static void expect_pair(const lt_text_pairs *p, int64_t i, const char *src, const char *tgt) {
  const char *s, *t;
  size_t sn, tn;
  LT_OK_OR_FAIL(lt_text_pairs_get(p, i, &s, &sn, &t, &tn));
  ck_assert_msg(strcmp(s, src) == 0 && sn == strlen(src), "pair %lld source \"%s\", want \"%s\"", (long long)i, s, src);
  ck_assert_msg(strcmp(t, tgt) == 0 && tn == strlen(tgt), "pair %lld target \"%s\", want \"%s\"", (long long)i, t, tgt);
}

static const int64_t *i64(const lt_tensor *t) { return (const int64_t *)t->data; }
static const bool *b8(const lt_tensor *t) { return (const bool *)t->data; }

/* ---- TSV ------------------------------------------------------------------------ */

START_TEST(test_tsv_parse) {
  const char *tsv = "\xEF\xBB\xBFhello\tbonjour\r\n\nthank you\tmerci\tCC-BY 2.0 (France) Attribution\n"
                    "caf\xC3\xA9\tcaf\xC3\xA9\n\r\nlast\tdernier";
  int64_t skipped = -1;
  lt_text_pairs *p = LT_NNP(lt_text_pairs_parse_tsv(tsv, strlen(tsv), "t.tsv", NULL, &skipped));
  ck_assert_int_eq(lt_text_pairs_count(p), 4);
  ck_assert_int_eq(skipped, 0);
  expect_pair(p, 0, "hello", "bonjour");
  expect_pair(p, 1, "thank you", "merci");
  expect_pair(p, 2, "caf\xC3\xA9", "caf\xC3\xA9");
  expect_pair(p, 3, "last", "dernier");
  const char *s;
  LT_EXPECT_ERR(lt_text_pairs_get(p, 4, &s, NULL, NULL, NULL), LT_ERR_INDEX, "pair 4");
  LT_EXPECT_ERR(lt_text_pairs_get(p, -1, &s, NULL, NULL, NULL), LT_ERR_INDEX, "pair -1");
  char *all;
  size_t n;
  LT_OK_OR_FAIL(lt_text_pairs_concat(p, &all, &n));
  ck_assert_str_eq(all, "hello\nbonjour\nthank you\nmerci\ncaf\xC3\xA9\ncaf\xC3\xA9\nlast\ndernier\n");
  ck_assert_uint_eq(n, strlen(all));
  free(all);
  lt_text_pairs_free(p);
  lt_text_pairs_free(NULL);
}
END_TEST

START_TEST(test_tsv_bad_data) {
  struct {
    const char *data;
    size_t len;
    const char *msg;
  } cases[] = {
      {"a\tb\nno tab here\nc\td\n", 0, "line 2 has no tab"},
      {"a\tb\n\tempty source\n", 0, "line 2 has an empty source"},
      {"a\tb\nempty target\t\n", 0, "line 2 has an empty target"},
      {"a\tb\nx\t\tthird\n", 0, "line 2 has an empty target"},
      {"a\tb\r\nc\td\r\nbad\xFF\tx\r\n", 0, "line 3 has invalid UTF-8 in the source at byte 3"},
      {"a\tb\nx\tok\xC3\n", 0, "line 2 has invalid UTF-8 in the target at byte 2"},
      {"a\tb\nx\0y\tz\n", 10, "line 2 contains a NUL byte"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    size_t len = cases[i].len ? cases[i].len : strlen(cases[i].data);
    LT_EXPECT_NULLP_ERR(lt_text_pairs_parse_tsv(cases[i].data, len, "c.tsv", NULL, NULL), LT_ERR_FORMAT, cases[i].msg);
    /* Skipping: the bad line is counted, the good ones kept. */
    int64_t skipped = -1;
    lt_tsv_opts o = {true};
    lt_text_pairs *p = LT_NNP(lt_text_pairs_parse_tsv(cases[i].data, len, "c.tsv", &o, &skipped));
    ck_assert_int_eq(skipped, 1);
    ck_assert_int_ge(lt_text_pairs_count(p), 1);
    expect_pair(p, 0, "a", "b");
    lt_text_pairs_free(p);
  }
  /* Empty input, blank lines only, all lines bad. */
  LT_EXPECT_NULLP_ERR(lt_text_pairs_parse_tsv("", 0, "e.tsv", NULL, NULL), LT_ERR_FORMAT, "e.tsv is empty");
  LT_EXPECT_NULLP_ERR(lt_text_pairs_parse_tsv("\n\r\n\n", 4, NULL, NULL, NULL), LT_ERR_FORMAT, "<buffer> has no examples");
  LT_EXPECT_NULLP_ERR(lt_text_pairs_parse_tsv("x\ny\n", 4, "b.tsv", &(lt_tsv_opts){true}, NULL), LT_ERR_FORMAT,
               "2 of them bad");
  LT_EXPECT_NULLP_ERR(lt_text_pairs_parse_tsv(NULL, 3, NULL, NULL, NULL), LT_ERR_NULL, "data");
  /* Files. */
  char *path = lt_test_write_temp("one\tun\ntwo\tdeux\n", 15);
  lt_text_pairs *p = LT_NNP(lt_text_pairs_load_tsv(path, NULL, NULL));
  ck_assert_int_eq(lt_text_pairs_count(p), 2);
  expect_pair(p, 1, "two", "deux");
  lt_text_pairs_free(p);
  unlink(path);
  free(path);
  path = lt_test_write_temp("", 0);
  LT_EXPECT_NULLP_ERR(lt_text_pairs_load_tsv(path, NULL, NULL), LT_ERR_FORMAT, "is empty");
  unlink(path);
  free(path);
  path = lt_test_write_temp("a\tb\nbroken\n", 11);
  LT_EXPECT_NULLP_ERR(lt_text_pairs_load_tsv(path, NULL, NULL), LT_ERR_FORMAT, "line 2 has no tab");
  /* The message names the file. */
  LT_EXPECT_NULLP_ERR(lt_text_pairs_load_tsv(path, NULL, NULL), LT_ERR_FORMAT, path);
  unlink(path);
  free(path);
  LT_EXPECT_NULLP_ERR(lt_text_pairs_load_tsv("/nonexistent/x.tsv", NULL, NULL), LT_ERR_IO, "/nonexistent/x.tsv");
}
END_TEST

/* lt_text_pairs_save_tsv writes what lt_text_pairs_load_tsv reads back, pair
 * for pair, and refuses what TSV cannot hold without writing anything. */
START_TEST(test_tsv_save) {
  lt_text_pairs *p = LT_NNP(lt_text_pairs_new());
  const char *pairs[][2] = {{"one", "un"}, {"deux mots", "two words"}, {"\xC3\xA9t\xC3\xA9", "summer"}, {" x ", "y"}};
  for (int i = 0; i < 4; i++)
    LT_OK_OR_FAIL(lt_text_pairs_add(p, pairs[i][0], strlen(pairs[i][0]), pairs[i][1], strlen(pairs[i][1])));
  char *path = lt_test_write_temp("old content\n", 12);
  LT_OK_OR_FAIL(lt_text_pairs_save_tsv(p, path)); /* replaces the file */
  lt_text_pairs *back = LT_NNP(lt_text_pairs_load_tsv(path, NULL, NULL));
  ck_assert_int_eq(lt_text_pairs_count(back), 4);
  for (int i = 0; i < 4; i++) expect_pair(back, i, pairs[i][0], pairs[i][1]);
  lt_text_pairs_free(back);
  const char *bad[][2] = {{"a\tb", "c"}, {"a", "b\nc"}, {"a\r", "b"}};
  for (int i = 0; i < 3; i++) {
    lt_text_pairs *q = LT_NNP(lt_text_pairs_new());
    LT_OK_OR_FAIL(lt_text_pairs_add(q, "fine", 4, "ok", 2));
    LT_OK_OR_FAIL(lt_text_pairs_add(q, bad[i][0], strlen(bad[i][0]), bad[i][1], strlen(bad[i][1])));
    unlink(path);
    ck_assert_int_eq(lt_text_pairs_save_tsv(q, path), LT_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(lt_last_error(), "pair 1"));
    ck_assert_int_eq(access(path, F_OK), -1); /* nothing written */
    lt_text_pairs_free(q);
  }
  lt_text_pairs *e = LT_NNP(lt_text_pairs_new());
  LT_OK_OR_FAIL(lt_text_pairs_add(e, "", 0, "x", 1));
  ck_assert_int_eq(lt_text_pairs_save_tsv(e, path), LT_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(lt_last_error(), "empty source"));
  lt_text_pairs_free(e);
  ck_assert_int_eq(lt_text_pairs_save_tsv(p, "/nonexistent/dir/x.tsv"), LT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(lt_last_error(), "/nonexistent/dir/x.tsv"));
  ck_assert_int_eq(lt_text_pairs_save_tsv(NULL, path), LT_ERR_NULL);
  lt_text_pairs_free(p);
  unlink(path);
  free(path);
}
END_TEST

START_TEST(test_split) {
  lt_text_pairs *p = LT_NNP(lt_text_pairs_new());
  char src[32], tgt[32];
  for (int i = 0; i < 2000; i++) {
    snprintf(src, sizeof src, "s%d", i % 1500); /* some duplicated sources */
    snprintf(tgt, sizeof tgt, "t%d", i);
    LT_OK_OR_FAIL(lt_text_pairs_add(p, src, strlen(src), tgt, strlen(tgt)));
  }
  lt_text_pairs *tr, *va;
  LT_OK_OR_FAIL(lt_text_pairs_split(p, 0.2, &tr, &va));
  int64_t nt = lt_text_pairs_count(tr), nv = lt_text_pairs_count(va);
  ck_assert_int_eq(nt + nv, 2000);
  ck_assert_msg(nv > 300 && nv < 500, "validation has %lld of 2000", (long long)nv);
  /* No source on both sides. */
  for (int64_t i = 0; i < nv; i++) {
    const char *s;
    size_t n;
    LT_OK_OR_FAIL(lt_text_pairs_get(va, i, &s, &n, NULL, NULL));
    ck_assert(lt_text_in_valid_split(s, n, 0.2));
    for (int64_t j = 0; j < nt; j++) {
      const char *u;
      lt_text_pairs_get(tr, j, &u, NULL, NULL, NULL);
      if (strcmp(s, u) == 0) ck_abort_msg("source %s in both splits", s);
    }
  }
  /* Order is kept. */
  const char *a, *b;
  LT_OK_OR_FAIL(lt_text_pairs_get(tr, 0, NULL, NULL, &a, NULL));
  LT_OK_OR_FAIL(lt_text_pairs_get(tr, 1, NULL, NULL, &b, NULL));
  ck_assert(atoi(a + 1) < atoi(b + 1));
  lt_text_pairs_free(tr);
  lt_text_pairs_free(va);
  /* The extremes. */
  LT_OK_OR_FAIL(lt_text_pairs_split(p, 0.0, &tr, &va));
  ck_assert_int_eq(lt_text_pairs_count(tr), 2000);
  ck_assert_int_eq(lt_text_pairs_count(va), 0);
  lt_text_pairs_free(tr);
  lt_text_pairs_free(va);
  LT_OK_OR_FAIL(lt_text_pairs_split(p, 1.0, &tr, &va));
  ck_assert_int_eq(lt_text_pairs_count(va), 2000);
  lt_text_pairs_free(tr);
  lt_text_pairs_free(va);
  tr = va = (lt_text_pairs *)0x1;
  LT_EXPECT_ERR(lt_text_pairs_split(p, 1.5, &tr, &va), LT_ERR_INVALID, "valid_fraction is 1.5");
  LT_EXPECT_ERR(lt_text_pairs_split(p, 0.0 / 0.0, &tr, &va), LT_ERR_INVALID, "valid_fraction");
  ck_assert(tr == (lt_text_pairs *)0x1 && va == (lt_text_pairs *)0x1);
  lt_text_pairs_free(p);
}
END_TEST

/* ---- tasks ----------------------------------------------------------------------- */

START_TEST(test_number_words) {
  struct {
    int64_t n;
    const char *w;
  } cases[] = {
      {0, "zero"},
      {7, "seven"},
      {13, "thirteen"},
      {20, "twenty"},
      {21, "twenty one"},
      {100, "one hundred"},
      {110, "one hundred ten"},
      {1001, "one thousand one"},
      {4127, "four thousand one hundred twenty seven"},
      {10000, "ten thousand"},
      {999999, "nine hundred ninety nine thousand nine hundred ninety nine"},
      {1000000, "one million"},
      {2000300, "two million three hundred"},
      {1000000000, "one billion"},
      {1000000000000LL, "one trillion"},
      {999999999999999LL,
       "nine hundred ninety nine trillion nine hundred ninety nine billion nine hundred ninety nine million nine "
       "hundred ninety nine thousand nine hundred ninety nine"},
  };
  char buf[256];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    LT_OK_OR_FAIL(lt_number_to_words(cases[i].n, buf, sizeof buf));
    ck_assert_str_eq(buf, cases[i].w);
  }
  LT_EXPECT_ERR(lt_number_to_words(-1, buf, sizeof buf), LT_ERR_INVALID, "-1 is outside");
  LT_EXPECT_ERR(lt_number_to_words(1000000000000000LL, buf, sizeof buf), LT_ERR_INVALID, "outside [0, 10^15)");
  LT_EXPECT_ERR(lt_number_to_words(4127, buf, 10), LT_ERR_INVALID, "too small");
  ck_assert_str_eq(buf, "");
  LT_EXPECT_ERR(lt_number_to_words(1, NULL, 10), LT_ERR_NULL, "buf");
}
END_TEST

static const char *const months[12] = {"January", "February", "March",     "April",   "May",      "June",
                                       "July",    "August",   "September", "October", "November", "December"};

static bool valid_date(int y, int m, int d) {
  static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 1900 || y > 2099 || m < 1 || m > 12 || d < 1) return false;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return d <= mdays[m - 1] + (m == 2 && leap);
}

/* Checks that pair i of a task is right. */
static void check_example(lt_task_kind kind, const lt_task_opts *o, const char *src, const char *tgt) {
  size_t n = strlen(src);
  char want[512];
  switch (kind) {
    case LT_TASK_COPY:
    case LT_TASK_REVERSE:
    case LT_TASK_SORT:
      ck_assert(n >= (size_t)o->min_len && n <= (size_t)o->max_len);
      for (size_t i = 0; i < n; i++) ck_assert(strchr("abcdefghijklmnopqrstuvwxyz0123456789", src[i]) &&
                                               strchr("abcdefghijklmnopqrstuvwxyz0123456789", src[i]) -
                                                       "abcdefghijklmnopqrstuvwxyz0123456789" < o->num_symbols);
      for (size_t i = 0; i < n; i++) want[i] = kind == LT_TASK_REVERSE ? src[n - 1 - i] : src[i];
      want[n] = '\0';
      if (kind == LT_TASK_SORT) /* insertion sort */
        for (size_t i = 1; i < n; i++)
          for (size_t j = i; j > 0 && want[j - 1] > want[j]; j--) {
            char c = want[j];
            want[j] = want[j - 1];
            want[j - 1] = c;
          }
      ck_assert_str_eq(tgt, want);
      break;
    case LT_TASK_NUMBER_WORDS: {
      ck_assert(n >= (size_t)o->min_len && n <= (size_t)o->max_len);
      ck_assert(n == 1 || src[0] != '0');
      LT_OK_OR_FAIL(lt_number_to_words(atoll(src), want, sizeof want));
      ck_assert_str_eq(tgt, want);
      break;
    }
    case LT_TASK_DATE: {
      int y, m, d;
      ck_assert_int_eq(sscanf(src, "%4d-%2d-%2d", &y, &m, &d), 3);
      ck_assert(n == 10 && valid_date(y, m, d));
      snprintf(want, sizeof want, "%d %s %d", d, months[m - 1], y);
      ck_assert_str_eq(tgt, want);
      break;
    }
    case LT_TASK_DATE_NORMALIZE: {
      int y, m, d;
      ck_assert_int_eq(sscanf(tgt, "%4d-%2d-%2d", &y, &m, &d), 3);
      ck_assert(valid_date(y, m, d));
      char f[4][64];
      snprintf(f[0], 64, "%s %d, %d", months[m - 1], d, y);
      snprintf(f[1], 64, "%02d/%02d/%d", d, m, y);
      snprintf(f[2], 64, "%d %.3s %d", d, months[m - 1], y);
      snprintf(f[3], 64, "%04d-%02d-%02d", y, m, d);
      ck_assert_msg(!strcmp(src, f[0]) || !strcmp(src, f[1]) || !strcmp(src, f[2]) || !strcmp(src, f[3]),
                    "\"%s\" is not a format of %s", src, tgt);
      break;
    }
    default:
      ck_abort();
  }
}

START_TEST(test_tasks) {
  for (int k = 0; k < LT_TASK_COUNT; k++) {
    lt_task_opts o = LT_TASK_DEFAULTS((lt_task_kind)k);
    o.num_examples = 600;
    if (k == LT_TASK_NUMBER_WORDS) o.max_len = 7;
    lt_text_pairs *tr = LT_NNP(lt_task_generate(&o, LT_SPLIT_TRAIN));
    lt_text_pairs *va = LT_NNP(lt_task_generate(&o, LT_SPLIT_VALID));
    ck_assert_int_eq(lt_text_pairs_count(tr), 600);
    ck_assert_int_eq(lt_text_pairs_count(va), 600);
    int seen_formats = 0;
    for (int64_t i = 0; i < 600; i++) {
      const char *s, *t;
      LT_OK_OR_FAIL(lt_text_pairs_get(tr, i, &s, NULL, &t, NULL));
      check_example((lt_task_kind)k, &o, s, t);
      if (k == LT_TASK_DATE_NORMALIZE) seen_formats |= s[4] == '-' ? 1 : s[2] == '/' ? 2 : s[1] == ' ' || s[2] == ' ' ? 4 : 8;
      LT_OK_OR_FAIL(lt_text_pairs_get(va, i, &s, NULL, &t, NULL));
      check_example((lt_task_kind)k, &o, s, t);
    }
    if (k == LT_TASK_DATE_NORMALIZE) ck_assert_int_eq(seen_formats, 15);
    /* Train and validation never share the split key (the source, or the date). */
    for (int64_t i = 0; i < 600; i++) {
      const char *ks, *kt;
      LT_OK_OR_FAIL(lt_text_pairs_get(va, i, &ks, NULL, &kt, NULL));
      const char *vkey = k == LT_TASK_DATE_NORMALIZE ? kt : ks;
      for (int64_t j = 0; j < 600; j++) {
        const char *s, *t;
        lt_text_pairs_get(tr, j, &s, NULL, &t, NULL);
        /* (not ck_assert: Check records every assertion, too slow in this loop) */
        if (strcmp(vkey, k == LT_TASK_DATE_NORMALIZE ? t : s) == 0)
          ck_abort_msg("%s: \"%s\" in both splits", lt_task_name((lt_task_kind)k), vkey);
      }
    }
    /* Reproducible from the seed, different for another seed. */
    lt_text_pairs *again = LT_NNP(lt_task_generate(&o, LT_SPLIT_TRAIN));
    o.seed++;
    lt_text_pairs *other = LT_NNP(lt_task_generate(&o, LT_SPLIT_TRAIN));
    int same = 0;
    for (int64_t i = 0; i < 600; i++) {
      const char *a, *b, *c;
      LT_OK_OR_FAIL(lt_text_pairs_get(tr, i, &a, NULL, NULL, NULL));
      LT_OK_OR_FAIL(lt_text_pairs_get(again, i, &b, NULL, NULL, NULL));
      LT_OK_OR_FAIL(lt_text_pairs_get(other, i, &c, NULL, NULL, NULL));
      ck_assert_str_eq(a, b);
      same += strcmp(a, c) == 0;
    }
    ck_assert_msg(same < 300, "%s: seeds %llu and %llu agree on %d of 600", lt_task_name((lt_task_kind)k),
                  (unsigned long long)o.seed - 1, (unsigned long long)o.seed, same);
    lt_text_pairs_free(again);
    lt_text_pairs_free(other);
    lt_text_pairs_free(tr);
    lt_text_pairs_free(va);
  }
  /* Fixed values of the stream for the default seed 1234: this pins the
   * generator and the split (change them only on purpose; docs/datasets.md
   * quotes these examples). */
  struct {
    lt_task_kind kind;
    lt_task_split split;
    const char *src, *tgt;
  } pinned[] = {
      {LT_TASK_REVERSE, LT_SPLIT_TRAIN, "egjjja", "ajjjge"},
      {LT_TASK_SORT, LT_SPLIT_VALID, "gbbfadcj", "abbcdfgj"},
      {LT_TASK_NUMBER_WORDS, LT_SPLIT_TRAIN, "644964", "six hundred forty four thousand nine hundred sixty four"},
      {LT_TASK_DATE, LT_SPLIT_TRAIN, "2054-05-30", "30 May 2054"},
      {LT_TASK_DATE_NORMALIZE, LT_SPLIT_VALID, "1902-05-06", "1902-05-06"},
  };
  for (size_t i = 0; i < sizeof pinned / sizeof *pinned; i++) {
    lt_task_opts o = LT_TASK_DEFAULTS(pinned[i].kind);
    o.num_examples = 1;
    lt_text_pairs *p1 = LT_NNP(lt_task_generate(&o, pinned[i].split));
    expect_pair(p1, 0, pinned[i].src, pinned[i].tgt);
    lt_text_pairs_free(p1);
  }
  ck_assert_str_eq(lt_task_name(LT_TASK_NUMBER_WORDS), "number_words");
  ck_assert_str_eq(lt_task_name((lt_task_kind)99), "unknown");
  /* The datasets enums' name tables round-trip through their parsers. */
  for (int k = 0; k < LT_TASK_COUNT; k++) {
    lt_task_kind v = (lt_task_kind)-1;
    LT_OK_OR_FAIL(lt_task_parse(lt_task_name((lt_task_kind)k), &v));
    ck_assert_int_eq(v, k);
  }
  for (int k = LT_TOKENIZER_BYTE; k <= LT_TOKENIZER_BPE; k++) {
    lt_tokenizer_kind v = (lt_tokenizer_kind)-1;
    LT_OK_OR_FAIL(lt_tokenizer_kind_parse(lt_tokenizer_kind_name((lt_tokenizer_kind)k), &v));
    ck_assert_int_eq(v, k);
  }
  for (int k = LT_OVERLONG_ERROR; k <= LT_OVERLONG_SKIP; k++) {
    lt_overlong v = (lt_overlong)-1;
    LT_OK_OR_FAIL(lt_overlong_parse(lt_overlong_name((lt_overlong)k), &v));
    ck_assert_int_eq(v, k);
  }
  ck_assert_str_eq(lt_tokenizer_kind_name(LT_TOKENIZER_BPE), "bpe");
  ck_assert_str_eq(lt_overlong_name(LT_OVERLONG_TRUNCATE), "truncate");
  lt_task_kind tk = LT_TASK_SORT;
  LT_EXPECT_ERR(lt_task_parse("add", &tk), LT_ERR_INVALID, "unknown task 'add' (one of: copy, reverse");
  ck_assert_int_eq(tk, LT_TASK_SORT);
  LT_EXPECT_ERR(lt_overlong_parse("wrap", &(lt_overlong){0}), LT_ERR_INVALID, "error, truncate, skip");
  lt_clear_error();
}
END_TEST

START_TEST(test_task_lengths_and_errors) {
  /* Lengths are honoured: all of [min_len, max_len] appear. */
  lt_task_opts o = LT_TASK_DEFAULTS(LT_TASK_SORT);
  o.min_len = 3;
  o.max_len = 6;
  o.num_examples = 400;
  lt_text_pairs *p = LT_NNP(lt_task_generate(&o, LT_SPLIT_TRAIN));
  int seen = 0;
  for (int64_t i = 0; i < 400; i++) {
    size_t n;
    LT_OK_OR_FAIL(lt_text_pairs_get(p, i, NULL, &n, NULL, NULL));
    ck_assert(n >= 3 && n <= 6);
    seen |= 1 << n;
  }
  ck_assert_int_eq(seen, 0x78);
  lt_text_pairs_free(p);
  o = LT_TASK_DEFAULTS(LT_TASK_NUMBER_WORDS);
  o.min_len = o.max_len = 15;
  o.num_examples = 50;
  p = LT_NNP(lt_task_generate(&o, LT_SPLIT_VALID));
  for (int64_t i = 0; i < 50; i++) {
    size_t n;
    LT_OK_OR_FAIL(lt_text_pairs_get(p, i, NULL, &n, NULL, NULL));
    ck_assert_uint_eq(n, 15);
  }
  lt_text_pairs_free(p);
  /* Errors name the option. */
  lt_task_opts bad;
  bad = LT_TASK_DEFAULTS(LT_TASK_COPY), bad.num_symbols = 1;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "num_symbols is 1");
  bad = LT_TASK_DEFAULTS(LT_TASK_COPY), bad.num_symbols = 37;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "num_symbols is 37");
  bad = LT_TASK_DEFAULTS(LT_TASK_COPY), bad.min_len = 0;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "min_len");
  bad = LT_TASK_DEFAULTS(LT_TASK_REVERSE), bad.min_len = 5, bad.max_len = 4;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "[5, 4]");
  bad = LT_TASK_DEFAULTS(LT_TASK_REVERSE), bad.max_len = 201;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "max_len <= 200");
  bad = LT_TASK_DEFAULTS(LT_TASK_NUMBER_WORDS), bad.max_len = 16;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "<= 15");
  bad = LT_TASK_DEFAULTS(LT_TASK_DATE), bad.num_examples = 0;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "num_examples is 0");
  bad = LT_TASK_DEFAULTS(LT_TASK_DATE), bad.valid_fraction = 0;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "valid_fraction");
  bad = LT_TASK_DEFAULTS(LT_TASK_DATE), bad.valid_fraction = 1;
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_VALID), LT_ERR_INVALID, "valid_fraction");
  bad = LT_TASK_DEFAULTS((lt_task_kind)42);
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_TRAIN), LT_ERR_INVALID, "unknown task kind 42");
  bad = LT_TASK_DEFAULTS(LT_TASK_DATE);
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, (lt_task_split)5), LT_ERR_INVALID, "unknown split 5");
  LT_EXPECT_NULLP_ERR(lt_task_generate(NULL, LT_SPLIT_TRAIN), LT_ERR_NULL, "opts");
  /* A source space too small for the split: 2 one-letter sources, neither of
   * which may hash into a 1% validation share. */
  bad = LT_TASK_DEFAULTS(LT_TASK_COPY);
  bad.num_symbols = 2, bad.min_len = bad.max_len = 1, bad.valid_fraction = 0.01, bad.num_examples = 10;
  bool a_valid = lt_text_in_valid_split("a", 1, 0.01), b_valid = lt_text_in_valid_split("b", 1, 0.01);
  ck_assert(!a_valid && !b_valid); /* true for this hash; the test relies on it */
  LT_EXPECT_NULLP_ERR(lt_task_generate(&bad, LT_SPLIT_VALID), LT_ERR_STATE, "too small");
  p = LT_NNP(lt_task_generate(&bad, LT_SPLIT_TRAIN));
  lt_text_pairs_free(p);
}
END_TEST

/* ---- token-id pairs ------------------------------------------------------------ */

START_TEST(test_seq_pairs_encode) {
  lt_text_pairs *t = LT_NNP(lt_text_pairs_new());
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "abc", 3, "xy", 2));
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "abcdefgh", 8, "x", 1));
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "a", 1, "xyzxyz", 6));
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_new_byte());
  int64_t aff = -1;
  lt_seq_pairs *p = LT_NNP(lt_seq_pairs_encode(t, tok, tok, NULL, &aff));
  ck_assert_int_eq(lt_seq_pairs_count(p), 3);
  ck_assert_int_eq(aff, 0);
  const int64_t *s, *g;
  int64_t sn, gn;
  LT_OK_OR_FAIL(lt_seq_pairs_get(p, 1, &s, &sn, &g, &gn));
  ck_assert_int_eq(sn, 8);
  ck_assert_int_eq(gn, 1);
  ck_assert_int_eq(s[7], 4 + 'h');
  ck_assert_int_eq(g[0], 4 + 'x');
  LT_EXPECT_ERR(lt_seq_pairs_get(p, 3, &s, &sn, &g, &gn), LT_ERR_INDEX, "example 3");
  lt_seq_pairs_free(p);
  /* max_src_len 4, max_tgt_len 4 (3 target tokens + <eos>). */
  lt_seq_opts o = {4, 4, LT_OVERLONG_ERROR};
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, tok, tok, &o, NULL), LT_ERR_INVALID, "example 1 has 8 source tokens");
  o.overlong = LT_OVERLONG_TRUNCATE;
  p = LT_NNP(lt_seq_pairs_encode(t, tok, tok, &o, &aff));
  ck_assert_int_eq(aff, 2);
  ck_assert_int_eq(lt_seq_pairs_count(p), 3);
  LT_OK_OR_FAIL(lt_seq_pairs_get(p, 1, &s, &sn, NULL, NULL));
  ck_assert_int_eq(sn, 4);
  ck_assert_int_eq(s[3], 4 + 'd');
  LT_OK_OR_FAIL(lt_seq_pairs_get(p, 2, NULL, NULL, &g, &gn));
  ck_assert_int_eq(gn, 3);
  lt_seq_pairs_free(p);
  o.overlong = LT_OVERLONG_SKIP;
  p = LT_NNP(lt_seq_pairs_encode(t, tok, tok, &o, &aff));
  ck_assert_int_eq(aff, 2);
  ck_assert_int_eq(lt_seq_pairs_count(p), 1);
  lt_seq_pairs_free(p);
  /* Nothing left. */
  o = (lt_seq_opts){1, 2, LT_OVERLONG_SKIP};
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, tok, tok, &o, NULL), LT_ERR_INVALID, "no example left");
  o = (lt_seq_opts){0, 1, LT_OVERLONG_TRUNCATE};
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, tok, tok, &o, NULL), LT_ERR_INVALID, ">= 2 for the target");
  o = (lt_seq_opts){0, 0, (lt_overlong)9};
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, tok, tok, &o, NULL), LT_ERR_INVALID, "overlong policy 9");
  /* Encoding errors name the example. */
  lt_tokenizer *c = LT_NNP(lt_tokenizer_new_char("abcxyz", 6));
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "a\xFF", 2, "x", 1));
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, c, c, NULL, NULL), LT_ERR_FORMAT, "example 3: tokenizer_encode: invalid UTF-8");
  lt_text_pairs_free(t);
  t = LT_NNP(lt_text_pairs_new());
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "", 0, "x", 1));
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, c, c, NULL, NULL), LT_ERR_INVALID, "example 0 has an empty source");
  LT_EXPECT_NULLP_ERR(lt_seq_pairs_encode(t, NULL, c, NULL, NULL), LT_ERR_NULL, "src_tok");
  lt_text_pairs_free(t);
  /* Pairs encoded with a tokenizer.json get its start, end and padding ids
   * (a BERT WordPiece file: [CLS] 2, [SEP] 3, [PAD] 0), the byte tokenizer's LT_TOKEN_*. */
  lt_tokenizer *wp = lt_tokenizer_load_hf(LT_TEST_DATA_DIR "/hf_tokenizers/wordpiece.json");
  ck_assert_msg(wp != NULL, "%s", lt_last_error());
  t = LT_NNP(lt_text_pairs_new());
  LT_OK_OR_FAIL(lt_text_pairs_add(t, "the cat", 7, "a dog", 5));
  p = LT_NNP(lt_seq_pairs_encode(t, tok, wp, NULL, NULL));
  lt_special_ids sp = lt_seq_pairs_special_ids(p);
  ck_assert(sp.bos == 2 && sp.eos == 3 && sp.pad == 0);
  lt_seq_pairs_free(p);
  p = LT_NNP(lt_seq_pairs_encode(t, wp, tok, NULL, NULL));
  sp = lt_seq_pairs_special_ids(p);
  ck_assert(sp.bos == LT_TOKEN_BOS && sp.eos == LT_TOKEN_EOS && sp.pad == LT_TOKEN_PAD);
  lt_seq_pairs_free(p);
  lt_tokenizer_free(wp);
  lt_text_pairs_free(t);
  lt_tokenizer_free(c);
  lt_tokenizer_free(tok);
  /* Adding ids directly. */
  p = LT_NNP(lt_seq_pairs_new());
  int64_t ids[] = {5, 6, -1};
  LT_EXPECT_ERR(lt_seq_pairs_add(p, ids, 0, ids, 1), LT_ERR_INVALID, "source length 0");
  LT_EXPECT_ERR(lt_seq_pairs_add(p, ids, 3, ids, 1), LT_ERR_INVALID, "source id -1 at 2");
  LT_EXPECT_ERR(lt_seq_pairs_add(p, ids, 1, ids, 3), LT_ERR_INVALID, "target id -1");
  LT_OK_OR_FAIL(lt_seq_pairs_add(p, ids, 2, NULL, 0));
  ck_assert_int_eq(lt_seq_pairs_count(p), 1);
  lt_seq_pairs_free(p);
  lt_seq_pairs_free(NULL);
}
END_TEST

/* ---- collation --------------------------------------------------------------------- */

static lt_seq_pairs *small_pairs(void) {
  lt_seq_pairs *p = LT_NNP(lt_seq_pairs_new());
  int64_t s0[] = {10, 11, 12}, t0[] = {20, 21};
  int64_t s1[] = {13}, t1[] = {22, 23, 24, 25};
  int64_t s2[] = {14, 15}, t2[] = {26};
  LT_OK_OR_FAIL(lt_seq_pairs_add(p, s0, 3, t0, 2));
  LT_OK_OR_FAIL(lt_seq_pairs_add(p, s1, 1, t1, 4));
  LT_OK_OR_FAIL(lt_seq_pairs_add(p, s2, 2, t2, 1));
  return p;
}

START_TEST(test_collate) {
  lt_seq_pairs *p = small_pairs();
  lt_seq2seq_batch b;
  int64_t idx[] = {0, 1, 2};
  LT_OK_OR_FAIL(lt_seq2seq_collate(p, idx, 3, &b));
  LT_ASSERT_SHAPE(b.src, 3, 3);
  LT_ASSERT_SHAPE(b.src_mask, 3, 3);
  LT_ASSERT_SHAPE(b.tgt_in, 3, 5);
  LT_ASSERT_SHAPE(b.tgt_mask, 3, 5);
  LT_ASSERT_SHAPE(b.labels, 3, 5);
  ck_assert_int_eq(b.src->dtype, LT_DTYPE_I64);
  ck_assert_int_eq(b.src_mask->dtype, LT_DTYPE_BOOL);
  ck_assert_int_eq(b.labels->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(b.src, 0, 10, 11, 12, 13, 0, 0, 14, 15, 0);
  LT_ASSERT_VALUES(b.src_mask, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1);
  LT_ASSERT_VALUES(b.tgt_in, 0, 1, 20, 21, 0, 0, 1, 22, 23, 24, 25, 1, 26, 0, 0, 0);
  LT_ASSERT_VALUES(b.tgt_mask, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1);
  LT_ASSERT_VALUES(b.labels, 0, 20, 21, 2, -100, -100, 22, 23, 24, 25, 2, 26, 2, -100, -100, -100);
  ck_assert_int_eq(b.n_tokens, 3 + 5 + 2);
  /* The teacher-forcing shift: labels[:, t] == tgt_in[:, t + 1] wherever both
   * are real, and the mask agrees with the labels' -100. */
  for (int64_t r = 0; r < 3; r++)
    for (int64_t t = 0; t < 5; t++) {
      int64_t lab = i64(b.labels)[r * 5 + t];
      ck_assert(b8(b.tgt_mask)[r * 5 + t] == (lab == LT_IGNORE_INDEX));
      if (t + 1 < 5 && !b8(b.tgt_mask)[r * 5 + t + 1]) ck_assert_int_eq(lab, i64(b.tgt_in)[r * 5 + t + 1]);
    }
  lt_seq2seq_batch_free(&b);
  ck_assert(b.src == NULL && b.labels == NULL);
  lt_seq2seq_batch_free(&b); /* twice is fine */
  lt_seq2seq_batch_free(NULL);
  /* One example, order as given, an empty target. */
  lt_seq_pairs *q = LT_NNP(lt_seq_pairs_new());
  int64_t s[] = {9};
  LT_OK_OR_FAIL(lt_seq_pairs_add(q, s, 1, NULL, 0));
  int64_t one = 0;
  LT_OK_OR_FAIL(lt_seq2seq_collate(q, &one, 1, &b));
  LT_ASSERT_SHAPE(b.tgt_in, 1, 1);
  LT_ASSERT_VALUES(b.tgt_in, 0, 1);
  LT_ASSERT_VALUES(b.labels, 0, 2);
  lt_seq2seq_batch_free(&b);
  lt_seq_pairs_free(q);
  int64_t rev[] = {2, 0};
  LT_OK_OR_FAIL(lt_seq2seq_collate(p, rev, 2, &b));
  LT_ASSERT_VALUES(b.src, 0, 14, 15, 0, 10, 11, 12);
  lt_seq2seq_batch_free(&b);
  /* Errors leave *out alone. */
  lt_seq2seq_batch keep = {.src = (lt_tensor *)0x1, .n_tokens = 42};
  int64_t badidx[] = {0, 3};
  LT_EXPECT_ERR(lt_seq2seq_collate(p, badidx, 2, &keep), LT_ERR_INDEX, "idx[1] is 3");
  LT_EXPECT_ERR(lt_seq2seq_collate(p, badidx, 0, &keep), LT_ERR_INVALID, "n is 0");
  LT_EXPECT_ERR(lt_seq2seq_collate(NULL, badidx, 1, &keep), LT_ERR_NULL, "data");
  ck_assert(keep.src == (lt_tensor *)0x1 && keep.n_tokens == 42);
  /* A tokenizer of other ids (a tokenizer.json's <s>, </s>, <pad>): the batches use them. */
  lt_special_ids def = lt_seq_pairs_special_ids(p);
  ck_assert(def.bos == LT_TOKEN_BOS && def.eos == LT_TOKEN_EOS && def.pad == LT_TOKEN_PAD);
  LT_OK_OR_FAIL(lt_seq_pairs_set_special_ids(p, (lt_special_ids){.bos = 7, .eos = 8, .pad = 9}));
  LT_OK_OR_FAIL(lt_seq2seq_collate(p, idx, 3, &b));
  LT_ASSERT_VALUES(b.src, 0, 10, 11, 12, 13, 9, 9, 14, 15, 9);
  LT_ASSERT_VALUES(b.tgt_in, 0, 7, 20, 21, 9, 9, 7, 22, 23, 24, 25, 7, 26, 9, 9, 9);
  LT_ASSERT_VALUES(b.labels, 0, 20, 21, 8, -100, -100, 22, 23, 24, 25, 8, 26, 8, -100, -100, -100);
  lt_seq2seq_batch_free(&b);
  LT_EXPECT_ERR(lt_seq_pairs_set_special_ids(p, (lt_special_ids){.bos = -1, .eos = 8, .pad = 9}), LT_ERR_INVALID,
                "bos -1");
  lt_seq_pairs_free(p);
}
END_TEST

/* ---- loaders ------------------------------------------------------------------------ */

/* n examples, example i with source length 1 + i % 7 (first id = i + 100) and
 * target length i % 5. */
static lt_seq_pairs *numbered_pairs(int64_t n) {
  lt_seq_pairs *p = LT_NNP(lt_seq_pairs_new());
  int64_t s[16], t[16];
  for (int64_t i = 0; i < n; i++) {
    int64_t sl = 1 + i % 7, tl = i % 5;
    for (int64_t j = 0; j < sl; j++) s[j] = j == 0 ? i + 100 : 50;
    for (int64_t j = 0; j < tl; j++) t[j] = 60 + j;
    LT_OK_OR_FAIL(lt_seq_pairs_add(p, s, sl, t, tl));
  }
  return p;
}

/* Example ids of a batch (from the first source id). */
static int64_t batch_ids(const lt_seq2seq_batch *b, int64_t *out) {
  int64_t B = b->src->shape[0], S = b->src->shape[1];
  for (int64_t r = 0; r < B; r++) out[r] = i64(b->src)[r * S] - 100;
  return B;
}

static bool same_batch(const lt_seq2seq_batch *a, const lt_seq2seq_batch *b) {
  return lt_equal(a->src, b->src) && lt_equal(a->src_mask, b->src_mask) && lt_equal(a->tgt_in, b->tgt_in) &&
         lt_equal(a->tgt_mask, b->tgt_mask) && lt_equal(a->labels, b->labels) && a->n_tokens == b->n_tokens;
}

START_TEST(test_seq2seq_loader_epochs) {
  int64_t N = 53;
  lt_seq_pairs *p = numbered_pairs(N);
  for (int variant = 0; variant < 4; variant++) {
    lt_batch_opts o = LT_BATCH_DEFAULTS(8);
    o.seed = 5;
    o.shuffle = variant & 1;
    o.drop_last = variant & 2;
    lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(p, &o));
    int64_t nb = lt_seq2seq_loader_batches_per_epoch(L);
    ck_assert_int_eq(nb, o.drop_last ? 6 : 7);
    int64_t first_order[64], pos = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
      int count[64] = {0};
      int64_t order[64], k = 0;
      for (int64_t bi = 0; bi < nb; bi++) {
        /* Between epochs the position stays at (previous epoch, nb) until
         * the next call starts the new epoch. */
        lt_loader_position ps = lt_seq2seq_loader_get_position(L);
        ck_assert_int_eq(ps.epoch, bi == 0 && epoch > 0 ? epoch - 1 : epoch);
        ck_assert_int_eq(ps.index, bi == 0 && epoch > 0 ? nb : bi);
        lt_seq2seq_batch b;
        LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
        int64_t ids[8], B = batch_ids(&b, ids);
        ck_assert_int_eq(B, bi < 6 ? 8 : N - 48);
        for (int64_t r = 0; r < B; r++) {
          count[ids[r]]++;
          order[k++] = ids[r];
        }
        lt_seq2seq_batch_free(&b);
      }
      /* Each example at most once per epoch; all of them without drop_last. */
      int64_t total = 0;
      for (int64_t i = 0; i < N; i++) {
        ck_assert_int_le(count[i], 1);
        total += count[i];
      }
      ck_assert_int_eq(total, o.drop_last ? 48 : N);
      if (!o.shuffle)
        for (int64_t i = 0; i < k; i++) ck_assert_int_eq(order[i], i);
      if (epoch == 0) {
        memcpy(first_order, order, sizeof order);
        pos = k;
      } else if (o.shuffle) {
        ck_assert(memcmp(first_order, order, (size_t)pos * sizeof *order) != 0);
      }
    }
    ck_assert_int_eq(lt_seq2seq_loader_get_position(L).epoch, 2);
    lt_seq2seq_loader_free(L);
  }
  lt_seq2seq_loader_free(NULL);
  lt_seq_pairs_free(p);
}
END_TEST

START_TEST(test_seq2seq_loader_bucketing) {
  int64_t N = 200;
  lt_seq_pairs *p = numbered_pairs(N);
  int64_t srclen[200];
  for (int64_t i = 0; i < N; i++) srclen[i] = 1 + i % 7;
  lt_batch_opts o = LT_BATCH_DEFAULTS(10);
  o.seed = 11;
  o.bucket_batches = 20; /* the whole epoch is one window */
  lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(p, &o));
  int64_t lo[20], hi[20], padded = 0;
  bool in_order = true;
  for (int64_t bi = 0; bi < 20; bi++) {
    lt_seq2seq_batch b;
    LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
    int64_t ids[10], B = batch_ids(&b, ids);
    lo[bi] = 100, hi[bi] = 0;
    for (int64_t r = 0; r < B; r++) {
      if (srclen[ids[r]] < lo[bi]) lo[bi] = srclen[ids[r]];
      if (srclen[ids[r]] > hi[bi]) hi[bi] = srclen[ids[r]];
    }
    padded += b.src->numel;
    if (bi > 0 && lo[bi] < hi[bi - 1]) in_order = false;
    lt_seq2seq_batch_free(&b);
  }
  /* Batches hold a contiguous range of the sorted lengths: no two overlap
   * beyond a shared boundary value. */
  for (int a = 0; a < 20; a++)
    for (int c = 0; c < 20; c++)
      if (a != c) ck_assert_msg(hi[a] <= lo[c] || hi[c] <= lo[a], "batches %d [%lld,%lld] and %d [%lld,%lld] interleave",
                                a, (long long)lo[a], (long long)hi[a], c, (long long)lo[c], (long long)hi[c]);
  ck_assert_msg(!in_order, "bucketed batches were not shuffled");
  /* Far less padding than unbucketed batches (which nearly always reach 7). */
  int64_t total_src = 0;
  for (int64_t i = 0; i < N; i++) total_src += srclen[i];
  ck_assert_msg(padded < total_src + 100, "%lld source positions for %lld tokens", (long long)padded,
                (long long)total_src);
  lt_seq2seq_loader_free(L);
  /* Bucketing without shuffling: sorted order within each window. */
  o.shuffle = false;
  o.bucket_batches = 2;
  L = LT_NNP(lt_seq2seq_loader_new(p, &o));
  int64_t prev = 0;
  for (int64_t bi = 0; bi < 20; bi++) {
    lt_seq2seq_batch b;
    LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
    int64_t ids[10], B = batch_ids(&b, ids);
    if (bi % 2 == 0) prev = 0;
    for (int64_t r = 0; r < B; r++) {
      ck_assert_int_ge(srclen[ids[r]], prev);
      prev = srclen[ids[r]];
      /* windows are examples [20w, 20w + 20) */
      ck_assert_int_eq(ids[r] / 20, bi / 2);
    }
    lt_seq2seq_batch_free(&b);
  }
  lt_seq2seq_loader_free(L);
  lt_seq_pairs_free(p);
}
END_TEST

START_TEST(test_seq2seq_resume) {
  lt_seq_pairs *p = numbered_pairs(37);
  for (int variant = 0; variant < 3; variant++) {
    lt_batch_opts o = LT_BATCH_DEFAULTS(4);
    o.seed = 1000 + (uint64_t)variant;
    o.bucket_batches = variant == 1 ? 3 : 0;
    o.shuffle = variant != 2;
    lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(p, &o));
    int64_t nb = lt_seq2seq_loader_batches_per_epoch(L); /* 10 */
    /* Save positions at several points, crossing epoch boundaries, among
     * them exactly at the end of an epoch (index == nb). */
    int64_t saves[] = {0, 3, nb, nb + 1, 2 * nb + 5};
    lt_loader_position pos[5];
    lt_seq2seq_batch run[40];
    int s = 0;
    for (int64_t k = 0; k < 40; k++) {
      if (s < 5 && saves[s] == k) pos[s++] = lt_seq2seq_loader_get_position(L);
      LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &run[k]));
    }
    ck_assert_int_eq(pos[2].index, nb);
    ck_assert_int_eq(pos[2].epoch, 0);
    for (int k = 0; k < 5; k++) {
      /* A fresh loader with another seed: the position carries the state. */
      lt_batch_opts o2 = o;
      o2.seed = 99;
      lt_seq2seq_loader *R = LT_NNP(lt_seq2seq_loader_new(p, &o2));
      LT_OK_OR_FAIL(lt_seq2seq_loader_set_position(R, pos[k]));
      lt_loader_position back = lt_seq2seq_loader_get_position(R);
      ck_assert(back.epoch == pos[k].epoch && back.index == pos[k].index && back.gen.seed == pos[k].gen.seed &&
                back.gen.offset == pos[k].gen.offset && back.fingerprint == pos[k].fingerprint);
      for (int64_t j = saves[k]; j < 40; j++) {
        lt_seq2seq_batch b;
        LT_OK_OR_FAIL(lt_seq2seq_loader_next(R, &b));
        ck_assert_msg(same_batch(&b, &run[j]), "variant %d, resumed at %lld: batch %lld differs", variant,
                      (long long)saves[k], (long long)j);
        lt_seq2seq_batch_free(&b);
      }
      lt_seq2seq_loader_free(R);
    }
    /* Refused positions leave the loader where it was. */
    lt_loader_position cur = lt_seq2seq_loader_get_position(L), bad = cur;
    bad.fingerprint ^= 1;
    LT_EXPECT_ERR(lt_seq2seq_loader_set_position(L, bad), LT_ERR_STATE, "fingerprint");
    bad = cur, bad.index = nb + 1;
    LT_EXPECT_ERR(lt_seq2seq_loader_set_position(L, bad), LT_ERR_INVALID, "index 11");
    bad = cur, bad.epoch = -1;
    LT_EXPECT_ERR(lt_seq2seq_loader_set_position(L, bad), LT_ERR_INVALID, "epoch -1");
    lt_loader_position after = lt_seq2seq_loader_get_position(L);
    ck_assert(after.epoch == cur.epoch && after.index == cur.index && after.gen.offset == cur.gen.offset);
    lt_seq2seq_batch b;
    LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
    lt_seq2seq_batch_free(&b);
    for (int k = 0; k < 40; k++) lt_seq2seq_batch_free(&run[k]);
    lt_seq2seq_loader_free(L);
  }
  /* A loader over different data or options refuses the position. */
  lt_batch_opts o = LT_BATCH_DEFAULTS(4);
  lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(p, &o));
  lt_loader_position pos = lt_seq2seq_loader_get_position(L);
  lt_seq_pairs *q = numbered_pairs(38);
  lt_seq2seq_loader *M = LT_NNP(lt_seq2seq_loader_new(q, &o));
  LT_EXPECT_ERR(lt_seq2seq_loader_set_position(M, pos), LT_ERR_STATE, "different data or options");
  lt_seq2seq_loader_free(M);
  o.batch_size = 5;
  M = LT_NNP(lt_seq2seq_loader_new(p, &o));
  LT_EXPECT_ERR(lt_seq2seq_loader_set_position(M, pos), LT_ERR_STATE, "fingerprint");
  lt_seq2seq_loader_free(M);
  lt_seq2seq_loader_free(L);
  lt_seq_pairs_free(q);
  lt_seq_pairs_free(p);
}
END_TEST

START_TEST(test_seq2seq_loader_errors) {
  lt_seq_pairs *p = numbered_pairs(5);
  lt_batch_opts o = LT_BATCH_DEFAULTS(0);
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(p, &o), LT_ERR_INVALID, "batch_size is 0");
  o = LT_BATCH_DEFAULTS(6);
  o.drop_last = true;
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(p, &o), LT_ERR_INVALID, "make no batch");
  o = LT_BATCH_DEFAULTS(2);
  o.bucket_batches = -1;
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(p, &o), LT_ERR_INVALID, "bucket_batches");
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(p, NULL), LT_ERR_NULL, "opts");
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(NULL, &o), LT_ERR_NULL, "data");
  lt_seq_pairs *empty = LT_NNP(lt_seq_pairs_new());
  o = LT_BATCH_DEFAULTS(2);
  LT_EXPECT_NULLP_ERR(lt_seq2seq_loader_new(empty, &o), LT_ERR_INVALID, "no example");
  lt_seq_pairs_free(empty);
  /* A batch larger than the data: one batch per epoch. */
  o = LT_BATCH_DEFAULTS(100);
  lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(p, &o));
  ck_assert_int_eq(lt_seq2seq_loader_batches_per_epoch(L), 1);
  lt_seq2seq_batch b;
  LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
  ck_assert_int_eq(b.src->shape[0], 5);
  lt_seq2seq_batch_free(&b);
  LT_EXPECT_ERR(lt_seq2seq_loader_next(L, NULL), LT_ERR_NULL, "out");
  LT_EXPECT_ERR(lt_seq2seq_loader_next(NULL, &b), LT_ERR_NULL, "loader");
  LT_EXPECT_ERR(lt_seq2seq_loader_set_position(NULL, lt_seq2seq_loader_get_position(L)), LT_ERR_NULL, "loader");
  ck_assert_int_eq(lt_seq2seq_loader_batches_per_epoch(NULL), 0);
  lt_seq2seq_loader_free(L);
  lt_seq_pairs_free(p);
}
END_TEST

START_TEST(test_lm_loader) {
  int64_t N = 103, T = 8; /* (103 - 1) / 8 = 12 chunks */
  lt_tensor *tok = LT_NN(lt_arange(LT_DTYPE_I32, 0, (double)N, 1));
  lt_batch_opts o = LT_BATCH_DEFAULTS(5);
  o.seed = 3;
  lt_lm_loader *L = LT_NNP(lt_lm_loader_new(tok, T, &o));
  lt_tensor_free(tok); /* the loader copied the tokens */
  ck_assert_int_eq(lt_lm_loader_batches_per_epoch(L), 3);
  lt_tensor *xs[9], *ys[9];
  for (int k = 0; k < 9; k++) {
    LT_OK_OR_FAIL(lt_lm_loader_next(L, &xs[k], &ys[k]));
    ck_assert_int_eq(xs[k]->dtype, LT_DTYPE_I64);
    int64_t B = k % 3 == 2 ? 2 : 5;
    LT_ASSERT_SHAPE(xs[k], B, T);
    LT_ASSERT_SHAPE(ys[k], B, T);
  }
  /* Each epoch: every chunk once; x a chunk start at a multiple of T, y = x + 1. */
  for (int e = 0; e < 3; e++) {
    int seen[12] = {0};
    for (int k = 3 * e; k < 3 * e + 3; k++) {
      const int64_t *x = i64(xs[k]), *y = i64(ys[k]);
      for (int64_t r = 0; r < xs[k]->shape[0]; r++) {
        ck_assert_int_eq(x[r * T] % T, 0);
        seen[x[r * T] / T]++;
        for (int64_t t = 0; t < T; t++) {
          ck_assert_int_eq(x[r * T + t], x[r * T] + t);
          ck_assert_int_eq(y[r * T + t], x[r * T + t] + 1);
        }
      }
    }
    for (int c = 0; c < 12; c++) ck_assert_int_eq(seen[c], 1);
  }
  ck_assert(!lt_equal(xs[0], xs[3]));
  /* Resume mid-epoch and at an epoch end. */
  int64_t saves[] = {2, 3, 4};
  for (int s = 0; s < 3; s++) {
    lt_tensor *t2 = LT_NN(lt_arange(LT_DTYPE_I64, 0, (double)N, 1));
    lt_lm_loader *R = LT_NNP(lt_lm_loader_new(t2, T, &o));
    lt_tensor_free(t2);
    lt_tensor *x, *y;
    for (int64_t k = 0; k < saves[s]; k++) {
      LT_OK_OR_FAIL(lt_lm_loader_next(R, &x, &y));
      lt_tensor_free(x);
      lt_tensor_free(y);
    }
    lt_loader_position pos = lt_lm_loader_get_position(R);
    lt_lm_loader_free(R);
    t2 = LT_NN(lt_arange(LT_DTYPE_I64, 0, (double)N, 1));
    R = LT_NNP(lt_lm_loader_new(t2, T, &(lt_batch_opts){.batch_size = 5, .shuffle = true, .seed = 777}));
    lt_tensor_free(t2);
    LT_OK_OR_FAIL(lt_lm_loader_set_position(R, pos));
    for (int64_t k = saves[s]; k < 9; k++) {
      LT_OK_OR_FAIL(lt_lm_loader_next(R, &x, &y));
      ck_assert_msg(lt_equal(x, xs[k]) && lt_equal(y, ys[k]), "resumed at %lld: batch %lld differs",
                    (long long)saves[s], (long long)k);
      lt_tensor_free(x);
      lt_tensor_free(y);
    }
    lt_lm_loader_free(R);
  }
  for (int k = 0; k < 9; k++) {
    lt_tensor_free(xs[k]);
    lt_tensor_free(ys[k]);
  }
  lt_lm_loader_free(L);
  lt_lm_loader_free(NULL);
}
END_TEST

START_TEST(test_lm_loader_errors) {
  lt_batch_opts o = LT_BATCH_DEFAULTS(2);
  lt_tensor *f = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(20)));
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(f, 4, &o), LT_ERR_SHAPE, "1-d integer tensor");
  lt_tensor *m = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(4, 5)));
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(m, 4, &o), LT_ERR_SHAPE, "[4,5]");
  lt_tensor *t = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(8)));
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(t, 8, &o), LT_ERR_INVALID, "8 tokens, need at least T + 1 = 9");
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(t, 0, &o), LT_ERR_INVALID, "T is 0");
  o.drop_last = true;
  o.batch_size = 3;
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(t, 4, &o), LT_ERR_INVALID, "make no batch");
  LT_EXPECT_NULLP_ERR(lt_lm_loader_new(NULL, 4, &o), LT_ERR_NULL, "tokens");
  /* Exactly T + 1 tokens: one chunk. */
  lt_lm_loader *L = LT_NNP(lt_lm_loader_new(t, 7, &LT_BATCH_DEFAULTS(4)));
  ck_assert_int_eq(lt_lm_loader_batches_per_epoch(L), 1);
  lt_tensor *x, *y;
  LT_OK_OR_FAIL(lt_lm_loader_next(L, &x, &y));
  LT_ASSERT_SHAPE(x, 1, 7);
  lt_tensor_free(x);
  lt_tensor_free(y);
  LT_EXPECT_ERR(lt_lm_loader_next(L, NULL, &y), LT_ERR_NULL, "x");
  lt_loader_position pos = lt_lm_loader_get_position(L);
  pos.index = 2;
  LT_EXPECT_ERR(lt_lm_loader_set_position(L, pos), LT_ERR_INVALID, "index 2");
  lt_lm_loader_free(L);
  lt_tensor_free(f);
  lt_tensor_free(m);
  lt_tensor_free(t);
}
END_TEST

START_TEST(test_end_to_end_task_pipeline) {
  /* The default run: a task, a char vocabulary from its training text, the
   * tokenizer saved and restored, encoded pairs, a bucketed loader; decoding
   * a batch's labels (without the -100s) gives the targets back. */
  lt_task_opts to = LT_TASK_DEFAULTS(LT_TASK_NUMBER_WORDS);
  to.num_examples = 300;
  to.max_len = 6;
  lt_text_pairs *tr = LT_NNP(lt_task_generate(&to, LT_SPLIT_TRAIN));
  char *text;
  size_t n;
  LT_OK_OR_FAIL(lt_text_pairs_concat(tr, &text, &n));
  lt_tokenizer *tok0 = LT_NNP(lt_tokenizer_new_char(text, n));
  free(text);
  void *buf;
  size_t bn;
  LT_OK_OR_FAIL(lt_tokenizer_serialize(tok0, &buf, &bn));
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_deserialize(buf, bn));
  free(buf);
  lt_tokenizer_free(tok0);
  lt_seq_pairs *sp = LT_NNP(lt_seq_pairs_encode(tr, tok, tok, &(lt_seq_opts){0, 0, LT_OVERLONG_ERROR}, NULL));
  lt_batch_opts bo = LT_BATCH_DEFAULTS(16);
  bo.bucket_batches = 4;
  bo.seed = 8;
  lt_seq2seq_loader *L = LT_NNP(lt_seq2seq_loader_new(sp, &bo));
  lt_seq2seq_batch b;
  LT_OK_OR_FAIL(lt_seq2seq_loader_next(L, &b));
  int64_t B = b.labels->shape[0], T = b.labels->shape[1], S = b.src->shape[1];
  for (int64_t r = 0; r < B; r++) {
    int64_t lab[64], k = 0;
    for (int64_t t = 0; t < T && i64(b.labels)[r * T + t] != LT_IGNORE_INDEX; t++) lab[k++] = i64(b.labels)[r * T + t];
    ck_assert_int_eq(lab[k - 1], LT_TOKEN_EOS);
    char *src, *tgt;
    size_t sl, tl;
    LT_OK_OR_FAIL(lt_tokenizer_decode(tok, i64(b.src) + r * S, S, 0, &src, &sl)); /* <pad> decodes to nothing */
    LT_OK_OR_FAIL(lt_tokenizer_decode(tok, lab, k, 0, &tgt, &tl));
    char want[256];
    LT_OK_OR_FAIL(lt_number_to_words(atoll(src), want, sizeof want));
    ck_assert_str_eq(tgt, want);
    free(src);
    free(tgt);
  }
  lt_seq2seq_batch_free(&b);
  lt_seq2seq_loader_free(L);
  lt_seq_pairs_free(sp);
  lt_tokenizer_free(tok);
  lt_text_pairs_free(tr);
}
END_TEST

int main(void) {
  Suite *s = suite_create("batch");
  LT_TEST_CASE(s, "core", 300, test_tsv_parse, test_tsv_bad_data, test_tsv_save, test_split, test_number_words,
               test_tasks, test_task_lengths_and_errors, test_seq_pairs_encode, test_collate,
               test_seq2seq_loader_epochs, test_seq2seq_loader_bucketing, test_seq2seq_resume,
               test_seq2seq_loader_errors, test_lm_loader, test_lm_loader_errors,
               test_end_to_end_task_pipeline);
  return lt_test_run(s);
}
