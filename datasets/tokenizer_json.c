/*
 * datasets/tokenizer_json.c: a tokenizer written as tokenizer.json, the file
 * of Hugging Face tokenizers (https://huggingface.co/docs/tokenizers), so that
 * the rules travel with the model (docs/datasets.md "tokenizer.json"):
 *   byte  BPE model without merges, ByteLevel pre-tokenizer (GPT-2's byte
 *         alphabet), ids 4 + b;
 *   bpe   BPE model with libtensor's vocabulary and merges, the piece rule as
 *         a Split regex, then ByteLevel;
 *   char  WordLevel model over the characters, one piece per character,
 *         <unk> for the others;
 * the four special tokens as added tokens with their ids. A BPE vocabulary in
 * which two ids spell the same bytes (possible, rare) cannot be a
 * Hugging Face vocabulary (a map from string to id): it is written in
 * libtensor's own JSON ("format": "libtensor-tokenizer", documented in
 * docs/datasets.md) with the reason.
 *
 * An hf tokenizer (read from a tokenizer.json, hf_tokenizer.c) is written
 * back as the text it was read from.
 *
 * What this is not: a reader (hf_tokenizer.c reads Hugging Face's files;
 * python/libtensor reads this JSON), nor a general Hugging Face
 * exporter (no normalizers, post-processors or templates are written).
 * JSON through jansson.
 */
#include "datasets/datasets.h"
#include "datasets/tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pieces of docs/datasets.md "BPE" as a regex (Oniguruma and Python re):
 * an optional space and a run of letters (ASCII letters and every non-ASCII
 * character), digits or other symbols, at most 128 characters with the
 * space; a run of whitespace ending in a non-space; a run at the end of the
 * text; a run without its last space when a non-space follows. */
#define WS "[\\t-\\r ]"
#define PIECE_REGEX                                                          \
  " (?:[A-Za-z]|[^\\x00-\\x7F]){1,127}|(?:[A-Za-z]|[^\\x00-\\x7F]){1,128}"   \
  "| [0-9]{1,127}|[0-9]{1,128}"                                              \
  "| [\\x00-\\x08\\x0E-\\x1F!-/:-@\\[-`{-\\x7F]{1,127}"                       \
  "|[\\x00-\\x08\\x0E-\\x1F!-/:-@\\[-`{-\\x7F]{1,128}"                        \
  "|" WS "*[\\t-\\r](?!" WS ")|" WS "+(?![\\s\\S])|" WS "+(?=" WS "(?!" WS "))"

const char *lt_tokenizer_piece_regex(void) { return PIECE_REGEX; }

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
 * for 256, 257, ... in byte order. UTF-8 of byte b's character into out (NUL-terminated). */
static void byte_char(unsigned b, char out[4]) {
  unsigned cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++) n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE));
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp, out[1] = 0;
  } else { /* < 0x800 */
    out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
  }
}

static const char *const special_names[LT_TOKEN_NUM_SPECIAL] = {"<pad>", "<bos>", "<eos>", "<unk>"};

/* The bytes of id (an ordinary token): new string of *n bytes (free it). */
static char *token_bytes(const lt_tokenizer *tok, int64_t id, size_t *n) {
  char *s = NULL;
  return lt_tokenizer_decode(tok, &id, 1, 0, &s, n) == LT_OK ? s : NULL;
}

/* Byte-level spelling of bytes s[0..n): new string (free it). */
static char *byte_level(const char *s, size_t n) {
  char *out = malloc(2 * n + 1), *p = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    char c[4];
    byte_char((unsigned char)s[i], c);
    size_t k = strlen(c);
    memcpy(p, c, k);
    p += k;
  }
  *p = 0;
  return out;
}

static json_t *added_tokens(void) {
  json_t *a = json_array();
  for (int i = 0; a && i < LT_TOKEN_NUM_SPECIAL; i++)
    json_array_append_new(a, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", i, "content", special_names[i],
                                       "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
  return a;
}

static json_t *byte_level_pre(void) {
  return json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
}

/* libtensor's own JSON for what Hugging Face's cannot hold (see the file comment). */
static json_t *own_json(const lt_tokenizer *tok, const char *why) {
  json_t *vocab = json_array(), *merges = json_array();
  for (int i = 0; i < LT_TOKEN_NUM_SPECIAL; i++) json_array_append_new(vocab, json_string(special_names[i]));
  for (int64_t id = LT_TOKEN_NUM_SPECIAL; id < lt_tokenizer_vocab_size(tok); id++) {
    size_t n;
    char *b = token_bytes(tok, id, &n), *hex = b ? malloc(2 * n + 1) : NULL;
    if (!hex) {
      free(b);
      json_decref(vocab), json_decref(merges);
      return NULL;
    }
    for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)b[i]);
    hex[2 * n] = 0;
    json_array_append_new(vocab, json_string(hex));
    free(b), free(hex);
  }
  for (int64_t i = 0; i < lt_tokenizer_num_merges(tok); i++) {
    int64_t l, r;
    lt_tokenizer_merge(tok, i, &l, &r);
    json_array_append_new(merges, json_pack("[I,I]", (json_int_t)l, (json_int_t)r));
  }
  return json_pack("{s:s,s:i,s:s,s:s,s:o,s:o,s:{s:s,s:i,s:s}}", "format", "libtensor-tokenizer", "version", 1,
                   "kind", lt_tokenizer_kind_name(lt_tokenizer_get_kind(tok)), "why", why, "vocab", vocab,
                   "merges", merges, "pre_tokenizer", "rule", "libtensor-bpe-pieces", "max_piece_bytes",
                   LT_BPE_MAX_PIECE, "regex", PIECE_REGEX);
}

