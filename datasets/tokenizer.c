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
 * BPE training (Sennrich et al. 2016, "Neural Machine Translation of Rare Words
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
#include "tensor/error_internal.h"
#include "tensor/byteorder_internal.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define NSPEC LT_TOKEN_NUM_SPECIAL
#define BYTE0 NSPEC            /* id of byte 0 */
#define NBASE (NSPEC + 256)    /* first merge id */
#define MAX_CODEPOINT 0x10FFFF

static const char *const special_names[NSPEC] = {"<pad>", "<bos>", "<eos>", "<unk>"};

/* ======================================================================== */
/* UTF-8                                                                    */
/* ======================================================================== */

/* Decodes one code point at s[i..n). Returns its byte length (1..4) and stores
 * the code point, or returns 0 for an ill-formed sequence (RFC 3629 table 3-7:
 * no overlongs, no surrogates, nothing above U+10FFFF, no truncation). */
static int utf8_decode(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;       /* overlong */
    if (c == 0xED) hi = 0x9F;       /* surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07;
    if (c == 0xF0) lo = 0x90;       /* overlong */
    if (c == 0xF4) hi = 0x8F;       /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n - i < (size_t)len) return 0;
  for (int k = 1; k < len; k++) {
    unsigned b = s[i + (size_t)k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return len;
}

static int utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

bool lt_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
  if (!s) return len == 0;
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    if (u[i] < 0x80) { /* ASCII fast path */
      i++;
      continue;
    }
    uint32_t cp;
    int k = utf8_decode(u, len, i, &cp);
    if (!k) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += (size_t)k;
  }
  return true;
}

/* ======================================================================== */
/* Small containers: a growable byte buffer, a (u32, u32) -> i64 hash map    */
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

/* Open addressing, linear probing; key UINT64_MAX marks an empty slot. */
typedef struct {
  uint64_t *keys;
  int64_t *vals;
  size_t cap; /* power of two */
  size_t count;
} pairmap;

#define PM_EMPTY UINT64_MAX

static inline uint64_t pair_key(int64_t l, int64_t r) { return ((uint64_t)l << 32) | (uint64_t)r; }

static inline size_t pm_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return (size_t)k;
}

static void pm_free(pairmap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static bool pm_init(pairmap *m, size_t want) {
  size_t cap = 16;
  while (cap < want * 2) cap *= 2;
  m->keys = malloc(cap * sizeof *m->keys);
  m->vals = malloc(cap * sizeof *m->vals);
  if (!m->keys || !m->vals) {
    pm_free(m);
    return false;
  }
  memset(m->keys, 0xff, cap * sizeof *m->keys);
  m->cap = cap;
  m->count = 0;
  return true;
}

/* Slot of key k: where it is, or the empty slot where it would go. */
static inline size_t pm_slot(const pairmap *m, uint64_t k) {
  size_t mask = m->cap - 1, i = pm_hash(k) & mask;
  while (m->keys[i] != PM_EMPTY && m->keys[i] != k) i = (i + 1) & mask;
  return i;
}

static inline bool pm_get(const pairmap *m, uint64_t k, int64_t *v) {
  size_t i = pm_slot(m, k);
  if (m->keys[i] == PM_EMPTY) return false;
  *v = m->vals[i];
  return true;
}

static bool pm_grow(pairmap *m) {
  pairmap n;
  if (!pm_init(&n, m->cap)) return false;
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != PM_EMPTY) {
      size_t j = pm_slot(&n, m->keys[i]);
      n.keys[j] = m->keys[i];
      n.vals[j] = m->vals[i];
    }
  n.count = m->count;
  pm_free(m);
  *m = n;
  return true;
}

/* Inserts k -> v if k is absent. *found tells whether it was there; *v_out is
 * the value now stored. */
