/*
 * datasets/hf_models.c: the models of tokenizer.json (tokenizers/src/models):
 *   BPE        merges as "a b" strings or ["a", "b"] pairs, applied by rank
 *              with a heap (leftmost first among equal ranks), unk_token and
 *              fuse_unk, byte_fallback (<0xAB> tokens),
 *              continuing_subword_prefix, end_of_word_suffix, ignore_merges;
 *   WordPiece  greedy longest match first, continuing_subword_prefix,
 *              max_input_chars_per_word, unk_token;
 *   WordLevel  the whole split or unk_token;
 *   Unigram    Viterbi over the scores on a byte trie (unknown characters
 *              score min - 10, as SentencePiece), unk_id, fused unknowns,
 *              byte_fallback.
 * A model turns one split (text with alignment) into tokens whose offsets
 * are original byte offsets.
 *
 * What this is not: BPE dropout (random; a dropout above 0 is refused) or
 * Unigram sampling.
 */
#include "datasets/hf_tokenizer_internal.h"
#include "datasets/tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { M_BPE, M_WORDPIECE, M_WORDLEVEL, M_UNIGRAM };

struct lt__hf_model {
  int type;
  lt__strmap vocab;
  int64_t unk_id;           /* -1: none */
  char *prefix, *suffix;    /* continuing_subword_prefix, end_of_word_suffix (NULL: none) */
  size_t nprefix, nsuffix;
  bool fuse_unk, byte_fallback, ignore_merges;
  lt__pairmap merges;       /* BPE: pair_key(a, b) -> rank << 32 | new id */
  int64_t byte_ids[256];    /* byte_fallback: id of <0xAB> or -1 */
  int64_t max_chars;        /* WordPiece */
  size_t max_len;           /* longest vocabulary entry in bytes */
  double *scores;           /* Unigram: per id */
  double min_score;
  int64_t nscores;
  lt__trie trie;             /* Unigram, WordPiece: every vocabulary entry -> its id */
};

void lt__hf_model_free(lt__hf_model *m) {
  if (!m) return;
  lt__strmap_free(&m->vocab);
  free(m->prefix);
  free(m->suffix);
  lt__pm_free(&m->merges);
  free(m->scores);
  lt__trie_free(&m->trie);
  free(m);
}

const lt__strmap *lt__hf_model_vocab(const lt__hf_model *m) { return &m->vocab; }

const char *lt__hf_model_type(const lt__hf_model *m) {
  static const char *const names[] = {"BPE", "WordPiece", "WordLevel", "Unigram"};
  return names[m->type];
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static lt_status nomem(const char *where) { return lt__err(LT_ERR_NOMEM, "tokenizer.json: %s: out of memory", where); }

/* vocab as {"token": id, ...} (BPE, WordPiece, WordLevel). */
static lt_status read_vocab_map(lt__hf_model *m, json_t *v, const char *where) {
  if (!json_is_object(v)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab must be an object {token: id}", where);
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    size_t n = strlen(key); /* jansson reads no NUL in an object key (it refuses the file) */
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= LT__HF_MAX_VOCAB)
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab[\"%.40s\"] must be an id in [0, %lld)", where, key,
                     (long long)LT__HF_MAX_VOCAB);
    if (n > LT__HF_MAX_TOKEN_BYTES)
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab has a token of %zu bytes (at most %d)", where, n,
                     LT__HF_MAX_TOKEN_BYTES);
    bool rep;
    if (!lt__strmap_set(&m->vocab, key, n, (int64_t)json_integer_value(val), &rep)) return nomem(where);
    if (n > m->max_len) m->max_len = n;
  }
  return LT_OK;
}

static lt_status opt_strdup(json_t *j, const char *where, const char *key, char **out, size_t *n) {
  const char *s = NULL;
  lt_status st = lt__hf_str_opt(j, where, key, &s, n);
  if (st != LT_OK || !s) return st;
  if (!(*out = lt__hf_strdup(s, *n))) return nomem(where);
  return LT_OK;
}

