/*
 * tensor/quant_internal.h: what the quantized product (tensor/qgemm.c)
 * shares with the formats (tensor/quant.c), and the kernel switch tests
 * use. Not installed.
 */
#ifndef LT_TENSOR_QUANT_INTERNAL_H
#define LT_TENSOR_QUANT_INTERNAL_H

#include "tensor/quant.h"

#include <stdbool.h>

/* quantize_row_q8_0_ref on nb whole blocks (x holds nb * 32 floats, finite
 * or not: a value that is not finite gives the quant 0). */
void lt__quantize_q8_0(const float *x, lt_block_q8_0 *y, int64_t nb);

/* A matrix of N rows of K weights in format f, its bytes uninitialised
 * except the padding past N * row_bytes (tensor/qgemm.c's allocator, which
 * owns the struct; op prefixes messages). NULL with the error set. The
 * constructors of tensor/quant.c write its bytes through
 * lt_qmatrix_data, which points at memory the matrix owns and may write. */
lt_qmatrix *lt__qmatrix_alloc(const char *op, lt_qformat f, int64_t N, int64_t K);

/* bf16 weights times M rows of x on oneDNN (tensor/qgemm_bf16.c): taken by
 * lt_qmatrix_linear from LT__QGEMM_BF16_MIN_ROWS rows on (a prompt, a
 * batch), where oneDNN has a bf16 matmul; x rounded to bf16, f32 sums,
 * y [M, N] = x W^T + bias (bias [N] or NULL). x contiguous [M, K]. */
#define LT__QGEMM_BF16_MIN_ROWS 16
bool lt__qgemm_bf16_wanted(const lt_qmatrix *w, int64_t M);
lt_status lt__qgemm_bf16(const lt_qmatrix *w, const float *x, int64_t M, float *y, const float *bias);
/* Sets the rows from which the oneDNN path is taken and returns the
 * previous value (tests: INT64_MAX keeps every product on the hand loop, 1
 * sends every one to oneDNN). Not thread-safe against running products. */
int64_t lt__qgemm_bf16_min_rows(int64_t m);

/* The kernels of lt_qmatrix_linear. */
typedef enum lt__qdot_kind {
  LT__QDOT_PORTABLE = 0, /* plain C, any CPU */
  LT__QDOT_AVX2 = 1,     /* AVX2 (vpmaddubsw), FMA and F16C */
  LT__QDOT_AVX512 = 2    /* AVX512F/BW/VL + AVX512-VNNI (vpdpbusd) and FMA */
} lt__qdot_kind;

/* The best kernel this CPU runs (checked once per process). */
lt__qdot_kind lt__qdot_best(void);
/* Limits lt_qmatrix_linear to kernels up to `kind` (the CPU's best is still
 * the ceiling) and returns the previous limit: tests force the portable
 * path with LT__QDOT_PORTABLE. Not thread-safe against running products.
 * The environment variable LT_QDOT=portable or LT_QDOT=avx2 sets it at
 * start. */
lt__qdot_kind lt__qdot_limit(lt__qdot_kind kind);

/* M rows of x quantized to Q8_0 for lt_qmatrix_linear (tensor/qgemm.c):
 * scale xd[m * nb + b] (f32 of the f16 scale, NaN for a block that is not
 * finite), quants xq[m * Kp + k]; for the VNNI kernels also, per block pair
 * p, the scales in 16 lanes xs[(m * npair + p) * 16 + i] = xd[2p + i / 8],
 * and per block b the correction of the unsigned weight operand in 8 lanes
 * nc[(m * nb + b) * 8 + i] = -shift * (the sum of quants 4i .. 4i + 3),
 * shift 8 (Q4_0's nibbles are q + 8) or 128 (Q8_0's weights xor 0x80 are q +
 * 128); from LT__QG_GROUP_M rows on, for the VNNI kernels and the AVX2
 * ones on Q4_0 weights, per block the sum of its 32 quants xsum[m * nb +
 * b] (NULL otherwise). */
typedef struct lt__qact {
  int64_t M, nb, Kp;
  float *xd, *xs;
  int8_t *xq;
  int32_t *nc, *xsum;
} lt__qact;

/* Where the AVX-512 kernels are compiled (GCC 10 or later on x86-64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define LT__QDOT_X86 1
#endif

/* The AVX512-VNNI kernels (tensor/qgemm_vnni.c, LT__QDOT_X86 only; call only where the path
 * qdot=vnni is supported): y[m * ldy + n] = row m of x times row n of W for
 * m < a->M and n in [n0, n1). w: the matrix's blocks (row n at w + n *
 * row_bytes), Q8_0 or Q4_0 as fmt says; bf16: K weights a row, x [M, K]
 * f32. Each element's sum runs in the same order whatever n0, n1 and M (so
 * the split over threads changes no bit). */