static bool pm_insert(pairmap *m, uint64_t k, int64_t v, bool *found, int64_t *v_out) {
  if ((m->count + 1) * 2 > m->cap && !pm_grow(m)) return false;
  size_t i = pm_slot(m, k);
  if (m->keys[i] != PM_EMPTY) {
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

/* ======================================================================== */
/* The tokenizer object                                                     */
/* ======================================================================== */

struct lt_tokenizer {
  lt_tokenizer_kind kind;
  int64_t vocab;      /* number of ids */
  /* char: the code points of ids 4.., strictly increasing */
  uint32_t *cps;
  int64_t ncps;
  /* bpe: merge i joins merge_l[i], merge_r[i] into id NBASE + i */
  int64_t nmerges;
  int32_t *merge_l, *merge_r;
  pairmap ranks;      /* pair_key(l, r) -> i */
  /* bpe: bytes of every id >= BYTE0: tok_off[id - BYTE0] .. tok_off[id - BYTE0 + 1] in blob */
  unsigned char *blob;
  int64_t *tok_off;
};

void lt_tokenizer_free(lt_tokenizer *tok) {
  if (!tok) return;
  free(tok->cps);
  free(tok->merge_l);
  free(tok->merge_r);
  pm_free(&tok->ranks);
  free(tok->blob);
  free(tok->tok_off);
  free(tok);
}

static lt_tokenizer *tok_alloc(lt_tokenizer_kind kind, const char *op) {
  lt_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    return NULL;
  }
  t->kind = kind;
  return t;
}

lt_tokenizer *lt_tokenizer_new_byte(void) {
  lt_tokenizer *t = tok_alloc(LT_TOKENIZER_BYTE, "tokenizer_new_byte");
  if (t) t->vocab = NBASE;
  return t;
}

static const char *const tokenizer_kind_names[] = {"byte", "char", "bpe"};

const char *lt_tokenizer_kind_name(lt_tokenizer_kind kind) {
  return lt_enum_name(tokenizer_kind_names, 3, (int)kind);
}

LT_ENUM_PARSER(lt_tokenizer_kind_parse, lt_tokenizer_kind, "tokenizer", tokenizer_kind_names, 3, NULL, 0)

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
  lt_tokenizer *t = tok_alloc(LT_TOKENIZER_CHAR, op);
  if (!t) {
    free(cps);
    return NULL;
  }
  t->cps = cps;
  t->ncps = n;
  t->vocab = NSPEC + n;
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
  size_t nwords = (MAX_CODEPOINT + 1 + 63) / 64;
  uint64_t *seen = calloc(nwords, sizeof *seen);
  if (!seen) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  const unsigned char *u = (const unsigned char *)text;
  int64_t count = 0;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int k = utf8_decode(u, len, i, &cp);
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
  return lo < t->ncps && t->cps[lo] == cp ? NSPEC + lo : LT_TOKEN_UNK;
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
static size_t next_piece(const unsigned char *s, size_t n, size_t i) {
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

/* ---- BPE: training ------------------------------------------------------- */

/* A distinct piece of the text: its current symbols and how often it occurs. */
typedef struct {
  int64_t off;   /* start of its symbols in the shared syms array */
  int32_t len;   /* current number of symbols (shrinks with merges) */
  int64_t freq;
  int64_t stamp; /* last merge step that visited it */
} word;

/* An adjacent pair of ids: its total count and the words it (may) occur in. */
typedef struct {
  int32_t l, r;
  int64_t count;
  int32_t *words; /* may hold stale entries; checked when used */
  int32_t nwords, capwords;
  bool dirty;     /* count changed during this step */
} pairinfo;

typedef struct {
  int64_t count;
  int32_t l, r;
} heapent;

typedef struct {
  word *words;
  int64_t nwords;
  int32_t *syms;
  pairmap index;  /* pair_key -> index into pairs */
  pairinfo *pairs;
  int64_t npairs, cappairs;
  heapent *heap;
  int64_t nheap, capheap;
  int64_t *dirty;
  int64_t ndirty, capdirty;
} bpe_trainer;

static void trainer_free(bpe_trainer *T) {
  free(T->words);
  free(T->syms);
  pm_free(&T->index);
  for (int64_t i = 0; i < T->npairs; i++) free(T->pairs[i].words);
  free(T->pairs);
  free(T->heap);
  free(T->dirty);
}

/* Grows the array whose pointer is at pp (a T **, passed as void * so that
 * any element type fits without aliasing casts) from *cap to at least need
 * elements of sz bytes. On failure the array is unchanged. */
static bool grow(void *pp, int64_t *cap, int64_t need, size_t sz) {
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

/* Heap order: larger count first, then smaller (l, r). */
static inline bool heap_before(const heapent *a, const heapent *b) {
  if (a->count != b->count) return a->count > b->count;
  if (a->l != b->l) return a->l < b->l;
  return a->r < b->r;
}

static bool heap_push(bpe_trainer *T, heapent e) {
  if (!grow(&T->heap, &T->capheap, T->nheap + 1, sizeof e)) return false;
  int64_t i = T->nheap++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_before(&e, &T->heap[p])) break;
    T->heap[i] = T->heap[p];
    i = p;
  }
  T->heap[i] = e;
  return true;
}

static heapent heap_pop(bpe_trainer *T) {
  heapent top = T->heap[0], last = T->heap[--T->nheap];
  int64_t i = 0, n = T->nheap;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_before(&T->heap[c + 1], &T->heap[c])) c++;
    if (!heap_before(&T->heap[c], &last)) break;
    T->heap[i] = T->heap[c];
    i = c;
  }
  if (n > 0) T->heap[i] = last;
  return top;
}

