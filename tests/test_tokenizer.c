/*
 * tests/test_tokenizer.c: datasets/tokenizer.c and the file readers of
 * datasets/corpus.c: UTF-8 validation, the byte, char and BPE tokenizers
 * (round trips with multi-byte UTF-8, special ids, <unk>, decoding out-of-range
 * ids), BPE learning (a hand example, tie-breaking, the piece boundaries, and
 * the incremental trainer against a naive reference on random texts),
 * serialisation (round trips, and every kind of corrupt buffer), and reading
 * text files (empty, missing).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <zlib.h>

#include "datasets/datasets.h"
#include "test_util.h"

/* decode(encode(s)) must give s back exactly. */
static void round_trip(const lt_tokenizer *tok, const char *s, size_t n) {
  int64_t *ids, m;
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, s, n, &ids, &m));
  ck_assert(ids != NULL);
  for (int64_t i = 0; i < m; i++)
    ck_assert(ids[i] >= LT_TOKEN_NUM_SPECIAL && ids[i] < lt_tokenizer_vocab_size(tok));
  char *back;
  size_t bn;
  LT_OK_OR_FAIL(lt_tokenizer_decode(tok, ids, m, 0, &back, &bn));
  ck_assert_msg(bn == n && memcmp(back, s, n) == 0, "round trip of %zu bytes gave %zu bytes", n, bn);
  ck_assert(back[bn] == '\0');
  free(ids);
  free(back);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

START_TEST(test_utf8_valid) {
  const char *good[] = {"", "plain", "h\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xEF\xBB\xBF",
                        "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    ck_assert_msg(lt_utf8_valid(good[i], strlen(good[i]), NULL), "good[%zu]", i);
  struct {
    const char *s;
    size_t off;
  } bad[] = {{"ab\x80", 2},          {"\xC0\x80", 0},         {"\xC1\xBF", 0},     {"x\xE0\x80\x80", 1},
             {"\xED\xA0\x80", 0},     {"\xF4\x90\x80\x80", 0}, {"\xE2\x82", 0},     {"\xF5\x80\x80\x80", 0},
             {"ok\xF0\x9F\x98", 2},   {"\xFF", 0},             {"\xC3\x28", 0},     {"\xE2\x28\xA1", 0}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t off = 999;
    ck_assert_msg(!lt_utf8_valid(bad[i].s, strlen(bad[i].s), &off), "bad[%zu] accepted", i);
    ck_assert_msg(off == bad[i].off, "bad[%zu]: offset %zu, want %zu", i, off, bad[i].off);
  }
  /* A NUL byte is valid UTF-8 (length-delimited strings). */
  ck_assert(lt_utf8_valid("a\0b", 3, NULL));
}
END_TEST

/* ---- byte tokenizer -------------------------------------------------------- */

START_TEST(test_byte_tokenizer) {
  lt_tokenizer *t = LT_NNP(lt_tokenizer_new_byte());
  ck_assert_int_eq(lt_tokenizer_get_kind(t), LT_TOKENIZER_BYTE);
  ck_assert_int_eq(lt_tokenizer_vocab_size(t), 260);
  ck_assert_int_eq(lt_tokenizer_num_merges(t), 0);
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, "h\xC3\xA9", 3, &ids, &n));
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(ids[0], 4 + 'h');
  ck_assert_int_eq(ids[1], 4 + 0xC3);
  ck_assert_int_eq(ids[2], 4 + 0xA9);
  free(ids);
  /* Every byte, NUL and invalid UTF-8 included. */
  char all[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  round_trip(t, all, 256);
  round_trip(t, "h\xC3\xA9llo \xF0\x9F\x98\x80", 11);
  /* The empty text gives a non-NULL empty array. */
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, "", 0, &ids, &n));
  ck_assert(ids != NULL);
  ck_assert_int_eq(n, 0);
  free(ids);
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, NULL, 0, &ids, &n));
  free(ids);
  /* Tensor form. */
  lt_tensor *tt = LT_NN(lt_tokenizer_encode_tensor(t, "ab", 2));
  LT_ASSERT_SHAPE(tt, 2);
  ck_assert_int_eq(tt->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(tt, 0, 4 + 'a', 4 + 'b');
  char *s;
  size_t sn;
  LT_OK_OR_FAIL(lt_tokenizer_decode_tensor(t, tt, 0, &s, &sn));
  ck_assert_str_eq(s, "ab");
  free(s);
  lt_tensor_free(tt);
  lt_tokenizer_free(t);
  lt_tokenizer_free(NULL);
}
END_TEST

START_TEST(test_decode_specials_and_range) {
  lt_tokenizer *t = LT_NNP(lt_tokenizer_new_byte());
  int64_t ids[] = {LT_TOKEN_BOS, 4 + 'h', LT_TOKEN_UNK, 4 + 'i', LT_TOKEN_EOS, LT_TOKEN_PAD, LT_TOKEN_PAD};
  char *s;
  size_t n;
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, ids, 7, 0, &s, &n));
  ck_assert_str_eq(s, "h\xEF\xBF\xBDi");
  ck_assert_uint_eq(n, 5);
  free(s);
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, ids, 7, LT_DECODE_SHOW_SPECIAL, &s, &n));
  ck_assert_str_eq(s, "<bos>h<unk>i<eos><pad><pad>");
  free(s);
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, ids, 0, 0, &s, &n));
  ck_assert_str_eq(s, "");
  free(s);
  /* Out-of-range ids: a clear error naming the id and position; outputs untouched. */
  s = (char *)0x1;
  n = 77;
  int64_t bad1[] = {4 + 'a', 260};
  LT_EXPECT_ERR(lt_tokenizer_decode(t, bad1, 2, 0, &s, &n), LT_ERR_INDEX, "id 260 at position 1");
  int64_t bad2[] = {LT_IGNORE_INDEX};
  LT_EXPECT_ERR(lt_tokenizer_decode(t, bad2, 1, 0, &s, &n), LT_ERR_INDEX, "id -100 at position 0");
  ck_assert(s == (char *)0x1 && n == 77);
  LT_EXPECT_ERR(lt_tokenizer_decode(t, bad1, -1, 0, &s, &n), LT_ERR_INVALID, "n is -1");
  LT_EXPECT_ERR(lt_tokenizer_decode(NULL, bad1, 1, 0, &s, &n), LT_ERR_NULL, "tok");
  LT_EXPECT_ERR(lt_tokenizer_decode(t, NULL, 1, 0, &s, &n), LT_ERR_NULL, "ids");
  lt_tensor *f = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_tokenizer_decode_tensor(t, f, 0, &s, &n), LT_ERR_DTYPE, "i32 or i64");
  lt_tensor_free(f);
  lt_tokenizer_free(t);
}
END_TEST

