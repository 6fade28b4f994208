/*
 * datasets/tokenizer.c: byte-level, character-level and byte-level BPE
 * tokenizers, their encode/decode, and their serialisation to a byte buffer.
 *
 * Every tokenizer shares the special ids 0..3 (<pad>, <bos>, <eos>, <unk>,
 * datasets.h). Byte and BPE tokenizers map byte b to id 4 + b, so any input is
 * encodable and decoding inverts encoding exactly; BPE adds one id per learned
 * merge (merge i makes id 260 + i). The char tokenizer's vocabulary is a sorted
 * list of code points.
 *
 * BPE training lives in bpe_train.c, UTF-8 in utf8.c. BPE training (Sennrich et al. 2016, "Neural Machine Translation of Rare Words
 * with Subword Units"; byte-level as GPT-2): the text is cut into pieces (see
 * next_piece), identical pieces are counted once with their frequency, and each
 * step merges the most frequent adjacent pair (ties: smallest (left, right)).
 * Pair counts are kept up to date incrementally: each pair knows the pieces it
 * occurs in, so a merge only revisits those pieces, and a max-heap with lazy
 * deletion (stale entries are skipped when popped) finds the best pair.
 * Encoding a piece applies merges by rank (lowest first), as GPT-2's encoder.
 *
 * What this is not: a SentencePiece/tiktoken-compatible tokenizer (no regex
 * pre-tokenizer, no Unicode normalisation) or a fast encoder for gigabyte
 * corpora (one piece at a time, quadratic in the piece length, which is capped).
 */
#include "datasets/datasets.h"
#include "datasets/tokenizer_internal.h"
#include "tensor/runtime_internal.h" /* lt__threads_for */
#include "datasets/utf8_internal.h"
#include "tensor/error_internal.h"
#include "tensor/byteorder_internal.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>


static const char *const special_names[LT__NSPEC] = {"<pad>", "<bos>", "<eos>", "<unk>"};

/* ======================================================================== */
/* Small containers: a growable byte buffer, the pair map, growable arrays   */
/* ======================================================================== */

typedef struct {
  char *p;
  size_t n, cap;
} bytebuf;

static bool bb_reserve(bytebuf *b, size_t extra) {
  if (extra <= b->cap - b->n) return true;
  size_t need = b->n + extra;
  if (need < b->n) return false;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) return false;
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return false;
  b->p = p;
  b->cap = cap;
  return true;
}

static bool bb_put(bytebuf *b, const void *src, size_t n) {
  if (!bb_reserve(b, n)) return false;
  if (n) memcpy(b->p + b->n, src, n);
  b->n += n;
  return true;
}


void lt__pm_free(lt__pairmap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

bool lt__pm_init(lt__pairmap *m, size_t want) {
  size_t cap = 16;
  while (cap < want * 2) cap *= 2;
  m->keys = malloc(cap * sizeof *m->keys);
  m->vals = malloc(cap * sizeof *m->vals);
  if (!m->keys || !m->vals) {
    lt__pm_free(m);
    return false;
  }
  memset(m->keys, 0xff, cap * sizeof *m->keys);
  m->cap = cap;
  m->count = 0;
  return true;
}

static bool pm_grow(lt__pairmap *m) {
  lt__pairmap n;
  if (!lt__pm_init(&n, m->cap)) return false;
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != LT__PM_EMPTY) {
      size_t j = lt__pm_slot(&n, m->keys[i]);
      n.keys[j] = m->keys[i];
      n.vals[j] = m->vals[i];
    }
  n.count = m->count;
  lt__pm_free(m);
  *m = n;
  return true;
}

/* Inserts k -> v if k is absent. *found tells whether it was there; *v_out is
 * the value now stored. */
bool lt__pm_insert(lt__pairmap *m, uint64_t k, int64_t v, bool *found, int64_t *v_out) {
  if ((m->count + 1) * 2 > m->cap && !pm_grow(m)) return false;
  size_t i = lt__pm_slot(m, k);
  if (m->keys[i] != LT__PM_EMPTY) {
    *found = true;
    *v_out = m->vals[i];
    return true;
  }
  m->keys[i] = k;
  m->vals[i] = v;
  m->count++;
  *found = false;
  *v_out = v;
  return true;
}
bool lt__grow(void *pp, int64_t *cap, int64_t need, size_t sz) {
  if (need <= *cap) return true;
  int64_t c = *cap ? *cap : 16;
  while (c < need) {
    if (c > INT64_MAX / 2) return false;
    c *= 2;
  }
  if ((uint64_t)c > SIZE_MAX / sz) return false;
  void *p;
  memcpy(&p, pp, sizeof p);
  void *q = realloc(p, (size_t)c * sz);
  if (!q) return false;
  memcpy(pp, &q, sizeof q);
  *cap = c;
  return true;
}