static lt_status unk_from_token(lt__hf_model *m, json_t *j, const char *where, bool required_in_vocab) {
  const char *u = NULL;
  size_t nu = 0;
  lt_status st = lt__hf_str_opt(j, where, "unk_token", &u, &nu);
  if (st != LT_OK) return st;
  m->unk_id = u ? lt__strmap_get(&m->vocab, u, nu) : -1;
  if (u && m->unk_id < 0 && required_in_vocab)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.unk_token \"%.40s\" is not in the vocabulary", where, u);
  return LT_OK;
}

/* One merge: "a b" or ["a", "b"]. */
static lt_status bpe_merge(lt__hf_model *m, json_t *e, size_t i, const char *where, char *buf) {
  const char *a, *b;
  size_t na, nb;
  if (json_is_string(e)) {
    const char *s = json_string_value(e);
    size_t n = json_string_length(e);
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu] \"%.60s\" must be two tokens separated by one space",
                     where, i, s);
    a = s, na = (size_t)(sp - s), b = sp + 1, nb = n - na - 1;
  } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
             json_is_string(json_array_get(e, 1))) {
    a = json_string_value(json_array_get(e, 0)), na = json_string_length(json_array_get(e, 0));
    b = json_string_value(json_array_get(e, 1)), nb = json_string_length(json_array_get(e, 1));
  } else {
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", where, i);
  }
  int64_t ia = lt__strmap_get(&m->vocab, a, na), ib = lt__strmap_get(&m->vocab, b, nb);
  if (ia < 0 || ib < 0)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu] names \"%.*s\", which is not in the vocabulary", where,
                   i, ia < 0 ? (int)(na > 60 ? 60 : na) : (int)(nb > 60 ? 60 : nb), ia < 0 ? a : b);
  if (nb < m->nprefix || memcmp(b, m->prefix ? m->prefix : "", m->nprefix) != 0) {
    if (m->nprefix && nb < m->nprefix)
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu]: its right part is shorter than the "
                     "continuing_subword_prefix", where, i);
  }
  size_t nn = na + nb - m->nprefix;
  if (nn > 2 * LT__HF_MAX_TOKEN_BYTES) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu] is too long", where, i);
  memcpy(buf, a, na);
  memcpy(buf + na, b + m->nprefix, nb - m->nprefix);
  int64_t id = lt__strmap_get(&m->vocab, buf, nn);
  if (id < 0)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges[%zu] makes \"%.*s\", which is not in the vocabulary", where,
                   i, (int)(nn > 60 ? 60 : nn), buf);
  bool found;
  int64_t old;
  uint64_t key = lt__pair_key(ia, ib), val = ((uint64_t)i << 32) | (uint64_t)id;
  if (!lt__pm_insert(&m->merges, key, (int64_t)val, &found, &old)) return nomem(where);
  if (found) m->merges.vals[lt__pm_slot(&m->merges, key)] = (int64_t)val; /* a repeated pair: the later one wins */
  return LT_OK;
}

