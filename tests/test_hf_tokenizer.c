/*
 * tests/test_hf_tokenizer.c: the Hugging Face tokenizer.json reader
 * (datasets/hf_*.c): ids, byte offsets and decodes against the `tokenizers`
 * library on small tokenizers it trained (tests/data/hf_tokenizers, written by
 * make_fixtures.py there: byte-level BPE, SentencePiece-style BPE with byte
 * fallback, Unigram with Metaspace, BERT WordPiece with added tokens), the
 * hf kind behind lt_tokenizer (serialisation, tokenizer.json back, vocab
 * size, token ids), offsets of the other kinds, and crafted files: bad JSON,
 * wrong types, huge ids, duplicate keys, merges naming unknown tokens, deep
 * nesting, unsupported components, each refused with a message naming the
 * field. The full conformance suite over megabytes is tests/tokenizers/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/datasets.h"
#include "datasets/hf_tokenizer_internal.h" /* the Unicode answers, the regex rewriting */
#include "test_util.h"

#define DIR LT_TEST_DATA_DIR "/hf_tokenizers/"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  ck_assert(fread(b, 1, (size_t)sz, f) == (size_t)sz);
  fclose(f);
  b[sz] = '\0';
  *n = (size_t)sz;
  return b;
}

/* The tokenizer of tests/data/hf_tokenizers/NAME (returns new). */
static lt_tokenizer *load_fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", DIR, name);
  lt_tokenizer *t = lt_tokenizer_load_hf(path);
  ck_assert_msg(t != NULL, "%s: %s", path, lt_last_error());
  return t;
}

static size_t unhex(const char *h, size_t nh, char *out) {
  size_t k = 0;
  for (size_t i = 0; i + 1 < nh; i += 2) {
    unsigned v;
    sscanf(h + i, "%2x", &v);
    out[k++] = (char)v;
  }
  return k;
}

/* Splits line at tabs into at most 6 fields (in place). */
static int fields(char *line, char **f) {
  int n = 0;
  f[n++] = line;
  for (char *p = line; *p && n < 6; p++)
    if (*p == '\t') *p = '\0', f[n++] = p + 1;
  return n;
}

START_TEST(test_against_tokenizers) {
  size_t n;
  char *all = slurp(DIR "cases.tsv", &n);
  char loaded[64] = "";
  lt_tokenizer *tok = NULL;
  int cases = 0, bad = 0;
  for (char *line = all, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *f[6];
    ck_assert_int_eq(fields(line, f), 6);
    if (strcmp(f[0], loaded) != 0) {
      lt_tokenizer_free(tok);
      char path[512];
      snprintf(path, sizeof path, DIR "%s.json", f[0]);
      tok = lt_tokenizer_load_hf(path);
      ck_assert_msg(tok != NULL, "%s: %s", path, lt_last_error());
      ck_assert_int_eq(lt_tokenizer_get_kind(tok), LT_TOKENIZER_HF);
      snprintf(loaded, sizeof loaded, "%s", f[0]);
    }
    char text[512], want_dec[1024];
    size_t tn = unhex(f[1], strlen(f[1]), text), dn = unhex(f[5], strlen(f[5]), want_dec);
    unsigned flags = LT_ENCODE_PAD_TRUNCATE | (f[2][0] == '1' ? LT_ENCODE_ADD_SPECIAL : 0);
    int64_t *ids, *off, m;
    LT_OK_OR_FAIL(lt_tokenizer_encode_ex(tok, text, tn, flags, &ids, &off, &m));
    char got[4096] = "", gotoff[4096] = "";
    for (int64_t i = 0; i < m; i++) {
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? " " : "", (long long)ids[i]);
      snprintf(gotoff + strlen(gotoff), sizeof gotoff - strlen(gotoff), "%s%lld:%lld", i ? " " : "",
               (long long)off[2 * i], (long long)off[2 * i + 1]);
    }
    char *dec;
    size_t decn;
    LT_OK_OR_FAIL(lt_tokenizer_decode(tok, ids, m, 0, &dec, &decn));
    bool ok = strcmp(got, f[3]) == 0 && strcmp(gotoff, f[4]) == 0 && decn == dn && memcmp(dec, want_dec, dn) == 0;
    if (!ok && bad++ < 5)
      fprintf(stderr, "%s input %s special %s:\n  ids  want %s\n       got  %s\n  offs want %s\n       got  %s\n"
              "  decode want %.*s\n         got  %.*s\n", f[0], f[1], f[2], f[3], got, f[4], gotoff, (int)dn, want_dec,
              (int)decn, dec);
    cases++;
    free(ids);
    free(off);
    free(dec);
  }
  lt_tokenizer_free(tok);
  free(all);
  ck_assert_int_ge(cases, 60);
  ck_assert_msg(bad == 0, "%d of %d cases differ from tokenizers", bad, cases);
}
END_TEST

