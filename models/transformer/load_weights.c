/*
 * models/transformer/load_weights.c: a file's tensor written into one of
 * the model's weights in the weight's own format (hf_internal.h): an f32
 * weight copied, a weight built quantized (nn/nn.h's lt_set_weight_format,
 * load.h's .weights) converted a block of rows at a time, so that no f32
 * copy of the whole model, nor of one large tensor, exists at any time; a
 * file tensor already in the weight's format (bf16 bits, GGUF Q8_0 / Q4_0
 * blocks) copied unchanged. Each tensor's file pages are released once
 * read (lt_st_release), so the mapped file does not stay resident beside
 * the model either.
 *
 * What this is not: the name and orientation mapping (hf.c's pieces) or a
 * reader of a format (checkpoint/).
 */
#include <stdlib.h>
#include <string.h>

#include "libtensor.h"
#include "models/transformer/hf_internal.h"

/* f32 scratch of a quantized weight's rows: at most this many bytes (a few
 * rows of the largest embedding table; the quantized weight is the memory
 * that stays). */
#define ROWS_BYTES ((size_t)1 << 20)

lt_status lt__tf_store_weight(lt_tensor *dst, const lt_tensor *src) {
  if (!lt_tensor_qmatrix(dst)) return lt_copy_(dst, src);
  return lt_tensor_qset_rows_(dst, 0, src);
}

/* Rows of K weights per block of scratch (at least one). */
static int64_t rows_per_chunk(int64_t K) {
  const int64_t r = K > 0 ? (int64_t)(ROWS_BYTES / sizeof(float)) / K : 1;
  return r > 0 ? r : 1;
}

lt_status lt__tf_store_st(lt_tensor *dst, const lt_st_file *f, int k) {
  const lt_qmatrix *q = lt_tensor_qmatrix(dst);
  const lt_st_tensor_info *ti = lt_st_info(f, k);
  lt_status s;
  const bool rows_ok = ti && ti->ndim == 2 && dst->ndim == 2 && ti->shape[0] == dst->shape[0] &&
                       ti->shape[1] == dst->shape[1] && lt_st_dtype_loads_into(ti->dtype, LT_DTYPE_F32);
  if (!rows_ok || (!q && (dst->dtype != LT_DTYPE_F32 || !lt_is_contiguous(dst)))) {
    s = lt_st_read_into(f, k, dst); /* vectors, other dtypes: at once (they are small) */
  } else if (q && ti->dtype == LT_ST_BF16 && lt_qmatrix_format(q) == LT_QFORMAT_BF16) {
    /* the bits as they are: bf16 -> f32 -> bf16 is exact for finite values */
    s = lt_st_check_finite(f, k);
    if (s == LT_OK) s = lt_tensor_qset_blocks_(dst, 0, dst->shape[0], lt_st_data(f, k));
  } else {
    /* a block of rows at a time through a scratch block, copied into the f32 weight or converted into the
     * quantized one; each block's file pages released once read */
    const int64_t N = dst->shape[0], K = dst->shape[1], R = rows_per_chunk(K);
    float *buf = malloc(sizeof(float) * (size_t)(R < N ? R : N > 0 ? N : 1) * (size_t)(K > 0 ? K : 1));
    s = buf ? LT_OK : lt_error_set(LT_ERR_NOMEM, "loading '%s': %lld rows of %lld floats", ti->name, (long long)R,
                                   (long long)K);
    for (int64_t n0 = 0; n0 < N && s == LT_OK; n0 += R) {
      const int64_t n = N - n0 < R ? N - n0 : R;
      if ((s = lt_st_read_rows_f32(f, k, n0, n, buf)) != LT_OK) break;
      lt_st_release_rows(f, k, n0, n);
      lt_tensor *rows = lt_tensor_from_borrowed(LT_DTYPE_F32, 2, (int64_t[]){n, K}, buf);
      lt_tensor *part = rows && !q ? lt_narrow(dst, 0, n0, n) : NULL;
      s = !rows || (!q && !part) ? lt_last_status() : q ? lt_tensor_qset_rows_(dst, n0, rows) : lt_copy_(part, rows);
      lt_tensor_free(part);
      lt_tensor_free(rows);
    }
    free(buf);
  }
  lt_st_release(f, k);
  return s;
}