static lt_status parse_bpe(lt__hf_model *m, json_t *j, const char *where) {
  lt_status st = lt__hf_known_keys(j, where, "BPE", KEYS("dropout", "unk_token", "continuing_subword_prefix",
                                   "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"));
  json_t *d = json_object_get(j, "dropout");
  if (st == LT_OK && d && !json_is_null(d) && (!json_is_number(d) || json_number_value(d) != 0.0))
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.dropout: BPE dropout (random merges) is not supported", where);
  if (st == LT_OK) st = read_vocab_map(m, json_object_get(j, "vocab"), where);
  if (st == LT_OK) st = opt_strdup(j, where, "continuing_subword_prefix", &m->prefix, &m->nprefix);
  if (st == LT_OK) st = opt_strdup(j, where, "end_of_word_suffix", &m->suffix, &m->nsuffix);
  if (st == LT_OK) st = lt__hf_bool_opt(j, where, "fuse_unk", &m->fuse_unk);
  if (st == LT_OK) st = lt__hf_bool_opt(j, where, "byte_fallback", &m->byte_fallback);
  if (st == LT_OK) st = lt__hf_bool_opt(j, where, "ignore_merges", &m->ignore_merges);
  if (st == LT_OK) st = unk_from_token(m, j, where, false);
  json_t *mg = json_object_get(j, "merges");
  if (st == LT_OK && mg && !json_is_array(mg))
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.merges must be an array", where);
  size_t nm = mg ? json_array_size(mg) : 0;
  if (st == LT_OK && (int64_t)nm >= LT__HF_MAX_VOCAB)
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s has %zu merges (at most %lld)", where, nm, (long long)LT__HF_MAX_VOCAB);
  if (st == LT_OK && !lt__pm_init(&m->merges, nm + 1)) st = nomem(where);
  char *buf = st == LT_OK ? malloc(2 * LT__HF_MAX_TOKEN_BYTES + 1) : NULL;
  if (st == LT_OK && !buf) st = nomem(where);
  for (size_t i = 0; st == LT_OK && i < nm; i++) st = bpe_merge(m, json_array_get(mg, i), i, where, buf);
  free(buf);
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    m->byte_ids[b] = lt__strmap_get(&m->vocab, name, 6);
  }
  return st;
}

/* A score as the tokenizers library holds it. Its JSON reader (serde_json
 * without float_roundtrip) makes a number from its decimal digits as
 * (double)significand, then one multiplication or division by a power of
 * ten, which can be an ulp away from the correctly rounded value jansson
 * gives; Viterbi ties then break another way. So the number's shortest
 * decimal form (what the library wrote) is read again that way. */
static double pow10_literal(int e) { /* the correctly rounded literal 1eN of serde's table */
  char b[16];
  snprintf(b, sizeof b, "1e%d", e);
  return strtod(b, NULL);
}

static double serde_f64(double v) {
  char buf[40];
  int p = 1;
  for (; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*e", p - 1, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (p > 17) return v;
  /* buf is [-]d[.ddd]e[+-]xx: p digits, exponent E */
  const char *q = buf;
  bool neg = *q == '-';
  if (neg) q++;
  uint64_t sig = 0;
  for (; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9') sig = sig * 10 + (uint64_t)(*q - '0');
  int exp10 = (*q == 'e' ? atoi(q + 1) : 0) - (p - 1);
  double f = (double)sig;
  if (exp10 >= 0) {
    f = exp10 <= 308 ? f * pow10_literal(exp10) : v;
  } else {
    while (-exp10 > 308 && f != 0.0) f /= 1e308, exp10 += 308;
    if (-exp10 <= 308) f /= pow10_literal(-exp10);
  }
  return neg ? -f : f;
}

static lt_status parse_unigram(lt__hf_model *m, json_t *j, const char *where) {
  lt_status st = lt__hf_known_keys(j, where, "Unigram", KEYS("unk_id", "vocab", "byte_fallback"));
  json_t *v = json_object_get(j, "vocab");
  if (st == LT_OK && !json_is_array(v))
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab must be an array of [piece, score]", where);
  if (st != LT_OK) return st;
  size_t n = json_array_size(v);
  if ((int64_t)n > LT__HF_MAX_VOCAB)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab has %zu pieces (at most %lld)", where, n, (long long)LT__HF_MAX_VOCAB);
  m->unk_id = -1;
  st = lt__hf_int_opt(j, where, "unk_id", 0, (int64_t)n - 1, &m->unk_id);
  if (st == LT_OK) st = lt__hf_bool_opt(j, where, "byte_fallback", &m->byte_fallback);
  if (st != LT_OK) return st;
  m->scores = malloc((n + 1) * sizeof *m->scores);
  if (!m->scores || !lt__trie_init(&m->trie, n * 4)) return nomem(where);
  m->nscores = (int64_t)n;
  m->min_score = INFINITY;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(json_array_get(e, 0)) ||
        !json_is_number(json_array_get(e, 1)))
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab[%zu] must be [piece, score]", where, i);
    const char *s = json_string_value(json_array_get(e, 0));
    size_t len = json_string_length(json_array_get(e, 0));
    double sc = serde_f64(json_number_value(json_array_get(e, 1)));
    if (!isfinite(sc)) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab[%zu] has a score that is not finite", where, i);
    if (len > LT__HF_MAX_TOKEN_BYTES)
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.vocab[%zu] is %zu bytes (at most %d)", where, i, len,
                     LT__HF_MAX_TOKEN_BYTES);
    bool rep;
    if (lt__strmap_get(&m->vocab, s, len) < 0 && !lt__strmap_set(&m->vocab, s, len, (int64_t)i, &rep)) return nomem(where);
    if (len && !lt__trie_add(&m->trie, s, len, (int64_t)i)) return nomem(where); /* a repeated piece keeps its first id */
    m->scores[i] = sc;
    if (sc < m->min_score) m->min_score = sc;
    if (len > m->max_len) m->max_len = len;
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    m->byte_ids[b] = lt__strmap_get(&m->vocab, name, 6);
  }
  return LT_OK;
}