/* ======================================================================== */
/* The tokenizer object                                                     */
/* ======================================================================== */


void lt_tokenizer_free(lt_tokenizer *tok) {
  if (!tok) return;
  free(tok->cps);
  free(tok->merge_l);
  free(tok->merge_r);
  lt__pm_free(&tok->ranks);
  free(tok->blob);
  free(tok->tok_off);
  if (tok->ops) tok->ops->free(tok->impl);
  free(tok);
}

lt_tokenizer *lt__tok_alloc(lt_tokenizer_kind kind, const char *op) {
  lt_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    return NULL;
  }
  t->kind = kind;
  return t;
}

lt_tokenizer *lt_tokenizer_new_byte(void) {
  lt_tokenizer *t = lt__tok_alloc(LT_TOKENIZER_BYTE, "tokenizer_new_byte");
  if (t) t->vocab = LT__NBASE;
  return t;
}

static const char *const tokenizer_kind_names[] = {"byte", "char", "bpe", "hf"};

const char *lt_tokenizer_kind_name(lt_tokenizer_kind kind) {
  return lt_enum_name(tokenizer_kind_names, 4, (int)kind);
}

LT_ENUM_PARSER(lt_tokenizer_kind_parse, lt_tokenizer_kind, "tokenizer", tokenizer_kind_names, 4, NULL, 0)

lt_tokenizer_kind lt_tokenizer_get_kind(const lt_tokenizer *tok) {
  return tok ? tok->kind : LT_TOKENIZER_BYTE;
}
int64_t lt_tokenizer_vocab_size(const lt_tokenizer *tok) { return tok ? tok->vocab : 0; }
int64_t lt_tokenizer_num_merges(const lt_tokenizer *tok) {
  return tok && tok->kind == LT_TOKENIZER_BPE ? tok->nmerges : 0;
}

lt_status lt_tokenizer_merge(const lt_tokenizer *tok, int64_t i, int64_t *left, int64_t *right) {
  if (!tok) return lt__err_null("tokenizer_merge", "tok");
  if (!left || !right) return lt__err(LT_ERR_NULL, "tokenizer_merge: left and right must not be NULL");
  int64_t n = lt_tokenizer_num_merges(tok);
  if (i < 0 || i >= n)
    return lt__err(LT_ERR_INDEX, "tokenizer_merge: merge %lld is outside [0, %lld)", (long long)i,
                   (long long)n);
  *left = tok->merge_l[i];
  *right = tok->merge_r[i];
  return LT_OK;
}

/* ---- char tokenizer ------------------------------------------------------- */

/* Builds a char tokenizer from a sorted, duplicate-free list (takes ownership of cps). */
static lt_tokenizer *char_from_cps(uint32_t *cps, int64_t n, const char *op) {
  lt_tokenizer *t = lt__tok_alloc(LT_TOKENIZER_CHAR, op);
  if (!t) {
    free(cps);
    return NULL;
  }
  t->cps = cps;
  t->ncps = n;
  t->vocab = LT__NSPEC + n;
  return t;
}

lt_tokenizer *lt_tokenizer_new_char(const char *text, size_t len) {
  const char *op = "tokenizer_new_char";
  if (!text && len) return lt__err(LT_ERR_NULL, "%s: text is NULL", op), NULL;
  if (len == 0) return lt__err(LT_ERR_INVALID, "%s: the text is empty: nothing to build a vocabulary from", op), NULL;
  size_t bad;
  if (!lt_utf8_valid(text, len, &bad))
    return lt__err(LT_ERR_FORMAT, "%s: invalid UTF-8 at byte offset %zu (byte 0x%02x)", op, bad,
                   (unsigned)(unsigned char)text[bad]), NULL;
  /* One bit per code point (136 KiB), then read off in order: sorted for free. */
  size_t nwords = (LT__MAX_CODEPOINT + 1 + 63) / 64;
  uint64_t *seen = calloc(nwords, sizeof *seen);
  if (!seen) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  const unsigned char *u = (const unsigned char *)text;
  int64_t count = 0;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int k = lt__utf8_decode(u, len, i, &cp);
    LT_CHECK(k > 0); /* validated above */
    i += (size_t)k;
    uint64_t bit = (uint64_t)1 << (cp & 63);
    if (!(seen[cp >> 6] & bit)) {
      seen[cp >> 6] |= bit;
      count++;
    }
  }
  uint32_t *cps = malloc((size_t)count * sizeof *cps);
  if (!cps) {
    free(seen);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  }
  int64_t j = 0;
  for (size_t w = 0; w < nwords; w++)
    for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
      cps[j++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
  free(seen);
  return char_from_cps(cps, count, op);
}

