/*
 * datasets/hf_tokenizer.c: a Hugging Face tokenizer.json read and run as the
 * `tokenizers` library does (tokenizers/src/tokenizer/mod.rs,
 * added_vocabulary.rs): the loader (jansson; every field checked, every
 * component this reader lacks refused by name), added tokens, the encode
 * pipeline with truncation and padding, and decode.
 *
 * Encoding a text (raw bytes; ill-formed UTF-8 becomes U+FFFD per maximal
 * subpart, as Python's errors="replace"):
 *   1. added tokens with normalized false are cut out of the raw text
 *      (leftmost-longest; single_word, lstrip, rstrip as find_matches);
 *   2. every other piece is normalized, then added tokens with normalized
 *      true are cut out of it (matched in their normalized form);
 *   3. the pre-tokenizer splits the pieces, the model tokenizes each;
 *   4. with LT_ENCODE_PAD_TRUNCATE, the file's truncation (leaving room for
 *      the special tokens when they are added), the post-processor, the
 *      file's padding; otherwise the post-processor only.
 * Offsets are byte offsets into the text given.
 *
 * What this is not: pairs of sequences, stride/overflowing encodings, BPE
 * dropout, Unigram sampling (refused or not offered).
 */
#include "datasets/hf_tokenizer_internal.h"
#include "datasets/tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *content, *norm; /* norm: the content normalized (normalized tokens) */
  size_t n, nnorm;
  int64_t id;
  bool special, single_word, lstrip, rstrip, normalized;
} added_tok;

struct lt__hf {
  char *json;
  size_t njson;
  lt__hf_norm *norm;
  lt__hf_pre *pre;
  lt__hf_model *model;
  lt__hf_post *post;
  lt__hf_dec *dec;
  added_tok *added;
  size_t nadded;
  /* added tokens by their text, per pass (0: raw, 1: normalized) -> index in added */
  lt__trie match[2];
  bool any[2];
  lt__strmap tok2id;       /* every token: the model's vocabulary, then added tokens */
  int64_t vocab;           /* largest id + 1 */
  char **id_str;           /* per id: its string (borrowed from tok2id's blob) or NULL */
  size_t *id_len;
  bool *id_special;
  bool trunc, pad;
  int64_t max_length, trunc_left;
  int64_t pad_fixed, pad_multiple, pad_id, pad_left; /* pad_fixed 0: BatchLongest */
};

void lt__hf_free(lt__hf *h) {
  if (!h) return;
  free(h->json);
  lt__hf_norm_free(h->norm);
  lt__hf_pre_free(h->pre);
  lt__hf_model_free(h->model);
  lt__hf_post_free(h->post);
  lt__hf_dec_free(h->dec);
  for (size_t i = 0; i < h->nadded; i++) {
    free(h->added[i].content);
    free(h->added[i].norm);
  }
  free(h->added);
  lt__trie_free(&h->match[0]);
  lt__trie_free(&h->match[1]);
  lt__strmap_free(&h->tok2id);
  free(h->id_str);
  free(h->id_len);
  free(h->id_special);
  free(h);
}

int64_t lt__hf_vocab_size(const lt__hf *h) { return h->vocab; }

const char *lt__hf_json(const lt__hf *h, size_t *len) {
  *len = h->njson;
  return h->json;
}

int64_t lt__hf_token_id(const lt__hf *h, const char *s, size_t n) { return lt__strmap_get(&h->tok2id, s, n); }

const char *lt__hf_id_token(const lt__hf *h, int64_t id, size_t *len) {
  if (id < 0 || id >= h->vocab || !h->id_str[id]) return NULL;
  *len = h->id_len[id];
  return h->id_str[id];
}

/* ---- loading -------------------------------------------------------------------- */

static lt_status nomem(void) { return lt__err(LT_ERR_NOMEM, "tokenizer.json: out of memory"); }