/* ---- char tokenizer ---------------------------------------------------------- */

START_TEST(test_char_tokenizer) {
  const char *text = "h\xC3\xA9llo w\xC3\xB6rld \xF0\x9F\x98\x80!";
  lt_tokenizer *t = LT_NNP(lt_tokenizer_new_char(text, strlen(text)));
  ck_assert_int_eq(lt_tokenizer_get_kind(t), LT_TOKENIZER_CHAR);
  /* Distinct: ' ', '!', d, h, l, o, r, w, e-acute, o-umlaut, emoji = 11. */
  ck_assert_int_eq(lt_tokenizer_vocab_size(t), 4 + 11);
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, " !\xF0\x9F\x98\x80", 6, &ids, &n));
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(ids[0], 4);       /* ' ' is the smallest code point */
  ck_assert_int_eq(ids[1], 5);       /* '!' */
  ck_assert_int_eq(ids[2], 4 + 10);  /* U+1F600 is the largest */
  free(ids);
  round_trip(t, text, strlen(text));
  round_trip(t, "w\xC3\xB6rld", 6);
  /* Unknown characters encode as <unk> and decode as U+FFFD. */
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, "hx\xE2\x82\xAC", 5, &ids, &n));
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(ids[1], LT_TOKEN_UNK);
  ck_assert_int_eq(ids[2], LT_TOKEN_UNK);
  char *s;
  size_t sn;
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, ids, n, 0, &s, &sn));
  ck_assert_str_eq(s, "h\xEF\xBF\xBD\xEF\xBF\xBD");
  free(s);
  free(ids);
  /* Invalid UTF-8: an error naming the offset, outputs untouched. */
  ids = (int64_t *)0x1;
  n = 5;
  LT_EXPECT_ERR(lt_tokenizer_encode(t, "ok\xC3", 3, &ids, &n), LT_ERR_FORMAT, "byte offset 2");
  LT_EXPECT_ERR(lt_tokenizer_encode(t, "\xED\xA0\x80", 3, &ids, &n), LT_ERR_FORMAT, "invalid UTF-8");
  ck_assert(ids == (int64_t *)0x1 && n == 5);
  int64_t big[] = {15};
  LT_EXPECT_ERR(lt_tokenizer_decode(t, big, 1, 0, &s, &sn), LT_ERR_INDEX, "outside [0, 15)");
  lt_tokenizer_free(t);
  /* Building: empty text, invalid UTF-8, NULL. */
  LT_EXPECT_NULLP_ERR(lt_tokenizer_new_char("", 0), LT_ERR_INVALID, "empty");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_new_char("ab\xFF", 3), LT_ERR_FORMAT, "byte offset 2");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_new_char(NULL, 3), LT_ERR_NULL, "text");
  /* NUL is an ordinary character. */
  t = LT_NNP(lt_tokenizer_new_char("a\0b", 3));
  ck_assert_int_eq(lt_tokenizer_vocab_size(t), 7);
  round_trip(t, "b\0a", 3);
  lt_tokenizer_free(t);
}
END_TEST

/* ---- BPE ------------------------------------------------------------------------ */

START_TEST(test_bpe_hand_example) {
  /* Wikipedia's example: aaabdaaabac -> merges aa=Z, ab=Y, ZY=X. After "aa"
   * (count 4), "ab" and "Za" both occur twice; the tie goes to the smaller
   * pair (a, b) = (101, 102) < (260, 101). Then ZY (count 2); then every pair
   * occurs once, below min_frequency 2. */
  const char *text = "aaabdaaabac";
  lt_bpe_opts o = {10, 0, 2};
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe(text, strlen(text), &o));
  ck_assert_int_eq(lt_tokenizer_get_kind(t), LT_TOKENIZER_BPE);
  ck_assert_int_eq(lt_tokenizer_num_merges(t), 3);
  ck_assert_int_eq(lt_tokenizer_vocab_size(t), 263);
  int64_t want[3][2] = {{4 + 'a', 4 + 'a'}, {4 + 'a', 4 + 'b'}, {260, 261}};
  for (int i = 0; i < 3; i++) {
    int64_t l, r;
    LT_OK_OR_FAIL(lt_tokenizer_merge(t, i, &l, &r));
    ck_assert_msg(l == want[i][0] && r == want[i][1], "merge %d is (%lld, %lld)", i, (long long)l, (long long)r);
  }
  int64_t l, r;
  LT_EXPECT_ERR(lt_tokenizer_merge(t, 3, &l, &r), LT_ERR_INDEX, "merge 3");
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, text, strlen(text), &ids, &n));
  int64_t enc[] = {262, 4 + 'd', 262, 4 + 'a', 4 + 'c'};
  ck_assert_int_eq(n, 5);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(ids[i], enc[i]);
  free(ids);
  round_trip(t, text, strlen(text));
  /* Decoding a merged id gives its bytes. */
  int64_t one[] = {262};
  char *s;
  size_t sn;
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, one, 1, 0, &s, &sn));
  ck_assert_str_eq(s, "aaab");
  free(s);
  lt_tokenizer_free(t);

  /* Tie-breaking among equal counts, min_frequency 1: ab < bc < cd. */
  o = (lt_bpe_opts){1, 0, 1};
  t = LT_NNP(lt_tokenizer_train_bpe("abcd", 4, &o));
  LT_OK_OR_FAIL(lt_tokenizer_merge(t, 0, &l, &r));
  ck_assert(l == 4 + 'a' && r == 4 + 'b');
  lt_tokenizer_free(t);

  /* A vocabulary-size target: 262 = 260 + 2 merges. */
  o = (lt_bpe_opts){0, 262, 2};
  t = LT_NNP(lt_tokenizer_train_bpe(text, strlen(text), &o));
  ck_assert_int_eq(lt_tokenizer_num_merges(t), 2);
  ck_assert_int_eq(lt_tokenizer_vocab_size(t), 262);
  lt_tokenizer_free(t);
}
END_TEST