lt__hf_model *lt__hf_model_parse(json_t *j, const char *where) {
  const char *type;
  if (lt__hf_type(j, where, &type) != LT_OK) return NULL;
  lt__hf_model *m = calloc(1, sizeof *m);
  if (!m) return nomem(where), NULL;
  m->unk_id = -1;
  lt_status st;
  if (strcmp(type, "BPE") == 0) {
    m->type = M_BPE;
    st = parse_bpe(m, j, where);
  } else if (strcmp(type, "WordPiece") == 0) {
    m->type = M_WORDPIECE;
    m->max_chars = 100;
    st = lt__hf_known_keys(j, where, type, KEYS("unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"));
    if (st == LT_OK) st = read_vocab_map(m, json_object_get(j, "vocab"), where);
    if (st == LT_OK && !lt__trie_init(&m->trie, m->vocab.count * 4)) st = nomem(where);
    for (size_t e = 0; st == LT_OK && e < m->vocab.count; e++)
      if (!lt__trie_add(&m->trie, m->vocab.blob + m->vocab.koff[e], m->vocab.klen[e], m->vocab.val[e])) st = nomem(where);
    if (st == LT_OK) st = lt__hf_int_opt(j, where, "max_input_chars_per_word", 0, INT64_MAX, &m->max_chars);
    if (st == LT_OK) st = opt_strdup(j, where, "continuing_subword_prefix", &m->prefix, &m->nprefix);
    if (st == LT_OK && !m->prefix) {
      if (!(m->prefix = lt__hf_strdup("##", 2))) st = nomem(where);
      m->nprefix = 2;
    }
    if (st == LT_OK) {
      if (!json_object_get(j, "unk_token") && lt__strmap_get(&m->vocab, "[UNK]", 5) >= 0)
        m->unk_id = lt__strmap_get(&m->vocab, "[UNK]", 5);
      else
        st = unk_from_token(m, j, where, true);
    }
  } else if (strcmp(type, "WordLevel") == 0) {
    m->type = M_WORDLEVEL;
    st = lt__hf_known_keys(j, where, type, KEYS("unk_token", "vocab"));
    if (st == LT_OK) st = read_vocab_map(m, json_object_get(j, "vocab"), where);
    if (st == LT_OK) st = unk_from_token(m, j, where, false);
  } else if (strcmp(type, "Unigram") == 0) {
    m->type = M_UNIGRAM;
    st = parse_unigram(m, j, where);
  } else {
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the model \"%s\" is not supported (supported: BPE, WordPiece, "
                 "WordLevel, Unigram)", where, type);
  }
  if (st != LT_OK) {
    lt__hf_model_free(m);
    return NULL;
  }
  return m;
}

/* ---- tokenizing ---------------------------------------------------------------------- */