static lt_status parse_added(lt__hf *h, json_t *arr) {
  if (!arr || json_is_null(arr)) return LT_OK;
  if (!json_is_array(arr)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: added_tokens must be an array");
  size_t n = json_array_size(arr);
  if ((int64_t)n > LT__HF_MAX_VOCAB) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %zu added tokens is too many", n);
  if (!(h->added = calloc(n + 1, sizeof *h->added))) return nomem();
  static const char *const known[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special", NULL};
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(arr, i);
    char w[64];
    snprintf(w, sizeof w, "added_tokens[%zu]", i);
    if (!json_is_object(e)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be an object", w);
    added_tok *a = &h->added[i];
    h->nadded = i + 1;
    const char *c;
    size_t nc;
    int64_t id = -1;
    lt_status st = lt__hf_known_keys(e, w, "AddedToken", known);
    if (st == LT_OK) st = lt__hf_str(e, w, "content", &c, &nc);
    if (st == LT_OK && !json_object_get(e, "id")) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s has no field \"id\"", w);
    if (st == LT_OK) st = lt__hf_int_opt(e, w, "id", 0, LT__HF_MAX_VOCAB - 1, &id);
    if (st == LT_OK) st = lt__hf_bool_opt(e, w, "special", &a->special);
    if (st == LT_OK) st = lt__hf_bool_opt(e, w, "single_word", &a->single_word);
    if (st == LT_OK) st = lt__hf_bool_opt(e, w, "lstrip", &a->lstrip);
    if (st == LT_OK) st = lt__hf_bool_opt(e, w, "rstrip", &a->rstrip);
    a->normalized = !a->special;
    if (st == LT_OK) st = lt__hf_bool_opt(e, w, "normalized", &a->normalized);
    if (st != LT_OK) return st;
    if (nc == 0) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.content is empty", w);
    if (nc > LT__HF_MAX_TOKEN_BYTES || memchr(c, '\0', nc))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.content is longer than %d bytes or holds a NUL", w,
                     LT__HF_MAX_TOKEN_BYTES);
    if (!(a->content = lt__hf_strdup(c, nc))) return nomem();
    a->n = nc;
    a->id = id;
  }
  return LT_OK;
}

static lt_status parse_truncation_padding(lt__hf *h, json_t *root) {
  json_t *t = json_object_get(root, "truncation"), *p = json_object_get(root, "padding");
  if (t && !json_is_null(t)) {
    static const char *const known[] = {"max_length", "strategy", "stride", "direction", NULL};
    const char *strategy = NULL, *dir = NULL;
    int64_t stride = 0;
    lt_status st = json_is_object(t) ? lt__hf_known_keys(t, "truncation", "truncation", known)
                                     : lt__err(LT_ERR_FORMAT, "tokenizer.json: truncation must be an object or null");
    if (st == LT_OK && !json_object_get(t, "max_length"))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: truncation has no field \"max_length\"");
    if (st == LT_OK) st = lt__hf_int_opt(t, "truncation", "max_length", 0, INT32_MAX, &h->max_length);
    if (st == LT_OK) st = lt__hf_int_opt(t, "truncation", "stride", 0, INT32_MAX, &stride);
    if (st == LT_OK) st = lt__hf_str_opt(t, "truncation", "strategy", &strategy, NULL);
    if (st == LT_OK) st = lt__hf_str_opt(t, "truncation", "direction", &dir, NULL);
    if (st != LT_OK) return st;
    if (strategy && strcmp(strategy, "LongestFirst") && strcmp(strategy, "OnlyFirst"))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: truncation.strategy \"%s\" is not supported for single sequences "
                     "(LongestFirst, OnlyFirst)", strategy);
    if (dir && strcmp(dir, "Right") && strcmp(dir, "Left"))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: truncation.direction is \"%s\": not Right or Left", dir);
    h->trunc_left = dir && strcmp(dir, "Left") == 0;
    h->trunc = true;
  }
  if (p && !json_is_null(p)) {
    static const char *const known[] = {"strategy", "direction", "pad_to_multiple_of", "pad_id", "pad_type_id",
                                        "pad_token", NULL};
    const char *dir = NULL;
    lt_status st = json_is_object(p) ? lt__hf_known_keys(p, "padding", "padding", known)
                                     : lt__err(LT_ERR_FORMAT, "tokenizer.json: padding must be an object or null");
    json_t *s = json_object_get(p, "strategy");
    if (st == LT_OK) {
      if (json_is_string(s) && json_string_length(s) == 12 && memcmp(json_string_value(s), "BatchLongest", 12) == 0)
        h->pad_fixed = 0;
      else if (json_is_object(s) && json_is_integer(json_object_get(s, "Fixed")))
        st = lt__hf_int_opt(s, "padding.strategy", "Fixed", 0, INT32_MAX, &h->pad_fixed);
      else st = lt__err(LT_ERR_FORMAT, "tokenizer.json: padding.strategy must be \"BatchLongest\" or {\"Fixed\": n}");
    }
    if (st == LT_OK) st = lt__hf_int_opt(p, "padding", "pad_to_multiple_of", 0, INT32_MAX, &h->pad_multiple);
    if (st == LT_OK) st = lt__hf_int_opt(p, "padding", "pad_id", 0, LT__HF_MAX_VOCAB - 1, &h->pad_id);
    if (st == LT_OK) st = lt__hf_str_opt(p, "padding", "direction", &dir, NULL);
    if (st != LT_OK) return st;
    if (dir && strcmp(dir, "Right") && strcmp(dir, "Left"))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: padding.direction is \"%s\": not Right or Left", dir);
    h->pad_left = dir && strcmp(dir, "Left") == 0;
    h->pad = true;
  }
  return LT_OK;
}

