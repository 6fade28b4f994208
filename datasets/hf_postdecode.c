/*
 * datasets/hf_postdecode.c: the two ends of a tokenizer.json pipeline.
 *
 * Post-processors (tokenizers/src/processors): TemplateProcessing (the
 * "single" template; "pair" is read and checked but this library encodes
 * single sequences), BertProcessing, RobertaProcessing, ByteLevel (offset
 * trimming), Sequence. They add special tokens with offsets (0, 0).
 *
 * Decoders (tokenizers/src/decoders), each a step over the list of token
 * strings as decode_chain: ByteLevel, Metaspace, WordPiece, ByteFallback,
 * Fuse, Strip, Replace, BPEDecoder, Sequence. Without a decoder, tokens are
 * joined with spaces.
 *
 * What this is not: the CTC decoder; it is refused at load.
 */
#include "datasets/hf_tokenizer_internal.h"
#include "datasets/utf8_internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ==== post-processors ==== */

enum { PP_TEMPLATE, PP_BERT, PP_ROBERTA, PP_BYTELEVEL, PP_SEQ };

typedef struct {
  int64_t *ids; /* NULL: the sequence */
  size_t nids;
} titem;

struct lt__hf_post {
  int type;
  titem *items;   /* TemplateProcessing "single"; Bert/Roberta: cls, A, sep */
  size_t nitems;
  bool trim_offsets, add_prefix_space;
  lt__hf_post **kids;
  size_t nkids;
};

void lt__hf_post_free(lt__hf_post *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nitems; i++) free(p->items[i].ids);
  free(p->items);
  for (size_t i = 0; i < p->nkids; i++) lt__hf_post_free(p->kids[i]);
  free(p->kids);
  free(p);
}

/* ["[CLS]", 101] into a one-id item, checked against the vocabulary. */
static lt_status pair_item(json_t *j, const char *where, const char *key, titem *out) {
  json_t *v = json_object_get(j, key);
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) ||
      !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 1)) < 0 ||
      json_integer_value(json_array_get(v, 1)) >= LT__HF_MAX_VOCAB)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s must be [token, id]", where, key);
  if (!(out->ids = malloc(sizeof(int64_t)))) return lt__err(LT_ERR_NOMEM, "out of memory");
  out->ids[0] = (int64_t)json_integer_value(json_array_get(v, 1));
  out->nids = 1;
  return LT_OK;
}

static lt_status parse_template(lt__hf_post *p, json_t *j, const char *where, const lt__strmap *vocab) {
  (void)vocab;
  json_t *single = json_object_get(j, "single"), *specials = json_object_get(j, "special_tokens");
  json_t *pair = json_object_get(j, "pair");
  if (!json_is_array(single)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.single must be an array", where);
  if (pair && !json_is_array(pair)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.pair must be an array", where);
  if (specials && !json_is_object(specials))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.special_tokens must be an object", where);
  size_t n = json_array_size(single);
  if (!(p->items = calloc(n + 1, sizeof *p->items))) return lt__err(LT_ERR_NOMEM, "out of memory");
  bool seen_a = false;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(single, i), *sp = json_object_get(e, "SpecialToken"), *sq = json_object_get(e, "Sequence");
    p->nitems = i + 1;
    if (json_is_object(sq) && json_object_size(e) == 1) {
      const char *id = NULL;
      json_t *idv = json_object_get(sq, "id");
      if (json_is_string(idv) && json_string_length(idv) == 1) id = json_string_value(idv);
      if (!id || strcmp(id, "A") != 0)
        return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.single[%zu]: a single template takes only the sequence \"A\"",
                       where, i);
      seen_a = true;
      continue;
    }
    if (!json_is_object(sp) || json_object_size(e) != 1 || !json_is_string(json_object_get(sp, "id")))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.single[%zu] must be {\"SpecialToken\": {\"id\": ...}} or "
                     "{\"Sequence\": {\"id\": \"A\"}}", where, i);
    const char *name = json_string_value(json_object_get(sp, "id"));
    json_t *def = specials ? json_object_getn(specials, name, json_string_length(json_object_get(sp, "id"))) : NULL, *ids = json_object_get(def, "ids");
    if (!json_is_array(ids))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.single[%zu] names the special token \"%.40s\", which "
                     "special_tokens does not define with its ids", where, i, name);
    size_t k = json_array_size(ids);
    if (!(p->items[i].ids = malloc((k + 1) * sizeof(int64_t)))) return lt__err(LT_ERR_NOMEM, "out of memory");
    for (size_t q = 0; q < k; q++) {
      json_t *x = json_array_get(ids, q);
      if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= LT__HF_MAX_VOCAB)
        return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.special_tokens[\"%.40s\"].ids[%zu] must be an id in [0, %lld)",
                       where, name, q, (long long)LT__HF_MAX_VOCAB);
      p->items[i].ids[q] = (int64_t)json_integer_value(x);
    }
    p->items[i].nids = k;
  }
  if (!seen_a) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.single has no {\"Sequence\": {\"id\": \"A\"}}", where);
  return LT_OK;
}

