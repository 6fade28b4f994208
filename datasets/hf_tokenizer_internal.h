/*
 * datasets/hf_tokenizer_internal.h: the pieces of the Hugging Face tokenizer
 * (a reader of the `tokenizers` library's tokenizer.json), shared by its files.
 * Not installed.
 *
 *   hf_text.c           text with alignment (each byte knows the original
 *                       bytes it came from), splits, token lists, a string
 *                       map, Unicode properties (libutf8proc), JSON field
 *                       readers that name the field in their errors
 *   hf_normalizers.c    normalizers
 *   hf_pretokenizers.c  pre-tokenizers (regexes through PCRE2)
 *   hf_models.c         BPE, WordPiece, WordLevel, Unigram
 *   hf_postdecode.c     post-processors and decoders
 *   hf_tokenizer.c      the JSON loader, added tokens, the pipeline, padding
 *                       and truncation, and the lt_tokenizer kind "hf"
 *
 * The pipeline is the library's (tokenizers/src/tokenizer/mod.rs): added
 * tokens are cut out of the raw text, the rest is normalized, pre-tokenized
 * into splits, each split tokenized by the model, then truncated,
 * post-processed (special tokens) and padded. Offsets are byte offsets into
 * the text as given.
 *
 * Every component a file may name but this reader does not implement is
 * refused at load with an error naming it and the field: no component is
 * ever approximated.
 */
#ifndef LT_DATASETS_HF_TOKENIZER_INTERNAL_H
#define LT_DATASETS_HF_TOKENIZER_INTERNAL_H

#include "datasets/datasets.h"
#include "datasets/tokenizer_internal.h" /* lt__pairmap */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Limits a tokenizer.json may reach (checked before allocating). */
#define LT__HF_MAX_VOCAB ((int64_t)1 << 24)     /* ids in [0, 2^24) */
#define LT__HF_MAX_TOKEN_BYTES 4096              /* one vocabulary entry */
#define LT__HF_MAX_DEPTH 16                      /* nesting of Sequence components */
/* the file itself: LT__HF_MAX_JSON_BYTES, datasets/tokenizer_internal.h */

/* ---- growable arrays ------------------------------------------------------ */
/* Grows *pp (an array of *cap elements of sz bytes) to hold at least need. */
bool lt__hf_grow(void *pp, size_t *cap, size_t need, size_t sz);

/* ---- text with alignment -------------------------------------------------- */
/* UTF-8 text where byte i came from the original bytes [os[i], oe[i]) (every
 * byte of a character carries the range of the original character(s) it came
 * from; inserted characters carry the range of their neighbour). */
typedef struct {
  char *s;
  size_t *os, *oe;
  size_t n, cap;
} lt__ntext;

void lt__ntext_free(lt__ntext *t);
/* Appends bytes b[0..k) all aligned to [os, oe). False when out of memory. */
bool lt__ntext_put(lt__ntext *t, const char *b, size_t k, size_t os, size_t oe);
bool lt__ntext_put_cp(lt__ntext *t, uint32_t cp, size_t os, size_t oe);
/* Appends src's bytes [a, b) with their alignment. */
bool lt__ntext_put_range(lt__ntext *t, const lt__ntext *src, size_t a, size_t b);
/* The code point at byte i of t (valid UTF-8 by construction); *len its bytes. */
uint32_t lt__ntext_cp(const lt__ntext *t, size_t i, int *len);
/* The text from raw input bytes: every ill-formed sequence (its maximal
 * subpart, as Python's errors="replace") becomes U+FFFD aligned to those
 * bytes. */
bool lt__ntext_from_raw(lt__ntext *t, const char *s, size_t n);

/* A split of the text: its content and, once known, its tokens. */
typedef struct {
  int64_t id, start, end; /* start, end: byte offsets into the original text */
  int32_t lead, trail;    /* an added token's leading / trailing whitespace characters as matched; -1: see its string */
} lt__token;

typedef struct {
  lt__token *v;
  size_t n, cap;
} lt__tokens;
bool lt__tokens_push(lt__tokens *t, int64_t id, int64_t start, int64_t end);

typedef struct {
  lt__ntext t;
  int64_t added_id; /* >= 0: this split is an added token (not normalized or tokenized further) */
} lt__split;

typedef struct {
  lt__split *v;
  size_t n, cap;
} lt__splits;
void lt__splits_free(lt__splits *s);
/* Appends the bytes [a, b) of src as a new split (takes nothing from src). */
bool lt__splits_push_range(lt__splits *s, const lt__ntext *src, size_t a, size_t b, int64_t added_id);
/* Appends t as a new split, taking ownership of its buffers (t is zeroed). */
bool lt__splits_push_take(lt__splits *s, lt__ntext *t, int64_t added_id);