/* The tries of added tokens, one per pass. */
static lt_status build_matchers(lt__hf *h) {
  if (!lt__trie_init(&h->match[0], 64) || !lt__trie_init(&h->match[1], 64)) return nomem();
  for (size_t i = 0; i < h->nadded; i++) {
    added_tok *a = &h->added[i];
    int pass = a->normalized ? 1 : 0;
    const char *s = a->normalized ? a->norm : a->content;
    size_t n = a->normalized ? a->nnorm : a->n;
    if (n == 0) continue;
    if (!lt__trie_add(&h->match[pass], s, n, (int64_t)i)) return nomem();
    h->any[pass] = true;
  }
  return LT_OK;
}

static lt_status build_vocab(lt__hf *h) {
  const lt__strmap *mv = lt__hf_model_vocab(h->model);
  int64_t maxid = -1;
  bool rep;
  for (size_t e = 0; e < mv->count; e++) {
    if (!lt__strmap_set(&h->tok2id, mv->blob + mv->koff[e], mv->klen[e], mv->val[e], &rep)) return nomem();
    if (mv->val[e] > maxid) maxid = mv->val[e];
  }
  for (size_t i = 0; i < h->nadded; i++) {
    if (!lt__strmap_set(&h->tok2id, h->added[i].content, h->added[i].n, h->added[i].id, &rep)) return nomem();
    if (h->added[i].id > maxid) maxid = h->added[i].id;
  }
  if (maxid < 0) return lt__err(LT_ERR_FORMAT, "tokenizer.json: the vocabulary is empty");
  h->vocab = maxid + 1;
  h->id_str = calloc((size_t)h->vocab, sizeof *h->id_str);
  h->id_len = calloc((size_t)h->vocab, sizeof *h->id_len);
  h->id_special = calloc((size_t)h->vocab, sizeof *h->id_special);
  if (!h->id_str || !h->id_len || !h->id_special) return nomem();
  /* id -> string: the model's entries (the first entry of an id wins), then
   * added tokens over them (tokenizers asks the added vocabulary first). */
  for (size_t e = 0; e < mv->count; e++) {
    int64_t id = mv->val[e];
    if (!h->id_str[id]) h->id_str[id] = mv->blob + mv->koff[e], h->id_len[id] = mv->klen[e];
  }
  for (size_t i = 0; i < h->nadded; i++) { /* decoding reads a normalized token in its normalized form */
    int64_t id = h->added[i].id;
    h->id_str[id] = h->added[i].normalized ? h->added[i].norm : h->added[i].content;
    h->id_len[id] = h->added[i].normalized ? h->added[i].nnorm : h->added[i].n;
  }
  for (size_t i = 0; i < h->nadded; i++)
    if (h->added[i].special) h->id_special[h->added[i].id] = true;
  return LT_OK;
}