static int64_t char_id(const lt_tokenizer *t, uint32_t cp) {
  int64_t lo = 0, hi = t->ncps;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t->cps[mid] < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->ncps && t->cps[lo] == cp ? LT__NSPEC + lo : LT_TOKEN_UNK;
}

/* ---- BPE: pieces ------------------------------------------------------------ */

static inline bool is_ws(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
/* 0 letter (ASCII letters and every byte of a multi-byte UTF-8 character),
 * 1 digit, 2 other symbols. */
static inline int char_class(unsigned c) {
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 0;
  if (c >= 0x80) return 0;
  if (c >= '0' && c <= '9') return 1;
  return 2;
}

/* End of the piece that starts at s[i] (i < n). A piece is
 *   - an optional single space followed by a run of one class (" hello",
 *     "world", " 42", "!!"), or
 *   - a run of whitespace, leaving out a last space that is followed by a
 *     non-space (that space starts the next piece),
 * and at most LT_BPE_MAX_PIECE bytes long (a longer run is cut). */
size_t lt__bpe_next_piece(const unsigned char *s, size_t n, size_t i) {
  size_t j;
  if (s[i] == ' ' && i + 1 < n && !is_ws(s[i + 1])) {
    int c = char_class(s[i + 1]);
    j = i + 2;
    while (j < n && !is_ws(s[j]) && char_class(s[j]) == c) j++;
  } else if (is_ws(s[i])) {
    j = i + 1;
    while (j < n && is_ws(s[j])) j++;
    if (j < n && j - 1 > i && s[j - 1] == ' ') j--;
  } else {
    int c = char_class(s[i]);
    j = i + 1;
    while (j < n && !is_ws(s[j]) && char_class(s[j]) == c) j++;
  }
  if (j - i > LT_BPE_MAX_PIECE) j = i + LT_BPE_MAX_PIECE;
  return j;
}

lt_status lt__bpe_build_tables(lt_tokenizer *t, const char *op) {
  int64_t ntok = 256 + t->nmerges;
  t->tok_off = malloc((size_t)(ntok + 1) * sizeof *t->tok_off);
  if (!t->tok_off || !lt__pm_init(&t->ranks, (size_t)t->nmerges + 1))
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  int64_t total = 256;
  int64_t *lens = t->tok_off; /* first pass: lengths in tok_off[1..] */
  lens[0] = 0;
  for (int64_t b = 0; b < 256; b++) lens[b + 1] = 1;
  for (int64_t i = 0; i < t->nmerges; i++) {
    int64_t l = t->merge_l[i], r = t->merge_r[i], id = LT__NBASE + i;
    if (l < LT__BYTE0 || l >= id || r < LT__BYTE0 || r >= id)
      return lt__err(LT_ERR_FORMAT, "%s: merge %lld joins ids %lld and %lld: both must be in [%d, %lld)",
                     op, (long long)i, (long long)l, (long long)r, LT__BYTE0, (long long)id);
    int64_t len = lens[l - LT__BYTE0 + 1] + lens[r - LT__BYTE0 + 1];
    if (len > LT_BPE_MAX_PIECE)
      return lt__err(LT_ERR_FORMAT, "%s: merge %lld makes a token of %lld bytes (at most %d)", op,
                     (long long)i, (long long)len, LT_BPE_MAX_PIECE);
    lens[i + 256 + 1] = len;
    total += len;
    bool found;
    int64_t v;
    if (!lt__pm_insert(&t->ranks, lt__pair_key(l, r), i, &found, &v))
      return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    if (found)
      return lt__err(LT_ERR_FORMAT, "%s: merge %lld repeats merge %lld (%lld, %lld)", op, (long long)i,
                     (long long)v, (long long)l, (long long)r);
  }
  t->blob = malloc((size_t)total);
  if (!t->blob) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  for (int64_t k = 0; k < ntok; k++) lens[k + 1] += lens[k]; /* lengths -> offsets */
  for (int64_t b = 0; b < 256; b++) t->blob[b] = (unsigned char)b;
  for (int64_t i = 0; i < t->nmerges; i++) {
    int64_t l = t->merge_l[i] - LT__BYTE0, r = t->merge_r[i] - LT__BYTE0, k = 256 + i;
    int64_t ll = t->tok_off[l + 1] - t->tok_off[l];
    memcpy(t->blob + t->tok_off[k], t->blob + t->tok_off[l], (size_t)ll);
    memcpy(t->blob + t->tok_off[k] + ll, t->blob + t->tok_off[r], (size_t)(t->tok_off[r + 1] - t->tok_off[r]));
  }
  return LT_OK;
}

/* ---- encode / decode ------------------------------------------------------ */

typedef struct {
  int64_t *p;
  int64_t n, cap;
} idbuf;

static inline bool ib_push(idbuf *b, int64_t id) {
  if (b->n == b->cap && !lt__grow(&b->p, &b->cap, b->n + 1, sizeof(int64_t))) return false;
  b->p[b->n++] = id;
  return true;
}

/* Encodes one piece s[0..n) (n <= LT_BPE_MAX_PIECE) with BPE: repeatedly
 * merge every occurrence (left to right) of the adjacent pair of lowest rank. */
static bool bpe_encode_piece(const lt_tokenizer *t, const unsigned char *s, size_t n, idbuf *out) {
  int64_t sym[LT_BPE_MAX_PIECE];
  int64_t m = (int64_t)n;
  for (int64_t i = 0; i < m; i++) sym[i] = LT__BYTE0 + s[i];
  while (m > 1) {
    int64_t best = INT64_MAX, v;
    for (int64_t i = 0; i + 1 < m; i++)
      if (lt__pm_get(&t->ranks, lt__pair_key(sym[i], sym[i + 1]), &v) && v < best) best = v;
    if (best == INT64_MAX) break;
    int64_t l = t->merge_l[best], r = t->merge_r[best], k = 0;
    for (int64_t i = 0; i < m;) {
      if (i + 1 < m && sym[i] == l && sym[i + 1] == r) {
        sym[k++] = LT__NBASE + best;
        i += 2;
      } else {
        sym[k++] = sym[i++];
      }
    }
    m = k;
  }
  for (int64_t i = 0; i < m; i++)
    if (!ib_push(out, sym[i])) return false;
  return true;
}

lt_status lt_tokenizer_encode(const lt_tokenizer *tok, const char *text, size_t len, int64_t **ids,
                              int64_t *n) {
  const char *op = "tokenizer_encode";
  if (!tok) return lt__err_null(op, "tok");
  if (!ids || !n) return lt__err(LT_ERR_NULL, "%s: ids and n must not be NULL", op);
  if (!text && len) return lt__err(LT_ERR_NULL, "%s: text is NULL but len is %zu", op, len);
  if ((uint64_t)len > (uint64_t)INT64_MAX / 8)
    return lt__err(LT_ERR_OVERFLOW, "%s: text of %zu bytes is too long", op, len);
  if (tok->ops) return tok->ops->encode(tok->impl, text, len, 0, ids, NULL, n);
  const unsigned char *s = (const unsigned char *)text;
  idbuf out = {0};
  /* Every tokenizer makes at most one id per byte; start with a fair guess. */
  if (!lt__grow(&out.p, &out.cap, tok->kind == LT_TOKENIZER_BPE ? (int64_t)len / 3 + 1 : (int64_t)len + 1,
            sizeof(int64_t)))
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %zu bytes of text", op, len);
  switch (tok->kind) {
    case LT_TOKENIZER_BYTE:
      for (size_t i = 0; i < len; i++) out.p[i] = LT__BYTE0 + s[i];
      out.n = (int64_t)len;
      break;
    case LT_TOKENIZER_CHAR:
      for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = lt__utf8_decode(s, len, i, &cp);
        if (!k) {
          free(out.p);
          return lt__err(LT_ERR_FORMAT,
                         "%s: invalid UTF-8 at byte offset %zu (byte 0x%02x): a char tokenizer needs UTF-8 text",
                         op, i, (unsigned)s[i]);
        }
        out.p[out.n++] = char_id(tok, cp);
        i += (size_t)k;
      }
      break;
    case LT_TOKENIZER_HF:
      LT_CHECK(0); /* its ops, above */
      break;
    case LT_TOKENIZER_BPE:
      for (size_t i = 0; i < len;) {
        size_t j = lt__bpe_next_piece(s, len, i);
        if (!bpe_encode_piece(tok, s + i, j - i, &out)) {
          free(out.p);
          return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
        }
        i = j;
      }
      break;
  }
  *ids = out.p;
  *n = out.n;
  return LT_OK;
}