lt__hf_post *lt__hf_post_parse(json_t *j, const char *where, const lt__strmap *vocab, int depth) {
  const char *type;
  if (depth > LT__HF_MAX_DEPTH)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: Sequence nested deeper than %d", where, LT__HF_MAX_DEPTH), NULL;
  if (lt__hf_type(j, where, &type) != LT_OK) return NULL;
  lt__hf_post *p = calloc(1, sizeof *p);
  if (!p) return lt__err(LT_ERR_NOMEM, "out of memory"), NULL;
  lt_status st;
  if (strcmp(type, "TemplateProcessing") == 0) {
    p->type = PP_TEMPLATE;
    st = lt__hf_known_keys(j, where, type, KEYS("single", "pair", "special_tokens"));
    if (st == LT_OK) st = parse_template(p, j, where, vocab);
  } else if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
    p->type = type[0] == 'B' ? PP_BERT : PP_ROBERTA;
    p->trim_offsets = p->add_prefix_space = true;
    st = p->type == PP_BERT ? lt__hf_known_keys(j, where, type, KEYS("sep", "cls"))
                            : lt__hf_known_keys(j, where, type, KEYS("sep", "cls", "trim_offsets", "add_prefix_space"));
    if (st == LT_OK && !(p->items = calloc(3, sizeof *p->items))) st = lt__err(LT_ERR_NOMEM, "out of memory");
    if (st == LT_OK) p->nitems = 3;
    if (st == LT_OK) st = pair_item(j, where, "cls", &p->items[0]);
    if (st == LT_OK) st = pair_item(j, where, "sep", &p->items[2]);
    if (st == LT_OK && p->type == PP_ROBERTA) st = lt__hf_bool_opt(j, where, "trim_offsets", &p->trim_offsets);
    if (st == LT_OK && p->type == PP_ROBERTA) st = lt__hf_bool_opt(j, where, "add_prefix_space", &p->add_prefix_space);
  } else if (strcmp(type, "ByteLevel") == 0) {
    p->type = PP_BYTELEVEL;
    p->trim_offsets = p->add_prefix_space = true;
    bool use_regex = true;
    st = lt__hf_known_keys(j, where, type, KEYS("add_prefix_space", "trim_offsets", "use_regex"));
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "trim_offsets", &p->trim_offsets);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "add_prefix_space", &p->add_prefix_space);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "use_regex", &use_regex);
  } else if (strcmp(type, "Sequence") == 0) {
    p->type = PP_SEQ;
    json_t *arr = json_object_get(j, "processors");
    st = lt__hf_known_keys(j, where, type, KEYS("processors"));
    if (st == LT_OK && !json_is_array(arr))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.processors must be an array", where);
    if (st == LT_OK && !(p->kids = calloc(json_array_size(arr) + 1, sizeof *p->kids)))
      st = lt__err(LT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LT_OK && i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
      if (!(p->kids[i] = lt__hf_post_parse(json_array_get(arr, i), w, vocab, depth + 1))) st = lt_last_status();
      else p->nkids++;
    }
  } else {
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the post-processor \"%s\" is not supported (supported: "
                 "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)", where, type);
  }
  if (st != LT_OK) {
    lt__hf_post_free(p);
    return NULL;
  }
  return p;
}

