/*
 * datasets/bpe_train.c: learning byte-level BPE merges from a text
 * (lt_tokenizer_train_bpe and _file; docs/datasets.md "Training").
 *
 * Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword
 * Units"; byte-level as GPT-2. The text is cut into pieces
 * (lt__bpe_next_piece), identical pieces are counted once with their
 * frequency, and each step merges the most frequent adjacent pair (ties:
 * smallest (left, right)). Pair counts are kept up to date incrementally: each
 * pair knows the pieces it occurs in, so a merge only revisits those pieces,
 * and a max-heap with lazy deletion (stale entries are skipped when popped)
 * finds the best pair.
 *
 * What this is not: a trainer of Hugging Face models (their BPE, WordPiece and
 * Unigram files are read by hf_tokenizer*.c, never learned here).
 */
#include "datasets/datasets.h"
#include "datasets/tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <stdlib.h>
#include <string.h>

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
  lt__pairmap index;  /* lt__pair_key -> index into pairs */
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
  lt__pm_free(&T->index);
  for (int64_t i = 0; i < T->npairs; i++) free(T->pairs[i].words);
  free(T->pairs);
  free(T->heap);
  free(T->dirty);
}

/* Heap order: larger count first, then smaller (l, r). */
static inline bool heap_before(const heapent *a, const heapent *b) {
  if (a->count != b->count) return a->count > b->count;
  if (a->l != b->l) return a->l < b->l;
  return a->r < b->r;
}

static bool heap_push(bpe_trainer *T, heapent e) {
  if (!lt__grow(&T->heap, &T->capheap, T->nheap + 1, sizeof e)) return false;
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
  if (!lt__pm_insert(&T->index, lt__pair_key(l, r), T->npairs, &found, &idx)) return false;
  if (!found) {
    if (!lt__grow(&T->pairs, &T->cappairs, T->npairs + 1, sizeof(pairinfo))) return false;
    T->pairs[T->npairs++] = (pairinfo){l, r, 0, NULL, 0, 0, false};
  }
  pairinfo *p = &T->pairs[idx];
  p->count += delta;
  if (!p->dirty) {
    if (!lt__grow(&T->dirty, &T->capdirty, T->ndirty + 1, sizeof(int64_t))) return false;
    T->dirty[T->ndirty++] = idx;
    p->dirty = true;
  }
  if (add_word && (p->nwords == 0 || p->words[p->nwords - 1] != w)) {
    int64_t cap = p->capwords;
    if (!lt__grow(&p->words, &cap, (int64_t)p->nwords + 1, sizeof(int32_t))) return false;
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
    size_t j = lt__bpe_next_piece(s, n, i), len = j - i;
    uint64_t h = 1469598103934665603ULL;
    for (size_t k = i; k < j; k++) h = (h ^ s[k]) * 1099511628211ULL;
    mask = cap - 1;
    size_t slot = lt__pm_hash(h) & mask;
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
      if (!lt__grow(&T->words, &capw, T->nwords + 1, sizeof(word))) goto fail;
      if (!lt__grow(&pos, &cappos, T->nwords + 1, sizeof(int64_t))) goto fail;
      if (!lt__grow(&T->syms, &capsyms, nsyms + (int64_t)len, sizeof(int32_t))) goto fail;
      for (size_t k = 0; k < len; k++) T->syms[nsyms + (int64_t)k] = LT__BYTE0 + s[i + k];
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
          size_t t = lt__pm_hash(hh) & (ncap - 1);
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

lt_tokenizer *lt_tokenizer_train_bpe(const char *text, size_t len, const lt_bpe_opts *opts) {
  const char *op = "tokenizer_train_bpe";
  lt_bpe_opts o = opts ? *opts : LT_BPE_DEFAULTS;
  if (!text && len) return lt__err(LT_ERR_NULL, "%s: text is NULL", op), NULL;
  if (len == 0) return lt__err(LT_ERR_INVALID, "%s: the text is empty: nothing to learn merges from", op), NULL;
  if ((o.num_merges > 0) == (o.vocab_size > 0))
    return lt__err(LT_ERR_INVALID,
                   "%s: num_merges is %lld and vocab_size is %lld: exactly one must be > 0", op,
                   (long long)o.num_merges, (long long)o.vocab_size), NULL;
  int64_t target = o.num_merges > 0 ? o.num_merges : o.vocab_size - LT__NBASE;
  if (target < 1)
    return lt__err(LT_ERR_INVALID, "%s: vocab_size %lld leaves no room for merges (must be > %d)", op,
                   (long long)o.vocab_size, LT__NBASE), NULL;
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
  t = lt__tok_alloc(LT_TOKENIZER_BPE, op);
  if (!t) goto done;
  t->merge_l = malloc((size_t)target * sizeof(int32_t));
  t->merge_r = malloc((size_t)target * sizeof(int32_t));
  if (!t->merge_l || !t->merge_r || !lt__pm_init(&T.index, 1024)) goto nomem;
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
      bool ok = lt__pm_get(&T.index, lt__pair_key(e.l, e.r), &idx);
      LT_CHECK(ok);
      if (T.pairs[idx].count == e.count) {
        pidx = idx;
        break;
      }
    }
    if (pidx < 0 || T.pairs[pidx].count < o.min_frequency) break;
    int32_t l = T.pairs[pidx].l, r = T.pairs[pidx].r, id = (int32_t)(LT__NBASE + m);
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
  t->vocab = LT__NBASE + t->nmerges;
  st = lt__bpe_build_tables(t, op);
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

