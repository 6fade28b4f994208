/*
 * tensor/dnnl_conv_internal.h: f32 and bf16 convolution on oneDNN's direct
 * kernels (tensor/dnnl_conv.c), for nn/conv.c's conv2d. Not installed.
 *
 * What it is not: the convolution op or its choice of path (nn/conv.c runs
 * its im2col path where these decline).
 */
#ifndef LT_TENSOR_DNNL_CONV_INTERNAL_H
#define LT_TENSOR_DNNL_CONV_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* The geometry of conv2d: x [N, C, H, W], weight [O, C/G, kh, kw], y [N, O,
 * OH, OW]; strides sh, sw; top/left padding ph, pw (the bottom/right padding
 * is implied by OH, OW); dilations dh, dw (1: none); G groups. */
typedef struct lt__dnnl_conv {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, G;
} lt__dnnl_conv;

typedef enum lt__dnnl_conv_pass {
  LT__DNNL_CONV_FWD,   /* y = conv(x, w) (+ bias) */
  LT__DNNL_CONV_BWD_X, /* dx = the input gradient of dy */
  LT__DNNL_CONV_BWD_W  /* dw = the weight gradient of dy over x */
} lt__dnnl_conv_pass;

/* One pass of an f32 convolution on oneDNN's direct (JIT) kernels; all
 * arrays contiguous NCHW / OIHW, borrowed:
 *   FWD:   x, w, bias (or NULL) in; y out.
 *   BWD_X: dy (in y's place), w in; dx (in x's place) out.
 *   BWD_W: x, dy in; dw (in w's place) and, if db is not NULL, the bias
 *          gradient db [O] out.
 * The batch runs in chunks of images fixed by the shapes (not the thread
 * count), one chunk per thread at a time, each on a one-thread primitive;
 * BWD_W sums the chunks' weight gradients in chunk order, so every pass gives
 * the same bits on any thread count. Primitives, reorders and scratch are
 * cached by geometry (no allocation once warm). Sets *taken false, and
 * returns LT_OK without touching anything, when oneDNN has no direct kernel
 * for the geometry (the caller then runs its own path) or the path table
 * says conv=im2col (tensor/paths.def); returns an error status (message
 * set) only when a pass that started
 * fails. */
lt_status lt__dnnl_conv_f32(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const float *w,
                            const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                            bool *taken);

/* The same pass under autocast: oneDNN's bf16 convolution, with the chunks,
 * caching and bits-on-any-thread-count of lt__dnnl_conv_f32. x, dy, bias
 * and the outputs (y, dx, dw, db) are f32 as there; x and dy are rounded to
 * bf16 (to nearest even) by the reorders into the primitive's layout; w
 * (FWD, BWD_X) is the weight's bf16 copy, plain OIHW (the autocast operand
 * cache's, lt__autocast_bf16_of); BWD_W's weight and bias gradients
 * accumulate in f32, chunks summed in chunk order. Sets *taken false (then
 * run lt__dnnl_conv_f32) when oneDNN has no bf16 matmul for this CPU
 * (lt__dnnl_bf16_available), no direct bf16 kernel for the geometry, or
 * conv=im2col is forced. Errors as lt__dnnl_conv_f32. */
lt_status lt__dnnl_conv_bf16(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const uint16_t *w,
                             const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                             bool *taken);

/* How convolutions run under autocast on this CPU, for lt_runtime_get_info
 * (bf16_conv): "native (...)", "fallback (oneDNN emulates ...)" or "f32
 * (...)". Static string. */
const char *lt__dnnl_conv_bf16_path(void);

/* For tests and benchmarks: the number of passes this path has run so far
 * (the path itself is turned off by forcing conv=im2col: LT_CONV_DNNL=0 or
 * lt__path_force, tensor/paths_internal.h). */
int64_t lt__dnnl_conv_runs(void);
/* The bf16 passes among them. */
int64_t lt__dnnl_conv_bf16_runs(void);

#endif /* LT_TENSOR_DNNL_CONV_INTERNAL_H */