int64_t lt__hf_post_added(const lt__hf_post *p) {
  int64_t n = 0;
  if (!p) return 0;
  if (p->type == PP_SEQ) {
    for (size_t i = 0; i < p->nkids; i++) n += lt__hf_post_added(p->kids[i]);
    return n;
  }
  for (size_t i = 0; i < p->nitems; i++) n += (int64_t)p->items[i].nids;
  return n;
}

/* ByteLevel's process_offsets: leading and trailing spaces (Ġ or whitespace)
 * of each token leave its offsets. */
/* The byte offset k characters after (k > 0) or before (k < 0) byte at in
 * text, never leaving [lo, hi]. */
static int64_t step_chars(const char *text, int64_t at, int64_t k, int64_t lo, int64_t hi) {
  const unsigned char *u = (const unsigned char *)text;
  for (; k > 0 && at < hi; k--)
    do at++; while (at < hi && (u[at] & 0xC0) == 0x80);
  for (; k < 0 && at > lo; k++)
    do at--; while (at > lo && (u[at] & 0xC0) == 0x80);
  return at;
}

static void trim_offsets(const lt__hf *h, lt__tokens *enc, bool add_prefix_space, const char *text) {
  for (size_t i = 0; i < enc->n; i++) {
    size_t n;
    const char *s = lt__hf_id_token(h, enc->v[i].id, &n);
    if (!s) continue;
    if (enc->v[i].lead >= 0) s = "", n = 0; /* an added token: its matched text's spaces, below */
    const unsigned char *u = (const unsigned char *)s;
    int64_t lead = 0, trail = 0;
    size_t a = 0, b = n;
    uint32_t cp;
    int k;
    while (a < n && (k = lt__utf8_decode(u, n, a, &cp)) > 0 && (cp == 0x120 || lt__uc_is_whitespace(cp))) a += (size_t)k, lead++;
    while (b > a) {
      size_t p = b - 1;
      while (p > a && (u[p] & 0xC0) == 0x80) p--;
      if ((k = lt__utf8_decode(u, n, p, &cp)) <= 0 || !(cp == 0x120 || lt__uc_is_whitespace(cp))) break;
      b = p, trail++;
    }
    if (a == n) trail = lead; /* all spaces: counted the same both ways */
    lt__token *t = &enc->v[i];
    if (t->lead >= 0) lead = t->lead, trail = t->trail;
    if (lead > 0) {
      bool first = i == 0 || t->start == 0;
      if (first && add_prefix_space && lead == 1) lead = 0;
      t->start = step_chars(text, t->start, lead, t->start, t->end);
    }
    if (trail > 0) t->end = step_chars(text, t->end, -trail, t->start, t->end);
  }
}

lt_status lt__hf_post_apply(const lt__hf_post *p, const lt__hf *h, lt__tokens *enc, bool add_special, const char *text,
                            size_t len) {
  if (p->type == PP_SEQ) {
    for (size_t i = 0; i < p->nkids; i++) {
      lt_status st = lt__hf_post_apply(p->kids[i], h, enc, add_special, text, len);
      if (st != LT_OK) return st;
    }
    return LT_OK;
  }
  if ((p->type == PP_ROBERTA || p->type == PP_BYTELEVEL) && p->trim_offsets) trim_offsets(h, enc, p->add_prefix_space, text);
  if (p->type == PP_BYTELEVEL || !add_special) return LT_OK;
  lt__tokens out = {0};
  for (size_t i = 0; i < p->nitems; i++) {
    bool ok = true;
    if (!p->items[i].ids && p->type == PP_TEMPLATE) {
      for (size_t q = 0; q < enc->n && ok; q++) ok = lt__tokens_push(&out, enc->v[q].id, enc->v[q].start, enc->v[q].end);
    } else if (!p->items[i].ids) { /* Bert, Roberta: the middle item */
      for (size_t q = 0; q < enc->n && ok; q++) ok = lt__tokens_push(&out, enc->v[q].id, enc->v[q].start, enc->v[q].end);
    } else {
      for (size_t q = 0; q < p->items[i].nids && ok; q++) ok = lt__tokens_push(&out, p->items[i].ids[q], 0, 0);
    }
    if (!ok) {
      free(out.v);
      return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory in the post-processor");
    }
  }
  free(enc->v);
  *enc = out;
  return LT_OK;
}