START_TEST(test_hf_kind) {
  size_t n;
  char *json = slurp(DIR "wordpiece.json", &n);
  lt_tokenizer *t = lt_tokenizer_from_hf_json(json, n);
  ck_assert_msg(t != NULL, "%s", lt_last_error());
  ck_assert_str_eq(lt_tokenizer_kind_name(lt_tokenizer_get_kind(t)), "hf");
  ck_assert_int_eq(lt_tokenizer_token_id(t, "[CLS]", 5), 2);
  ck_assert_int_eq(lt_tokenizer_token_id(t, "no-such-token", 13), -1);
  int64_t V = lt_tokenizer_vocab_size(t);
  ck_assert_int_gt(V, 100);
  /* lt_tokenizer_encode: no special tokens */
  int64_t *a, na, *b, nb;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, "the license", 11, &a, &na));
  LT_OK_OR_FAIL(lt_tokenizer_encode_ex(t, "the license", 11, LT_ENCODE_ADD_SPECIAL, &b, NULL, &nb));
  ck_assert_int_eq(nb, na + 2);
  ck_assert_int_eq(b[0], 2);
  ck_assert_int_eq(b[nb - 1], 3);
  /* serialise and back: the same tokenizer */
  void *buf;
  size_t size;
  LT_OK_OR_FAIL(lt_tokenizer_serialize(t, &buf, &size));
  lt_tokenizer *u = lt_tokenizer_deserialize(buf, size);
  ck_assert_msg(u != NULL, "%s", lt_last_error());
  ck_assert_int_eq(lt_tokenizer_vocab_size(u), V);
  int64_t *c, nc;
  LT_OK_OR_FAIL(lt_tokenizer_encode(u, "the license", 11, &c, &nc));
  ck_assert_int_eq(nc, na);
  ck_assert(memcmp(a, c, (size_t)na * sizeof *a) == 0);
  /* a flipped byte in the JSON is caught by the checksum */
  ((unsigned char *)buf)[40] ^= 1;
  ck_assert_ptr_null(lt_tokenizer_deserialize(buf, size));
  /* tokenizer.json: the text it was read from */
  char *back;
  size_t bn;
  LT_OK_OR_FAIL(lt_tokenizer_to_json(t, &back, &bn));
  ck_assert(bn == n && memcmp(back, json, n) == 0);
  /* ids outside the vocabulary */
  int64_t badid = V;
  char *text;
  size_t tl;
  LT_EXPECT_ERR(lt_tokenizer_decode(t, &badid, 1, 0, &text, &tl), LT_ERR_INDEX, "outside");
  free(a), free(b), free(c), free(buf), free(back), free(json);
  lt_tokenizer_free(u);
  lt_tokenizer_free(t);
}
END_TEST