START_TEST(test_bpe_pieces) {
  /* Merges never cross a piece boundary: with plenty of merges, no token holds
   * a space after its first byte, or mixes letters with digits or symbols. */
  const char *text = "the cat sat on the mat, the cat ate 42 rats!! the end.\n\nthe  cat  sat 4242";
  lt_bpe_opts o = {200, 0, 1};
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe(text, strlen(text), &o));
  ck_assert(lt_tokenizer_num_merges(t) > 10);
  for (int64_t id = 260; id < lt_tokenizer_vocab_size(t); id++) {
    char *s;
    size_t n;
    LT_OK_OR_FAIL(lt_tokenizer_decode(t, &id, 1, 0, &s, &n));
    int classes = 0;
    bool ws_run = true;
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)s[i];
      bool ws = c == ' ' || c == '\n';
      if (!ws) ws_run = false;
      if (i > 0 && ws) ck_assert_msg(ws_run, "token %lld \"%s\" has whitespace inside", (long long)id, s);
      if (!ws) classes |= (c >= '0' && c <= '9') ? 1 : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? 2 : 4;
    }
    ck_assert_msg(classes == 0 || classes == 1 || classes == 2 || classes == 4, "token \"%s\" mixes classes", s);
    free(s);
  }
  /* " the" is a token: the leading space belongs to the word. */
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, " the", 4, &ids, &n));
  ck_assert_int_eq(n, 1);
  free(ids);
  round_trip(t, text, strlen(text));
  lt_tokenizer_free(t);
}
END_TEST

/* ---- a naive BPE trainer as the reference ------------------------------------ */

static bool ref_ws(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int ref_class(unsigned c) {
  if (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0x80) return 0;
  return c >= '0' && c <= '9' ? 1 : 2;
}
/* The piece rule of docs/datasets.md, written again independently. */
static size_t ref_piece(const unsigned char *s, size_t n, size_t i) {
  size_t j = i;
  if (s[i] == ' ' && i + 1 < n && !ref_ws(s[i + 1])) {
    j = i + 1;
    int c = ref_class(s[j]);
    while (j < n && !ref_ws(s[j]) && ref_class(s[j]) == c) j++;
  } else if (ref_ws(s[i])) {
    while (j < n && ref_ws(s[j])) j++;
    if (j < n && j - i >= 2 && s[j - 1] == ' ') j--;
  } else {
    int c = ref_class(s[i]);
    while (j < n && !ref_ws(s[j]) && ref_class(s[j]) == c) j++;
  }
  return j - i > LT_BPE_MAX_PIECE ? i + LT_BPE_MAX_PIECE : j;
}

/* Recounts every pair at every step (each occurrence of each piece separately). */
static int64_t ref_train(const char *text, size_t len, int64_t merges, int64_t minf, int64_t (*out)[2]) {
  const unsigned char *s = (const unsigned char *)text;
  int64_t *sym = malloc(len * sizeof *sym);
  size_t *pstart = malloc((len + 1) * sizeof *pstart), np = 0;
  int64_t *plen = malloc((len + 1) * sizeof *plen);
  for (size_t i = 0; i < len; i++) sym[i] = 4 + s[i];
  for (size_t i = 0; i < len;) {
    size_t j = ref_piece(s, len, i);
    pstart[np] = i;
    plen[np++] = (int64_t)(j - i);
    i = j;
  }
  int64_t m = 0;
  for (; m < merges; m++) {
    int64_t V = 260 + m;
    int64_t *cnt = calloc((size_t)(V * V), sizeof *cnt);
    for (size_t p = 0; p < np; p++)
      for (int64_t i = 0; i + 1 < plen[p]; i++) cnt[sym[pstart[p] + i] * V + sym[pstart[p] + i + 1]]++;
    int64_t best = -1;
    for (int64_t k = 0; k < V * V; k++)
      if (cnt[k] > 0 && (best < 0 || cnt[k] > cnt[best])) best = k; /* first max: smallest (l, r) */
    if (best < 0 || cnt[best] < minf) {
      free(cnt);
      break;
    }
    free(cnt);
    int64_t l = best / V, r = best % V;
    out[m][0] = l;
    out[m][1] = r;
    for (size_t p = 0; p < np; p++) {
      int64_t *w = sym + pstart[p], k = 0;
      for (int64_t i = 0; i < plen[p];) {
        if (i + 1 < plen[p] && w[i] == l && w[i + 1] == r) {
          w[k++] = V;
          i += 2;
        } else {
          w[k++] = w[i++];
        }
      }
      plen[p] = k;
    }
  }
  free(sym);
  free(pstart);
  free(plen);
  return m;
}

START_TEST(test_bpe_against_reference) {
  /* Random texts over a small alphabet with spaces, digits and punctuation, so
   * that counts tie often and pieces repeat. */
  const char alpha[] = "aab  ba1,. \nab";
  uint64_t st = 12345;
  for (int trial = 0; trial < 12; trial++) {
    size_t len = 200 + (size_t)trial * 60;
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++) {
      st = st * 6364136223846793005ULL + 1442695040888963407ULL;
      text[i] = alpha[(st >> 33) % (sizeof alpha - 1)];
    }
    int64_t merges = 40, minf = trial % 3 == 0 ? 1 : 2;
    int64_t want[40][2];
    int64_t nwant = ref_train(text, len, merges, minf, want);
    lt_bpe_opts o = {merges, 0, minf};
    lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe(text, len, &o));
    ck_assert_msg(lt_tokenizer_num_merges(t) == nwant, "trial %d: %lld merges, reference %lld", trial,
                  (long long)lt_tokenizer_num_merges(t), (long long)nwant);
    for (int64_t i = 0; i < nwant; i++) {
      int64_t l, r;
      LT_OK_OR_FAIL(lt_tokenizer_merge(t, i, &l, &r));
      ck_assert_msg(l == want[i][0] && r == want[i][1], "trial %d merge %lld: (%lld, %lld), reference (%lld, %lld)",
                    trial, (long long)i, (long long)l, (long long)r, (long long)want[i][0], (long long)want[i][1]);
    }
    round_trip(t, text, len);
    lt_tokenizer_free(t);
    free(text);
  }
}
END_TEST