lt_status lt_tokenizer_encode_ex(const lt_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                 int64_t **ids, int64_t **offsets, int64_t *n) {
  const char *op = "tokenizer_encode";
  if (!tok) return lt__err_null(op, "tok");
  if (!ids || !n) return lt__err(LT_ERR_NULL, "%s: ids and n must not be NULL", op);
  if (!text && len) return lt__err(LT_ERR_NULL, "%s: text is NULL but len is %zu", op, len);
  if (tok->ops) return tok->ops->encode(tok->impl, text, len, flags, ids, offsets, n);
  int64_t *p, m;
  lt_status st = lt_tokenizer_encode(tok, text, len, &p, &m);
  if (st != LT_OK || !offsets) {
    if (st == LT_OK) *ids = p, *n = m;
    return st;
  }
  /* The ids spell the text in order: each token's bytes are its decoded length. */
  int64_t *o = malloc((size_t)(m ? m : 1) * 2 * sizeof *o);
  if (!o) {
    free(p);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  int64_t at = 0;
  for (int64_t i = 0; i < m; i++) {
    int64_t k = 1, id = p[i];
    if (tok->kind == LT_TOKENIZER_BPE) k = tok->tok_off[id - LT__BYTE0 + 1] - tok->tok_off[id - LT__BYTE0];
    else if (tok->kind == LT_TOKENIZER_CHAR) { /* <unk> or a code point: one character of the text */
      uint32_t cp;
      k = lt__utf8_decode((const unsigned char *)text, len, (size_t)at, &cp);
    }
    o[2 * i] = at, o[2 * i + 1] = at + k;
    at += k;
  }
  *ids = p, *offsets = o, *n = m;
  return LT_OK;
}

int64_t lt_tokenizer_token_id(const lt_tokenizer *tok, const char *s, size_t n) {
  if (!tok || (!s && n)) return -1;
  if (tok->ops) return tok->ops->token_id(tok->impl, s, n);
  for (int i = 0; i < LT__NSPEC; i++)
    if (strlen(special_names[i]) == n && memcmp(special_names[i], s, n) == 0) return i;
  return -1;
}

lt_status lt_tokenizer_encode_batch(const lt_tokenizer *tok, const char *const *texts, const size_t *lens, int64_t n,
                                    unsigned flags, int64_t **ids, int64_t *starts) {
  const char *op = "tokenizer_encode_batch";
  if (!tok) return lt__err_null(op, "tok");
  if (!ids || !starts) return lt__err(LT_ERR_NULL, "%s: ids and starts must not be NULL", op);
  if (n < 0) return lt__err(LT_ERR_INVALID, "%s: n is %lld, must be >= 0", op, (long long)n);
  if (n > 0 && (!texts || !lens)) return lt__err(LT_ERR_NULL, "%s: texts and lens must not be NULL", op);
  int64_t **part = calloc((size_t)(n ? n : 1), sizeof *part), *cnt = calloc((size_t)(n ? n : 1), sizeof *cnt);
  if (!part || !cnt) {
    free(part), free(cnt);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  /* Each text is encoded whole by one thread into its own slot; a failure
   * marks the slot (-1) and the first failing index is encoded again below,
   * on this thread, for its message (the error state is per thread). */
  size_t bytes = 0;
  for (int64_t i = 0; i < n; i++) bytes += lens[i];
  const int nt = lt__threads_for((int64_t)(bytes < (size_t)INT64_MAX / 4 ? bytes * 4 : (size_t)INT64_MAX), n); /* threads from 8 KiB of text */
#pragma omp parallel for schedule(dynamic, 16) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; i++)
    if (lt_tokenizer_encode_ex(tok, texts[i], lens[i], flags, &part[i], NULL, &cnt[i]) != LT_OK) part[i] = NULL,
      cnt[i] = -1;
  int64_t total = 0, bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    if (cnt[i] < 0) bad = i;
    else total += cnt[i];
  }
  int64_t *all = NULL;
  lt_status st = LT_OK;
  if (bad >= 0) {
    int64_t *p = NULL, m;
    st = lt_tokenizer_encode_ex(tok, texts[bad], lens[bad], flags, &p, NULL, &m); /* the same failure, here */
    free(p);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    st = lt__err(st != LT_OK ? st : LT_ERR_INVALID, "%s: text %lld: %s", op, (long long)bad, msg);
  } else if (total > 0 && !(all = malloc((size_t)total * sizeof *all))) {
    st = lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld ids", op, (long long)total);
  }
  if (st == LT_OK) {
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
      starts[i] = at;
      if (cnt[i]) memcpy(all + at, part[i], (size_t)cnt[i] * sizeof *all);
      at += cnt[i];
    }
    starts[n] = at;
    *ids = all;
  }
  for (int64_t i = 0; i < n; i++) free(part[i]);
  free(part), free(cnt);
  return st;
}