/* ---- a map from byte strings to ids ---------------------------------------- */
typedef struct {
  char *blob;            /* every key, back to back */
  size_t nblob, capblob;
  size_t *koff, *klen;   /* per entry */
  int64_t *val;
  size_t count, capent;
  size_t *slots;         /* entry + 1, 0 empty; power-of-two size */
  size_t nslots;
} lt__strmap;
void lt__strmap_free(lt__strmap *m);
/* Sets key -> v (replacing an earlier value: *replaced true). False when out of memory. */
bool lt__strmap_set(lt__strmap *m, const char *k, size_t n, int64_t v, bool *replaced);
/* The id of key, or -1. */
int64_t lt__strmap_get(const lt__strmap *m, const char *k, size_t n);

/* ---- a byte trie -------------------------------------------------------------- */
/* Keys are byte strings; node 0 is the root; val[node] is the value of the key
 * ending there or -1. Walking it finds every key that is a prefix of a text
 * in one pass (longest matches, Unigram's lattice) with work bounded by the
 * longest key. */
typedef struct {
  lt__pairmap edges; /* (node << 8 | byte) -> child */
  int64_t *val;
  size_t n, cap;
} lt__trie;
bool lt__trie_init(lt__trie *t, size_t hint);
void lt__trie_free(lt__trie *t);
/* Adds key s[0..n) -> v; a key already there keeps its first value. False when out of memory. */
bool lt__trie_add(lt__trie *t, const char *s, size_t n, int64_t v);
/* The child of node by byte b, or -1. */
static inline int64_t lt__trie_step(const lt__trie *t, int64_t node, unsigned char b) {
  int64_t child;
  return lt__pm_get(&t->edges, ((uint64_t)node << 8) | b, &child) ? child : -1;
}

/* ---- Unicode properties (libutf8proc; the White_Space list of Unicode) ---- */
bool lt__uc_is_whitespace(uint32_t c);   /* Rust's char::is_whitespace (White_Space) */
bool lt__uc_is_other(uint32_t c);        /* categories Cc Cf Co Cs (as tokenizers: not Cn) */
/* Each answers as the tokenizers library does (its Unicode tables, not only
 * libutf8proc's: hf_unicode_table.h holds where they differ). */
bool lt__uc_is_bert_punct(uint32_t c);   /* ASCII punctuation or P* (unicode_categories) */
bool lt__uc_is_mn(uint32_t c);           /* category Mn (unicode_categories: BertNormalizer) */
bool lt__uc_is_mark(uint32_t c);         /* categories M* (StripAccents' is_combining_mark) */
bool lt__uc_is_numeric(uint32_t c);      /* categories Nd Nl No (Rust's is_numeric) */
bool lt__uc_is_word(uint32_t c);         /* Oniguruma's \w (the Whitespace pre-tokenizer) */
bool lt__uc_is_single_word(uint32_t c);  /* the regex crate's \w (added tokens' single_word) */
/* False for a code point the library's normalizer does not know (no
 * decomposition, combining class 0, never composed). */
bool lt__uc_norm_known(uint32_t c);
/* Appends the lowercase of c (Rust's char::to_lowercase) to out. */
bool lt__uc_lower(lt__ntext *out, uint32_t c, size_t os, size_t oe);

/* ---- JSON fields ------------------------------------------------------------- */
/* Each reads obj[key] at the place `where` (e.g. "normalizer.normalizers[1]")
 * and fails with LT_ERR_FORMAT naming where, the key and what was found.
 * _opt variants leave *out alone when the key is absent or null. */
lt_status lt__hf_str(json_t *obj, const char *where, const char *key, const char **out, size_t *len);
lt_status lt__hf_str_opt(json_t *obj, const char *where, const char *key, const char **out, size_t *len);
lt_status lt__hf_bool_opt(json_t *obj, const char *where, const char *key, bool *out);
lt_status lt__hf_int_opt(json_t *obj, const char *where, const char *key, int64_t lo, int64_t hi, int64_t *out);
/* The "type" of a component object; LT_ERR_FORMAT if obj is not an object with one. */
lt_status lt__hf_type(json_t *obj, const char *where, const char **type);
/* Refuses (LT_ERR_UNSUPPORTED-like LT_ERR_FORMAT) any key of obj not in the
 * NULL-terminated list known: a field this reader does not understand could
 * change the result. */
lt_status lt__hf_known_keys(json_t *obj, const char *where, const char *type, const char *const *known);
/* The first occurrence of needle[0..nn) (nn >= 1) in hay[0..nh), or NULL. */
const char *lt__hf_memmem(const char *hay, size_t nh, const char *needle, size_t nn);
/* A new NUL-terminated copy of s[0..n) (free with free()). */
char *lt__hf_strdup(const char *s, size_t n);
/* Compiles pattern (tokenizers' Regex: Oniguruma syntax, UTF-8 with Unicode
 * properties) with PCRE2 and its JIT. Returns new (free with pcre2_code_free). */