lt__hf *lt__hf_new(const char *json, size_t len) {
  if (len > LT__HF_MAX_JSON_BYTES)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %zu bytes is more than the %zu this reader takes", len,
                   LT__HF_MAX_JSON_BYTES), NULL;
  json_error_t je;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
  if (!root)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: not valid JSON at line %d column %d: %s", je.line, je.column, je.text),
           NULL;
  lt__hf *h = calloc(1, sizeof *h);
  lt_status st = h ? LT_OK : nomem();
  if (st == LT_OK && !json_is_object(root)) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: the top level must be an object");
  if (st == LT_OK) {
    static const char *const known[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                        "pre_tokenizer", "model", "post_processor", "decoder", NULL};
    st = lt__hf_known_keys(root, "the top level", "tokenizer", known);
  }
  if (st == LT_OK && !(h->json = lt__hf_strdup(json, len))) st = nomem();
  if (st == LT_OK) h->njson = len;
  json_t *v;
  if (st == LT_OK) st = parse_added(h, json_object_get(root, "added_tokens"));
  if (st == LT_OK) st = parse_truncation_padding(h, root);
  if (st == LT_OK && (v = json_object_get(root, "normalizer")) && !json_is_null(v) &&
      !(h->norm = lt__hf_norm_parse(v, "normalizer", 0)))
    st = lt_last_status();
  if (st == LT_OK && (v = json_object_get(root, "pre_tokenizer")) && !json_is_null(v) &&
      !(h->pre = lt__hf_pre_parse(v, "pre_tokenizer", 0)))
    st = lt_last_status();
  if (st == LT_OK && !json_object_get(root, "model")) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: no \"model\"");
  if (st == LT_OK && !(h->model = lt__hf_model_parse(json_object_get(root, "model"), "model"))) st = lt_last_status();
  /* normalized forms of the normalized added tokens */
  for (size_t i = 0; st == LT_OK && i < h->nadded; i++) {
    added_tok *a = &h->added[i];
    if (!a->normalized) continue;
    lt__ntext t = {0};
    if (!lt__ntext_put(&t, a->content, a->n, 0, a->n)) st = nomem();
    if (st == LT_OK && h->norm) st = lt__hf_norm_apply(h->norm, &t);
    if (st == LT_OK && !(a->norm = lt__hf_strdup(t.s ? t.s : "", t.n))) st = nomem();
    a->nnorm = t.n;
    lt__ntext_free(&t);
  }
  if (st == LT_OK) st = build_vocab(h);
  if (st == LT_OK && (v = json_object_get(root, "post_processor")) && !json_is_null(v) &&
      !(h->post = lt__hf_post_parse(v, "post_processor", &h->tok2id, 0)))
    st = lt_last_status();
  if (st == LT_OK && (v = json_object_get(root, "decoder")) && !json_is_null(v) &&
      !(h->dec = lt__hf_dec_parse(v, "decoder", 0)))
    st = lt_last_status();
  if (st == LT_OK) st = build_matchers(h);
  if (st == LT_OK && h->post) {
    /* every id a post-processor adds must exist */
    lt__tokens probe = {0};
    st = lt__hf_post_apply(h->post, h, &probe, true, "", 0);
    for (size_t i = 0; st == LT_OK && i < probe.n; i++)
      if (probe.v[i].id >= h->vocab)
        st = lt__err(LT_ERR_FORMAT, "tokenizer.json: post_processor adds id %lld, outside the vocabulary [0, %lld)",
                     (long long)probe.v[i].id, (long long)h->vocab);
    free(probe.v);
  }
  if (st == LT_OK && h->pad && h->pad_id >= h->vocab)
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: padding.pad_id %lld is outside the vocabulary [0, %lld)",
                 (long long)h->pad_id, (long long)h->vocab);
  if (st == LT_OK && h->trunc && h->post && h->max_length < lt__hf_post_added(h->post))
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: truncation.max_length %lld leaves no room for the %lld special tokens",
                 (long long)h->max_length, (long long)lt__hf_post_added(h->post));
  json_decref(root);
  if (st != LT_OK) {
    lt__hf_free(h);
    return NULL;
  }
  return h;
}