/* Adds delta to the count of pair (l, r), creating it; records word w in its
 * list when add_word. */
static bool pair_update(bpe_trainer *T, int32_t l, int32_t r, int64_t delta, int32_t w, bool add_word) {
  bool found;
  int64_t idx;
  if (!pm_insert(&T->index, pair_key(l, r), T->npairs, &found, &idx)) return false;
  if (!found) {
    if (!grow(&T->pairs, &T->cappairs, T->npairs + 1, sizeof(pairinfo))) return false;
    T->pairs[T->npairs++] = (pairinfo){l, r, 0, NULL, 0, 0, false};
  }
  pairinfo *p = &T->pairs[idx];
  p->count += delta;
  if (!p->dirty) {
    if (!grow(&T->dirty, &T->capdirty, T->ndirty + 1, sizeof(int64_t))) return false;
    T->dirty[T->ndirty++] = idx;
    p->dirty = true;
  }
  if (add_word && (p->nwords == 0 || p->words[p->nwords - 1] != w)) {
    int64_t cap = p->capwords;
    if (!grow(&p->words, &cap, (int64_t)p->nwords + 1, sizeof(int32_t))) return false;
    if (cap > INT32_MAX) return false;
    p->capwords = (int32_t)cap;
    p->words[p->nwords++] = w;
  }
  return true;
}

/* Pushes a fresh heap entry for every pair whose count changed. */
static bool flush_dirty(bpe_trainer *T) {
  for (int64_t k = 0; k < T->ndirty; k++) {
    pairinfo *p = &T->pairs[T->dirty[k]];
    p->dirty = false;
    if (p->count > 0 && !heap_push(T, (heapent){p->count, p->l, p->r})) return false;
  }
  T->ndirty = 0;
  return true;
}

/* Applies merge (l, r) -> id to word w, keeping pair counts current. */
static bool merge_word(bpe_trainer *T, int32_t w, int32_t l, int32_t r, int32_t id) {
  word *wd = &T->words[w];
  int32_t *s = T->syms + wd->off;
  int32_t n = wd->len;
  bool has = false;
  for (int32_t i = 0; i + 1 < n && !has; i++) has = s[i] == l && s[i + 1] == r;
  if (!has) return true; /* a stale list entry */
  for (int32_t i = 0; i + 1 < n; i++)
    if (!pair_update(T, s[i], s[i + 1], -wd->freq, w, false)) return false;
  int32_t m = 0;
  for (int32_t i = 0; i < n;) {
    if (i + 1 < n && s[i] == l && s[i + 1] == r) {
      s[m++] = id;
      i += 2;
    } else {
      s[m++] = s[i++];
    }
  }
  wd->len = m;
  /* Pairs without the new id were already in this word (and list it). */
  for (int32_t i = 0; i + 1 < m; i++)
    if (!pair_update(T, s[i], s[i + 1], wd->freq, w, s[i] == id || s[i + 1] == id)) return false;
  return true;
}