static int64_t first_token_of(const lt_tokenizer *tok, const char *const *names) {
  for (; *names; names++) {
    int64_t id = lt_tokenizer_token_id(tok, *names, strlen(*names));
    if (id >= 0) return id;
  }
  return -1;
}

lt_special_ids lt_tokenizer_special_ids(const lt_tokenizer *tok) {
  if (!tok || tok->kind != LT_TOKENIZER_HF) return (lt_special_ids){LT_TOKEN_BOS, LT_TOKEN_EOS, LT_TOKEN_PAD};
  static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<|startoftext|>", "<bos>", "[CLS]", "<|endoftext|>",
                                    NULL};
  static const char *const eos[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "[SEP]", NULL};
  static const char *const pad[] = {"<pad>", "[PAD]", "<|pad|>", "<|finetune_right_pad_id|>", NULL};
  lt_special_ids r = {first_token_of(tok, bos), first_token_of(tok, eos), first_token_of(tok, pad)};
  if (r.bos < 0) r.bos = r.eos;
  if (r.pad < 0) r.pad = r.eos;
  return r;
}

lt_status lt_tokenizer_parse_ids(const char *line, size_t len, int64_t **ids, int64_t *n) {
  const char *op = "tokenizer_parse_ids";
  if (!line && len) return lt__err_null(op, "line");
  if (!ids || !n) return lt__err_null(op, !ids ? "ids" : "n");
  int64_t *v = NULL, cnt = 0, cap = 0;
  for (size_t i = 0; i < len;) {
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
    if (i == len) break;
    size_t j = i;
    while (j < len && !(line[j] == ' ' || line[j] == '\t' || line[j] == '\r' || line[j] == '\n')) j++;
    /* the word line[i..j): an optional sign, then decimal digits, in range */
    size_t k = i + (line[i] == '-' || line[i] == '+');
    bool ok = k < j;
    uint64_t mag = 0;
    for (size_t q = k; ok && q < j; q++) {
      unsigned d = (unsigned char)line[q] - '0';
      ok = d <= 9 && mag <= (UINT64_MAX - d) / 10;
      if (ok) mag = mag * 10 + d;
    }
    bool neg = line[i] == '-';
    ok = ok && mag <= (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX);
    if (!ok) {
      free(v);
      return lt__err(LT_ERR_FORMAT, "%s: \"%.*s%s\" is not an id", op, (int)(j - i > 40 ? 40 : j - i), line + i,
                     j - i > 40 ? "..." : "");
    }
    if (!lt__grow(&v, &cap, cnt + 1, sizeof *v)) {
      free(v);
      return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    }
    v[cnt++] = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    i = j;
  }
  *ids = v, *n = cnt;
  return LT_OK;
}

