/*
 * autograd/gradcheck.c: lt_gradcheck, the finite-difference proof of every
 * backward (see autograd.h for the contract).
 *
 * What it does, as torch.autograd.gradcheck: the scalar L = sum(f(x) * w),
 * with w a fixed pseudo-random weighting of the output (every weight is
 * +-[0.5, 1.5), so every output element matters and symmetric mistakes do not
 * cancel), is differentiated twice:
 *   - analytically, by one lt_backward(out, w) (the gradient of sum(out * w)
 *     with respect to out is w itself, so no mul/sum op is involved);
 *   - numerically, by central differences: each element of each input that
 *     requires grad is moved by +-eps in place and f is run again with grad
 *     mode off. The write goes straight to the element's memory (inputs are
 *     f64), so it bumps no version counter and records nothing; the element
 *     is restored exactly afterwards.
 * Every f call runs inside a scope, so f's temporaries need no free.
 *
 * What it is not: a second-order check, or a check of integer inputs (inputs
 * that do not require grad are passed through unperturbed, so index tensors
 * can be inputs).
 */
#include "autograd/internal.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Weight k of the fixed weighting: splitmix64 of k, mapped to +-[0.5, 1.5). */
static double weight(int64_t k) {
  uint64_t z = (uint64_t)k + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  double u = (double)(z >> 11) * 0x1.0p-53; /* [0, 1) */
  return (z & 1) ? -(0.5 + u) : (0.5 + u);
}

/* Row-major multi-index of flat element j of shape (ndim, shape). */
static void unravel(int64_t j, int ndim, const int64_t *shape, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = shape[d] ? j % shape[d] : 0;
    j = shape[d] ? j / shape[d] : 0;
  }
}

typedef struct gc_run {
  lt_gradcheck_fn f;
  void *user;
  int n;
  lt_tensor *const *inputs;
  int out_ndim;
  int64_t out_shape[LT_MAX_DIMS];
  int64_t out_numel;
  double *w;    /* out_numel weights */
  double *buf;  /* out_numel scratch */
} gc_run;

/* One evaluation of sum(f(inputs) * w) with grad mode off. */
static lt_status eval(gc_run *r, double *out_sum) {
  lt_scope *sc = lt_scope_begin();
  if (!sc) return lt_last_status();
  lt_status s = LT_OK;
  lt_tensor *out = r->f(r->n, r->inputs, r->user);
  if (!out) {
    s = lt__err(lt_last_status() == LT_OK ? LT_ERR_INVALID : lt_last_status(),
                "gradcheck: f returned NULL on a perturbed input: %s", lt_last_error());
  } else if (out->ndim != r->out_ndim ||
             memcmp(out->shape, r->out_shape, sizeof(int64_t) * (size_t)out->ndim) != 0) {
    s = lt__err(LT_ERR_STATE,
                "gradcheck: f returned %s on a perturbed input but %s before: f must be "
                "deterministic",
                LT__D(out), LT__S(r->out_ndim, r->out_shape));
  } else if ((s = lt_tensor_read(out, LT_DTYPE_F64, r->buf, r->out_numel)) == LT_OK) {
    double acc = 0;
    for (int64_t k = 0; k < r->out_numel; k++) acc += r->buf[k] * r->w[k];
    *out_sum = acc;
  }
  lt_scope_end(sc);
  return s;
}

/* Validates the arguments; returns the number of inputs that require grad. */
static lt_status check_args(lt_gradcheck_fn f, int n, lt_tensor *const *inputs,
                            const lt_gradcheck_opts *o, int *nreq) {
  if (!f) return lt__err(LT_ERR_NULL, "gradcheck: f is NULL");
  if (n < 0 || (n > 0 && !inputs))
    return lt__err(LT_ERR_INVALID, "gradcheck: n is %d and inputs is %p", n, (void *)inputs);
  if (!(o->eps > 0) || !(o->atol >= 0) || !(o->rtol >= 0))
    return lt__err(LT_ERR_INVALID, "gradcheck: eps %g must be > 0, atol %g and rtol %g >= 0",
                   o->eps, o->atol, o->rtol);
  *nreq = 0;
  for (int i = 0; i < n; i++) {
    const lt_tensor *x = inputs[i];
    if (!x) return lt__err(LT_ERR_NULL, "gradcheck: input %d is NULL", i);
    if (!x->requires_grad) continue;
    if (x->dtype != LT_DTYPE_F64)
      return lt__err(LT_ERR_DTYPE,
                     "gradcheck: input %d is %s: inputs that require grad must be f64 (f32 "
                     "is too coarse for finite differences)",
                     i, LT__D(x));
    if (x->grad_fn)
      return lt__err(LT_ERR_INVALID, "gradcheck: input %d %s is not a leaf (it has a grad_fn)",
                     i, LT__D(x));
    for (int d = 0; d < x->ndim; d++)
      if (x->stride[d] == 0 && x->shape[d] > 1)
        return lt__err(LT_ERR_INVALID,
                       "gradcheck: input %d %s has overlapping memory (stride 0 on dim %d): "
                       "perturbing one element would move several",
                       i, LT__D(x), d);
    (*nreq)++;
  }
  if (*nreq == 0)
    return lt__err(LT_ERR_INVALID, "gradcheck: none of the %d inputs requires grad", n);
  return LT_OK;
}