lt_tensor *lt__tf_st_f32(const lt_st_file *f, int k) {
  const lt_st_tensor_info *ti = lt_st_info(f, k);
  if (!ti || ti->ndim != 2) return lt_st_tensor(f, k, LT_DTYPE_F32);
  lt_tensor *t = lt_empty(LT_DTYPE_F32, 2, ti->shape);
  const int64_t N = ti->shape[0], K = ti->shape[1], R = rows_per_chunk(K);
  for (int64_t n0 = 0; t && n0 < N; n0 += R) {
    const int64_t n = N - n0 < R ? N - n0 : R;
    if (lt_st_read_rows_f32(f, k, n0, n, (float *)t->data + n0 * K) != LT_OK) {
      lt_tensor_free(t);
      return NULL;
    }
    lt_st_release_rows(f, k, n0, n);
  }
  return t;
}

/* The ggml type of a weight format, or -1. */
static int ggml_type_of(lt_qformat f) {
  switch (f) {
    case LT_QFORMAT_BF16: return LT_GGML_BF16;
    case LT_QFORMAT_Q8_0: return LT_GGML_Q8_0;
    case LT_QFORMAT_Q4_0: return LT_GGML_Q4_0;
    default: return -1;
  }
}

bool lt__tf_gguf_blocks_fit(const piece *p, const lt_gguf_file *f, int k) {
  const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, k);
  if (!ti || ti->ndim != 2 || (p->op != P_SAME && p->op != P_CAT && p->op != P_ROPE)) return false;
  if (p->op == P_ROPE && (p->n != 1 || p->heads <= 0 || ti->shape[0] % (2 * p->heads) != 0)) return false;
  for (int j = 0; j < p->n; j++) {
    const lt_qmatrix *q = lt_tensor_qmatrix(p->src[j]);
    if (!q || ggml_type_of(lt_qmatrix_format(q)) != ti->type || lt_qmatrix_padded_cols(q) != lt_qmatrix_cols(q) ||
        lt_qmatrix_cols(q) != ti->shape[1])
      return false;
  }
  return true;
}

lt_status lt__tf_store_gguf_blocks(const piece *p, const lt_gguf_file *f, int k) {
  const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, k);
  const unsigned char *src = lt_gguf_tensor_data(f, k);
  size_t rb;
  lt_status s = lt_qformat_row_bytes(lt_qmatrix_format(lt_tensor_qmatrix(p->src[0])), ti->shape[1], &rb);
  if (s == LT_OK && (uint64_t)rb * (uint64_t)ti->shape[0] != ti->nbytes)
    s = lt_error_set(LT_ERR_FORMAT, "gguf: tensor '%s': %llu bytes for %lld rows of %zu", ti->name,
                     (unsigned long long)ti->nbytes, (long long)ti->shape[0], rb);
  /* finite values, as lt_gguf_read_f32 requires: a block's weights are
   * finite when its f16 scale is; a bf16 weight when its exponent is not all
   * ones */
  const lt_qformat fmt = lt_qmatrix_format(lt_tensor_qmatrix(p->src[0]));
  const size_t step = lt_qformat_block_bytes(fmt);
  for (uint64_t b = 0; s == LT_OK && step && b < ti->nbytes / step; b++) {
    uint16_t h;
    memcpy(&h, src + b * step, sizeof h);
    if (fmt == LT_QFORMAT_BF16 ? (h & 0x7F80u) == 0x7F80u : (h & 0x7C00u) == 0x7C00u)
      s = lt_error_set(LT_ERR_NUMERIC, "gguf: tensor '%s': block %llu holds %s: refused (non-finite weights)",
                       ti->name, (unsigned long long)b, fmt == LT_QFORMAT_BF16 ? "a NaN or infinity" : "a scale that "
                       "is NaN or infinite");
  }
  if (s == LT_OK && p->op == P_ROPE) {
    /* GGUF's q / k rows of head h in ggml's order (h, i, j), pair i, half j, back to Hugging Face's (h, j, i)
     * (hf.c's rope_permute): whole rows, so each row's blocks move as they are */
    const int64_t H = p->heads, HS = ti->shape[0] / H;
    for (int64_t h = 0; h < H && s == LT_OK; h++)
      for (int64_t j = 0; j < 2 && s == LT_OK; j++)
        for (int64_t i = 0; i < HS / 2 && s == LT_OK; i++)
          s = lt_tensor_qset_blocks_(p->src[0], h * HS + j * (HS / 2) + i, 1, src + (size_t)(h * HS + 2 * i + j) * rb);
    return s;
  }
  int64_t row = 0; /* a P_CAT piece's parameters are consecutive rows */
  for (int j = 0; j < p->n && s == LT_OK; j++) {
    s = lt_tensor_qset_blocks_(p->src[j], 0, p->src[j]->shape[0], src + (size_t)row * rb);
    row += p->src[j]->shape[0];
  }
  return s;
}
