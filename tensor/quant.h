/*
 * tensor/quant.h: weight formats for inference: bf16 and ggml's 8-bit and
 * 4-bit blocks (Q8_0, Q4_0), laid out byte for byte as ggml's block_q8_0
 * and block_q4_0 (ggml/src/ggml-common.h), with the reference row
 * conversions of ggml/src/ggml-quants.c (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref, dequantize_row_q8_0, dequantize_row_q4_0) and of
 * ggml-impl.h (ggml_compute_fp32_to_bf16, ggml_compute_fp32_to_fp16): the
 * bytes written here are the bytes ggml and the `gguf` Python package
 * (gguf/quants.py) write for the same floats, so a GGUF file can carry them
 * unchanged (tests/test_quant.c checks the bits against gguf/quants.py).
 *
 * What it is not: a tensor dtype. Quantized weights are read-only inputs of
 * products; nothing here has a gradient.
 *
 * Layouts (little-endian; ggml's):
 *   Q8_0: 32 weights a block, 34 bytes: d (f16 bits), then qs[32] (int8);
 *         weight j = d * qs[j].
 *   Q4_0: 32 weights a block, 18 bytes: d (f16 bits), then qs[16]: byte j
 *         holds weight j in its low nibble and weight j + 16 in its high
 *         nibble, each stored as q + 8 (0..15); weight = d * (nibble - 8).
 *   BF16: one weight in 2 bytes (the upper half of its f32 bits).
 *   F32:  one weight in 4 bytes (no conversion).
 * A row of n weights is n / 32 blocks one after the other (n a multiple of
 * 32 for Q8_0 and Q4_0; any n for BF16 and F32).
 *
 * Rounding (ggml's reference, bit for bit):
 *   Q8_0: amax = max |x_j| over the block, d = amax / 127, id = 1/d (0 when
 *         d is 0), qs[j] = roundf(x_j * id) (half away from zero), the
 *         scale stored as f16(d).
 *   Q4_0: max = the x_j of largest |x_j| (the first one on ties), d = max
 *         / -8, id = 1/d (0 when d is 0), nibble = min(15, (int8_t)(x_j *
 *         id + 8.5f)), the scale stored as f16(d).
 *   f16:  round to nearest even, subnormals kept, overflow to infinity.
 *   bf16: round to nearest even, a NaN kept quiet (lt_bf16_from_f32).
 * Q8_0 and Q4_0 need finite weights (a NaN or an infinity is refused).
 */
#ifndef LT_TENSOR_QUANT_H
#define LT_TENSOR_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weight formats. _name gives "f32", "bf16", "q8_0", "q4_0". */
typedef enum lt_qformat {
  LT_QFORMAT_F32 = 0,
  LT_QFORMAT_BF16,
  LT_QFORMAT_Q8_0,
  LT_QFORMAT_Q4_0,
  LT_QFORMAT_COUNT
} lt_qformat;

/* A static string; "unknown" for a value out of range. */
LT_API const char *lt_qformat_name(lt_qformat f);
/* Sets *out from "f32", "bf16", "q8_0", "q4_0" (also accepted: "fp32",
 * "q8", "q4"). Errors: LT_ERR_NULL, LT_ERR_INVALID naming the choices. */
LT_API lt_status lt_qformat_parse(const char *s, lt_qformat *out);

#define LT_QK8_0 32
#define LT_QK4_0 32

/* ggml's block_q8_0 (34 bytes, no padding). */
typedef struct lt_block_q8_0 {
  uint16_t d;            /* scale, f16 bits */
  int8_t qs[LT_QK8_0];   /* quants */
} lt_block_q8_0;

/* ggml's block_q4_0 (18 bytes, no padding). */
typedef struct lt_block_q4_0 {
  uint16_t d;               /* scale, f16 bits */
  uint8_t qs[LT_QK4_0 / 2]; /* nibbles: low = weight j, high = weight j + 16, each + 8 */
} lt_block_q4_0;

_Static_assert(sizeof(lt_block_q8_0) == 34, "block_q8_0 is 34 bytes as in ggml");
_Static_assert(sizeof(lt_block_q4_0) == 18, "block_q4_0 is 18 bytes as in ggml");

/* Weights per block: 32 for Q8_0 and Q4_0, 1 for F32 and BF16; 0 for a
 * value out of range. */