START_TEST(test_bpe_round_trips_and_determinism) {
  /* A text with multi-byte UTF-8, then arbitrary bytes (invalid UTF-8, NUL):
   * BPE is byte-level, so every input encodes and decodes exactly. */
  const char *train = "na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC 12 \xF0\x9F\x98\x80\xF0\x9F\x98\x80 caf\xC3\xA9 na\xC3\xAFve "
                      "caf\xC3\xA9 \xE2\x82\xAC\xE2\x82\xAC 1212";
  lt_bpe_opts o = {0, 300, 2};
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe(train, strlen(train), &o));
  round_trip(t, train, strlen(train));
  round_trip(t, "\xFF\xFE\x00 caf\xC3 \xC3\xA9\x80", 12);
  char junk[1000];
  uint64_t st = 99;
  for (size_t i = 0; i < sizeof junk; i++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    junk[i] = (char)(st >> 56);
  }
  round_trip(t, junk, sizeof junk);
  /* A long run is cut into pieces of at most LT_BPE_MAX_PIECE bytes. */
  char *longrun = malloc(5000);
  memset(longrun, 'a', 5000);
  round_trip(t, longrun, 5000);
  lt_tokenizer *t2 = LT_NNP(lt_tokenizer_train_bpe(longrun, 5000, &(lt_bpe_opts){20, 0, 2}));
  for (int64_t id = 260; id < lt_tokenizer_vocab_size(t2); id++) {
    char *s;
    size_t n;
    LT_OK_OR_FAIL(lt_tokenizer_decode(t2, &id, 1, 0, &s, &n));
    ck_assert(n <= LT_BPE_MAX_PIECE);
    free(s);
  }
  round_trip(t2, longrun, 5000);
  lt_tokenizer_free(t2);
  free(longrun);
  /* Training twice gives the same bytes. */
  lt_tokenizer *t3 = LT_NNP(lt_tokenizer_train_bpe(train, strlen(train), &o));
  void *b1, *b3;
  size_t n1, n3;
  LT_OK_OR_FAIL(lt_tokenizer_serialize(t, &b1, &n1));
  LT_OK_OR_FAIL(lt_tokenizer_serialize(t3, &b3, &n3));
  ck_assert(n1 == n3 && memcmp(b1, b3, n1) == 0);
  free(b1);
  free(b3);
  lt_tokenizer_free(t3);
  lt_tokenizer_free(t);
}
END_TEST

START_TEST(test_bpe_errors) {
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("abc", 3, &(lt_bpe_opts){5, 300, 2}), LT_ERR_INVALID, "exactly one");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("abc", 3, &(lt_bpe_opts){0, 0, 2}), LT_ERR_INVALID, "exactly one");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("abc", 3, &(lt_bpe_opts){0, 200, 2}), LT_ERR_INVALID, "vocab_size 200");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("abc", 3, &(lt_bpe_opts){5, 0, 0}), LT_ERR_INVALID, "min_frequency");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("abc", 3, &(lt_bpe_opts){LT_BPE_MAX_MERGES + 1, 0, 2}), LT_ERR_INVALID,
               "at most");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe("", 0, NULL), LT_ERR_INVALID, "empty");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe(NULL, 4, NULL), LT_ERR_NULL, "text");
  /* A text with nothing to merge gives a byte-level BPE with 0 merges. */
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe("abc", 3, NULL));
  ck_assert_int_eq(lt_tokenizer_num_merges(t), 0);
  round_trip(t, "cab", 3);
  lt_tokenizer_free(t);
  /* NULL tokenizer arguments. */
  int64_t *ids, n;
  LT_EXPECT_ERR(lt_tokenizer_encode(NULL, "a", 1, &ids, &n), LT_ERR_NULL, "tok");
  lt_tokenizer *b = LT_NNP(lt_tokenizer_new_byte());
  LT_EXPECT_ERR(lt_tokenizer_encode(b, NULL, 1, &ids, &n), LT_ERR_NULL, "text");
  LT_EXPECT_ERR(lt_tokenizer_encode(b, "a", 1, NULL, &n), LT_ERR_NULL, "ids");
  ck_assert_int_eq(lt_tokenizer_vocab_size(NULL), 0);
  lt_tokenizer_free(b);
}
END_TEST

/* ---- serialisation ------------------------------------------------------------ */

static lt_tokenizer *make_kind(int k) {
  const char *text = "the cat sat on the mat; the caf\xC3\xA9 \xF0\x9F\x98\x80 sat";
  if (k == 0) return lt_tokenizer_new_byte();
  if (k == 1) return lt_tokenizer_new_char(text, strlen(text));
  return lt_tokenizer_train_bpe(text, strlen(text), &(lt_bpe_opts){30, 0, 1});
}