/* ---- added tokens ------------------------------------------------------------------ */

static uint32_t cp_before(const lt__ntext *t, size_t i) {
  size_t p = i - 1;
  while (p > 0 && ((unsigned char)t->s[p] & 0xC0) == 0x80) p--;
  int k;
  return lt__ntext_cp(t, p, &k);
}

/* find_matches over t for one pass; appends splits (added ones carry their id). */
static lt_status split_added(const lt__hf *h, int pass, lt__ntext *t, lt__splits *out) {
  size_t start_offset = 0, i = 0;
  bool ok = true;
  if (!h->any[pass] || t->n == 0) return lt__splits_push_take(out, t, -1) ? LT_OK : nomem();
  const lt__trie *tr = &h->match[pass];
  while (ok && i < t->n) {
    /* the longest added token starting at i: one walk down the trie */
    size_t best = SIZE_MAX, blen = 0;
    int64_t node = 0;
    for (size_t e = i; e < t->n; e++) {
      if ((node = lt__trie_step(tr, node, (unsigned char)t->s[e])) < 0) break;
      if (tr->val[node] >= 0) best = (size_t)tr->val[node], blen = e + 1 - i;
    }
    if (best == SIZE_MAX) {
      i++;
      continue;
    }
    const added_tok *a = &h->added[best];
    size_t ms = i, me = i + blen;
    i = me; /* the next match starts after this one, taken or not */
    if (a->single_word) {
      int k;
      bool ss = ms == 0 || !lt__uc_is_single_word(cp_before(t, ms));
      bool es = me == t->n || !lt__uc_is_single_word(lt__ntext_cp(t, me, &k));
      if (!ss || !es) continue;
    }
    if (a->lstrip) {
      size_t ns = ms;
      while (ns > 0) {
        size_t p = ns - 1;
        while (p > 0 && ((unsigned char)t->s[p] & 0xC0) == 0x80) p--;
        int k;
        if (!lt__uc_is_whitespace(lt__ntext_cp(t, p, &k))) break;
        ns = p;
      }
      ms = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip) {
      int k;
      while (me < t->n && lt__uc_is_whitespace(lt__ntext_cp(t, me, &k))) me += (size_t)k;
    }
    if (start_offset < ms) ok = lt__splits_push_range(out, t, start_offset, ms, -1);
    ok = ok && lt__splits_push_range(out, t, ms, me, a->id);
    start_offset = me; /* (the next match may start inside what rstrip took: tokenizers keeps both) */
  }
  if (ok && start_offset < t->n) ok = lt__splits_push_range(out, t, start_offset, t->n, -1);
  lt__ntext_free(t);
  return ok ? LT_OK : nomem();
}

/* ---- encode ------------------------------------------------------------------------ */