START_TEST(test_offsets_other_kinds) {
  lt_tokenizer *t = lt_tokenizer_new_byte();
  int64_t *ids, *off, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode_ex(t, "ab", 2, LT_ENCODE_ADD_SPECIAL, &ids, &off, &n));
  ck_assert_int_eq(n, 2);
  ck_assert(off[0] == 0 && off[1] == 1 && off[2] == 1 && off[3] == 2);
  free(ids), free(off);
  lt_tokenizer_free(t);
  const char *txt = "h\xC3\xA9llo h\xC3\xA9llo h\xC3\xA9llo";
  t = lt_tokenizer_train_bpe(txt, strlen(txt), &(lt_bpe_opts){3, 0, 2});
  ck_assert(t != NULL);
  LT_OK_OR_FAIL(lt_tokenizer_encode_ex(t, txt, strlen(txt), 0, &ids, &off, &n));
  ck_assert_int_eq(off[0], 0);
  for (int64_t i = 1; i < n; i++) ck_assert_int_eq(off[2 * i], off[2 * i - 1]);
  ck_assert_int_eq(off[2 * n - 1], (int64_t)strlen(txt));
  free(ids), free(off);
  lt_tokenizer_free(t);
}
END_TEST

/* A minimal WordPiece file with one component replaced. */
#define WP_MODEL "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"a\": 1}}"

START_TEST(test_crafted_files) {
  static const struct {
    const char *json, *msg;
  } cases[] = {
    {"", "not valid JSON"},
    {"{", "not valid JSON"},
    {"[1, 2]", "top level must be an object"},
    {"{\"model\": 3}", "model is an integer"},
    {"{\"added_tokens\": []}", "no \"model\""},
    {"{\"model\": {\"vocab\": {}}}", "no field \"type\""},
    {"{\"model\": {\"type\": \"Mystery\", \"vocab\": {}}}", "the model \"Mystery\" is not supported"},
    {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"a\": 16777216}}}",
     "must be an id in [0, 16777216)"},
    {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": -1}}}", "must be an id"},
    {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": \"0\"}}}", "must be an id"},
    {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"a\": 0, \"a\": 1}}}",
     "duplicate object key"},
    {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[ZZZ]\", \"vocab\": {\"a\": 0}}}",
     "unk_token \"[ZZZ]\" is not in the vocabulary"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a c\"]}}",
     "merges[0] names \"c\", which is not in the vocabulary"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
     "merges[0] makes \"ab\", which is not in the vocabulary"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"ab\"]}}",
     "two tokens separated by one space"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}", "must be \"a b\" or"},
    {"{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, \"merges\": []}}", "dropout"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"surprise\": 1}}",
     "the field \"surprise\", which this reader does not support"},
    {"{\"model\": {\"type\": \"Unigram\", \"unk_id\": 5, \"vocab\": [[\"a\", -1.0]]}}", "unk_id is 5"},
    {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}", "vocab[0] must be [piece, score]"},
    {"{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}, " WP_MODEL "}",
     "normalizer: the normalizer \"Precompiled\" is not supported"},
    {"{\"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}, " WP_MODEL "}",
     "the pre-tokenizer \"UnicodeScripts\" is not supported"},
    {"{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Whitespace\"}, {\"type\": \"CharDelimiterSplit\", \"delimiter\": \"x\"}]}, " WP_MODEL "}",
     "pre_tokenizer.pretokenizers[1]: the pre-tokenizer \"CharDelimiterSplit\""},
    {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, " WP_MODEL "}",
     "the regex does not compile"},
    {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}, " WP_MODEL "}",
     "behavior is \"Sideways\""},
    {"{\"decoder\": {\"type\": \"CTC\"}, " WP_MODEL "}", "the decoder \"CTC\" is not supported"},
    {"{\"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 99999999], \"cls\": [\"[CLS]\", 1]}, " WP_MODEL "}",
     "sep must be [token, id]"},
    {"{\"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 7], \"cls\": [\"[CLS]\", 1]}, " WP_MODEL "}",
     "post_processor adds id 7, outside the vocabulary"},
    {"{\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {}}, " WP_MODEL "}",
     "names the special token \"[CLS]\""},
    {"{\"added_tokens\": [{\"id\": 1, \"content\": \"\"}], " WP_MODEL "}", "added_tokens[0].content is empty"},
    {"{\"added_tokens\": [{\"id\": 123456789, \"content\": \"x\"}], " WP_MODEL "}", "added_tokens[0].id is 123456789"},
    {"{\"added_tokens\": {\"id\": 1}, " WP_MODEL "}", "added_tokens must be an array"},
    {"{\"truncation\": {\"max_length\": 8, \"strategy\": \"OnlySecond\"}, " WP_MODEL "}", "OnlySecond"},
    {"{\"padding\": {\"strategy\": \"Sometimes\"}, " WP_MODEL "}", "padding.strategy"},
    {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"extra\": 1, " WP_MODEL "}", "the field \"extra\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lt_tokenizer *t = lt_tokenizer_from_hf_json(cases[i].json, strlen(cases[i].json));
    ck_assert_msg(t == NULL, "case %zu was accepted: %s", i, cases[i].json);
    ck_assert_int_eq(lt_last_status(), LT_ERR_FORMAT);
    ck_assert_msg(strstr(lt_last_error(), cases[i].msg) != NULL, "case %zu: message \"%s\" lacks \"%s\"", i,
                  lt_last_error(), cases[i].msg);
  }
  /* deep nesting: Sequence in Sequence ... */
  char deep[8192] = "{\"normalizer\": ";
  for (int d = 0; d < 40; d++) strcat(deep, "{\"type\": \"Sequence\", \"normalizers\": [");
  strcat(deep, "{\"type\": \"Lowercase\"}");
  for (int d = 0; d < 40; d++) strcat(deep, "]}");
  strcat(deep, ", " WP_MODEL "}");
  ck_assert_ptr_null(lt_tokenizer_from_hf_json(deep, strlen(deep)));
  ck_assert(strstr(lt_last_error(), "nested deeper than 16") != NULL);
  /* and a file that does not exist */
  ck_assert_ptr_null(lt_tokenizer_load_hf("/nonexistent/tokenizer.json"));
  ck_assert_int_eq(lt_last_status(), LT_ERR_IO);
  /* the minimal file itself is fine; a word it cannot spell becomes [UNK] */
  const char *ok = "{" WP_MODEL "}";
  lt_tokenizer *t = lt_tokenizer_from_hf_json(ok, strlen(ok));
  ck_assert_msg(t != NULL, "%s", lt_last_error());
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, "ab", 2, &ids, &n));
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(ids[0], 0);
  free(ids);
  lt_tokenizer_free(t);
}
END_TEST