/* Counts the distinct pieces of text into T->words / T->syms. */
static lt_status collect_words(bpe_trainer *T, const unsigned char *s, size_t n, const char *op) {
  /* Map from a piece (by its bytes) to its word index; keys are text offsets. */
  size_t cap = 1024, mask;
  int64_t *slots = NULL; /* word index + 1, 0 empty */
  int64_t *pos = NULL, capw = 0, cappos = 0; /* text offset of each word's first occurrence */
  int64_t nsyms = 0, capsyms = 0;
  lt_status st = LT_ERR_NOMEM;
  slots = calloc(cap, sizeof *slots);
  if (!slots) goto fail;
  for (size_t i = 0; i < n;) {
    size_t j = next_piece(s, n, i), len = j - i;
    uint64_t h = 1469598103934665603ULL;
    for (size_t k = i; k < j; k++) h = (h ^ s[k]) * 1099511628211ULL;
    mask = cap - 1;
    size_t slot = pm_hash(h) & mask;
    for (;;) {
      int64_t w = slots[slot] - 1;
      if (w < 0) break;
      if ((size_t)T->words[w].len == len && memcmp(s + pos[w], s + i, len) == 0) break;
      slot = (slot + 1) & mask;
    }
    if (slots[slot]) {
      T->words[slots[slot] - 1].freq++;
    } else {
      if (T->nwords >= INT32_MAX) {
        st = lt__err(LT_ERR_OVERFLOW, "%s: more than %d distinct pieces", op, INT32_MAX);
        goto fail_set;
      }
      if (!grow(&T->words, &capw, T->nwords + 1, sizeof(word))) goto fail;
      if (!grow(&pos, &cappos, T->nwords + 1, sizeof(int64_t))) goto fail;
      if (!grow(&T->syms, &capsyms, nsyms + (int64_t)len, sizeof(int32_t))) goto fail;
      for (size_t k = 0; k < len; k++) T->syms[nsyms + (int64_t)k] = BYTE0 + s[i + k];
      pos[T->nwords] = (int64_t)i;
      T->words[T->nwords] = (word){nsyms, (int32_t)len, 1, -1};
      nsyms += (int64_t)len;
      slots[slot] = ++T->nwords;
      if ((size_t)T->nwords * 2 > cap) { /* rehash */
        size_t ncap = cap * 2;
        int64_t *ns = calloc(ncap, sizeof *ns);
        if (!ns) goto fail;
        for (size_t k = 0; k < cap; k++) {
          if (!slots[k]) continue;
          int64_t w = slots[k] - 1;
          uint64_t hh = 1469598103934665603ULL;
          for (int64_t q = 0; q < T->words[w].len; q++) hh = (hh ^ s[pos[w] + q]) * 1099511628211ULL;
          size_t t = pm_hash(hh) & (ncap - 1);
          while (ns[t]) t = (t + 1) & (ncap - 1);
          ns[t] = slots[k];
        }
        free(slots);
        slots = ns;
        cap = ncap;
      }
    }
    i = j;
  }
  free(slots);
  free(pos);
  return LT_OK;
fail:
  st = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
fail_set:
  free(slots);
  free(pos);
  return st;
}

static lt_status bpe_build_tables(lt_tokenizer *t, const char *op);