lt_status lt__hf_encode(const lt__hf *h, const char *text, size_t len, unsigned flags, lt__tokens *out) {
  lt__ntext raw = {0};
  lt__splits s1 = {0}, s2 = {0};
  lt__tokens enc = {0};
  lt_status st = LT_OK;
  if (!lt__ntext_from_raw(&raw, text, len)) st = nomem();
  if (st == LT_OK) st = split_added(h, 0, &raw, &s1);
  for (size_t i = 0; st == LT_OK && i < s1.n; i++) {
    if (s1.v[i].added_id >= 0) {
      if (!lt__splits_push_take(&s2, &s1.v[i].t, s1.v[i].added_id)) st = nomem();
      continue;
    }
    if (h->norm) st = lt__hf_norm_apply(h->norm, &s1.v[i].t);
    if (st == LT_OK) st = split_added(h, 1, &s1.v[i].t, &s2);
  }
  if (st == LT_OK && h->pre) st = lt__hf_pre_apply(h->pre, &s2);
  for (size_t i = 0; st == LT_OK && i < s2.n; i++) {
    const lt__ntext *t = &s2.v[i].t;
    if (s2.v[i].added_id >= 0) {
      if (!lt__tokens_push(&enc, s2.v[i].added_id, (int64_t)t->os[0], (int64_t)t->oe[t->n - 1])) st = nomem();
      else { /* what lstrip and rstrip took, for the offset trimming of ByteLevel */
        int32_t lead = 0, trail = 0;
        int k;
        for (size_t q = 0; q < t->n && lt__uc_is_whitespace(lt__ntext_cp(t, q, &k)); q += (size_t)k) lead++;
        for (size_t q = t->n; q > 0;) {
          size_t p = q - 1;
          while (p > 0 && ((unsigned char)t->s[p] & 0xC0) == 0x80) p--;
          if (!lt__uc_is_whitespace(lt__ntext_cp(t, p, &k))) break;
          q = p, trail++;
        }
        enc.v[enc.n - 1].lead = lead, enc.v[enc.n - 1].trail = trail;
      }
    } else if (t->n) {
      st = lt__hf_model_tokenize(h->model, t, &enc);
    }
  }
  bool special = flags & LT_ENCODE_ADD_SPECIAL;
  if (st == LT_OK && (flags & LT_ENCODE_PAD_TRUNCATE) && h->trunc) {
    int64_t max = h->max_length - (special && h->post ? lt__hf_post_added(h->post) : 0);
    if ((int64_t)enc.n > max) {
      if (h->trunc_left) memmove(enc.v, enc.v + (enc.n - (size_t)max), (size_t)max * sizeof *enc.v);
      enc.n = (size_t)max;
    }
  }
  if (st == LT_OK && h->post) st = lt__hf_post_apply(h->post, h, &enc, special, text, len);
  if (st == LT_OK && (flags & LT_ENCODE_PAD_TRUNCATE) && h->pad) {
    int64_t target = h->pad_fixed ? h->pad_fixed : (int64_t)enc.n;
    if (h->pad_multiple > 0 && target % h->pad_multiple) target += h->pad_multiple - target % h->pad_multiple;
    size_t add = target > (int64_t)enc.n ? (size_t)target - enc.n : 0;
    if (add) {
      size_t n0 = enc.n;
      for (size_t q = 0; q < add && st == LT_OK; q++)
        if (!lt__tokens_push(&enc, h->pad_id, 0, 0)) st = nomem();
      if (st == LT_OK && h->pad_left) {
        memmove(enc.v + add, enc.v, n0 * sizeof *enc.v);
        for (size_t q = 0; q < add; q++) enc.v[q] = (lt__token){.id = h->pad_id, .lead = -1, .trail = -1};
      }
    }
  }
  lt__ntext_free(&raw);
  lt__splits_free(&s1);
  lt__splits_free(&s2);
  if (st != LT_OK) {
    free(enc.v);
    return st;
  }
  *out = enc;
  return LT_OK;
}

/* ---- decode ------------------------------------------------------------------------ */

