/*
 * datasets/tokenizer_internal.h: what the tokenizer files of datasets/ share
 * (tokenizer.c: the object, encode, decode, serialisation; bpe_train.c: BPE
 * training): the struct, the id layout, a (u32, u32) -> i64 hash map, growable
 * arrays, the BPE piece rule and the check that builds a BPE's tables.
 * Not installed.
 */
#ifndef LT_DATASETS_TOKENIZER_INTERNAL_H
#define LT_DATASETS_TOKENIZER_INTERNAL_H

#include "datasets/datasets.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LT__NSPEC LT_TOKEN_NUM_SPECIAL
#define LT__BYTE0 LT__NSPEC            /* id of byte 0 */
#define LT__NBASE (LT__NSPEC + 256)    /* first merge id */

/* ---- A (u32, u32) -> i64 hash map ---------------------------------------- */
/* Open addressing, linear probing; key LT__PM_EMPTY marks an empty slot. */
typedef struct {
  uint64_t *keys;
  int64_t *vals;
  size_t cap; /* power of two */
  size_t count;
} lt__pairmap;

#define LT__PM_EMPTY UINT64_MAX

static inline uint64_t lt__pair_key(int64_t l, int64_t r) { return ((uint64_t)l << 32) | (uint64_t)r; }

static inline size_t lt__pm_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return (size_t)k;
}

/* Slot of key k: where it is, or the empty slot where it would go. */
static inline size_t lt__pm_slot(const lt__pairmap *m, uint64_t k) {
  size_t mask = m->cap - 1, i = lt__pm_hash(k) & mask;
  while (m->keys[i] != LT__PM_EMPTY && m->keys[i] != k) i = (i + 1) & mask;
  return i;
}

static inline bool lt__pm_get(const lt__pairmap *m, uint64_t k, int64_t *v) {
  size_t i = lt__pm_slot(m, k);
  if (m->keys[i] == LT__PM_EMPTY) return false;
  *v = m->vals[i];
  return true;
}

/* Frees the slots and zeroes *m (a zeroed map is a no-op). */
void lt__pm_free(lt__pairmap *m);
/* Makes an empty map with room for want keys; false when out of memory. */
bool lt__pm_init(lt__pairmap *m, size_t want);
/* Inserts k -> v if k is absent. *found tells whether it was there; *v_out is
 * the value now stored. False when out of memory (the map is unchanged). */
bool lt__pm_insert(lt__pairmap *m, uint64_t k, int64_t v, bool *found, int64_t *v_out);

/* Grows the array whose pointer is at pp (a T **, passed as void * so that
 * any element type fits without aliasing casts) from *cap to at least need
 * elements of sz bytes. On failure (false) the array is unchanged. */
bool lt__grow(void *pp, int64_t *cap, int64_t need, size_t sz);

/* ---- A kind implemented in files of its own -------------------------------- */
/* The calls of a tokenizer kind whose state lives outside this file (the kind
 * hf: datasets/hf_tokenizer.c fills one and sets it at construction). The
 * generic functions of tokenizer.c check their arguments, then call these,
 * so tokenizer.c includes nothing of the kind: the kind builds on this header,
 * never the other way. impl is the tokenizer's impl. */
typedef struct lt__tok_ops {
  /* Releases impl (never NULL). */
  void (*free)(void *impl);
  /* lt_tokenizer_encode_ex's contract (arguments already checked; offsets may be NULL). */
  lt_status (*encode)(const void *impl, const char *text, size_t len, unsigned flags, int64_t **ids,
                      int64_t **offsets, int64_t *n);
  /* lt_tokenizer_decode's contract (ids already checked against the vocabulary). */
  lt_status (*decode)(const void *impl, const int64_t *ids, int64_t n, bool skip_special, char **text, size_t *len);
  /* The id of the token string s[0..n), or -1. */
  int64_t (*token_id)(const void *impl, const char *s, size_t n);
  /* The text the tokenizer was read from (borrowed): what serialisation writes. */
  const char *(*source)(const void *impl, size_t *len);
} lt__tok_ops;

/* The most bytes of tokenizer.json text the kind hf reads (its loader and
 * the serialised buffer of lt_tokenizer_deserialize both check it). */
#define LT__HF_MAX_JSON_BYTES ((size_t)1 << 30)

/* ---- The object ------------------------------------------------------------ */
struct lt_tokenizer {
  lt_tokenizer_kind kind;
  int64_t vocab;      /* number of ids */
  /* char: the code points of ids 4.., strictly increasing */
  uint32_t *cps;
  int64_t ncps;
  /* bpe: merge i joins merge_l[i], merge_r[i] into id LT__NBASE + i */
  int64_t nmerges;
  int32_t *merge_l, *merge_r;
  lt__pairmap ranks;      /* lt__pair_key(l, r) -> i */
  /* bpe: bytes of every id >= LT__BYTE0: tok_off[id - LT__BYTE0] .. tok_off[id - LT__BYTE0 + 1] in blob */
  unsigned char *blob;
  int64_t *tok_off;
  /* a kind of its own (hf: the Hugging Face tokenizer, vocab is its size):
   * its calls and its state (owned, released by ops->free); NULL otherwise */
  const lt__tok_ops *ops;
  void *impl;
};
/* A zeroed tokenizer of the kind (returns new, free with lt_tokenizer_free);
 * NULL with LT_ERR_NOMEM naming op. */
lt_tokenizer *lt__tok_alloc(lt_tokenizer_kind kind, const char *op);

/* ---- BPE ------------------------------------------------------------------ */
/* End of the piece that starts at s[i] (i < n): docs/datasets.md "Pieces". */
size_t lt__bpe_next_piece(const unsigned char *s, size_t n, size_t i);
/* Checks the merges of t (from a trainer or a buffer) and builds the rank map
 * and the bytes of every token. Fails with LT_ERR_FORMAT on a merge that uses
 * a special or not-yet-defined id, a repeated pair, or a token longer than
 * LT_BPE_MAX_PIECE bytes (no trained tokenizer has one). */
lt_status lt__bpe_build_tables(lt_tokenizer *t, const char *op);

#endif /* LT_DATASETS_TOKENIZER_INTERNAL_H */