static lt_status oom(void) { return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory in the model"); }

/* Original offsets of the split's bytes [a, b). */
static bool push_tok(lt__tokens *out, const lt__ntext *t, int64_t id, size_t a, size_t b) {
  size_t s = a < t->n ? t->os[a] : (t->n ? t->oe[t->n - 1] : 0);
  size_t e = b > a ? t->oe[b - 1] : s;
  return lt__tokens_push(out, id, (int64_t)s, (int64_t)e);
}

typedef struct {
  int64_t id;
  size_t a, b;        /* bytes of the split */
  int64_t prev, next; /* linked list; -1 ends */
} sym;

typedef struct {
  uint64_t rank; /* rank << 32 | pos */
  int64_t new_id;
} hent;

static void heap_push(hent *h, size_t *n, hent e) {
  size_t i = (*n)++;
  while (i > 0 && h[(i - 1) / 2].rank > e.rank) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = e;
}

static hent heap_pop(hent *h, size_t *n) {
  hent top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1].rank < h[c].rank) c++;
    if (h[c].rank >= last.rank) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

static bool merge_of(const lt__hf_model *m, int64_t a, int64_t b, uint64_t *rank, int64_t *id) {
  int64_t v;
  if (!lt__pm_get(&m->merges, lt__pair_key(a, b), &v)) return false;
  *rank = (uint64_t)v >> 32;
  *id = (int64_t)((uint64_t)v & 0xFFFFFFFFu);
  return true;
}

static lt_status bpe_tokenize(const lt__hf_model *m, const lt__ntext *t, lt__tokens *out) {
  if (t->n == 0) return LT_OK;
  if (m->ignore_merges) {
    int64_t id = lt__strmap_get(&m->vocab, t->s, t->n);
    if (id >= 0) return push_tok(out, t, id, 0, t->n) ? LT_OK : oom();
  }
  /* At most one symbol per byte, plus the prefix and suffix bytes of byte-fallback tokens. */
  size_t maxsym = t->n * (1 + m->nprefix + m->nsuffix) + 1;
  sym *w = malloc(maxsym * sizeof *w);
  hent *h = malloc(3 * maxsym * sizeof *h); /* each merge pushes at most two entries */
  char *buf = malloc(m->nprefix + m->nsuffix + 5);
  lt_status st = LT_OK;
  if (!w || !h || !buf) {
    st = oom();
    goto done;
  }
  size_t ns = 0;
  int64_t unk = -1;
  size_t unk_a = 0, unk_b = 0;
#define ADD(ID, A, B) (w[ns] = (sym){(ID), (A), (B), (int64_t)ns - 1, (int64_t)ns + 1}, ns++)
  for (size_t i = 0; i < t->n;) {
    int k;
    lt__ntext_cp(t, i, &k);
    size_t e = i + (size_t)k, nb = 0;
    if (i > 0 && m->prefix) memcpy(buf, m->prefix, m->nprefix), nb = m->nprefix;
    memcpy(buf + nb, t->s + i, (size_t)k), nb += (size_t)k;
    if (e == t->n && m->suffix) memcpy(buf + nb, m->suffix, m->nsuffix), nb += m->nsuffix;
    int64_t id = lt__strmap_get(&m->vocab, buf, nb);
    if (id >= 0) {
      if (unk >= 0) ADD(unk, unk_a, unk_b), unk = -1;
      ADD(id, i, e);
    } else {
      bool done_bytes = false;
      if (m->byte_fallback) {
        bool all = true;
        for (size_t q = 0; q < nb && all; q++) all = m->byte_ids[(unsigned char)buf[q]] >= 0;
        if (all) { /* as tokenizers: each byte token covers one byte of the split */
          for (size_t q = 0; q < nb; q++) {
            size_t a = i + q < e ? i + q : e - 1;
            ADD(m->byte_ids[(unsigned char)buf[q]], a, a + 1);
          }
          done_bytes = true;
        }
      }
      if (!done_bytes && m->unk_id >= 0) {
        if (unk >= 0 && m->fuse_unk) {
          unk_b = e;
        } else {
          if (unk >= 0) ADD(unk, unk_a, unk_b);
          unk = m->unk_id, unk_a = i, unk_b = e;
        }
      }
    }
    i = e;
  }
  if (unk >= 0) ADD(unk, unk_a, unk_b);
#undef ADD
  if (ns) w[ns - 1].next = -1;
  size_t nh = 0;
  for (size_t i = 0; i + 1 < ns; i++) {
    uint64_t r;
    int64_t id;
    if (merge_of(m, w[i].id, w[i + 1].id, &r, &id)) heap_push(h, &nh, (hent){(r << 32) | i, id});
  }
  while (nh) {
    hent top = heap_pop(h, &nh);
    size_t p = (size_t)(top.rank & 0xFFFFFFFFu);
    if (w[p].b == SIZE_MAX || w[p].next < 0) continue; /* removed, or last */
    size_t q = (size_t)w[p].next;
    uint64_t r;
    int64_t id;
    if (!merge_of(m, w[p].id, w[q].id, &r, &id) || id != top.new_id) continue; /* stale */
    w[p].id = id;
    w[p].b = w[q].b;
    w[p].next = w[q].next;
    w[q].b = SIZE_MAX;
    if (w[p].next >= 0) w[w[p].next].prev = (int64_t)p;
    if (w[p].prev >= 0 && merge_of(m, w[w[p].prev].id, w[p].id, &r, &id))
      heap_push(h, &nh, (hent){(r << 32) | (uint64_t)w[p].prev, id});
    if (w[p].next >= 0 && merge_of(m, w[p].id, w[w[p].next].id, &r, &id))
      heap_push(h, &nh, (hent){(r << 32) | p, id});
  }
  for (size_t i = 0; i < ns && st == LT_OK; i++)
    if (w[i].b != SIZE_MAX && !push_tok(out, t, w[i].id, w[i].a, w[i].b)) st = oom();
done:
  free(w);
  free(h);
  free(buf);
  return st;
}