lt_status lt_gradcheck(lt_gradcheck_fn f, void *user, int n, lt_tensor *const *inputs,
                       const lt_gradcheck_opts *opts) {
  lt_gradcheck_opts o = opts ? *opts : LT_GRADCHECK_DEFAULTS;
  int nreq = 0;
  lt_status s = check_args(f, n, inputs, &o, &nreq);
  if (s != LT_OK) return s;

  gc_run r = {.f = f, .user = user, .n = n, .inputs = inputs};
  lt_tensor **saved_grad = calloc((size_t)n, sizeof(lt_tensor *));
  double **analytic = calloc((size_t)n, sizeof(double *));
  if (!saved_grad || !analytic) {
    free(saved_grad);
    free(analytic);
    return lt__err(LT_ERR_NOMEM, "gradcheck: out of memory");
  }
  /* Move the inputs' .grad aside: the analytic pass needs them empty. */
  for (int i = 0; i < n; i++) {
    if (!inputs[i]->requires_grad) continue;
    saved_grad[i] = inputs[i]->grad;
    inputs[i]->grad = NULL;
  }
  bool prev_grad = lt_set_grad_enabled(true);

  /* ---- analytic: one forward with grad, lt_backward(out, w) ---- */
  lt_scope *sc = lt_scope_begin();
  if (!sc) {
    s = lt_last_status();
    goto done;
  }
  lt_tensor *out = f(n, inputs, user);
  if (!out) {
    s = lt__err(lt_last_status() == LT_OK ? LT_ERR_INVALID : lt_last_status(),
                "gradcheck: f returned NULL: %s", lt_last_error());
  } else if (!lt_dtype_is_float(out->dtype)) {
    s = lt__err(LT_ERR_DTYPE, "gradcheck: f returned %s: the output must be float", LT__D(out));
  } else {
    r.out_ndim = out->ndim;
    memcpy(r.out_shape, out->shape, sizeof(int64_t) * (size_t)out->ndim);
    r.out_numel = out->numel;
    size_t nb = sizeof(double) * (size_t)(out->numel ? out->numel : 1);
    r.w = malloc(nb);
    r.buf = malloc(nb);
    if (!r.w || !r.buf) {
      s = lt__err(LT_ERR_NOMEM, "gradcheck: out of memory for an output of %s", LT__D(out));
    } else {
      for (int64_t k = 0; k < out->numel; k++) r.w[k] = weight(k);
      lt_tensor *w = lt_tensor_from_copy(LT_DTYPE_F64, out->ndim, out->shape, r.w);
      if (!w)
        s = lt_last_status();
      else if (out->grad_fn || out->requires_grad) {
        s = lt_backward(out, w, false);
        if (s != LT_OK) s = lt__err(s, "gradcheck: backward failed: %s", lt_last_error());
      }
      /* else: the output does not depend on the inputs: analytic gradient 0 */
    }
  }
  for (int i = 0; i < n && s == LT_OK; i++) {
    lt_tensor *x = inputs[i];
    if (!x->requires_grad) continue;
    analytic[i] = calloc((size_t)(x->numel ? x->numel : 1), sizeof(double));
    if (!analytic[i])
      s = lt__err(LT_ERR_NOMEM, "gradcheck: out of memory for input %d %s", i, LT__D(x));
    else if (x->grad)
      s = lt_tensor_read(x->grad, LT_DTYPE_F64, analytic[i], x->numel);
  }
  for (int i = 0; i < n; i++)
    if (inputs[i]->requires_grad) lt_zero_grad(inputs[i]);
  lt_scope_end(sc);
  if (s != LT_OK) goto done;

  /* ---- numeric: central differences with grad mode off ---- */
  lt_set_grad_enabled(false);
  int64_t nbad = 0;
  double maxdiff = 0;
  char first[512] = "";
  for (int i = 0; i < n && s == LT_OK; i++) {
    lt_tensor *x = inputs[i];
    if (!x->requires_grad) continue;
    for (int64_t j = 0; j < x->numel; j++) {
      int64_t idx[LT_MAX_DIMS] = {0}, off = 0;
      unravel(j, x->ndim, x->shape, idx);
      for (int d = 0; d < x->ndim; d++) off += idx[d] * x->stride[d];
      double *p = (double *)x->data + off;
      const double orig = *p;
      double sp = 0, sm = 0;
      *p = orig + o.eps;
      s = eval(&r, &sp);
      if (s == LT_OK) {
        *p = orig - o.eps;
        s = eval(&r, &sm);
      }
      *p = orig;
      if (s != LT_OK) break;
      double num = (sp - sm) / (2 * o.eps), ana = analytic[i][j];
      double diff = fabs(ana - num);
      if (diff <= o.atol + o.rtol * fabs(num)) continue;
      if (!(diff <= maxdiff)) maxdiff = diff; /* NaN sticks */
      if (nbad++ == 0)
        snprintf(first, sizeof first,
                 "input %d element %s: analytic %.10g vs numeric %.10g (|diff| %.3g > atol %g + "
                 "rtol %g * |numeric|)",
                 i, LT__S(x->ndim, idx), ana, num, diff, o.atol, o.rtol);
    }
  }
  if (s == LT_OK && nbad > 0) {
    int64_t total = 0;
    for (int i = 0; i < n; i++)
      if (inputs[i]->requires_grad) total += inputs[i]->numel;
    s = lt__err(LT_ERR_AUTOGRAD,
                "gradcheck: analytic and numeric gradients differ: %s; %lld of %lld elements "
                "differ, max |diff| %.3g",
                first, (long long)nbad, (long long)total, maxdiff);
  }

done:
  lt_set_grad_enabled(prev_grad);
  for (int i = 0; i < n; i++) {
    if (!inputs[i]->requires_grad) continue;
    lt_zero_grad(inputs[i]);
    inputs[i]->grad = saved_grad[i];
    free(analytic[i]);
  }
  free(saved_grad);
  free(analytic);
  free(r.w);
  free(r.buf);
  return s;
}