LT_API int64_t lt_qformat_block_elems(lt_qformat f);
/* Bytes per block: 34, 18, 4, 2; 0 for a value out of range. */
LT_API size_t lt_qformat_block_bytes(lt_qformat f);

/* *bytes = the size of a row of n weights in format f, with checked
 * arithmetic (n comes from files). Errors: LT_ERR_INVALID for an unknown
 * format or n < 0, LT_ERR_SHAPE when n is not a multiple of the block
 * (naming the format, n and the block), LT_ERR_OVERFLOW above SIZE_MAX or
 * 2^62. *bytes is untouched on failure. */
LT_API lt_status lt_qformat_row_bytes(lt_qformat f, int64_t n, size_t *bytes);

/* f16 <-> f32 as ggml converts them (ggml_compute_fp32_to_fp16: round to
 * nearest even, subnormals kept; a NaN stays a NaN). */
LT_API uint16_t lt_f16_from_f32(float x);
LT_API float lt_f32_from_f16(uint16_t h);

/* Converts the n floats x into format f at dst (lt_qformat_row_bytes(f, n)
 * bytes; F32 copies). Borrows x and dst (not overlapping). Errors: those of
 * lt_qformat_row_bytes, LT_ERR_NULL, LT_ERR_NUMERIC for a weight that is
 * not finite in Q8_0 or Q4_0 (naming its index); nothing is written on
 * failure. */
LT_API lt_status lt_quantize_row(lt_qformat f, const float *x, int64_t n, void *dst);
/* Converts n weights of format f at src back to floats y (ggml's
 * dequantize_row_*: y = d * q in f32). Borrows src and y. Errors as
 * lt_quantize_row. */
LT_API lt_status lt_dequantize_row(lt_qformat f, const void *src, int64_t n, float *y);

/* ---- quantized matrices and their product ---------------------------------
 *
 * An lt_qmatrix is a weight matrix W [N, K] (N rows of K weights, the layout
 * of a Linear weight [out, in] or an embedding table [V, C]) held in one
 * format. Rows of Q8_0 and Q4_0 are padded with zero weights to a multiple
 * of 32 (lt_qmatrix_padded_cols), so any K works; a row is
 * lt_qmatrix_row_bytes bytes and row n starts at lt_qmatrix_data + n *
 * row_bytes (blocks exactly as ggml's, so a GGUF tensor of K a multiple of
 * 32 is the same bytes).
 *
 * The product (lt_qmatrix_linear) is what llama.cpp computes: for Q8_0 and
 * Q4_0 weights, each row of x is quantized to Q8_0 blocks on the fly
 * (lt_quantize_row's rounding; the f16 scale too), each block's integer dot
 * product is exact in int32, and the per-block products d_w * d_x * isum
 * are summed in f32. bf16 weights multiply f32 activations (each weight
 * widened exactly to f32, products summed in f32) for up to 15 rows of x
 * (decoding); from 16 rows on (a prompt, a batch) the product runs on
 * oneDNN's bf16 matmul where it has one (tensor/qgemm_bf16.c): x rounded to
 * bf16 as autocast rounds it, the products summed in f32. Kernels: AVX512-VNNI
 * (vpdpbusd) for Q8_0 / Q4_0 and AVX-512 FMA for bf16 where the CPU has them
 * (checked once at run time), else AVX2 (vpmaddubsw) and AVX2 FMA, else
 * portable C; lt_qmatrix_kernel names the one in use. AMX-INT8 is not used.
 * The kernels differ only in the order of the f32 sums (the SIMD ones on 16
 * rows of x and more have the portable kernel's order: the same bits). */
typedef struct lt_qmatrix lt_qmatrix;

/* Quantizes w (a 2-d f32 tensor [N, K], any strides; borrowed) into format
 * f. Returns new (free with lt_qmatrix_free), or NULL with LT_ERR_NULL,
 * LT_ERR_DTYPE (not f32), LT_ERR_SHAPE (not 2-d), LT_ERR_NUMERIC (a weight
 * that is not finite, Q8_0/Q4_0), LT_ERR_OVERFLOW, LT_ERR_NOMEM. */
LT_API lt_qmatrix *lt_qmatrix_quantize(const lt_tensor *w, lt_qformat f);
/* A matrix from N rows of ggml blocks (a GGUF tensor's data: N *
 * lt_qformat_row_bytes(f, K) bytes at src, copied). K must be a multiple of
 * the block. Returns new, or NULL with LT_ERR_NULL, LT_ERR_INVALID (N or K <
 * 0), LT_ERR_SHAPE, LT_ERR_OVERFLOW, LT_ERR_NOMEM. */