static lt_status wordpiece_tokenize(const lt__hf_model *m, const lt__ntext *t, lt__tokens *out) {
  if (t->n == 0) return LT_OK;
  size_t nchars = 0;
  for (size_t i = 0; i < t->n; i++) nchars += ((unsigned char)t->s[i] & 0xC0) != 0x80;
  if ((int64_t)nchars > m->max_chars) {
    if (m->unk_id < 0) return lt__err(LT_ERR_INVALID, "tokenizer: WordPiece needs an unk_token in its vocabulary");
    return push_tok(out, t, m->unk_id, 0, t->n) ? LT_OK : oom();
  }
  /* The node after the continuing prefix: where every piece but the first starts. */
  int64_t cont = 0;
  for (size_t q = 0; q < m->nprefix && cont >= 0; q++) cont = lt__trie_step(&m->trie, cont, (unsigned char)m->prefix[q]);
  size_t mark = out->n, start = 0;
  while (start < t->n) {
    /* The longest entry that spells (prefix +) t[start..end): one walk down
     * the trie (an entry is UTF-8, so it ends on a character boundary). */
    int64_t node = start == 0 ? 0 : cont, found = -1;
    size_t end = start;
    for (size_t e = start; node >= 0 && e < t->n; e++) {
      node = lt__trie_step(&m->trie, node, (unsigned char)t->s[e]);
      if (node >= 0 && m->trie.val[node] >= 0) found = m->trie.val[node], end = e + 1;
    }
    if (found < 0) {
      out->n = mark;
      if (m->unk_id < 0) return lt__err(LT_ERR_INVALID, "tokenizer: WordPiece needs an unk_token in its vocabulary");
      return push_tok(out, t, m->unk_id, 0, t->n) ? LT_OK : oom();
    }
    if (!push_tok(out, t, found, start, end)) return oom();
    start = end;
  }
  return LT_OK;
}

typedef struct {
  int64_t id;
  double score;
  int64_t from; /* -1: not reached */
} vnode;