lt_tokenizer *lt_tokenizer_train_bpe(const char *text, size_t len, const lt_bpe_opts *opts) {
  const char *op = "tokenizer_train_bpe";
  lt_bpe_opts o = opts ? *opts : LT_BPE_DEFAULTS;
  if (!text && len) return lt__err(LT_ERR_NULL, "%s: text is NULL", op), NULL;
  if (len == 0) return lt__err(LT_ERR_INVALID, "%s: the text is empty: nothing to learn merges from", op), NULL;
  if ((o.num_merges > 0) == (o.vocab_size > 0))
    return lt__err(LT_ERR_INVALID,
                   "%s: num_merges is %lld and vocab_size is %lld: exactly one must be > 0", op,
                   (long long)o.num_merges, (long long)o.vocab_size), NULL;
  int64_t target = o.num_merges > 0 ? o.num_merges : o.vocab_size - NBASE;
  if (target < 1)
    return lt__err(LT_ERR_INVALID, "%s: vocab_size %lld leaves no room for merges (must be > %d)", op,
                   (long long)o.vocab_size, NBASE), NULL;
  if (target > LT_BPE_MAX_MERGES)
    return lt__err(LT_ERR_INVALID, "%s: %lld merges asked, at most %lld", op, (long long)target,
                   (long long)LT_BPE_MAX_MERGES), NULL;
  if (o.min_frequency < 1)
    return lt__err(LT_ERR_INVALID, "%s: min_frequency is %lld, must be >= 1", op,
                   (long long)o.min_frequency), NULL;

  bpe_trainer T = {0};
  lt_tokenizer *t = NULL;
  lt_status st = collect_words(&T, (const unsigned char *)text, len, op);
  if (st != LT_OK) goto done;
  st = LT_ERR_NOMEM;
  t = tok_alloc(LT_TOKENIZER_BPE, op);
  if (!t) goto done;
  t->merge_l = malloc((size_t)target * sizeof(int32_t));
  t->merge_r = malloc((size_t)target * sizeof(int32_t));
  if (!t->merge_l || !t->merge_r || !pm_init(&T.index, 1024)) goto nomem;
  for (int64_t w = 0; w < T.nwords; w++) {
    const int32_t *s = T.syms + T.words[w].off;
    for (int32_t i = 0; i + 1 < T.words[w].len; i++)
      if (!pair_update(&T, s[i], s[i + 1], T.words[w].freq, (int32_t)w, true)) goto nomem;
  }
  if (!flush_dirty(&T)) goto nomem;

  for (int64_t m = 0; m < target; m++) {
    /* The best pair whose heap entry is current. */
    int64_t pidx = -1;
    while (T.nheap > 0) {
      heapent e = heap_pop(&T);
      int64_t idx;
      bool ok = pm_get(&T.index, pair_key(e.l, e.r), &idx);
      LT_CHECK(ok);
      if (T.pairs[idx].count == e.count) {
        pidx = idx;
        break;
      }
    }
    if (pidx < 0 || T.pairs[pidx].count < o.min_frequency) break;
    int32_t l = T.pairs[pidx].l, r = T.pairs[pidx].r, id = (int32_t)(NBASE + m);
    t->merge_l[m] = l;
    t->merge_r[m] = r;
    t->nmerges = m + 1;
    /* Visit each word of the pair once (its list may repeat a word). */
    int32_t *wl = T.pairs[pidx].words, nw = T.pairs[pidx].nwords;
    T.pairs[pidx].words = NULL;
    T.pairs[pidx].nwords = T.pairs[pidx].capwords = 0;
    bool ok = true;
    for (int32_t k = 0; k < nw && ok; k++) {
      word *wd = &T.words[wl[k]];
      if (wd->stamp == m) continue;
      wd->stamp = m;
      ok = merge_word(&T, wl[k], l, r, id);
    }
    free(wl);
    if (!ok) goto nomem;
    LT_CHECK(T.pairs[pidx].count == 0);
    if (!flush_dirty(&T)) goto nomem;
  }
  t->vocab = NBASE + t->nmerges;
  st = bpe_build_tables(t, op);
  goto done;
nomem:
  st = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
done:
  trainer_free(&T);
  if (st != LT_OK) {
    lt_tokenizer_free(t);
    return NULL;
  }
  return t;
}

lt_tokenizer *lt_tokenizer_train_bpe_file(const char *path, const lt_bpe_opts *opts) {
  char *text;
  size_t len;
  if (lt_text_file_read(path, &text, &len) != LT_OK) return NULL;
  if (len == 0) {
    free(text);
    return lt__err(LT_ERR_FORMAT, "tokenizer_train_bpe_file: %s is empty", path), NULL;
  }
  lt_tokenizer *t = lt_tokenizer_train_bpe(text, len, opts);
  free(text);
  return t;
}

/* Checks the merges of t (from a trainer or a buffer) and builds the rank map
 * and the bytes of every token. Fails with LT_ERR_FORMAT on a merge that uses
 * a special or not-yet-defined id, a repeated pair, or a token longer than
 * LT_BPE_MAX_PIECE bytes (no trained tokenizer has one). */