START_TEST(test_serialize_round_trip) {
  const char *probe = "the mat sat; caf\xC3\xA9 \xF0\x9F\x98\x80";
  for (int k = 0; k < 3; k++) {
    lt_tokenizer *t = LT_NNP(make_kind(k));
    void *buf;
    size_t n;
    LT_OK_OR_FAIL(lt_tokenizer_serialize(t, &buf, &n));
    ck_assert(memcmp(buf, "LTTK", 4) == 0);
    lt_tokenizer *u = LT_NNP(lt_tokenizer_deserialize(buf, n));
    ck_assert_int_eq(lt_tokenizer_get_kind(u), lt_tokenizer_get_kind(t));
    ck_assert_int_eq(lt_tokenizer_vocab_size(u), lt_tokenizer_vocab_size(t));
    ck_assert_int_eq(lt_tokenizer_num_merges(u), lt_tokenizer_num_merges(t));
    int64_t *a, *b, na, nb;
    LT_OK_OR_FAIL(lt_tokenizer_encode(t, probe, strlen(probe), &a, &na));
    LT_OK_OR_FAIL(lt_tokenizer_encode(u, probe, strlen(probe), &b, &nb));
    ck_assert(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    free(a);
    free(b);
    round_trip(u, probe, strlen(probe));
    void *buf2;
    size_t n2;
    LT_OK_OR_FAIL(lt_tokenizer_serialize(u, &buf2, &n2));
    ck_assert(n == n2 && memcmp(buf, buf2, n) == 0);
    free(buf2);
    free(buf);
    lt_tokenizer_free(u);
    lt_tokenizer_free(t);
  }
}
END_TEST

static void put32(unsigned char *p, uint32_t v) {
  for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}
/* Rewrites the trailing CRC so that only the semantic checks can fail. */
static void fix_crc(unsigned char *p, size_t n) {
  put32(p + n - 4, (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)(n - 4)));
}

/* A forged buffer: header fields and payload words, with a valid CRC. */
static unsigned char *forge(uint32_t kind, uint64_t vocab, uint64_t count, const uint32_t *words, size_t nwords,
                            size_t *n) {
  *n = 32 + nwords * 4 + 4;
  unsigned char *p = calloc(1, *n);
  memcpy(p, "LTTK", 4);
  put32(p + 4, 1);
  put32(p + 8, kind);
  put32(p + 12, 4);
  put64(p + 16, vocab);
  put64(p + 24, count);
  for (size_t i = 0; i < nwords; i++) put32(p + 32 + 4 * i, words[i]);
  fix_crc(p, *n);
  return p;
}

#define EXPECT_FORGED(kind, vocab, count, substr, ...)                                        \
  do {                                                                                        \
    uint32_t w_[] = {0, __VA_ARGS__};                                                         \
    size_t n_;                                                                                \
    unsigned char *b_ = forge((kind), (vocab), (count), w_ + 1, sizeof w_ / 4 - 1, &n_);      \
    LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(b_, n_), LT_ERR_FORMAT, (substr));                  \
    free(b_);                                                                                 \
  } while (0)

START_TEST(test_deserialize_corrupt) {
  lt_tokenizer *t = LT_NNP(make_kind(2));
  unsigned char *buf;
  size_t n;
  LT_OK_OR_FAIL(lt_tokenizer_serialize(t, (void **)&buf, &n));
  lt_tokenizer_free(t);
  /* Every truncation. */
  for (size_t k = 0; k < n; k++) LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, k), LT_ERR_FORMAT, NULL);
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, 10), LT_ERR_FORMAT, "shorter than");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, n - 1), LT_ERR_FORMAT, "its header implies");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(NULL, n), LT_ERR_NULL, "buf");
  /* Every single-bit flip is caught (most by the checksum). */
  for (size_t k = 0; k < n; k++)
    for (int bit = 0; bit < 8; bit++) {
      buf[k] ^= (unsigned char)(1u << bit);
      LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, n), LT_ERR_FORMAT, NULL);
      buf[k] ^= (unsigned char)(1u << bit);
    }
  buf[40] ^= 1;
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, n), LT_ERR_FORMAT, "checksum");
  buf[40] ^= 1;
  buf[0] = 'X';
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(buf, n), LT_ERR_FORMAT, "magic");
  free(buf);

  /* Semantic checks, with valid checksums. */
  size_t m;
  unsigned char *v = forge(0, 260, 0, NULL, 0, &m);
  lt_tokenizer *ok = LT_NNP(lt_tokenizer_deserialize(v, m));
  ck_assert_int_eq(lt_tokenizer_vocab_size(ok), 260);
  lt_tokenizer_free(ok);
  put32(v + 4, 2);
  fix_crc(v, m);
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(v, m), LT_ERR_FORMAT, "version 2");
  put32(v + 4, 1);
  put32(v + 12, 5);
  fix_crc(v, m);
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(v, m), LT_ERR_FORMAT, "5 special tokens");
  free(v);
  EXPECT_FORGED(7, 260, 0, "unknown tokenizer kind 7", 0);
  EXPECT_FORGED(0, 261, 0, "vocabulary size 261");
  EXPECT_FORGED(0, 260, 1, "above the limit", 5);
  /* char: code points must be increasing scalar values. */
  EXPECT_FORGED(1, 6, 2, "not a scalar value", 'b', 'a');
  EXPECT_FORGED(1, 6, 2, "not a scalar value", 'a', 'a');
  EXPECT_FORGED(1, 5, 1, "not a scalar value", 0xD800);
  EXPECT_FORGED(1, 5, 1, "not a scalar value", 0x110000);
  EXPECT_FORGED(1, 5, 2, "vocabulary size 5", 'a', 'b');
  EXPECT_FORGED(1, 4 + 0x110001ULL, 0x110001ULL, "above the limit", 0);
  /* bpe: merges may only join ordinary ids defined before them. */
  EXPECT_FORGED(2, 261, 1, "must be in [4, 260)", 3, 100);
  EXPECT_FORGED(2, 261, 1, "must be in [4, 260)", 100, 260);
  EXPECT_FORGED(2, 262, 2, "must be in [4, 261)", 100, 101, 261, 100);
  EXPECT_FORGED(2, 261, 1, "must be in", 0xFFFFFFFFu, 100);
  EXPECT_FORGED(2, 262, 2, "repeats merge 0", 100, 101, 100, 101);
  EXPECT_FORGED(2, 263, 2, "vocabulary size 263", 100, 101, 101, 102);
  EXPECT_FORGED(2, 260 + (1ULL << 40), 1ULL << 40, "above the limit", 100, 101);
  /* A chain of self-merges doubling a token past LT_BPE_MAX_PIECE bytes. */
  uint32_t chain[16];
  for (int i = 0; i < 8; i++) {
    chain[2 * i] = i == 0 ? 100 : (uint32_t)(259 + i);
    chain[2 * i + 1] = chain[2 * i];
  }
  size_t cn;
  unsigned char *cb = forge(2, 268, 8, chain, 16, &cn);
  LT_EXPECT_NULLP_ERR(lt_tokenizer_deserialize(cb, cn), LT_ERR_FORMAT, "bytes (at most 128)");
  /* Seven doublings (128 bytes) are fine. */
  free(cb);
  cb = forge(2, 267, 7, chain, 14, &cn);
  ok = LT_NNP(lt_tokenizer_deserialize(cb, cn));
  int64_t id = 266;
  char *s;
  size_t sn;
  LT_OK_OR_FAIL(lt_tokenizer_decode(ok, &id, 1, 0, &s, &sn));
  ck_assert_uint_eq(sn, 128);
  free(s);
  lt_tokenizer_free(ok);
  free(cb);
}
END_TEST