/* ==== decoders ==== */

enum { D_BYTELEVEL, D_METASPACE, D_WORDPIECE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_REPLACE, D_BPE, D_SEQ };

struct lt__hf_dec {
  int type;
  char *a, *b; /* WordPiece prefix; Replace pattern, content; BPEDecoder suffix; Metaspace replacement */
  size_t na, nb;
  pcre2_code *re;
  bool cleanup, prepend_first;
  uint32_t content; /* Strip */
  int64_t start, stop;
  lt__hf_dec **kids;
  size_t nkids;
};

void lt__hf_dec_free(lt__hf_dec *d) {
  if (!d) return;
  free(d->a);
  free(d->b);
  if (d->re) pcre2_code_free(d->re);
  for (size_t i = 0; i < d->nkids; i++) lt__hf_dec_free(d->kids[i]);
  free(d->kids);
  free(d);
}

static lt_status dup_field(json_t *j, const char *where, const char *key, const char *dflt, char **out, size_t *n) {
  const char *s = dflt;
  *n = dflt ? strlen(dflt) : 0;
  lt_status st = lt__hf_str_opt(j, where, key, &s, n);
  if (st != LT_OK) return st;
  if (!s) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s has no field \"%s\"", where, key);
  if (!(*out = lt__hf_strdup(s, *n))) return lt__err(LT_ERR_NOMEM, "out of memory");
  return LT_OK;
}

