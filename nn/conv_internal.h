/*
 * nn/conv_internal.h: what convolution (nn/conv.c) and pooling (nn/pool.c)
 * share: the window geometry over [N, C, H, W], the output size of a window
 * sweep, and the dtype check of their operands. Not installed.
 */
#ifndef LT_NN_CONV_INTERNAL_H
#define LT_NN_CONV_INTERNAL_H

#include "nn/conv.h"

/* An im2col geometry: the image side [N, C, H, W] (of conv2d's input, of
 * conv_transpose2d's output), the kernel, and the OH x OW kernel positions.
 * ph, pw are the top and left padding (the bottom/right padding is implied by
 * OH, OW). Stored in a node's aux, so it stays within LT__AUX_MAX. */
typedef struct lt__conv_geom {
  int64_t N, C, H, W;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t OH, OW;
  int64_t groups;
} lt__conv_geom;

/* Output size of a window sweep (PyTorch's pooling_output_shape, and the
 * convolution formula with ceil_mode false). May be <= 0: the caller refuses. */
int64_t lt__conv_out_size(int64_t in, int64_t k, int64_t s, int64_t pad_l, int64_t pad_r, int64_t d, bool ceil_mode);

/* LT_ERR_DTYPE (naming op) unless x is f32 or f64 and w and b (either may be
 * NULL) have x's dtype. */
lt_status lt__conv_check_float(const char *op, const lt_tensor *x, const lt_tensor *w, const lt_tensor *b);

#endif