lt_tensor *lt_tokenizer_encode_tensor(const lt_tokenizer *tok, const char *text, size_t len) {
  int64_t *ids, n;
  if (lt_tokenizer_encode(tok, text, len, &ids, &n) != LT_OK) return NULL;
  lt_tensor *t = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){n}, ids);
  free(ids);
  return t;
}

lt_status lt_tokenizer_decode(const lt_tokenizer *tok, const int64_t *ids, int64_t n, unsigned flags,
                              char **text, size_t *len) {
  const char *op = "tokenizer_decode";
  if (!tok) return lt__err_null(op, "tok");
  if (!text || !len) return lt__err(LT_ERR_NULL, "%s: text and len must not be NULL", op);
  if (n < 0) return lt__err(LT_ERR_INVALID, "%s: n is %lld, must be >= 0", op, (long long)n);
  if (!ids && n) return lt__err(LT_ERR_NULL, "%s: ids is NULL but n is %lld", op, (long long)n);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= tok->vocab)
      return lt__err(LT_ERR_INDEX, "%s: id %lld at position %lld is outside [0, %lld) (%s vocabulary)", op,
                     (long long)ids[i], (long long)i, (long long)tok->vocab,
                     lt_tokenizer_kind_name(tok->kind));
  if (tok->ops) return tok->ops->decode(tok->impl, ids, n, !(flags & LT_DECODE_SHOW_SPECIAL), text, len);
  bytebuf b = {0};
  bool ok = bb_reserve(&b, (size_t)n + 1);
  for (int64_t i = 0; i < n && ok; i++) {
    int64_t id = ids[i];
    if (id < LT__NSPEC) {
      if (flags & LT_DECODE_SHOW_SPECIAL)
        ok = bb_put(&b, special_names[id], strlen(special_names[id]));
      else if (id == LT_TOKEN_UNK)
        ok = bb_put(&b, "\xEF\xBF\xBD", 3);
    } else if (tok->kind == LT_TOKENIZER_CHAR) {
      char u[4];
      ok = bb_put(&b, u, (size_t)lt__utf8_encode(tok->cps[id - LT__NSPEC], u));
    } else if (tok->kind == LT_TOKENIZER_BPE) {
      int64_t k = id - LT__BYTE0;
      ok = bb_put(&b, tok->blob + tok->tok_off[k], (size_t)(tok->tok_off[k + 1] - tok->tok_off[k]));
    } else {
      char c = (char)(unsigned char)(id - LT__BYTE0);
      ok = bb_put(&b, &c, 1);
    }
  }
  if (ok) ok = bb_put(&b, "", 1);
  if (!ok) {
    free(b.p);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  *text = b.p;
  *len = b.n - 1;
  return LT_OK;
}

