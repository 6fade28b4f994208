/*
 * fuzz/fuzz_hf_tokenizer.c: the Hugging Face tokenizer.json reader
 * (datasets/hf_*.c) on arbitrary bytes. The first input byte chooses what the
 * rest (the payload) is:
 *   0  a tokenizer.json (lt_tokenizer_from_hf_json), then exercised on a few
 *      fixed texts;
 *   1  text (raw bytes, any UTF-8 or not) for a built-in tokenizer that uses
 *      most components: a byte-level BPE with added tokens, a Sequence of
 *      normalizers, a Split regex, TemplateProcessing, padding, truncation;
 *   2  the same for a WordPiece with BertNormalizer and BertPreTokenizer;
 *   3  the same for a Unigram with Metaspace and byte fallback.
 *
 * Checked promises (docs/datasets.md): a refused file has a message; ids are
 * in [0, vocab size); offsets are within the text and ordered start <= end;
 * decoding any in-range ids works; serialising and deserialising gives a
 * tokenizer that encodes the same; tokenizer.json comes back as read.
 */
#include <string.h>

#include "datasets/datasets.h"
#include "fuzz_util.h"

enum { MAX_TEXT = 1 << 16 };

static const char BPE_JSON[] =
    "{\"version\": \"1.0\", \"truncation\": {\"max_length\": 64, \"strategy\": \"LongestFirst\", \"stride\": 0, "
    "\"direction\": \"Left\"}, \"padding\": {\"strategy\": \"BatchLongest\", \"direction\": \"Right\", "
    "\"pad_to_multiple_of\": 8, \"pad_id\": 0, \"pad_type_id\": 0, \"pad_token\": \"<pad>\"},"
    "\"added_tokens\": [{\"id\": 0, \"content\": \"<pad>\", \"special\": true, \"normalized\": false},"
    " {\"id\": 1, \"content\": \"<s>\", \"special\": true, \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
    " {\"id\": 2, \"content\": \"ab\", \"single_word\": true, \"normalized\": true}],"
    "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": \"Lowercase\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"}, {\"type\": \"Strip\"}]},"
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
    " \"\\\\p{N}{1,3}|\\\\w+|[^\\\\w\\\\s]+|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
    " {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": false}]},"
    "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", \"trim_offsets\": true},"
    " {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
    " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\","
    " \"ids\": [1], \"tokens\": [\"<s>\"]}}}]},"
    "\"decoder\": {\"type\": \"ByteLevel\"},"
    "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {\"<pad>\": 0, \"<s>\": 1, \"ab\": 2, \"a\": 3,"
    " \"b\": 4, \"\\u0120\": 5, \"\\u0120a\": 6, \"\\u0120ab\": 7, \"c\": 8, \"1\": 9, \"11\": 10, \"\\u00c3\": 11},"
    " \"merges\": [\"\\u0120 a\", [\"\\u0120a\", \"b\"], \"1 1\"]}}";

static const char WORDPIECE_JSON[] =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"[UNK]\", \"special\": true}, {\"id\": 1, \"content\": \"[CLS]\","
    " \"special\": true}, {\"id\": 2, \"content\": \"[SEP]\", \"special\": true}],"
    "\"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, \"handle_chinese_chars\": true,"
    " \"strip_accents\": null, \"lowercase\": true},"
    "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},"
    "\"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 2], \"cls\": [\"[CLS]\", 1]},"
    "\"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true},"
    "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"max_input_chars_per_word\": 20,"
    " \"vocab\": {\"[UNK]\": 0, \"[CLS]\": 1, \"[SEP]\": 2, \"a\": 3, \"##b\": 4, \"ab\": 5, \"##a\": 6, \".\": 7,"
    " \"\\u4e2d\": 8}}}";

static const char UNIGRAM_JSON[] =
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": \"StripAccents\"},"
    " {\"type\": \"Prepend\", \"prepend\": \"x\"}]},"
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\", \"replacement\":"
    " \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}, {\"type\": \"Digits\", \"individual_digits\": true},"
    " {\"type\": \"Punctuation\", \"behavior\": \"Contiguous\"}]},"
    "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Metaspace\","
    " \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}, {\"type\": \"Strip\", \"content\":"
    " \" \", \"start\": 1, \"stop\": 1}, {\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"A\"}]},"
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": [[\"<unk>\", 0.0],"
    " [\"\\u2581\", -1.0], [\"a\", -2.0], [\"ab\", -2.5], [\"b\", -3.0], [\"<0x41>\", -5.0], [\"<0xC3>\", -5.0],"
    " [\"\\u2581a\", -1.5], [\"1\", -1.0]]}}";

