/*
 * nn/conv.h: convolution, pooling and im2col (unfold/fold), in PyTorch's
 * NCHW layout and semantics (torch.nn.functional.conv1d, conv2d,
 * conv_transpose2d, unfold, fold, max_pool1d/2d, avg_pool1d/2d,
 * adaptive_avg_pool2d), and the Conv1d/Conv2d modules. Included by nn/nn.h;
 * split out because nn.h was getting long.
 *
 * What this is: im2col + one GEMM per group over slices of the batch (about
 * 2 MiB of im2col each, so the scratch stays in cache; through
 * lt__mat_gemm, the entry lt_matmul uses), forward and backward; direct
 * kernels for pooling (a fast path for the 2x2 / stride 2 max pool).
 * Results do not depend on the thread count.
 * What this is not: channels-last (NHWC) layouts, 3-d convolution, unbatched
 * inputs (add the batch dim with lt_unsqueeze), padding modes other than
 * zeros (pad first with lt_pad, tensor/tensor.h: reflect or replicate).
 *
 * Shapes: N batch, C channels (C_in, C_out), H x W spatial size, k kernel
 * size. Every function here returns new (free with lt_tensor_free, or the
 * open scope owns it), borrows its inputs and options, takes f32 or f64
 * (all tensor inputs the same dtype), accepts any strides, and records itself
 * for autograd (gradients to input, weight and bias). Errors: LT_ERR_NULL,
 * LT_ERR_DTYPE, LT_ERR_SHAPE (rank, channels, groups, kernel larger than the
 * padded input, bias shape), LT_ERR_INVALID (stride or dilation < 1, padding
 * < 0, output_padding out of range), LT_ERR_OOM; messages name the op and
 * shapes.
 */
#ifndef LT_NN_CONV_H
#define LT_NN_CONV_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of the convolutions and of unfold/fold. Element [0] is the height
 * (for 1-d ops: the length), [1] the width (ignored by 1-d ops). Start from
 * LT_CONV_OPTS_DEFAULT (stride 1, padding 0, dilation 1, groups 1): a zeroed
 * struct has stride 0, which is refused. */
typedef struct lt_conv_opts {
  int64_t stride[2];         /* >= 1 */
  int64_t padding[2];        /* >= 0: zeros on both sides of each dim */
  int64_t dilation[2];       /* >= 1 */
  int64_t output_padding[2]; /* conv_transpose2d only: extra rows/cols at the end, < stride or < dilation */
  int64_t groups;            /* >= 1, divides C_in and C_out (convolutions only) */
  bool padding_same;         /* conv1d/conv2d: PyTorch's padding="same" (stride 1; padding is ignored;
                                an odd total pads one more at the end, as PyTorch) */
} lt_conv_opts;

#define LT_CONV_OPTS_DEFAULT ((lt_conv_opts){.stride = {1, 1}, .dilation = {1, 1}, .groups = 1})

/* torch.nn.functional.conv2d: x [N, C_in, H, W], weight [C_out, C_in/groups,
 * kh, kw], bias [C_out] or NULL; opts NULL means LT_CONV_OPTS_DEFAULT.
 * Returns [N, C_out, OH, OW] with OH = (H + 2 ph - dh (kh - 1) - 1) / sh + 1
 * (OW likewise; "same": OH = H). */
LT_API lt_tensor *lt_conv2d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, const lt_conv_opts *opts);

/* torch.nn.functional.conv1d: x [N, C_in, L], weight [C_out, C_in/groups, k],
 * bias [C_out] or NULL; options [0]. Returns [N, C_out, OL]. Composed as
 * lt_conv2d on [N, C, 1, L] views. */
LT_API lt_tensor *lt_conv1d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, const lt_conv_opts *opts);

/* torch.nn.functional.conv_transpose2d (the gradient of conv2d with respect
 * to its input): x [N, C_in, H, W], weight [C_in, C_out/groups, kh, kw], bias
 * [C_out] or NULL; opts as above (padding_same refused). Returns [N, C_out,
 * OH, OW], OH = (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1. */
LT_API lt_tensor *lt_conv_transpose2d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias,
                               const lt_conv_opts *opts);

/* torch.nn.functional.conv_transpose1d: x [N, C_in, L], weight [C_in,
 * C_out/groups, k], bias [C_out] or NULL; options [0] (output_padding[0]
 * too). Returns [N, C_out, OL], OL = (L - 1) s - 2 p + d (k - 1) + op + 1.
 * Composed as lt_conv_transpose2d on [N, C, 1, L] views. */
LT_API lt_tensor *lt_conv_transpose1d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias,
                               const lt_conv_opts *opts);