/* Hostile inputs stay linear: a long run of one character, and a long word. */
START_TEST(test_long_inputs) {
  lt_tokenizer *t = load_fixture("gpt2.json");
  size_t len = 1 << 20;
  char *s = malloc(len);
  memset(s, 'a', len);
  int64_t *ids, m;
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, s, len, &ids, &m));
  ck_assert_int_gt(m, 0);
  free(ids);
  for (size_t i = 0; i < len; i++) s[i] = (char)(i % 7 == 0 ? ' ' : 0x80 | (i & 0x3F)); /* invalid UTF-8 */
  LT_OK_OR_FAIL(lt_tokenizer_encode(t, s, len, &ids, &m));
  free(ids);
  free(s);
  lt_tokenizer_free(t);
}
END_TEST

/* Encodes text with json and checks ids and byte offsets (values from the
 * tokenizers library 0.23.3, computed by the Python lines beside each case). */
static void expect_encoding(const char *json, size_t nj, const char *text, size_t len, const int64_t *want_ids,
                            const int64_t (*want_off)[2], int64_t want_n) {
  lt_tokenizer *t = lt_tokenizer_from_hf_json(json, nj);
  ck_assert_msg(t != NULL, "%s", lt_last_error());
  int64_t *ids, *off, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode_ex(t, text, len, 0, &ids, &off, &n));
  ck_assert_int_eq(n, want_n);
  for (int64_t i = 0; i < n; i++) {
    if (want_ids) ck_assert_msg(ids[i] == want_ids[i], "token %lld: id %lld, want %lld", (long long)i,
                                (long long)ids[i], (long long)want_ids[i]);
    if (want_off)
      ck_assert_msg(off[2 * i] == want_off[i][0] && off[2 * i + 1] == want_off[i][1],
                    "token %lld: offsets (%lld, %lld), want (%lld, %lld)", (long long)i, (long long)off[2 * i],
                    (long long)off[2 * i + 1], (long long)want_off[i][0], (long long)want_off[i][1]);
  }
  free(ids);
  free(off);
  lt_tokenizer_free(t);
}