static void exercise(const lt_tokenizer *tok, const char *text, size_t len) {
  int64_t vocab = lt_tokenizer_vocab_size(tok);
  FUZZ_ASSERT(vocab >= 1, "vocab size %lld", (long long)vocab);
  for (unsigned flags = 0; flags < 4; flags++) {
    int64_t *ids = NULL, *off = NULL, n = -1;
    lt_status s = fuzz_check_status(lt_tokenizer_encode_ex(tok, text, len, flags, &ids, &off, &n), "encode");
    if (s != LT_OK) continue; /* a model without unk meeting an unknown word, for instance: with a message */
    for (int64_t i = 0; i < n; i++) {
      FUZZ_ASSERT(ids[i] >= 0 && ids[i] < vocab, "encode made id %lld (vocab %lld)", (long long)ids[i],
                  (long long)vocab);
      FUZZ_ASSERT(off[2 * i] >= 0 && off[2 * i] <= off[2 * i + 1] && off[2 * i + 1] <= (int64_t)len,
                  "token %lld has offsets %lld:%lld in a text of %zu bytes", (long long)i, (long long)off[2 * i],
                  (long long)off[2 * i + 1], len);
    }
    char *back = NULL;
    size_t blen = 0;
    for (unsigned df = 0; df < 2; df++) {
      FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_decode(tok, ids, n, df ? LT_DECODE_SHOW_SPECIAL : 0, &back, &blen),
                                    "decode") == LT_OK, "decode of encode failed: %s", lt_last_error());
      FUZZ_ASSERT(back[blen] == '\0', "decode's text is not NUL-terminated");
      free(back);
    }
    free(ids);
    free(off);
  }
  /* The payload's bytes as ids, folded into the vocabulary. */
  int64_t ids[64];
  int64_t n = 0;
  for (size_t i = 0; i + 1 < len && n < 64; i += 2) ids[n++] = ((unsigned char)text[i] << 8 | (unsigned char)text[i + 1]) % vocab;
  char *back = NULL;
  size_t blen = 0;
  FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_decode(tok, ids, n, 0, &back, &blen), "decode ids") == LT_OK,
              "decode of in-range ids failed: %s", lt_last_error());
  free(back);
}

static void round_trip(const lt_tokenizer *tok, const char *text, size_t len) {
  void *buf = NULL;
  size_t size = 0;
  FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_serialize(tok, &buf, &size), "serialize") == LT_OK, "serialize: %s",
              lt_last_error());
  lt_tokenizer *u = lt_tokenizer_deserialize(buf, size);
  FUZZ_ASSERT(u != NULL, "deserialize of serialize failed: %s", lt_last_error());
  int64_t *a = NULL, *b = NULL, na = 0, nb = 0;
  lt_status sa = lt_tokenizer_encode(tok, text, len, &a, &na), sb = lt_tokenizer_encode(u, text, len, &b, &nb);
  FUZZ_ASSERT(sa == sb, "the copy encodes with another status");
  if (sa == LT_OK) FUZZ_ASSERT(na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a)), "the copy encodes differently");
  free(a), free(b), free(buf);
  lt_tokenizer_free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  lt_init();
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  if (data[0] % 4 == 0) {
    lt_tokenizer *t = lt_tokenizer_from_hf_json(p, n);
    if (!t) {
      FUZZ_ASSERT(lt_last_status() != LT_OK && lt_last_error()[0], "a refused file without a message");
      return 0;
    }
    char *json = NULL;
    size_t jn = 0;
    FUZZ_ASSERT(lt_tokenizer_to_json(t, &json, &jn) == LT_OK && jn == n && !memcmp(json, p, n),
                "tokenizer.json does not come back as read");
    free(json);
    static const char *const texts[] = {"", "Hello, world! 123 4567", "  a  ab abc\t\n", "h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87",
                                        "\xff\xfe\xe2\x82", "<s>[CLS]<pad></s>"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) exercise(t, texts[i], strlen(texts[i]));
    round_trip(t, "Hello, world!", 13);
    lt_tokenizer_free(t);
    return 0;
  }
  static lt_tokenizer *builtin[3];
  static const char *const src[3] = {BPE_JSON, WORDPIECE_JSON, UNIGRAM_JSON};
  int k = data[0] % 4 - 1;
  if (!builtin[k]) {
    builtin[k] = lt_tokenizer_from_hf_json(src[k], strlen(src[k]));
    FUZZ_ASSERT(builtin[k] != NULL, "the built-in tokenizer %d: %s", k, lt_last_error());
  }
  if (n > MAX_TEXT) n = MAX_TEXT;
  exercise(builtin[k], p, n);
  if (n < 256) round_trip(builtin[k], p, n);
  return 0;
}
