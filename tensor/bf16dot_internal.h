/*
 * tensor/bf16dot_internal.h: small bf16 GEMM kernels for callers that pack
 * their operands once and multiply many small tiles of them (the fused
 * attention under autocast, nn/attention.c): one on AMX tiles (tdpbf16ps,
 * 16 x 16 blocks of C, 32 products of bf16 pairs deep) and one on
 * vdpbf16ps (AVX512_BF16: pairs of bf16 products summed into f32 lanes).
 * Both read the same packed layouts. Not installed.
 *
 * What it is not: a general GEMM. There is no threading (the caller runs
 * one product per thread), no packing inside the product, and no check of
 * shapes or strides beyond LT_CHECK; lt__mat_gemm (tensor/gemm_internal.h)
 * is the entry for everything else. On a CPU without AVX512_BF16 nothing
 * here may be called (lt__bf16dot_best() says LT__BF16DOT_NONE); the
 * callers keep their lt__mat_gemm path, so no illegal instruction is ever
 * reached. AMX needs the kernel's permission for the tile data
 * (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here; oneDNN asks the same):
 * when it is refused, the vdpbf16ps kernel is used.
 *
 * Layouts (elements are uint16_t bf16 bits; "pairs" are two consecutive
 * elements along the product's inner dimension k):
 *   rows   A [M, K]: row m at A + m*lda, element (m, k) at A[m*lda + k].
 *   pairs  B [K, N] ("VNNI"): pair p = (k 2p, 2p+1) of column n at
 *          B[p*ldb + 2n], B[p*ldb + 2n + 1].
 * Padding (AMX reads whole 16 x 32 tiles; ceil32(x) is x rounded up to a
 * multiple of 32): A has ceil32(M) readable rows of ceil32(K) elements and
 * B ceil32(K)/2 pair rows of ceil32(N) readable columns. Rows of A past M
 * and columns of B past N may hold anything (they only reach elements of C
 * that are not written back); along K past K, one of A and B holds zeros
 * and the other finite numbers (the packing below writes zeros there).
 *
 * Rounding: the operands are rounded to bf16 by lt__bf16_from_f32
 * (tensor/storage_internal.h: round to nearest even, subnormals kept, the
 * bits of autocast's operand conversion). Products of two bf16 are exact in
 * f32; they are summed into an f32 accumulator per element of C, starting
 * from zero: vdpbf16ps adds a pair's two products, tdpbf16ps 32 products
 * (16 pairs) per step, both rounding to nearest even, reading subnormal
 * inputs as zero and flushing subnormal results (the instructions' fixed
 * DAZ/FTZ). The two kernels therefore differ in the last bits. alpha
 * multiplies the f32 sum once at the end, fused with the addition to C
 * when accumulating (C + alpha * sum, one rounding). For a given kernel and
 * M, N, K the sequence of operations of every element of C is fixed, so
 * the bits never depend on the thread count or on where a tile starts.
 */
#ifndef LT_TENSOR_BF16DOT_INTERNAL_H
#define LT_TENSOR_BF16DOT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#define LT__BF16DOT_CEIL(x) (((x) + 31) / 32 * 32)

typedef enum lt__bf16dot_kind {
  LT__BF16DOT_NONE = 0, /* neither kernel runs on this CPU */
  LT__BF16DOT_DOT = 1,  /* vdpbf16ps (AVX512F, AVX512BW, AVX512_BF16) */
  LT__BF16DOT_AMX = 2   /* AMX-TILE + AMX-BF16, tile data permitted */
} lt__bf16dot_kind;

/* The fastest kernel this CPU runs (checked once per process). Any kind up
 * to it may be passed to lt__bf16dot_gemm. */
lt__bf16dot_kind lt__bf16dot_best(void);
/* lt__bf16dot_best() in words, for lt_runtime_get_info (a static string). */
const char *lt__bf16dot_path(void);

/* C[m, n] (f32, row m at C + m*ldc, columns contiguous) = alpha *
 * sum_k A[m, k] B[k, n] (+ C[m, n] when accumulate), for m < M, n < N,
 * k < K, with A in the rows layout (lda elements a row) and B in the pairs
 * layout (ldb elements a pair row), padded as above. kind: a kernel up to
 * lt__bf16dot_best() (not NONE). Borrows everything; no allocation. */
void lt__bf16dot_gemm(lt__bf16dot_kind kind, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                      int64_t lda, const uint16_t *B, int64_t ldb, bool accumulate, float *C, int64_t ldc);

/* Packing from f32 (any strides, in elements; lt__bf16_from_f32's bits),
 * only where lt__bf16dot_best() is not NONE. x [rows, cols]: element
 * (i, j) at x[i*rs + j*cs]. */

/* dst in the rows layout: dst[i*ldd + j] = bf16(x[i, j]) for j < cols, and
 * zeros for cols <= j < min(ldd, ceil32(cols)). */
void lt__bf16dot_pack_rows(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols, int64_t rs,
                           int64_t cs);

/* dst in the pairs layout of B = x [K = rows, N = cols] (ldd >= 2*cols):
 * pair p of column j at dst[p*ldd + 2j]; zeros in the second element of an
 * odd rows count's last pair and in the pair rows up to ceil32(rows)/2
 * (columns < cols). */
void lt__bf16dot_pack_pairs(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols, int64_t rs,
                            int64_t cs);

/* Both layouts of one x [rows, cols] with contiguous columns (row stride
 * rs), in one pass over x: exactly what lt__bf16dot_pack_rows(rdst, ldr,
 * x, rows, cols, rs, 1) and lt__bf16dot_pack_pairs(pdst, ldp, x, rows,
 * cols, rs, 1) write, bit for bit (the fused attention's dS tile, the A of
 * one product and the B of another). */
void lt__bf16dot_pack_rows_pairs(uint16_t *rdst, int64_t ldr, uint16_t *pdst, int64_t ldp, const float *x,
                                 int64_t rows, int64_t cols, int64_t rs);

/* dst[j*ldd + i] = src[i*lds + j] for i < n, j < m: an f32 matrix
 * transposed in 16 x 16 blocks in registers (the fused attention's dK^T,
 * dV^T written back as dK, dV). Only where lt__bf16dot_best() is not NONE. */
void lt__bf16dot_transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t n, int64_t m);

#endif /* LT_TENSOR_BF16DOT_INTERNAL_H */