static lt_status bpe_build_tables(lt_tokenizer *t, const char *op) {
  int64_t ntok = 256 + t->nmerges;
  t->tok_off = malloc((size_t)(ntok + 1) * sizeof *t->tok_off);
  if (!t->tok_off || !pm_init(&t->ranks, (size_t)t->nmerges + 1))
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  int64_t total = 256;
  int64_t *lens = t->tok_off; /* first pass: lengths in tok_off[1..] */
  lens[0] = 0;
  for (int64_t b = 0; b < 256; b++) lens[b + 1] = 1;
  for (int64_t i = 0; i < t->nmerges; i++) {
    int64_t l = t->merge_l[i], r = t->merge_r[i], id = NBASE + i;
    if (l < BYTE0 || l >= id || r < BYTE0 || r >= id)
      return lt__err(LT_ERR_FORMAT, "%s: merge %lld joins ids %lld and %lld: both must be in [%d, %lld)",
                     op, (long long)i, (long long)l, (long long)r, BYTE0, (long long)id);
    int64_t len = lens[l - BYTE0 + 1] + lens[r - BYTE0 + 1];
    if (len > LT_BPE_MAX_PIECE)
      return lt__err(LT_ERR_FORMAT, "%s: merge %lld makes a token of %lld bytes (at most %d)", op,
                     (long long)i, (long long)len, LT_BPE_MAX_PIECE);
    lens[i + 256 + 1] = len;
    total += len;
    bool found;
    int64_t v;
    if (!pm_insert(&t->ranks, pair_key(l, r), i, &found, &v))
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
    int64_t l = t->merge_l[i] - BYTE0, r = t->merge_r[i] - BYTE0, k = 256 + i;
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
  if (b->n == b->cap && !grow(&b->p, &b->cap, b->n + 1, sizeof(int64_t))) return false;
  b->p[b->n++] = id;
  return true;
}

/* Encodes one piece s[0..n) (n <= LT_BPE_MAX_PIECE) with BPE: repeatedly
 * merge every occurrence (left to right) of the adjacent pair of lowest rank. */
static bool bpe_encode_piece(const lt_tokenizer *t, const unsigned char *s, size_t n, idbuf *out) {
  int64_t sym[LT_BPE_MAX_PIECE];
  int64_t m = (int64_t)n;
  for (int64_t i = 0; i < m; i++) sym[i] = BYTE0 + s[i];
  while (m > 1) {
    int64_t best = INT64_MAX, v;
    for (int64_t i = 0; i + 1 < m; i++)
      if (pm_get(&t->ranks, pair_key(sym[i], sym[i + 1]), &v) && v < best) best = v;
    if (best == INT64_MAX) break;
    int64_t l = t->merge_l[best], r = t->merge_r[best], k = 0;
    for (int64_t i = 0; i < m;) {
      if (i + 1 < m && sym[i] == l && sym[i + 1] == r) {
        sym[k++] = NBASE + best;
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
  const unsigned char *s = (const unsigned char *)text;
  idbuf out = {0};
  /* Every tokenizer makes at most one id per byte; start with a fair guess. */
  if (!grow(&out.p, &out.cap, tok->kind == LT_TOKENIZER_BPE ? (int64_t)len / 3 + 1 : (int64_t)len + 1,
            sizeof(int64_t)))
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %zu bytes of text", op, len);
  switch (tok->kind) {
    case LT_TOKENIZER_BYTE:
      for (size_t i = 0; i < len; i++) out.p[i] = BYTE0 + s[i];
      out.n = (int64_t)len;
      break;
    case LT_TOKENIZER_CHAR:
      for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = utf8_decode(s, len, i, &cp);
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
    case LT_TOKENIZER_BPE:
      for (size_t i = 0; i < len;) {
        size_t j = next_piece(s, len, i);
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
  bytebuf b = {0};
  bool ok = bb_reserve(&b, (size_t)n + 1);
  for (int64_t i = 0; i < n && ok; i++) {
    int64_t id = ids[i];
    if (id < NSPEC) {
      if (flags & LT_DECODE_SHOW_SPECIAL)
        ok = bb_put(&b, special_names[id], strlen(special_names[id]));
      else if (id == LT_TOKEN_UNK)
        ok = bb_put(&b, "\xEF\xBF\xBD", 3);
    } else if (tok->kind == LT_TOKENIZER_CHAR) {
      char u[4];
      ok = bb_put(&b, u, (size_t)utf8_encode(tok->cps[id - NSPEC], u));
    } else if (tok->kind == LT_TOKENIZER_BPE) {
      int64_t k = id - BYTE0;
      ok = bb_put(&b, tok->blob + tok->tok_off[k], (size_t)(tok->tok_off[k + 1] - tok->tok_off[k]));
    } else {
      char c = (char)(unsigned char)(id - BYTE0);
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
  uint64_t count = tok->kind == LT_TOKENIZER_CHAR ? (uint64_t)tok->ncps
                   : tok->kind == LT_TOKENIZER_BPE ? (uint64_t)tok->nmerges : 0;
  size_t per = tok->kind == LT_TOKENIZER_BPE ? 8 : 4;
  size_t n = SER_HEADER + (size_t)count * per + 4;
  unsigned char *p = malloc(n);
  if (!p) return lt__err(LT_ERR_NOMEM, "%s: out of memory for %zu bytes", op, n);
  memcpy(p, SER_MAGIC, 4);
  lt__put_le32(p + 4, SER_VERSION);
  lt__put_le32(p + 8, (uint32_t)tok->kind);
  lt__put_le32(p + 12, NSPEC);
  lt__put_le64(p + 16, (uint64_t)tok->vocab);
  lt__put_le64(p + 24, count);
  unsigned char *q = p + SER_HEADER;
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
  if (kind > LT_TOKENIZER_BPE)
    return lt__err(LT_ERR_FORMAT, "%s: unknown tokenizer kind %u", op, kind), NULL;
  if (nspec != NSPEC)
    return lt__err(LT_ERR_FORMAT, "%s: %u special tokens, expected %d", op, nspec, NSPEC), NULL;
  uint64_t max_count = kind == LT_TOKENIZER_BYTE ? 0
                       : kind == LT_TOKENIZER_CHAR ? (uint64_t)MAX_CODEPOINT + 1 : (uint64_t)LT_BPE_MAX_MERGES;
  if (count > max_count)
    return lt__err(LT_ERR_FORMAT, "%s: count %llu is above the limit %llu for this kind", op,
                   (unsigned long long)count, (unsigned long long)max_count), NULL;
  size_t per = kind == LT_TOKENIZER_BPE ? 8 : 4;
  size_t want = SER_HEADER + (size_t)count * per + 4; /* count is small enough not to overflow */
  if (size != want)
    return lt__err(LT_ERR_FORMAT, "%s: buffer is %zu bytes, its header implies %zu", op, size, want), NULL;
  uint64_t want_vocab = (kind == LT_TOKENIZER_CHAR ? NSPEC : NBASE) + count;
  if (vocab != want_vocab)
    return lt__err(LT_ERR_FORMAT, "%s: vocabulary size %llu, but the contents make %llu", op,
                   (unsigned long long)vocab, (unsigned long long)want_vocab), NULL;
  uint32_t crc = lt__get_le32(p + size - 4), got = crc_of(p, size - 4);
  if (crc != got)
    return lt__err(LT_ERR_FORMAT, "%s: checksum mismatch (stored %08x, computed %08x): the buffer is corrupt",
                   op, crc, got), NULL;

  const unsigned char *q = p + SER_HEADER;
  if (kind == LT_TOKENIZER_BYTE) return lt_tokenizer_new_byte();
  if (kind == LT_TOKENIZER_CHAR) {
    uint32_t *cps = malloc((size_t)(count ? count : 1) * sizeof *cps);
    if (!cps) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
    for (uint64_t i = 0; i < count; i++) {
      cps[i] = lt__get_le32(q + 4 * i);
      if (cps[i] > MAX_CODEPOINT || (cps[i] >= 0xD800 && cps[i] <= 0xDFFF) || (i > 0 && cps[i] <= cps[i - 1])) {
        lt__err(LT_ERR_FORMAT, "%s: code point %llu is U+%04X: not a scalar value above the previous one", op,
                (unsigned long long)i, cps[i]);
        free(cps);
        return NULL;
      }
    }
    return char_from_cps(cps, (int64_t)count, op);
  }
  lt_tokenizer *t = tok_alloc(LT_TOKENIZER_BPE, op);
  if (!t) return NULL;
  t->merge_l = malloc((size_t)(count ? count : 1) * sizeof(int32_t));
  t->merge_r = malloc((size_t)(count ? count : 1) * sizeof(int32_t));
  if (!t->merge_l || !t->merge_r) {
    lt_tokenizer_free(t);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  }
  for (uint64_t i = 0; i < count; i++) {
    uint32_t l = lt__get_le32(q + 8 * i), r = lt__get_le32(q + 8 * i + 4);
    /* Range-checked in bpe_build_tables; clamp so int32 cannot wrap first. */
    t->merge_l[i] = l > INT32_MAX ? INT32_MAX : (int32_t)l;
    t->merge_r[i] = r > INT32_MAX ? INT32_MAX : (int32_t)r;
  }
  t->nmerges = (int64_t)count;
  t->vocab = (int64_t)vocab;
  if (bpe_build_tables(t, op) != LT_OK) {
    lt_tokenizer_free(t);
    return NULL;
  }
  return t;
}