lt__hf_dec *lt__hf_dec_parse(json_t *j, const char *where, int depth) {
  const char *type;
  if (depth > LT__HF_MAX_DEPTH)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: Sequence nested deeper than %d", where, LT__HF_MAX_DEPTH), NULL;
  if (lt__hf_type(j, where, &type) != LT_OK) return NULL;
  lt__hf_dec *d = calloc(1, sizeof *d);
  if (!d) return lt__err(LT_ERR_NOMEM, "out of memory"), NULL;
  lt_status st;
  if (strcmp(type, "ByteLevel") == 0) {
    d->type = D_BYTELEVEL;
    st = lt__hf_known_keys(j, where, type, KEYS("add_prefix_space", "trim_offsets", "use_regex"));
  } else if (strcmp(type, "Metaspace") == 0) {
    d->type = D_METASPACE;
    const char *scheme = NULL;
    bool aps = true, aps_set = json_object_get(j, "add_prefix_space") != NULL;
    st = lt__hf_known_keys(j, where, type, KEYS("replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"));
    if (st == LT_OK) st = dup_field(j, where, "replacement", NULL, &d->a, &d->na);
    if (st == LT_OK) st = lt__hf_str_opt(j, where, "prepend_scheme", &scheme, NULL);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "add_prefix_space", &aps);
    d->prepend_first = scheme ? strcmp(scheme, "never") != 0 : (aps_set ? aps : true);
    if (st == LT_OK && scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.prepend_scheme is \"%s\": not always, first or never", where, scheme);
  } else if (strcmp(type, "WordPiece") == 0) {
    d->type = D_WORDPIECE;
    d->cleanup = true;
    st = lt__hf_known_keys(j, where, type, KEYS("prefix", "cleanup"));
    if (st == LT_OK) st = dup_field(j, where, "prefix", "##", &d->a, &d->na);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "cleanup", &d->cleanup);
  } else if (strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0) {
    d->type = type[0] == 'B' ? D_BYTEFALLBACK : D_FUSE;
    st = lt__hf_known_keys(j, where, type, KEYS("type"));
  } else if (strcmp(type, "Strip") == 0) {
    d->type = D_STRIP;
    const char *c = NULL;
    size_t nc = 0;
    st = lt__hf_known_keys(j, where, type, KEYS("content", "start", "stop"));
    if (st == LT_OK) st = lt__hf_str(j, where, "content", &c, &nc);
    if (st == LT_OK) {
      uint32_t cp = 0;
      int k = nc ? lt__utf8_decode((const unsigned char *)c, nc, 0, &cp) : 0;
      if (k <= 0 || (size_t)k != nc) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.content must be one character", where);
      d->content = cp;
    }
    if (st == LT_OK) st = lt__hf_int_opt(j, where, "start", 0, 1 << 20, &d->start);
    if (st == LT_OK) st = lt__hf_int_opt(j, where, "stop", 0, 1 << 20, &d->stop);
  } else if (strcmp(type, "Replace") == 0) {
    d->type = D_REPLACE;
    st = lt__hf_known_keys(j, where, type, KEYS("pattern", "content"));
    if (st == LT_OK) st = dup_field(j, where, "content", NULL, &d->b, &d->nb);
    json_t *pat = json_object_get(j, "pattern");
    char w[256];
    snprintf(w, sizeof w, "%s.pattern", where);
    const char *s;
    size_t n;
    if (st == LT_OK && json_is_object(pat) && json_object_get(pat, "String") && json_object_size(pat) == 1) {
      st = lt__hf_str(pat, w, "String", &s, &n);
      if (st == LT_OK && n == 0) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.String is empty", w);
      if (st == LT_OK && !(d->a = lt__hf_strdup(s, n))) st = lt__err(LT_ERR_NOMEM, "out of memory");
      d->na = n;
    } else if (st == LT_OK && json_is_object(pat) && json_object_get(pat, "Regex") && json_object_size(pat) == 1) {
      st = lt__hf_str(pat, w, "Regex", &s, &n);
      if (st == LT_OK && !(d->re = lt__hf_regex(s, n, w))) st = lt_last_status();
    } else if (st == LT_OK) {
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be {\"String\": s} or {\"Regex\": r}", w);
    }
  } else if (strcmp(type, "BPEDecoder") == 0) {
    d->type = D_BPE;
    st = lt__hf_known_keys(j, where, type, KEYS("suffix"));
    if (st == LT_OK) st = dup_field(j, where, "suffix", "</w>", &d->a, &d->na);
  } else if (strcmp(type, "Sequence") == 0) {
    d->type = D_SEQ;
    json_t *arr = json_object_get(j, "decoders");
    st = lt__hf_known_keys(j, where, type, KEYS("decoders"));
    if (st == LT_OK && !json_is_array(arr)) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.decoders must be an array", where);
    if (st == LT_OK && !(d->kids = calloc(json_array_size(arr) + 1, sizeof *d->kids)))
      st = lt__err(LT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LT_OK && i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
      if (!(d->kids[i] = lt__hf_dec_parse(json_array_get(arr, i), w, depth + 1))) st = lt_last_status();
      else d->nkids++;
    }
  } else {
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the decoder \"%s\" is not supported (supported: ByteLevel, "
                 "Metaspace, WordPiece, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence)", where, type);
  }
  if (st != LT_OK) {
    lt__hf_dec_free(d);
    return NULL;
  }
  return d;
}

/* A growable byte string. */
typedef struct {
  char *p;
  size_t n, cap;
} sbuf;

static bool sb_put(sbuf *b, const void *s, size_t n) {
  if (!lt__hf_grow(&b->p, &b->cap, b->n + n + 1, 1)) return false;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
  return true;
}

/* Bytes as text, each ill-formed sequence (maximal subpart) as U+FFFD: Rust's
 * String::from_utf8_lossy. */
static bool sb_put_lossy(sbuf *out, const char *s, size_t n) {
  lt__ntext t = {0};
  bool ok = lt__ntext_from_raw(&t, s, n) && sb_put(out, t.s ? t.s : "", t.n);
  lt__ntext_free(&t);
  return ok;
}

/* Inverse of GPT-2's bytes_to_unicode: the byte for cp, or -1. */
static int char_byte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
  if (cp < 256 || cp >= 256 + 68) return -1;
  unsigned n = cp - 256;
  for (unsigned b = 0; b < 256; b++)
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) && n-- == 0) return (int)b;
  return -1;
}