/* The Hugging Face document, or NULL with *dup set when two ids spell the same string. */
static json_t *hf_json(const lt_tokenizer *tok, bool *dup) {
  const lt_tokenizer_kind kind = lt_tokenizer_get_kind(tok);
  json_t *vocab = json_object();
  *dup = false;
  for (int i = 0; vocab && i < LT_TOKEN_NUM_SPECIAL; i++) json_object_set_new(vocab, special_names[i], json_integer(i));
  for (int64_t id = LT_TOKEN_NUM_SPECIAL; vocab && id < lt_tokenizer_vocab_size(tok); id++) {
    size_t n;
    char *b = token_bytes(tok, id, &n);
    char *key = b && kind != LT_TOKENIZER_CHAR ? byte_level(b, n) : b;
    if (key != b) free(b);
    if (!key) {
      json_decref(vocab);
      return NULL;
    }
    if (json_object_get(vocab, key)) *dup = true;
    json_object_set_new(vocab, key, json_integer((json_int_t)id));
    free(key);
  }
  if (!vocab || *dup) {
    json_decref(vocab);
    return NULL;
  }
  json_t *model, *pre, *dec;
  if (kind == LT_TOKENIZER_CHAR) {
    model = json_pack("{s:s,s:o,s:s}", "type", "WordLevel", "vocab", vocab, "unk_token", "<unk>");
    pre = json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split", "pattern", "Regex", "[\\s\\S]", "behavior", "Isolated",
                    "invert", 0);
    dec = json_pack("{s:s}", "type", "Fuse");
  } else {
    json_t *merges = json_array();
    for (int64_t i = 0; merges && i < lt_tokenizer_num_merges(tok); i++) {
      int64_t lr[2];
      lt_tokenizer_merge(tok, i, &lr[0], &lr[1]);
      char *s[2] = {NULL, NULL};
      size_t n[2];
      for (int k = 0; k < 2; k++) {
        char *b = token_bytes(tok, lr[k], &n[k]);
        s[k] = b ? byte_level(b, n[k]) : NULL;
        free(b);
      }
      size_t len = s[0] && s[1] ? strlen(s[0]) + strlen(s[1]) + 2 : 0;
      char *m = len ? malloc(len) : NULL;
      if (m) snprintf(m, len, "%s %s", s[0], s[1]);
      free(s[0]), free(s[1]);
      if (!m) {
        json_decref(merges), json_decref(vocab);
        return NULL;
      }
      json_array_append_new(merges, json_string(m));
      free(m);
    }
    model = json_pack("{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:o,s:o}", "type", "BPE", "dropout", "unk_token",
                      "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                      "vocab", vocab, "merges", merges);
    pre = kind == LT_TOKENIZER_BYTE
              ? byte_level_pre()
              : json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},o]}", "type", "Sequence", "pretokenizers", "type", "Split",
                          "pattern", "Regex", PIECE_REGEX, "behavior", "Isolated", "invert", 0, byte_level_pre());
    dec = json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex",
                    0);
  }
  return json_pack("{s:s,s:n,s:n,s:o,s:n,s:o,s:n,s:o,s:o}", "version", "1.0", "truncation", "padding",
                   "added_tokens", added_tokens(), "normalizer", "pre_tokenizer", pre, "post_processor", "decoder",
                   dec, "model", model);
}

lt_status lt_tokenizer_to_json(const lt_tokenizer *tok, char **json, size_t *len) {
  const char *op = "tokenizer_to_json";
  if (!tok) return lt__err_null(op, "tok");
  if (!json || !len) return lt__err(LT_ERR_NULL, "%s: json and len must not be NULL", op);
  if (tok->ops) { /* a kind of its own (hf): the file it was read from, as it was */
    size_t n;
    const char *src = tok->ops->source(tok->impl, &n);
    if (!(*json = malloc(n + 1))) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    memcpy(*json, src, n);
    (*json)[n] = '\0';
    *len = n;
    return LT_OK;
  }
  bool dup = false;
  json_t *doc = hf_json(tok, &dup);
  if (!doc && dup)
    doc = own_json(tok, "two ids spell the same bytes, and a Hugging Face vocabulary maps each string to one id");
  char *s = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
  json_decref(doc);
  if (!s) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  *json = s;
  *len = strlen(s);
  return LT_OK;
}

lt_status lt_tokenizer_save_json(const lt_tokenizer *tok, const char *path) {
  const char *op = "tokenizer_save_json";
  if (!path) return lt__err_null(op, "path");
  char *s;
  size_t n;
  lt_status st = lt_tokenizer_to_json(tok, &s, &n);
  if (st != LT_OK) return st;
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(s);
    return lt__err(LT_ERR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
  }
  bool ok = fwrite(s, 1, n, f) == n && fputc('\n', f) != EOF;
  ok = (fclose(f) == 0) && ok;
  free(s);
  if (!ok) return lt__err(LT_ERR_IO, "%s: writing '%s' failed", op, path);
  return LT_OK;
}