/* torch.nn.functional.interpolate (nn.Upsample is this with fixed options;
 * it has no parameters): x [N, C, L] (1 spatial dim) or [N, C, H, W] (2).
 * mode NEAREST: output i takes input floor(i * scale) (PyTorch's "nearest",
 * clamped to the last row); LINEAR: "linear" for 3-d x, "bilinear" for 4-d,
 * separable, the source position (i + 0.5) scale - 0.5 clamped at 0
 * (align_corners false) or i (in - 1) / (out - 1) (align_corners true).
 * scale is in / out when size[d] is given, else 1 / scale_factor[d], with
 * out = floor(in * scale_factor[d]) (PyTorch's recompute_scale_factor=None).
 * Composed of index_select and arithmetic: differentiable for float x
 * (the gradient of each output summed into its sources). Returns new. */
typedef enum { LT_INTERP_NEAREST, LT_INTERP_LINEAR } lt_interp_mode;
typedef struct lt_interpolate_opts {
  lt_interp_mode mode;
  int64_t size[2];          /* output size per spatial dim ([0] H or L, [1] W); 0: from scale_factor */
  double scale_factor[2];   /* > 0, used where size is 0 */
  bool align_corners;       /* LINEAR only (PyTorch refuses it for nearest) */
} lt_interpolate_opts;
LT_API lt_tensor *lt_interpolate(const lt_tensor *x, const lt_interpolate_opts *opts);

/* torch.nn.functional.unfold (im2col): x [N, C, H, W] -> [N, C kh kw, L], L
 * the number of kernel positions; row (c, i, j) holds x[n, c] under kernel
 * element (i, j), zero in the padding. stride/padding/dilation of opts (NULL:
 * defaults); groups is ignored. */
LT_API lt_tensor *lt_unfold(const lt_tensor *x, int64_t kh, int64_t kw, const lt_conv_opts *opts);

/* torch.nn.functional.fold (col2im), the adjoint of lt_unfold: x [N, C kh kw,
 * L] -> [N, C, H, W] (H, W = output_size), summing overlapping entries. L
 * must be the number of kernel positions lt_unfold gives on [H, W]. */
LT_API lt_tensor *lt_fold(const lt_tensor *x, int64_t H, int64_t W, int64_t kh, int64_t kw, const lt_conv_opts *opts);

/* Options of the pooling ops ([0] height or length, [1] width). Start from
 * LT_POOL_OPTS(kh, kw): stride = kernel (PyTorch's stride=None), padding 0,
 * dilation 1, count_include_pad true. Padding is at most half the kernel;
 * padded elements never win a max. ceil_mode: the last window may start in
 * the input (or left padding) and run past the end, as PyTorch. */
typedef struct lt_pool_opts {
  int64_t kernel[2];        /* >= 1 */
  int64_t stride[2];        /* >= 1 */
  int64_t padding[2];       /* in [0, kernel / 2] */
  int64_t dilation[2];      /* >= 1; max pooling only (avg pooling refuses != 1) */
  bool ceil_mode;
  bool count_include_pad;   /* avg pooling: padded zeros count in the divisor */
  int64_t divisor_override; /* avg pooling: if > 0, the divisor of every window */
} lt_pool_opts;

#define LT_POOL_OPTS(kh, kw) \
  ((lt_pool_opts){.kernel = {(kh), (kw)}, .stride = {(kh), (kw)}, .dilation = {1, 1}, .count_include_pad = true})

/* torch.nn.functional.max_pool2d: x [N, C, H, W] -> [N, C, OH, OW], OH =
 * (H + 2 ph - dh (kh - 1) - 1 + (ceil_mode ? sh - 1 : 0)) / sh + 1 (less one
 * if that window would start in the right padding). The maximum is the first
 * in scan order (row by row) among equal values, and a NaN wins; the gradient
 * goes to that element only, as PyTorch's. indices: if not NULL, set to a new
 * i64 tensor [N, C, OH, OW] of flat positions h * W + w in the input plane
 * (PyTorch's return_indices; not differentiable); NULL on failure. */
LT_API lt_tensor *lt_max_pool2d(const lt_tensor *x, const lt_pool_opts *opts, lt_tensor **indices);

/* torch.nn.functional.max_pool1d: x [N, C, L] -> [N, C, OL] (options [0];
 * indices are positions in L). Composed on [N, C, 1, L] views. */
LT_API lt_tensor *lt_max_pool1d(const lt_tensor *x, const lt_pool_opts *opts, lt_tensor **indices);

/* torch.nn.functional.avg_pool2d: the mean over each window, the divisor
 * being divisor_override if > 0, else the window's size clipped to the padded
 * input (count_include_pad) or to the input (not). Output size as max pooling
 * with dilation 1. */
LT_API lt_tensor *lt_avg_pool2d(const lt_tensor *x, const lt_pool_opts *opts);