START_TEST(test_deserialize_fuzz) {
  /* Random payload words with a valid checksum: either rejected or a working
   * tokenizer, never a crash. */
  uint64_t st = 7;
  int accepted = 0;
  for (int trial = 0; trial < 400; trial++) {
    uint32_t kind = (uint32_t)(trial % 3), words[24];
    size_t count = (size_t)(trial % 12);
    for (int i = 0; i < 24; i++) {
      st = st * 6364136223846793005ULL + 1442695040888963407ULL;
      uint32_t r = (uint32_t)(st >> 32);
      words[i] = trial % 2 ? r % 300 : (kind == 1 ? (uint32_t)(i * 50 + r % 50) : r);
    }
    size_t nw = kind == 2 ? 2 * count : kind == 1 ? count : 0;
    uint64_t vocab = kind == 1 ? 4 + count : 260 + (kind == 2 ? count : 0);
    size_t n;
    unsigned char *b = forge(kind, vocab, kind == 0 ? 0 : count, words, nw, &n);
    lt_tokenizer *t = lt_tokenizer_deserialize(b, n);
    if (t) {
      accepted++;
      if (kind != 1) round_trip(t, "abc", 3);
      int64_t all[300];
      for (int64_t i = 0; i < lt_tokenizer_vocab_size(t) && i < 300; i++) all[i] = i;
      char *s;
      size_t sn;
      LT_OK_OR_FAIL(lt_tokenizer_decode(t, all, lt_tokenizer_vocab_size(t) < 300 ? lt_tokenizer_vocab_size(t) : 300,
                                        0, &s, &sn));
      free(s);
    } else {
      ck_assert_int_eq(lt_last_status(), LT_ERR_FORMAT);
    }
    lt_clear_error();
    lt_tokenizer_free(t);
    free(b);
  }
  ck_assert(accepted > 10);
}
END_TEST

/* ---- files ---------------------------------------------------------------------- */

START_TEST(test_text_files) {
  const char *text = "to be or not to be, that is the question\n";
  char *path = lt_test_write_temp(text, strlen(text));
  char *data;
  size_t n;
  LT_OK_OR_FAIL(lt_text_file_read(path, &data, &n));
  ck_assert_uint_eq(n, strlen(text));
  ck_assert_str_eq(data, text);
  free(data);
  lt_tokenizer *b = LT_NNP(lt_tokenizer_new_byte());
  lt_tensor *toks = LT_NN(lt_text_file_tokens(b, path));
  LT_ASSERT_SHAPE(toks, (int64_t)strlen(text));
  ck_assert_int_eq(((int64_t *)toks->data)[0], 4 + 't');
  lt_tensor_free(toks);
  lt_tokenizer *bpe = LT_NNP(lt_tokenizer_train_bpe_file(path, &(lt_bpe_opts){10, 0, 2}));
  ck_assert(lt_tokenizer_num_merges(bpe) > 0);
  toks = LT_NN(lt_text_file_tokens(bpe, path));
  ck_assert(toks->numel < (int64_t)strlen(text));
  lt_tensor_free(toks);
  lt_tokenizer_free(bpe);
  unlink(path);
  free(path);
  /* An empty file reads fine but has no tokens and nothing to learn from. */
  path = lt_test_write_temp("", 0);
  LT_OK_OR_FAIL(lt_text_file_read(path, &data, &n));
  ck_assert_uint_eq(n, 0);
  ck_assert_str_eq(data, "");
  free(data);
  LT_EXPECT_NULL_ERR(lt_text_file_tokens(b, path), LT_ERR_FORMAT, "is empty");
  LT_EXPECT_NULLP_ERR(lt_tokenizer_train_bpe_file(path, NULL), LT_ERR_FORMAT, "is empty");
  unlink(path);
  free(path);
  /* Missing file, NULL path. */
  LT_EXPECT_ERR(lt_text_file_read("/nonexistent/lt_text", &data, &n), LT_ERR_IO, "/nonexistent/lt_text");
  LT_EXPECT_NULL_ERR(lt_text_file_tokens(b, "/nonexistent/lt_text"), LT_ERR_IO, "cannot open");
  LT_EXPECT_ERR(lt_text_file_read(NULL, &data, &n), LT_ERR_NULL, "path");
  /* Invalid UTF-8 in a file given to a char tokenizer. */
  path = lt_test_write_temp("ab\xC3(", 4);
  lt_tokenizer *c = LT_NNP(lt_tokenizer_new_char("ab", 2));
  LT_EXPECT_NULL_ERR(lt_text_file_tokens(c, path), LT_ERR_FORMAT, "byte offset 2");
  lt_tokenizer_free(c);
  unlink(path);
  free(path);
  /* A larger file crosses the reader's internal buffer size. */
  size_t big = 200000;
  char *bigtext = malloc(big);
  for (size_t i = 0; i < big; i++) bigtext[i] = (char)('a' + i % 26);
  path = lt_test_write_temp(bigtext, big);
  LT_OK_OR_FAIL(lt_text_file_read(path, &data, &n));
  ck_assert(n == big && memcmp(data, bigtext, big) == 0);
  free(data);
  free(bigtext);
  unlink(path);
  free(path);
  lt_tokenizer_free(b);
}
END_TEST