LT_API lt_qmatrix *lt_qmatrix_from_blocks(lt_qformat f, int64_t N, int64_t K, const void *src);
LT_API void lt_qmatrix_free(lt_qmatrix *m); /* NULL is a no-op */

LT_API lt_qformat lt_qmatrix_format(const lt_qmatrix *m);
LT_API int64_t lt_qmatrix_rows(const lt_qmatrix *m);        /* N */
LT_API int64_t lt_qmatrix_cols(const lt_qmatrix *m);        /* K */
LT_API int64_t lt_qmatrix_padded_cols(const lt_qmatrix *m); /* K rounded up to the block */
LT_API size_t lt_qmatrix_row_bytes(const lt_qmatrix *m);
LT_API size_t lt_qmatrix_bytes(const lt_qmatrix *m);        /* N * row_bytes: what the weights occupy */
LT_API const void *lt_qmatrix_data(const lt_qmatrix *m);    /* borrowed, valid while m lives */

/* The f32 values of rows [n0, n0 + count) (the first K of each padded row)
 * into y [count, K] (row-major, borrowed). Errors: LT_ERR_NULL, LT_ERR_INDEX
 * for rows outside [0, N). */
LT_API lt_status lt_qmatrix_dequantize_rows(const lt_qmatrix *m, int64_t n0, int64_t count, float *y);
/* All of it as a new f32 tensor [N, K] (free with lt_tensor_free), or NULL
 * with LT_ERR_NULL / LT_ERR_NOMEM. */
LT_API lt_tensor *lt_qmatrix_dequantize(const lt_qmatrix *m);

/* y = x W^T (+ bias): x [..., K] f32 (any strides; borrowed), bias [N] f32
 * or NULL (borrowed). Returns new y [..., N] f32 (no autograd: the weights
 * are constants and x's graph is not recorded), or NULL with LT_ERR_NULL,
 * LT_ERR_DTYPE, LT_ERR_SHAPE naming x, W and bias, LT_ERR_NOMEM. Threads:
 * rows of W split over the OpenMP threads (lt_set_num_threads) from 2^22
 * multiply-adds or 256 KB of weights on (as the f32 products: below, a
 * wake-up costs more; the bytes rule is decoding's, M = 1). */
LT_API lt_tensor *lt_qmatrix_linear(const lt_tensor *x, const lt_qmatrix *w, const lt_tensor *bias);
/* out[i] = lt_qmatrix_linear(x, w[i], bias ? bias[i] : NULL) for i < n,
 * the same bits, for 1 <= n <= LT_QMATRIX_MANY_MAX matrices of one format
 * and K (the projections that read the same x: q, k and v, a gated
 * feed-forward's two): x quantized once and, below oneDNN's rows, the rows
 * of all the matrices split over the threads in one parallel region, one
 * wake-up instead of n (a decoding step's products are short: the wake-ups
 * are a large share of them). out[i] new (free each with lt_tensor_free);
 * on an error none is set (NULL) and the status is returned: the errors
 * of lt_qmatrix_linear (LT_ERR_SHAPE also for a K that differs), or
 * LT_ERR_INVALID (n out of range, formats that differ). x, w, bias
 * borrowed. */
#define LT_QMATRIX_MANY_MAX 8
LT_API lt_status lt_qmatrix_linear_many(const lt_tensor *x, int n, const lt_qmatrix *const *w,
                                        const lt_tensor *const *bias, lt_tensor **out);

/* ---- quantized weight tensors --------------------------------------------
 *
 * lt_tensor_quantize_ converts a weight tensor in place: t keeps its
 * identity, dtype (f32), shape [N, K] and references (layer structs that
 * hold it stay valid), its f32 memory is released (when no view shares it)
 * and it holds an lt_qmatrix instead. lt_linear (weight), lt_embedding
 * (table) and so every nn/ layer built on them then compute with the
 * quantized weights; every other op reads t as zeros (its values are a
 * single 0 broadcast to [N, K], so nothing reads out of bounds), and
 * checkpoint saving and lt_params_to_dtype refuse it. It no longer requires
 * grad; lt_linear on it fails with LT_ERR_AUTOGRAD when x requires grad
 * under grad mode (the quantized product has no backward). */