/* torch.nn.functional.avg_pool1d: x [N, C, L] -> [N, C, OL] (options [0];
 * divisor_override is ignored, as PyTorch has none for 1-d). */
LT_API lt_tensor *lt_avg_pool1d(const lt_tensor *x, const lt_pool_opts *opts);

/* torch.nn.functional.adaptive_avg_pool2d: x [N, C, H, W] -> [N, C, OH, OW]
 * (OH, OW >= 1); output (i, j) is the mean of rows floor(i H / OH) to
 * ceil((i + 1) H / OH) - 1 and the same for columns. */
LT_API lt_tensor *lt_adaptive_avg_pool2d(const lt_tensor *x, int64_t OH, int64_t OW);

/* ======================================================================== */
/* Modules                                                                  */
/* ======================================================================== */

/* torch.nn.Conv2d / Conv1d: parameters "<name>.weight" [C_out, C_in/groups,
 * kh, kw] (1-d: [C_out, C_in/groups, k]) and "<name>.bias" [C_out] (if bias),
 * initialised as PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5))
 * on the weight, bias uniform in +-1/sqrt(fan_in), fan_in = C_in/groups kh kw,
 * drawn from g. opts is copied (NULL: defaults). The struct borrows the
 * parameters from p (no free of its own). Errors: LT_ERR_INVALID (sizes,
 * options, duplicate names), LT_ERR_OOM. */
typedef struct lt_conv2d_m {
  lt_tensor *weight; /* [C_out, C_in/groups, kh, kw] */
  lt_tensor *bias;   /* [C_out] or NULL */
  lt_conv_opts opts;
} lt_conv2d_m;
LT_API lt_status lt_conv2d_init(lt_conv2d_m *m, lt_params *p, const char *name, int64_t C_in, int64_t C_out, int64_t kh,
                         int64_t kw, const lt_conv_opts *opts, bool bias, lt_generator *g);
LT_API lt_tensor *lt_conv2d_forward(const lt_conv2d_m *m, const lt_tensor *x); /* lt_conv2d with m's parameters */

typedef struct lt_conv1d_m {
  lt_tensor *weight; /* [C_out, C_in/groups, k] */
  lt_tensor *bias;   /* [C_out] or NULL */
  lt_conv_opts opts;
} lt_conv1d_m;
LT_API lt_status lt_conv1d_init(lt_conv1d_m *m, lt_params *p, const char *name, int64_t C_in, int64_t C_out, int64_t k,
                         const lt_conv_opts *opts, bool bias, lt_generator *g);
LT_API lt_tensor *lt_conv1d_forward(const lt_conv1d_m *m, const lt_tensor *x); /* lt_conv1d with m's parameters */

/* torch.nn.ConvTranspose2d / ConvTranspose1d: parameters "<name>.weight"
 * [C_in, C_out/groups, kh, kw] (1-d: [C_in, C_out/groups, k]) and
 * "<name>.bias" [C_out] (if bias), initialised as PyTorch's
 * reset_parameters (kaiming_uniform(a = sqrt(5)) with fan_in = C_out/groups
 * kh kw, the bias uniform in +-1/sqrt(fan_in)); opts (NULL: defaults) holds
 * stride, padding, output_padding, dilation, groups (forward's output_size
 * argument is output_padding chosen by the caller). Ownership and errors as
 * Conv2d's. */
typedef struct lt_conv_transpose2d_m {
  lt_tensor *weight; /* [C_in, C_out/groups, kh, kw] */
  lt_tensor *bias;   /* [C_out] or NULL */
  lt_conv_opts opts;
} lt_conv_transpose2d_m;
LT_API lt_status lt_conv_transpose2d_init(lt_conv_transpose2d_m *m, lt_params *p, const char *name, int64_t C_in,
                                   int64_t C_out, int64_t kh, int64_t kw, const lt_conv_opts *opts, bool bias,
                                   lt_generator *g);
LT_API lt_tensor *lt_conv_transpose2d_forward(const lt_conv_transpose2d_m *m, const lt_tensor *x);

typedef struct lt_conv_transpose1d_m {
  lt_tensor *weight; /* [C_in, C_out/groups, k] */
  lt_tensor *bias;   /* [C_out] or NULL */
  lt_conv_opts opts;
} lt_conv_transpose1d_m;
LT_API lt_status lt_conv_transpose1d_init(lt_conv_transpose1d_m *m, lt_params *p, const char *name, int64_t C_in,
                                   int64_t C_out, int64_t k, const lt_conv_opts *opts, bool bias, lt_generator *g);
LT_API lt_tensor *lt_conv_transpose1d_forward(const lt_conv_transpose1d_m *m, const lt_tensor *x);

#ifdef __cplusplus
}
#endif

#endif /* LT_NN_CONV_H */