lt_status lt_tokenizer_decode_tensor(const lt_tokenizer *tok, const lt_tensor *ids, unsigned flags,
                                     char **text, size_t *len) {
  const char *op = "tokenizer_decode_tensor";
  if (!tok) return lt__err_null(op, "tok");
  if (!ids) return lt__err_null(op, "ids");
  if (ids->dtype != LT_DTYPE_I64 && ids->dtype != LT_DTYPE_I32)
    return lt__err(LT_ERR_DTYPE, "%s: ids is %s: must be i32 or i64", op, LT__D(ids));
  int64_t *buf = malloc((size_t)(ids->numel ? ids->numel : 1) * sizeof *buf);
  if (!buf) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  lt_status st = lt_tensor_read(ids, LT_DTYPE_I64, buf, ids->numel);
  if (st == LT_OK) st = lt_tokenizer_decode(tok, buf, ids->numel, flags, text, len);
  free(buf);
  return st;
}

/* ======================================================================== */
/* Serialisation                                                            */
/* ======================================================================== */
/* Layout (all integers little-endian):
 *   0  4  magic "LTTK"
 *   4  4  u32 format version (1)
 *   8  4  u32 kind (0 byte, 1 char, 2 bpe)
 *  12  4  u32 number of special tokens (4)
 *  16  8  u64 vocabulary size
 *  24  8  u64 count: 0 (byte), code points (char), merges (bpe)
 *  32     payload: count u32 code points, or count (u32 left, u32 right)
 *  end 4  u32 CRC-32 (zlib's crc32) of every byte before it */
#define SER_MAGIC "LTTK"
#define SER_VERSION 1u
#define SER_HEADER 32