START_TEST(test_bpe_compresses_real_text) {
  /* A few hundred KB of number words: training is fast enough and shortens
   * the text; the result round-trips. */
  size_t cap = 400000, n = 0;
  char *text = malloc(cap);
  char w[256];
  for (int64_t k = 0; n + 300 < cap; k++) {
    LT_OK_OR_FAIL(lt_number_to_words((k * 7919) % 1000000, w, sizeof w));
    size_t l = strlen(w);
    memcpy(text + n, w, l);
    n += l;
    text[n++] = '\n';
  }
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe(text, n, &(lt_bpe_opts){0, 512, 2}));
  int64_t *ids, m;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, text, n, &ids, &m));
  ck_assert_msg(m * 4 < (int64_t)n, "%lld tokens for %zu bytes", (long long)m, n);
  free(ids);
  round_trip(t, text, n);
  lt_tokenizer_free(t);
  free(text);
}
END_TEST

/* tokenizer.json of t, parsed (fails the test if it is not JSON). */
static json_t *to_json(const lt_tokenizer *t) {
  char *s;
  size_t n;
  LT_OK_OR_FAIL(lt_tokenizer_to_json(t, &s, &n));
  ck_assert_uint_eq(strlen(s), n);
  for (size_t i = 0; i < n; i++) ck_assert_msg((unsigned char)s[i] < 0x80, "byte %zu is not ASCII", i);
  json_error_t e;
  json_t *j = json_loadb(s, n, 0, &e);
  ck_assert_msg(j != NULL, "not JSON: %s (line %d)", e.text, e.line);
  free(s);
  return j;
}

static int64_t vocab_id(json_t *j, const char *token) {
  json_t *v = json_object_get(json_object_get(json_object_get(j, "model"), "vocab"), token);
  ck_assert_msg(json_is_integer(v), "'%s' is not in the vocabulary", token);
  return (int64_t)json_integer_value(v);
}

START_TEST(test_tokenizer_json) {
  /* BPE: the hand example's merges aa = 260, ab = 261, (aa)(ab) = 262, byte-level spelled. */
  lt_tokenizer *t = LT_NNP(lt_tokenizer_train_bpe("aaabdaaabac", 11, &(lt_bpe_opts){10, 0, 2}));
  json_t *j = to_json(t);
  json_t *model = json_object_get(j, "model");
  ck_assert_str_eq(json_string_value(json_object_get(model, "type")), "BPE");
  ck_assert_int_eq(json_object_size(json_object_get(model, "vocab")), 263);
  ck_assert_int_eq(vocab_id(j, "<pad>"), 0);
  ck_assert_int_eq(vocab_id(j, "<unk>"), 3);
  ck_assert_int_eq(vocab_id(j, "a"), 4 + 'a');
  ck_assert_int_eq(vocab_id(j, "\u0120"), 4 + ' ');   /* GPT-2's byte alphabet: space is U+0120 */
  ck_assert_int_eq(vocab_id(j, "\u0100"), 4 + 0);     /* byte 0 is U+0100 */
  ck_assert_int_eq(vocab_id(j, "aaab"), 262);
  json_t *merges = json_object_get(model, "merges");
  ck_assert_int_eq(json_array_size(merges), 3);
  ck_assert_str_eq(json_string_value(json_array_get(merges, 2)), "aa ab");
  json_t *pre = json_object_get(j, "pre_tokenizer");
  ck_assert_str_eq(json_string_value(json_object_get(pre, "type")), "Sequence");
  json_t *split = json_array_get(json_object_get(pre, "pretokenizers"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex")),
                   lt_tokenizer_piece_regex());
  json_t *added = json_object_get(j, "added_tokens");
  ck_assert_int_eq(json_array_size(added), 4);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(added, 2), "content")), "<eos>");
  json_decref(j);
  lt_tokenizer_free(t);

  /* byte: a BPE model without merges, the pre-tokenizer ByteLevel alone */
  t = LT_NNP(lt_tokenizer_new_byte());
  j = to_json(t);
  ck_assert_int_eq(json_object_size(json_object_get(json_object_get(j, "model"), "vocab")), 260);
  ck_assert_int_eq(json_array_size(json_object_get(json_object_get(j, "model"), "merges")), 0);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "pre_tokenizer"), "type")), "ByteLevel");
  ck_assert_int_eq(vocab_id(j, "\u00ff"), 4 + 255);
  json_decref(j);
  lt_tokenizer_free(t);

  /* char: WordLevel over the characters, <unk> for the others */
  const char *text = "b\xc3\xa9" "a"; /* "bea" with e-acute: code points 'a' < 'b' < U+00E9 */
  t = LT_NNP(lt_tokenizer_new_char(text, strlen(text)));
  j = to_json(t);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "model"), "type")), "WordLevel");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "model"), "unk_token")), "<unk>");
  ck_assert_int_eq(vocab_id(j, "a"), 4);
  ck_assert_int_eq(vocab_id(j, "\xc3\xa9"), 6);
  json_decref(j);
  lt_tokenizer_free(t);

  /* Two ids spelling "aaa" ((aa)a and a(aa)): libtensor's own JSON, saying why. */
  unsigned char buf[32 + 24 + 4] = {'L', 'T', 'T', 'K', 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 7, 1, 0, 0, 0, 0, 0, 0,
                                    3, 0, 0, 0, 0, 0, 0, 0};
  const uint32_t m[6] = {4 + 'a', 4 + 'a', 260, 4 + 'a', 4 + 'a', 260};
  for (int i = 0; i < 6; i++)
    for (int b = 0; b < 4; b++) buf[32 + 4 * i + b] = (unsigned char)(m[i] >> (8 * b));
  uint32_t crc = (uint32_t)crc32(0, buf, 56);
  for (int b = 0; b < 4; b++) buf[56 + b] = (unsigned char)(crc >> (8 * b));
  t = LT_NNP(lt_tokenizer_deserialize(buf, sizeof buf));
  j = to_json(t);
  ck_assert_str_eq(json_string_value(json_object_get(j, "format")), "libtensor-tokenizer");
  ck_assert(strstr(json_string_value(json_object_get(j, "why")), "same bytes"));
  json_t *vocab = json_object_get(j, "vocab");
  ck_assert_int_eq(json_array_size(vocab), 263);
  ck_assert_str_eq(json_string_value(json_array_get(vocab, 261)), "616161");
  ck_assert_str_eq(json_string_value(json_array_get(vocab, 262)), "616161");
  ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(json_object_get(j, "merges"), 2), 1)), 260);
  json_decref(j);

  /* errors */
  char *s = NULL;
  size_t n = 0;
  LT_EXPECT_ERR(lt_tokenizer_to_json(NULL, &s, &n), LT_ERR_NULL, "tok");
  LT_EXPECT_ERR(lt_tokenizer_to_json(t, NULL, &n), LT_ERR_NULL, "json");
  ck_assert_ptr_null(s);
  LT_EXPECT_ERR(lt_tokenizer_save_json(t, "/nonexistent-dir/tokenizer.json"), LT_ERR_IO, "/nonexistent-dir");
  lt_tokenizer_free(t);
}
END_TEST