pcre2_code *lt__hf_regex(const char *pattern, size_t n, const char *where);

/* ---- components ------------------------------------------------------------- */
typedef struct lt__hf_norm lt__hf_norm;
typedef struct lt__hf_pre lt__hf_pre;
typedef struct lt__hf_model lt__hf_model;
typedef struct lt__hf_post lt__hf_post;
typedef struct lt__hf_dec lt__hf_dec;

/* Each _parse reads a component from JSON (depth: nesting so far) and
 * returns new (free with the _free beside it); NULL with the error set.
 * JSON null is "no component": callers check for it first. */
lt__hf_norm *lt__hf_norm_parse(json_t *j, const char *where, int depth);
void lt__hf_norm_free(lt__hf_norm *n);
/* Normalizes *t in place. */
lt_status lt__hf_norm_apply(const lt__hf_norm *n, lt__ntext *t);

lt__hf_pre *lt__hf_pre_parse(json_t *j, const char *where, int depth);
void lt__hf_pre_free(lt__hf_pre *p);
/* Splits every split of *s that is not an added token further. */
lt_status lt__hf_pre_apply(const lt__hf_pre *p, lt__splits *s);

/* The model: vocabulary (string -> id) and how a split becomes tokens. */
lt__hf_model *lt__hf_model_parse(json_t *j, const char *where);
void lt__hf_model_free(lt__hf_model *m);
const lt__strmap *lt__hf_model_vocab(const lt__hf_model *m);
const char *lt__hf_model_type(const lt__hf_model *m);
/* Tokenizes the split t, appending tokens with original offsets to out. */
lt_status lt__hf_model_tokenize(const lt__hf_model *m, const lt__ntext *t, lt__tokens *out);

/* Post-processors need the token -> id map to check their tokens (vocab:
 * every token the tokenizer knows, added tokens included). */
lt__hf_post *lt__hf_post_parse(json_t *j, const char *where, const lt__strmap *vocab, int depth);
void lt__hf_post_free(lt__hf_post *p);
/* Number of special tokens the post-processor adds to a single sequence. */
int64_t lt__hf_post_added(const lt__hf_post *p);
/* Applies the post-processor to a single sequence (adding its special
 * tokens when add_special; offsets may be trimmed either way: h gives the
 * token strings, text[0..len) the original text, whose characters a trim
 * steps over, as the library trims character offsets). */
typedef struct lt__hf lt__hf;
lt_status lt__hf_post_apply(const lt__hf_post *p, const lt__hf *h, lt__tokens *enc, bool add_special, const char *text,
                            size_t len);

/* Decoders work on the list of token strings, as tokenizers' decode_chain. */
typedef struct {
  char **s;
  size_t *n;
  size_t count, cap;
} lt__strs;
void lt__strs_free(lt__strs *l);
/* Appends a copy of s[0..n) (takes ownership of owned when not NULL instead). */
bool lt__strs_push(lt__strs *l, const char *s, size_t n);
bool lt__strs_push_take(lt__strs *l, char *owned, size_t n);

lt__hf_dec *lt__hf_dec_parse(json_t *j, const char *where, int depth);
void lt__hf_dec_free(lt__hf_dec *d);
lt_status lt__hf_dec_apply(const lt__hf_dec *d, lt__strs *toks);

/* ---- the tokenizer ------------------------------------------------------------ */
/* Parses tokenizer.json text. Returns new (free with lt__hf_free). */
lt__hf *lt__hf_new(const char *json, size_t len);
void lt__hf_free(lt__hf *h);
int64_t lt__hf_vocab_size(const lt__hf *h);
/* The original JSON text (borrowed). */
const char *lt__hf_json(const lt__hf *h, size_t *len);
/* Encodes text (raw bytes) into tokens. flags: LT_ENCODE_* (datasets.h). */
lt_status lt__hf_encode(const lt__hf *h, const char *text, size_t len, unsigned flags, lt__tokens *out);
/* Decodes ids (checked against the vocabulary) into new text (free with free()). */
lt_status lt__hf_decode(const lt__hf *h, const int64_t *ids, int64_t n, bool skip_special, char **text, size_t *len);
/* The id of a token string, or -1. */
int64_t lt__hf_token_id(const lt__hf *h, const char *s, size_t n);
/* The string of id (borrowed), or NULL. */
const char *lt__hf_id_token(const lt__hf *h, int64_t id, size_t *len);

#endif /* LT_DATASETS_HF_TOKENIZER_INTERNAL_H */