/* Unigram vocabulary entries "\u0000" are read (JSON_ALLOW_NUL, lengths
 * kept); a field that cannot hold a NUL refuses it by name, and so does an
 * object key (jansson reads none). */
START_TEST(test_nul_entries) {
  /* Tokenizer(Unigram([("<unk>", 0), ("\0", -1), ("a", -2), ("b", -2)], unk_id=0)).encode("a\0b") */
  static const char uni[] = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": false, \"vocab\": "
                            "[[\"<unk>\", 0.0], [\"\\u0000\", -1.0], [\"a\", -2.0], [\"b\", -2.0]]}}";
  expect_encoding(uni, sizeof uni - 1, "a\0b", 3, (const int64_t[]){2, 1, 3},
                  (const int64_t[][2]){{0, 1}, {1, 2}, {2, 3}}, 3);
  lt_tokenizer *t = lt_tokenizer_from_hf_json(uni, sizeof uni - 1);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(lt_tokenizer_token_id(t, "\0", 1), 1);
  char *text;
  size_t len;
  LT_OK_OR_FAIL(lt_tokenizer_decode(t, (const int64_t[]){2, 1, 3}, 3, 0, &text, &len));
  ck_assert_uint_eq(len, 5); /* no decoder: the tokens joined with spaces, as decode([2, 1, 3]) */
  ck_assert(memcmp(text, "a \0 b", 5) == 0);
  free(text);
  lt_tokenizer_free(t);
  static const struct {
    const char *json, *msg;
  } bad[] = {
    {"{\"normalizer\": {\"type\": \"Lower\\u0000case\"}, " WP_MODEL "}", "normalizer.type contains \\u0000"},
    {"{\"normalizer\": {\"type\": \"Lowercase\", \"type\\u0000\": 1}, " WP_MODEL "}", "NUL byte in object key"},
    {"{\"padding\": {\"strategy\": \"BatchLongest\", \"direction\": \"Right\\u0000\"}, " WP_MODEL "}",
     "padding.direction contains \\u0000"},
    /* jansson (2.14) reads no NUL in an object key: a BPE, WordPiece or WordLevel vocabulary cannot hold one */
    {"{\"model\": {\"type\": \"WordLevel\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"a\\u0000b\": 1}}}",
     "NUL byte in object key not supported"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(lt_tokenizer_from_hf_json(bad[i].json, strlen(bad[i].json)) == NULL, "case %zu accepted", i);
    ck_assert_msg(strstr(lt_last_error(), bad[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, lt_last_error(),
                  bad[i].msg);
  }
}
END_TEST

/* Normal forms align as the library's transform does: marks that are
 * reordered or composed keep the ranges of the positions they land on.
 * Values: a WordLevel tokenizer with the normalizer and Split(Regex("."),
 * "isolated"), encode("a\u0301\u0328 o\u031b\u0301\u0323 x\u0334\u0301\u0316").offsets, as bytes. */
START_TEST(test_normal_form_offsets) {
  static const char text[] = "a\xcc\x81\xcc\xa8 o\xcc\x9b\xcc\x81\xcc\xa3 x\xcc\xb4\xcc\x81\xcc\x96";
  static const char *const forms[] = {"NFC", "NFD", "NFKC"};
  static const int64_t composed[][2] = {{0, 1}, {3, 5}, {5, 6}, {6, 7}, {11, 13}, {13, 14}, {14, 15}, {15, 17},
                                        {17, 19}, {19, 21}};
  static const int64_t decomposed[][2] = {{0, 1}, {1, 3}, {3, 5}, {5, 6}, {6, 7}, {7, 9}, {9, 11}, {11, 13},
                                          {13, 14}, {14, 15}, {15, 17}, {17, 19}, {19, 21}};
  for (int f = 0; f < 3; f++) {
    char json[512];
    int nj = snprintf(json, sizeof json,
                      "{\"normalizer\": {\"type\": \"%s\"}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                      "{\"Regex\": \".\"}, \"behavior\": \"Isolated\", \"invert\": false}, \"model\": {\"type\": "
                      "\"WordLevel\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0}}}", forms[f]);
    bool nfd = f == 1;
    expect_encoding(json, (size_t)nj, text, sizeof text - 1, NULL, nfd ? decomposed : composed, nfd ? 13 : 10);
  }
}
END_TEST

/* Where the library's Unicode tables differ from libutf8proc's and PCRE2's
 * (datasets/hf_unicode_table.h), the library's answer wins. */
static bool rx_matches(const char *pattern, const char *subject) {
  pcre2_code *re = lt__hf_regex(pattern, strlen(pattern), "test");
  ck_assert_msg(re != NULL, "%s", lt_last_error());
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
  int rc = pcre2_match(re, (PCRE2_SPTR)subject, strlen(subject), 0, 0, md, NULL);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

START_TEST(test_unicode_versions) {
  ck_assert(!lt__uc_is_other(0x0890));        /* Cf since Unicode 14; unassigned in unicode_categories' 8.0 */
  ck_assert(lt__uc_is_other(0x200B));         /* Cf in both */
  ck_assert(!lt__uc_is_bert_punct(0x2E43));   /* Po since Unicode 9 */
  ck_assert(lt__uc_is_bert_punct(0x166D));    /* Po in Unicode 8, So since 12 */
  ck_assert(!lt__uc_is_mn(0x0AFA));           /* Mn since Unicode 10 */
  ck_assert(lt__uc_is_numeric(0x116D0));      /* Nd of Unicode 16 (Rust's std) */
  ck_assert(lt__uc_is_word(0x1E4D0));         /* a letter of Unicode 15 (Oniguruma) */
  ck_assert(!lt__uc_norm_known(0x07FD));      /* a mark the library's normalizer does not know */
  ck_assert(lt__uc_norm_known(0x0301));
  lt__ntext t = {0};
  ck_assert(lt__uc_lower(&t, 0xA7CB, 0, 3));  /* Unicode 16: U+A7CB lowercases to U+0264 */
  ck_assert_uint_eq(t.n, 2);
  ck_assert(memcmp(t.s, "\xc9\xa4", 2) == 0);
  lt__ntext_free(&t);
  /* regexes: U+1E4D0 is a letter, U+180E is not \s (it is PCRE2's), U+1E4D0 is not unassigned */
  ck_assert(rx_matches("^\\p{L}$", "\xf0\x9e\x93\x90"));
  ck_assert(rx_matches("^[\\p{L}]$", "\xf0\x9e\x93\x90"));
  ck_assert(!rx_matches("^[^\\s\\p{L}\\p{N}]$", "\xf0\x9e\x93\x90"));
  ck_assert(!rx_matches("^\\P{L}$", "\xf0\x9e\x93\x90"));
  ck_assert(!rx_matches("^\\p{Cn}$", "\xf0\x9e\x93\x90"));
  ck_assert(rx_matches("^\\p{Cn}$", "\xf0\x9e\x93\xba")); /* U+1E4FA: still unassigned */
  ck_assert(!rx_matches("^\\s$", "\xe1\xa0\x8e"));
  ck_assert(!rx_matches("^[\\s]$", "\xe1\xa0\x8e"));
  ck_assert(rx_matches("^[^\\s\\p{L}\\p{N}]$", "\xe1\xa0\x8e"));
  ck_assert(rx_matches("^\\S$", "\xe1\xa0\x8e"));
  ck_assert(rx_matches("^[\\S]$", "\xe1\xa0\x8e"));
  ck_assert(rx_matches("^\\s+$", " \t\xe3\x80\x80"));
  ck_assert(rx_matches("^\\w$", "\xf0\x9e\x93\x90"));
  ck_assert(rx_matches("^\\d$", "\xf0\x91\x9b\x90")); /* U+116D0 */
  ck_assert(rx_matches("^\\\\p\\{L\\}$", "\\p{L}"));   /* an escaped backslash stays one */
}
END_TEST

/* The batch encoder: the same ids as one text at a time, on one thread and
 * on two (the result does not depend on the thread count); the first failing
 * text named. */
START_TEST(test_encode_batch) {
  lt_tokenizer *t = load_fixture("gpt2.json");
  enum { N = 500 };
  static char buf[N][96];
  const char *texts[N];
  size_t lens[N];
  for (int i = 0; i < N; i++) { /* texts of every length 0..95, mixed scripts */
    static const char *const words[] = {"the ", "caf\xc3\xa9 ", "\xe6\x97\xa5\xe6\x9c\xac ", "123 ", "  ", "x\n",
                                        "\xf0\x9f\x91\x8d", "don't "};
    size_t k = 0;
    for (int w = 0; k + 8 < (size_t)(i % 96); w++) {
      const char *p = words[(i * 7 + w * 3) % 8];
      memcpy(buf[i] + k, p, strlen(p)), k += strlen(p);
    }
    texts[i] = buf[i], lens[i] = k;
  }
  int64_t starts[N + 1], starts2[N + 1];
  int64_t *all = NULL, *all2 = NULL;
  const int before = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  LT_OK_OR_FAIL(lt_tokenizer_encode_batch(t, texts, lens, N, LT_ENCODE_ADD_SPECIAL, &all, starts));
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  LT_OK_OR_FAIL(lt_tokenizer_encode_batch(t, texts, lens, N, LT_ENCODE_ADD_SPECIAL, &all2, starts2));
  ck_assert(memcmp(starts, starts2, sizeof starts) == 0);
  ck_assert(memcmp(all, all2, (size_t)starts[N] * sizeof *all) == 0);
  ck_assert_int_eq(starts[0], 0);
  for (int i = 0; i < N; i++) {
    int64_t *ids, n;
    LT_OK_OR_FAIL(lt_tokenizer_encode_ex(t, texts[i], lens[i], LT_ENCODE_ADD_SPECIAL, &ids, NULL, &n));
    ck_assert_int_eq(starts[i + 1] - starts[i], n);
    if (n) ck_assert(memcmp(all + starts[i], ids, (size_t)n * sizeof *ids) == 0);
    free(ids);
  }
  free(all), free(all2);
  /* no texts; errors leave the outputs alone */
  int64_t *none = (int64_t *)0x1;
  LT_OK_OR_FAIL(lt_tokenizer_encode_batch(t, NULL, NULL, 0, 0, &none, starts));
  ck_assert_ptr_null(none);
  ck_assert_int_eq(starts[0], 0);
  texts[300] = NULL, lens[300] = 3, texts[400] = NULL, lens[400] = 3;
  int64_t *keep = (int64_t *)0x1;
  starts[0] = 77;
  LT_EXPECT_ERR(lt_tokenizer_encode_batch(t, texts, lens, N, 0, &keep, starts), LT_ERR_NULL, "text 300: ");
  ck_assert(keep == (int64_t *)0x1 && starts[0] == 77);
  LT_EXPECT_ERR(lt_tokenizer_encode_batch(t, texts, lens, -1, 0, &keep, starts), LT_ERR_INVALID, "n is -1");
  LT_EXPECT_ERR(lt_tokenizer_encode_batch(NULL, texts, lens, 1, 0, &keep, starts), LT_ERR_NULL, "tok");
  lt_clear_error();
  LT_OK_OR_FAIL(lt_set_num_threads(before));
  lt_tokenizer_free(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf_tokenizer");
  LT_TEST_CASE(s, "core", 300, test_against_tokenizers, test_hf_kind, test_offsets_other_kinds, test_crafted_files,
               test_long_inputs, test_nul_entries, test_normal_form_offsets, test_unicode_versions,
               test_encode_batch);
  return lt_test_run(s);
}