/* A line of ids: every word must be a whole decimal integer, and the error
 * quotes the whole word ("nan", not "n"). */
START_TEST(test_parse_ids) {
  int64_t *ids = NULL, n = -1;
  const char *line = " 12\t0 -3\r\n 9223372036854775807 ";
  LT_OK_OR_FAIL(lt_tokenizer_parse_ids(line, strlen(line), &ids, &n));
  ck_assert_int_eq(n, 4);
  ck_assert(ids[0] == 12 && ids[1] == 0 && ids[2] == -3 && ids[3] == INT64_MAX);
  free(ids);
  LT_OK_OR_FAIL(lt_tokenizer_parse_ids("  \t", 3, &ids, &n));
  ck_assert_int_eq(n, 0);
  ck_assert_ptr_null(ids);
  static const struct {
    const char *line, *msg;
  } bad[] = {
      {"1 nan 2", "\"nan\" is not an id"},
      {"12x 3", "\"12x\" is not an id"},
      {"1 2 inf", "\"inf\" is not an id"},
      {"-", "\"-\" is not an id"},
      {"9223372036854775808", "\"9223372036854775808\" is not an id"},
      {"1.5", "\"1.5\" is not an id"},
      {"0x10", "\"0x10\" is not an id"},
      {"12345678901234567890123456789012345678901234567890", "\"1234567890123456789012345678901234567890...\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t *keep = (int64_t *)0x1;
    LT_EXPECT_ERR(lt_tokenizer_parse_ids(bad[i].line, strlen(bad[i].line), &keep, &n), LT_ERR_FORMAT, bad[i].msg);
    ck_assert(keep == (int64_t *)0x1);
  }
  lt_clear_error();
}
END_TEST

/* Start, end and padding ids: libtensor's own, and a tokenizer.json's by name. */
START_TEST(test_special_ids) {
  lt_tokenizer *b = LT_NNP(lt_tokenizer_new_byte());
  lt_special_ids s = lt_tokenizer_special_ids(b);
  ck_assert(s.bos == LT_TOKEN_BOS && s.eos == LT_TOKEN_EOS && s.pad == LT_TOKEN_PAD);
  lt_tokenizer_free(b);
  static const struct {
    const char *file;
    int64_t bos, eos, pad;
  } cases[] = {
      {"gpt2.json", 0, 0, 0},      /* <|endoftext|> is all three */
      {"llama2.json", 1, 2, 2},    /* <s>, </s>; no <pad>: the end */
      {"unigram.json", 1, 1, 0},   /* </s>, <pad>; no start token: the end */
      {"wordpiece.json", 2, 3, 0}, /* [CLS], [SEP], [PAD] */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/hf_tokenizers/%s", LT_TEST_DATA_DIR, cases[i].file);
    lt_tokenizer *t = lt_tokenizer_load_hf(path);
    ck_assert_msg(t != NULL, "%s", lt_last_error());
    s = lt_tokenizer_special_ids(t);
    ck_assert_msg(s.bos == cases[i].bos && s.eos == cases[i].eos && s.pad == cases[i].pad,
                  "%s: bos %lld eos %lld pad %lld", cases[i].file, (long long)s.bos, (long long)s.eos,
                  (long long)s.pad);
    lt_tokenizer_free(t);
  }
  s = lt_tokenizer_special_ids(NULL);
  ck_assert(s.bos == LT_TOKEN_BOS && s.eos == LT_TOKEN_EOS && s.pad == LT_TOKEN_PAD);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tokenizer");
  LT_TEST_CASE(s, "core", 300, test_utf8_valid, test_byte_tokenizer, test_decode_specials_and_range,
               test_char_tokenizer, test_bpe_hand_example, test_bpe_pieces,
               test_bpe_against_reference, test_bpe_round_trips_and_determinism, test_bpe_errors,
               test_serialize_round_trip, test_deserialize_corrupt, test_deserialize_fuzz,
               test_text_files, test_bpe_compresses_real_text, test_tokenizer_json, test_parse_ids,
               test_special_ids);
  return lt_test_run(s);
}