static lt_status unigram_tokenize(const lt__hf_model *m, const lt__ntext *t, lt__tokens *out) {
  size_t n = t->n;
  if (n == 0) return LT_OK;
  vnode *best = malloc((n + 1) * sizeof *best);
  if (!best) return oom();
  for (size_t i = 0; i <= n; i++) best[i] = (vnode){0, 0.0, -1};
  double unk_score = m->min_score - 10.0;
  lt_status st = LT_OK;
  for (size_t s = 0; s < n;) {
    int k;
    lt__ntext_cp(t, s, &k);
    bool single = false;
    double here = best[s].score;
    int64_t node = 0;
    for (size_t e = s; e < n; e++) {
      if ((node = lt__trie_step(&m->trie, node, (unsigned char)t->s[e])) < 0) break;
      int64_t id = m->trie.val[node];
      if (id < 0) continue;
      double cand = m->scores[id] + here;
      vnode *tn = &best[e + 1];
      if (tn->from < 0 || cand > tn->score) *tn = (vnode){id, cand, (int64_t)s};
      if (e + 1 - s == (size_t)k) single = true;
    }
    if (!single) {
      if (m->unk_id < 0) {
        st = lt__err(LT_ERR_INVALID, "tokenizer: Unigram meets a character it cannot encode and has no unk_id");
        break;
      }
      vnode *tn = &best[s + (size_t)k];
      double cand = unk_score + here;
      if (tn->from < 0 || cand > tn->score) *tn = (vnode){m->unk_id, cand, (int64_t)s};
    }
    s += (size_t)k;
  }
  /* Back from the end: pieces (a, b, id), unknowns fused (fuse_unk is always on). */
  size_t cap = 0, np = 0;
  struct piece { size_t a, b; int64_t id; } *pc = NULL;
  for (size_t e = n; st == LT_OK && e > 0;) {
    size_t s = (size_t)best[e].from;
    int64_t id = best[e].id;
    if (id == m->unk_id && np && pc[np - 1].id == m->unk_id && pc[np - 1].a == e) {
      pc[np - 1].a = s;
    } else {
      if (!lt__hf_grow(&pc, &cap, np + 1, sizeof *pc)) {
        st = oom();
        break;
      }
      pc[np++] = (struct piece){s, e, id};
    }
    e = s;
  }
  for (size_t r = np; st == LT_OK && r-- > 0;) {
    size_t a = pc[r].a, b = pc[r].b;
    int64_t id = pc[r].id;
    /* A fused unknown run is looked up again (tokenizers looks up its string). */
    if (id == m->unk_id) {
      int64_t known = lt__strmap_get(&m->vocab, t->s + a, b - a);
      if (known >= 0) id = known;
    }
    if (id == m->unk_id && m->byte_fallback) {
      bool all = true;
      for (size_t q = a; q < b && all; q++) all = m->byte_ids[(unsigned char)t->s[q]] >= 0;
      if (all) {
        for (size_t q = a; q < b && st == LT_OK; q++)
          if (!push_tok(out, t, m->byte_ids[(unsigned char)t->s[q]], a, b)) st = oom();
        continue;
      }
    }
    if (!push_tok(out, t, id, a, b)) st = oom();
  }
  free(pc);
  free(best);
  return st;
}

lt_status lt__hf_model_tokenize(const lt__hf_model *m, const lt__ntext *t, lt__tokens *out) {
  switch (m->type) {
    case M_BPE: return bpe_tokenize(m, t, out);
    case M_WORDPIECE: return wordpiece_tokenize(m, t, out);
    case M_UNIGRAM: return unigram_tokenize(m, t, out);
    default: {
      if (t->n == 0) return LT_OK;
      int64_t id = lt__strmap_get(&m->vocab, t->s, t->n);
      if (id < 0) id = m->unk_id;
      if (id < 0) return lt__err(LT_ERR_INVALID, "tokenizer: WordLevel: a word is not in the vocabulary and there is no unk_token");
      return push_tok(out, t, id, 0, t->n) ? LT_OK : oom();
    }
  }
}