lt_status lt__hf_decode(const lt__hf *h, const int64_t *ids, int64_t n, bool skip_special, char **text, size_t *len) {
  lt__strs toks = {0};
  lt_status st = LT_OK;
  for (int64_t i = 0; i < n && st == LT_OK; i++) {
    int64_t id = ids[i];
    if (!h->id_str[id] || (skip_special && h->id_special[id])) continue;
    if (!lt__strs_push(&toks, h->id_str[id], h->id_len[id])) st = nomem();
  }
  if (st == LT_OK && h->dec) st = lt__hf_dec_apply(h->dec, &toks);
  size_t total = 0;
  for (size_t i = 0; i < toks.count; i++) total += toks.n[i] + 1;
  char *out = st == LT_OK ? malloc(total + 1) : NULL;
  if (st == LT_OK && !out) st = nomem();
  if (st == LT_OK) {
    size_t k = 0;
    for (size_t i = 0; i < toks.count; i++) {
      if (!h->dec && i) out[k++] = ' '; /* no decoder: tokens joined with spaces */
      memcpy(out + k, toks.s[i], toks.n[i]);
      k += toks.n[i];
    }
    out[k] = '\0';
    *text = out;
    *len = k;
  }
  lt__strs_free(&toks);
  return st;
}

/* ---- the lt_tokenizer kind "hf" ------------------------------------------------------- */

/* The kind's calls (tokenizer_internal.h, lt__tok_ops): tokenizer.c checks
 * the arguments and calls these. */
static void hf_ops_free(void *impl) { lt__hf_free(impl); }

static lt_status hf_ops_encode(const void *impl, const char *text, size_t len, unsigned flags, int64_t **ids,
                               int64_t **offsets, int64_t *n) {
  const char *op = "tokenizer_encode";
  lt__tokens t = {0};
  lt_status st = lt__hf_encode(impl, text, len, flags, &t);
  if (st != LT_OK) return st;
  int64_t *p = malloc((t.n ? t.n : 1) * sizeof *p), *o = offsets ? malloc((t.n ? t.n : 1) * 2 * sizeof *o) : NULL;
  if (!p || (offsets && !o)) {
    free(p), free(o), free(t.v);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  for (size_t i = 0; i < t.n; i++) {
    p[i] = t.v[i].id;
    if (o) o[2 * i] = t.v[i].start, o[2 * i + 1] = t.v[i].end;
  }
  free(t.v);
  *ids = p;
  if (offsets) *offsets = o;
  *n = (int64_t)t.n;
  return LT_OK;
}

static lt_status hf_ops_decode(const void *impl, const int64_t *ids, int64_t n, bool skip_special, char **text,
                               size_t *len) {
  return lt__hf_decode(impl, ids, n, skip_special, text, len);
}

static int64_t hf_ops_token_id(const void *impl, const char *s, size_t n) { return lt__hf_token_id(impl, s, n); }

static const char *hf_ops_source(const void *impl, size_t *len) { return lt__hf_json(impl, len); }

static const lt__tok_ops hf_ops = {
    .free = hf_ops_free,
    .encode = hf_ops_encode,
    .decode = hf_ops_decode,
    .token_id = hf_ops_token_id,
    .source = hf_ops_source,
};

lt_tokenizer *lt_tokenizer_from_hf_json(const char *json, size_t len) {
  if (!json && len) return lt__err(LT_ERR_NULL, "tokenizer_from_hf_json: json is NULL"), NULL;
  lt__hf *h = lt__hf_new(json ? json : "", len);
  if (!h) return NULL;
  lt_tokenizer *t = lt__tok_alloc(LT_TOKENIZER_HF, "tokenizer_from_hf_json");
  if (!t) {
    lt__hf_free(h);
    return NULL;
  }
  t->ops = &hf_ops;
  t->impl = h;
  t->vocab = h->vocab;
  return t;
}

lt_tokenizer *lt_tokenizer_load_hf(const char *path) {
  char *text;
  size_t len;
  if (lt_text_file_read(path, &text, &len) != LT_OK) return NULL;
  lt_tokenizer *t = lt_tokenizer_from_hf_json(text, len);
  free(text);
  if (!t) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt__err(lt_last_status(), "%s: %s", path, msg);
  }
  return t;
}
