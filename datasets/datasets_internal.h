/*
 * datasets/datasets_internal.h: what the loaders of datasets/ share (batch.c
 * defines them; shards.c uses them). Not installed.
 */
#ifndef LT_DATASETS_INTERNAL_H
#define LT_DATASETS_INTERNAL_H

#include <stdint.h>

#include "tensor/tensor.h"

/* The FNV-1a offset basis, and v's 8 bytes (little-endian order) mixed into
 * the FNV-1a 64 hash h: the loaders' fingerprints. */
#define LT__FNV_BASIS 1469598103934665603ULL
uint64_t lt__fnv_mix(uint64_t h, uint64_t v);
/* A fresh permutation of [0, n) from g (lt_randperm) into dst[0..n). */
lt_status lt__draw_perm(lt_generator *g, int64_t n, int64_t *dst);

#endif