/* t: a 2-d f32 tensor that is not a view, has no grad_fn and is not
 * quantized yet. f = LT_QFORMAT_F32 leaves it as it is. Errors: LT_ERR_NULL,
 * LT_ERR_DTYPE, LT_ERR_SHAPE, LT_ERR_STATE (already quantized, or a
 * non-leaf), LT_ERR_INVALID (a view: offset or strides not its own), those
 * of lt_qmatrix_quantize; on failure t is unchanged. */
LT_API lt_status lt_tensor_quantize_(lt_tensor *t, lt_qformat f);
/* The quantized weights of t (borrowed, valid while t lives), or NULL if
 * t is NULL or not quantized. */
LT_API const lt_qmatrix *lt_tensor_qmatrix(const lt_tensor *t);

/* ---- building quantized weights in place ----------------------------------
 *
 * A loader that reads a model straight into a weight format (without an f32
 * copy of the whole model: models/transformer/load.h's .weights) builds each
 * weight quantized from the start (nn/nn.h's lt_set_weight_format) and then
 * fills it a few rows at a time, so the f32 values exist for those rows
 * only. The bytes written are lt_qmatrix_quantize's for the same floats. */

/* A matrix of N rows of K weights in format f (not F32), every weight 0
 * (all-zero blocks). Returns new (free with lt_qmatrix_free), or NULL with
 * LT_ERR_INVALID (N or K < 0, an unknown format or F32), LT_ERR_OVERFLOW,
 * LT_ERR_NOMEM. */
LT_API lt_qmatrix *lt_qmatrix_new(lt_qformat f, int64_t N, int64_t K);

/* Makes t quantized with the weights q, taking ownership of q in every case
 * (freed on failure): t keeps its identity, dtype f32 and shape [N, K] as
 * lt_tensor_quantize_ leaves it (its f32 memory released, its values read as
 * zeros by other ops, no grad). t: a 2-d f32 tensor of q's shape, not a
 * view, no grad_fn, not quantized yet. Errors: LT_ERR_NULL, LT_ERR_DTYPE,
 * LT_ERR_SHAPE (naming both shapes), LT_ERR_STATE, LT_ERR_INVALID, as
 * lt_tensor_quantize_; on failure t is unchanged. */
LT_API lt_status lt_tensor_set_qmatrix_(lt_tensor *t, lt_qmatrix *q);

/* A weight tensor [N, K] (f32, as lt_tensor_quantize_ leaves one) that holds
 * zero weights in format f (not F32) and never had f32 memory: what nn/'s
 * layers build under lt_set_weight_format. Outside any scope (the caller
 * owns it). Returns new (free with lt_tensor_free), or NULL with the errors
 * of lt_qmatrix_new. */
LT_API lt_tensor *lt_quantized_zeros(lt_qformat f, int64_t N, int64_t K);

/* Writes rows (a 2-d f32 tensor [count, K], any strides; borrowed) into the
 * quantized weights of t from row n0, each row converted to t's format as
 * lt_qmatrix_quantize converts it (padded with zeros to the block). Errors:
 * LT_ERR_NULL; LT_ERR_STATE (t not quantized); LT_ERR_DTYPE (rows not f32);
 * LT_ERR_SHAPE (not [count, K]); LT_ERR_INDEX (rows beyond N); LT_ERR_NUMERIC
 * (a weight that is not finite, Q8_0 / Q4_0, naming its row): the rows
 * before the failing one are written. */
LT_API lt_status lt_tensor_qset_rows_(lt_tensor *t, int64_t n0, const lt_tensor *rows);
/* Copies count rows already in t's format (count * lt_qmatrix_row_bytes
 * bytes at src, borrowed: a GGUF tensor's blocks, a bf16 file's bits) into
 * t's weights from row n0, unchanged. K must be a multiple of the block (no
 * padding to fill). Errors: LT_ERR_NULL, LT_ERR_STATE, LT_ERR_SHAPE (K not a
 * multiple of the block), LT_ERR_INDEX. */
LT_API lt_status lt_tensor_qset_blocks_(lt_tensor *t, int64_t n0, int64_t count, const void *src);

/* The kernel lt_qmatrix_linear uses for format f on this CPU, in words
 * ("AVX512-VNNI (vpdpbusd)", "AVX-512 FMA", "AVX2 (vpmaddubsw)", "AVX2
 * FMA", "portable C"). Static. */
LT_API const char *lt_qmatrix_kernel(lt_qformat f);

#ifdef __cplusplus
}
#endif

#endif /* LT_TENSOR_QUANT_H */