void lt__qgemm_blocks_vnni(lt_qformat fmt, const char *w, size_t row_bytes, const lt__qact *a, int64_t n0, int64_t n1,
                           float *y, int64_t ldy);
/* The loop of the SIMD kernels over y[m, n], m < M, n in [n0, n1) (M, n0,
 * n1, rb the bytes of a row of W, y in scope): the rows of W in cache blocks
 * of about BLOCK_BYTES (a multiple of NR rows), each block under every tile
 * of x before the next one starts, so that it is read from memory once
 * (prompt processing: it stays in L2 while the rows of x go past). Inside a
 * block, register tiles of LT__QG_MR rows of x by NR rows of W (below
 * LT__QG_MR rows of x, decoding, one row of W: W then streams in order,
 * which the hardware prefetcher follows), the edges in smaller tiles.
 * TILE(MR, NR) computes the tile at rows m0 of x and n of W. */
#define LT__QG_MR 4
/* From this many rows of x on (a prompt) the SIMD kernels repack W into
 * groups of rows, one per lane (tensor/qgemm_avx2.c, tensor/qgemm_vnni.c),
 * and give the portable kernel's bits; below, the row tiles. */
#define LT__QG_GROUP_M 16
/* The grouped kernels' buffer for a->M >= LT__QG_GROUP_M rows of x (NULL
 * below, or without memory: the row tiles, which need none): *gblk groups
 * of gblk_bytes per block of a row (a->nb blocks) to a cache block of about
 * block_bytes, at least one, aligned to align. Free with free(). */
char *lt__qg_group_buffer(const lt__qact *a, size_t gblk_bytes, size_t block_bytes, size_t align, int64_t *gblk);
#define LT__QG_BLOCKED(BLOCK_BYTES, NR, TILE)                                                                 \
  do {                                                                                                         \
    int64_t nblk = (int64_t)((BLOCK_BYTES) / (rb ? rb : 1)) / (NR) * (NR);                                     \
    if (nblk < (NR)) nblk = (NR);                                                                              \
    const bool wide = M >= LT__QG_MR;                                                                          \
    for (int64_t b0 = n0; b0 < n1; b0 += nblk) {                                                               \
      const int64_t b1 = n1 - b0 < nblk ? n1 : b0 + nblk;                                                      \
      for (int64_t m0 = 0; m0 < M; m0 += LT__QG_MR) {                                                          \
        const int mr = (int)(M - m0 < LT__QG_MR ? M - m0 : LT__QG_MR);                                         \
        int64_t n = b0;                                                                                        \
        for (; wide && n + (NR) <= b1; n += (NR)) switch (mr) {                                                \
          case 1: TILE(1, NR); break;                                                                          \
          case 2: TILE(2, NR); break;                                                                          \
          case 3: TILE(3, NR); break;                                                                          \
          default: TILE(LT__QG_MR, NR); break;                                                                 \
          }                                                                                                    \
        for (; n < b1; n++) switch (mr) {                                                                      \
          case 1: TILE(1, 1); break;                                                                           \
          case 2: TILE(2, 1); break;                                                                           \
          case 3: TILE(3, 1); break;                                                                           \
          default: TILE(LT__QG_MR, 1); break;                                                                  \
          }                                                                                                    \
      }                                                                                                        \
    }                                                                                                          \
  } while (0)

/* The AVX2 kernels (tensor/qgemm_avx2.c, LT__QDOT_X86 only; call only where
 * the path qdot=avx2 is supported), as lt__qgemm_blocks_vnni and
 * lt__qgemm_bf16_avx512 but on AVX2, FMA and F16C: a's xd and xq only (the
 * scalar quantizer's). */
void lt__qgemm_blocks_avx2(lt_qformat fmt, const char *w, size_t row_bytes, const lt__qact *a, int64_t n0, int64_t n1,
                           float *y, int64_t ldy);
/* Fills a's xd and xq (and xsum where it is allocated) as
 * lt__qact_fill_vnni does (bit for bit the scalar quantizer's), with AVX2. */
void lt__qact_fill_avx2(const float *x2, int64_t M, int64_t K, lt__qact *a);
void lt__qgemm_bf16_avx2(const char *w, size_t row_bytes, int64_t K, const float *x, int64_t M, int64_t n0, int64_t n1,
                         float *y, int64_t ldy);

/* Fills a's xd, xq and nc for the M rows of x2 [M, K] (f32, contiguous;
 * columns K .. a->Kp read as zeros) as the scalar code of tensor/qgemm.c
 * does, bit for bit (lt__quantize_q8_0's rounding), with AVX-512. */
void lt__qact_fill_vnni(const float *x2, int64_t M, int64_t K, int32_t shift, lt__qact *a);
void lt__qgemm_bf16_avx512(const char *w, size_t row_bytes, int64_t K, const float *x, int64_t M, int64_t n0,
                           int64_t n1, float *y, int64_t ldy);

#endif /* LT_TENSOR_QUANT_INTERNAL_H */