static bool replace_all(sbuf *out, const char *s, size_t n, const lt__hf_dec *d) {
  size_t i = 0;
  pcre2_match_data *md = d->re ? pcre2_match_data_create_from_pattern(d->re, NULL) : NULL;
  if (d->re && !md) return false;
  bool ok = true;
  while (ok && i <= n) {
    size_t ms, me;
    if (d->re) {
      if (pcre2_match(d->re, (PCRE2_SPTR)s, n, i, 0, md, NULL) < 0) break;
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      ms = ov[0], me = ov[1];
    } else {
      const char *p = d->na <= n - i ? lt__hf_memmem(s + i, n - i, d->a, d->na) : NULL;
      if (!p) break;
      ms = (size_t)(p - s), me = ms + d->na;
    }
    ok = sb_put(out, s + i, ms - i) && sb_put(out, d->b, d->nb);
    if (me == ms) {
      if (ms >= n) {
        i = n;
        break;
      }
      ok = ok && sb_put(out, s + ms, 1);
      me = ms + 1;
    }
    i = me;
  }
  if (md) pcre2_match_data_free(md);
  return ok && sb_put(out, s + i, i < n ? n - i : 0);
}

static const char *const CLEANUP[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                                         {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
                                         {" 've", "'ve"}, {" 're", "'re"}};

/* One decoder step over the token strings. */
static bool dec_one(const lt__hf_dec *d, lt__strs *in, lt__strs *out) {
  sbuf b = {0};
  bool ok = true;
  switch (d->type) {
    case D_BYTELEVEL:
    case D_FUSE:
      for (size_t i = 0; ok && i < in->count; i++) {
        if (d->type == D_FUSE) {
          ok = sb_put(&b, in->s[i], in->n[i]);
          continue;
        }
        /* a token all in the byte alphabet gives its bytes, any other its UTF-8 */
        const unsigned char *u = (const unsigned char *)in->s[i];
        size_t n = in->n[i], mark = b.n;
        bool all = true;
        for (size_t q = 0; q < n && all && ok;) {
          uint32_t cp;
          int k = lt__utf8_decode(u, n, q, &cp);
          int by = k > 0 ? char_byte(cp) : -1;
          if (by < 0) all = false;
          else {
            char c = (char)by;
            ok = sb_put(&b, &c, 1);
          }
          q += k > 0 ? (size_t)k : 1;
        }
        if (!all) {
          b.n = mark;
          ok = ok && sb_put(&b, in->s[i], n);
        }
      }
      if (!ok) break;
      if (d->type == D_BYTELEVEL) {
        sbuf l = {0};
        ok = sb_put_lossy(&l, b.p ? b.p : "", b.n);
        free(b.p);
        b = l;
      }
      ok = ok && lt__strs_push(out, b.p ? b.p : "", b.n);
      break;
    case D_WORDPIECE:
      for (size_t i = 0; ok && i < in->count; i++) {
        b.n = 0;
        if (i != 0) {
          if (in->n[i] >= d->na && memcmp(in->s[i], d->a, d->na) == 0) ok = sb_put(&b, in->s[i] + d->na, in->n[i] - d->na);
          else ok = sb_put(&b, " ", 1) && sb_put(&b, in->s[i], in->n[i]);
        } else {
          ok = sb_put(&b, in->s[i], in->n[i]);
        }
        if (ok && d->cleanup) {
          for (size_t r = 0; ok && r < sizeof CLEANUP / sizeof CLEANUP[0]; r++) {
            lt__hf_dec tmp = {.a = (char *)CLEANUP[r][0], .na = strlen(CLEANUP[r][0]), .b = (char *)CLEANUP[r][1],
                              .nb = strlen(CLEANUP[r][1])};
            sbuf c = {0};
            ok = replace_all(&c, b.p ? b.p : "", b.n, &tmp);
            free(b.p);
            b = c;
          }
        }
        ok = ok && lt__strs_push(out, b.p ? b.p : "", b.n);
      }
      break;
    case D_METASPACE:
      for (size_t i = 0; ok && i < in->count; i++) {
        b.n = 0;
        for (size_t q = 0; ok && q < in->n[i];) {
          if (in->n[i] - q >= d->na && memcmp(in->s[i] + q, d->a, d->na) == 0) {
            if (!(i == 0 && d->prepend_first)) ok = sb_put(&b, " ", 1);
            q += d->na;
          } else {
            ok = sb_put(&b, in->s[i] + q, 1);
            q++;
          }
        }
        ok = ok && lt__strs_push(out, b.p ? b.p : "", b.n);
      }
      break;
    case D_BYTEFALLBACK: {
      sbuf bytes = {0};
      size_t nbytes = 0;
      for (size_t i = 0; ok && i <= in->count; i++) {
        const char *s = i < in->count ? in->s[i] : NULL;
        size_t n = i < in->count ? in->n[i] : 0;
        unsigned v;
        char tail;
        bool is_byte = s && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
                       sscanf(s + 3, "%2x%c", &v, &tail) == 2 && tail == '>' &&
                       ((s[3] >= '0' && s[3] <= '9') || (s[3] >= 'A' && s[3] <= 'F') || (s[3] >= 'a' && s[3] <= 'f')) &&
                       ((s[4] >= '0' && s[4] <= '9') || (s[4] >= 'A' && s[4] <= 'F') || (s[4] >= 'a' && s[4] <= 'f'));
        if (is_byte) {
          char c = (char)v;
          ok = sb_put(&bytes, &c, 1);
          nbytes++;
          continue;
        }
        if (nbytes) {
          if (lt_utf8_valid(bytes.p, bytes.n, NULL)) ok = lt__strs_push(out, bytes.p, bytes.n);
          else
            for (size_t q = 0; ok && q < nbytes; q++) ok = lt__strs_push(out, "\xEF\xBF\xBD", 3);
          bytes.n = 0;
          nbytes = 0;
        }
        if (s) ok = ok && lt__strs_push(out, s, n);
      }
      free(bytes.p);
      break;
    }
    case D_STRIP:
      for (size_t i = 0; ok && i < in->count; i++) {
        const unsigned char *u = (const unsigned char *)in->s[i];
        size_t n = in->n[i], a = 0, e = n;
        uint32_t cp;
        int k;
        for (int64_t q = 0; q < d->start && a < n; q++) {
          if ((k = lt__utf8_decode(u, n, a, &cp)) <= 0 || cp != d->content) break;
          a += (size_t)k;
        }
        for (int64_t q = 0; q < d->stop && e > a; q++) {
          size_t p = e - 1;
          while (p > a && (u[p] & 0xC0) == 0x80) p--;
          if ((k = lt__utf8_decode(u, n, p, &cp)) <= 0 || cp != d->content) break;
          e = p;
        }
        ok = lt__strs_push(out, in->s[i] + a, e - a);
      }
      break;
    case D_REPLACE:
      for (size_t i = 0; ok && i < in->count; i++) {
        b.n = 0;
        ok = replace_all(&b, in->s[i], in->n[i], d) && lt__strs_push(out, b.p ? b.p : "", b.n);
      }
      break;
    case D_BPE:
      for (size_t i = 0; ok && i < in->count; i++) {
        b.n = 0;
        lt__hf_dec tmp = {.a = d->a, .na = d->na, .b = i + 1 == in->count ? "" : " ", .nb = i + 1 == in->count ? 0 : 1};
        ok = replace_all(&b, in->s[i], in->n[i], &tmp) && lt__strs_push(out, b.p ? b.p : "", b.n);
      }
      break;
    default:
      LT_CHECK(0);
  }
  free(b.p);
  return ok;
}

lt_status lt__hf_dec_apply(const lt__hf_dec *d, lt__strs *toks) {
  if (d->type == D_SEQ) {
    for (size_t i = 0; i < d->nkids; i++) {
      lt_status st = lt__hf_dec_apply(d->kids[i], toks);
      if (st != LT_OK) return st;
    }
    return LT_OK;
  }
  lt__strs out = {0};
  if (!dec_one(d, toks, &out)) {
    lt__strs_free(&out);
    return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory while decoding");
  }
  lt__strs_free(toks);
  *toks = out;
  return LT_OK;
}