static uint32_t crc_of(const unsigned char *p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) { /* zlib takes uInt lengths */
    uInt k = n > 0x40000000u ? 0x40000000u : (uInt)n;
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

lt_status lt_tokenizer_serialize(const lt_tokenizer *tok, void **buf, size_t *size) {
  const char *op = "tokenizer_serialize";
  if (!tok) return lt__err_null(op, "tok");
  if (!buf || !size) return lt__err(LT_ERR_NULL, "%s: buf and size must not be NULL", op);
  size_t njson = 0;
  const char *json = tok->ops ? tok->ops->source(tok->impl, &njson) : NULL; /* the kind hf: its tokenizer.json */
  uint64_t count = tok->kind == LT_TOKENIZER_CHAR ? (uint64_t)tok->ncps
                   : tok->kind == LT_TOKENIZER_BPE ? (uint64_t)tok->nmerges
                   : tok->kind == LT_TOKENIZER_HF ? (uint64_t)njson : 0;
  size_t per = tok->kind == LT_TOKENIZER_BPE ? 8 : tok->kind == LT_TOKENIZER_HF ? 1 : 4;
  size_t n = SER_HEADER + (size_t)count * per + 4;
  unsigned char *p = malloc(n);
  if (!p) return lt__err(LT_ERR_NOMEM, "%s: out of memory for %zu bytes", op, n);
  memcpy(p, SER_MAGIC, 4);
  lt__put_le32(p + 4, SER_VERSION);
  lt__put_le32(p + 8, (uint32_t)tok->kind);
  lt__put_le32(p + 12, LT__NSPEC);
  lt__put_le64(p + 16, (uint64_t)tok->vocab);
  lt__put_le64(p + 24, count);
  unsigned char *q = p + SER_HEADER;
  if (json) {
    memcpy(q, json, njson);
    q += njson;
    count = 0;
  }
  for (uint64_t i = 0; i < count; i++) {
    if (tok->kind == LT_TOKENIZER_CHAR) {
      lt__put_le32(q, tok->cps[i]);
      q += 4;
    } else {
      lt__put_le32(q, (uint32_t)tok->merge_l[i]);
      lt__put_le32(q + 4, (uint32_t)tok->merge_r[i]);
      q += 8;
    }
  }
  lt__put_le32(q, crc_of(p, (size_t)(q - p)));
  *buf = p;
  *size = n;
  return LT_OK;
}

lt_tokenizer *lt_tokenizer_deserialize(const void *buf, size_t size) {
  const char *op = "tokenizer_deserialize";
  if (!buf) return lt__err(LT_ERR_NULL, "%s: buf is NULL", op), NULL;
  const unsigned char *p = buf;
  if (size < SER_HEADER + 4)
    return lt__err(LT_ERR_FORMAT, "%s: buffer of %zu bytes is shorter than the %d-byte header and checksum",
                   op, size, SER_HEADER + 4), NULL;
  if (memcmp(p, SER_MAGIC, 4) != 0)
    return lt__err(LT_ERR_FORMAT, "%s: bad magic (expected \"%s\"): not a tokenizer buffer", op, SER_MAGIC),
           NULL;
  uint32_t version = lt__get_le32(p + 4), kind = lt__get_le32(p + 8), nspec = lt__get_le32(p + 12);
  uint64_t vocab = lt__get_le64(p + 16), count = lt__get_le64(p + 24);
  if (version != SER_VERSION)
    return lt__err(LT_ERR_FORMAT, "%s: format version %u, this library reads version %u", op, version,
                   SER_VERSION), NULL;
  if (kind > LT_TOKENIZER_HF)
    return lt__err(LT_ERR_FORMAT, "%s: unknown tokenizer kind %u", op, kind), NULL;
  if (nspec != LT__NSPEC)
    return lt__err(LT_ERR_FORMAT, "%s: %u special tokens, expected %d", op, nspec, LT__NSPEC), NULL;
  uint64_t max_count = kind == LT_TOKENIZER_BYTE ? 0
                       : kind == LT_TOKENIZER_CHAR ? (uint64_t)LT__MAX_CODEPOINT + 1
                       : kind == LT_TOKENIZER_HF ? (uint64_t)LT__HF_MAX_JSON_BYTES : (uint64_t)LT_BPE_MAX_MERGES;
  if (count > max_count)
    return lt__err(LT_ERR_FORMAT, "%s: count %llu is above the limit %llu for this kind", op,
                   (unsigned long long)count, (unsigned long long)max_count), NULL;
  size_t per = kind == LT_TOKENIZER_BPE ? 8 : kind == LT_TOKENIZER_HF ? 1 : 4;
  size_t want = SER_HEADER + (size_t)count * per + 4; /* count is small enough not to overflow */
  if (size != want)
    return lt__err(LT_ERR_FORMAT, "%s: buffer is %zu bytes, its header implies %zu", op, size, want), NULL;
  uint64_t want_vocab = (kind == LT_TOKENIZER_CHAR ? LT__NSPEC : LT__NBASE) + count;
  if (kind != LT_TOKENIZER_HF && vocab != want_vocab)
    return lt__err(LT_ERR_FORMAT, "%s: vocabulary size %llu, but the contents make %llu", op,
                   (unsigned long long)vocab, (unsigned long long)want_vocab), NULL;
  uint32_t crc = lt__get_le32(p + size - 4), got = crc_of(p, size - 4);
  if (crc != got)
    return lt__err(LT_ERR_FORMAT, "%s: checksum mismatch (stored %08x, computed %08x): the buffer is corrupt",
                   op, crc, got), NULL;

  const unsigned char *q = p + SER_HEADER;
  if (kind == LT_TOKENIZER_BYTE) return lt_tokenizer_new_byte();
  if (kind == LT_TOKENIZER_HF) {
    lt_tokenizer *t = lt_tokenizer_from_hf_json((const char *)q, (size_t)count);
    if (t && (uint64_t)t->vocab != vocab) {
      lt__err(LT_ERR_FORMAT, "%s: vocabulary size %llu, but the tokenizer.json makes %lld", op,
              (unsigned long long)vocab, (long long)t->vocab);
      lt_tokenizer_free(t);
      return NULL;
    }
    return t;
  }
  if (kind == LT_TOKENIZER_CHAR) {
    uint32_t *cps = malloc((size_t)(count ? count : 1) * sizeof *cps);
    if (!cps) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
    for (uint64_t i = 0; i < count; i++) {
      cps[i] = lt__get_le32(q + 4 * i);
      if (cps[i] > LT__MAX_CODEPOINT || (cps[i] >= 0xD800 && cps[i] <= 0xDFFF) || (i > 0 && cps[i] <= cps[i - 1])) {
        lt__err(LT_ERR_FORMAT, "%s: code point %llu is U+%04X: not a scalar value above the previous one", op,
                (unsigned long long)i, cps[i]);
        free(cps);
        return NULL;
      }
    }
    return char_from_cps(cps, (int64_t)count, op);
  }
  lt_tokenizer *t = lt__tok_alloc(LT_TOKENIZER_BPE, op);
  if (!t) return NULL;
  t->merge_l = malloc((size_t)(count ? count : 1) * sizeof(int32_t));
  t->merge_r = malloc((size_t)(count ? count : 1) * sizeof(int32_t));
  if (!t->merge_l || !t->merge_r) {
    lt_tokenizer_free(t);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  }
  for (uint64_t i = 0; i < count; i++) {
    uint32_t l = lt__get_le32(q + 8 * i), r = lt__get_le32(q + 8 * i + 4);
    /* Range-checked in lt__bpe_build_tables; clamp so int32 cannot wrap first. */
    t->merge_l[i] = l > INT32_MAX ? INT32_MAX : (int32_t)l;
    t->merge_r[i] = r > INT32_MAX ? INT32_MAX : (int32_t)r;
  }
  t->nmerges = (int64_t)count;
  t->vocab = (int64_t)vocab;
  if (lt__bpe_build_tables(t, op) != LT_OK) {
    lt_tokenizer_free(t);
    return NULL;
  }
  return t;
}
