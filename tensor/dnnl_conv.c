/*
 * tensor/dnnl_conv.c: conv2d's direct kernels on oneDNN, f32 and (under
 * autocast) bf16 (tensor/dnnl_conv_internal.h; docs/vision.md).
 *
 * What it is not: the convolution op (nn/conv.c owns conv2d, its im2col
 * path and the choice between the two), nor a product (tensor/dnnl_matmul.c).
 */
#include "tensor/dnnl_conv_internal.h"

#include "tensor/dnnl_common_internal.h"
#include "tensor/dnnl_internal.h"
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/threads_internal.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ==== convolution ============================================================
 *
 * conv2d's three passes on oneDNN's direct JIT kernels (docs/vision.md). The
 * kernels want blocked layouts (nChw16c, OIhw16i16o, ...; oneDNN picks them
 * from format "any"), so each pass reorders its NCHW operands in and its
 * result out, chunk by chunk, in per-thread buffers. Where oneDNN would pick
 * its im2col + GEMM ("gemm:jit") or reference kernel for a geometry, or a
 * padding it cannot express, the pass is not taken and nn/conv.c runs its own
 * im2col path.
 *
 * Determinism: the batch is cut into chunks of nb images from the shapes only
 * (chunk_plan), and each chunk runs whole on one thread on a primitive made
 * for one thread. Forward and input gradient write disjoint images; the
 * weight gradient is computed per chunk and the chunks summed in order. So
 * the bits do not depend on the thread count (oneDNN 2.6 has no
 * deterministic mode: its own multi-threaded weight gradient reduces per
 * thread). */

typedef struct cv_key {
  lt__dnnl_conv g; /* g.N: the images of one chunk */
  int32_t pass, has_bias;
  int32_t bf16, unused; /* bf16: the autocast pass (lt__dnnl_conv_bf16) */
} cv_key;

typedef struct cv_entry {
  cv_key key;
  bool ok; /* false: not taken for this geometry (remembered, so tried once) */
  dnnl_primitive_t conv;
  /* img: x / dx; out: y / dy; wei: w / dw. md_*: the primitive's layouts,
   * pl_*: plain NCHW / OIHW; r_*: the reorder between them (NULL when equal),
   * in the pass's direction (inputs plain -> blocked, the output back). In a
   * bf16 pass the inputs' reorders also round f32 to bf16 (pl_* f32, md_*
   * bf16), except the weights of FWD and BWD_X, which come as bf16 already
   * (the autocast operand cache); outputs stay f32 both sides. */
  dnnl_memory_desc_t md_img, md_out, md_wei, pl_img, pl_out, pl_wei, md_bias;
  dnnl_primitive_t r_img, r_out, r_wei;
  size_t scratch;
} cv_entry;

#define CV_MAX 128
static cv_entry cv_cache[CV_MAX];
static int ncv = 0;
static pthread_rwlock_t cv_lock = PTHREAD_RWLOCK_INITIALIZER;

static dnnl_status_t reorder_prim(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                  dnnl_primitive_t *r) {
  *r = NULL;
  if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, lt__dnnl_engine(), to, lt__dnnl_engine(), NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(r, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return s;
}

/* Builds entry e for key k (made for one thread: the caller has set
 * omp_set_num_threads(1)). e->ok false when not taken. */
static dnnl_status_t cv_build(const cv_key *k, cv_entry *e) {
  memset(e, 0, sizeof *e);
  e->key = *k;
  const lt__dnnl_conv *g = &k->g;
  const int64_t prh = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->H - g->ph;
  const int64_t prw = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->W - g->pw;
  if (prh < 0 || prw < 0) return dnnl_success; /* a right padding oneDNN cannot express: not taken */
  const dnnl_dims_t sd = {g->N, g->C, g->H, g->W}, dd = {g->N, g->O, g->OH, g->OW}, bd = {g->O};
  const dnnl_dims_t st = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->ph, g->pw}, pr = {prh, prw};
  const int wn = g->G > 1 ? 5 : 4;
  dnnl_dims_t wd = {g->O, g->C, g->kh, g->kw};
  if (g->G > 1) wd[0] = g->G, wd[1] = g->O / g->G, wd[2] = g->C / g->G, wd[3] = g->kh, wd[4] = g->kw;
  /* Data types: all f32, or (bf16) the primitive's inputs bf16 and its
   * output f32 (dst, diff_src, diff_weights: accumulated in f32). */
  const bool b16 = k->bf16 != 0, fw0 = k->pass == LT__DNNL_CONV_FWD, bx0 = k->pass == LT__DNNL_CONV_BWD_X,
             bw0 = k->pass == LT__DNNL_CONV_BWD_W;
  const dnnl_data_type_t t_img = b16 && !bx0 ? dnnl_bf16 : dnnl_f32, t_out = b16 && !fw0 ? dnnl_bf16 : dnnl_f32,
                         t_wei = b16 && !bw0 ? dnnl_bf16 : dnnl_f32, t_h = b16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_img, a_out, a_wei, h_img, h_out, h_wei; /* h_*: the forward hint of a backward pass */
  dnnl_status_t s;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  dnnl_convolution_desc_t fd, bd_;
  if ((s = dnnl_memory_desc_init_by_tag(&e->pl_img, 4, sd, dnnl_f32, dnnl_nchw)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->pl_out, 4, dd, dnnl_f32, dnnl_nchw)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->pl_wei, wn, wd, t_wei, wn == 5 ? dnnl_goihw : dnnl_oihw)) !=
          dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->md_bias, 1, bd, dnnl_f32, dnnl_x)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_img, 4, sd, t_img, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_out, 4, dd, t_out, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_wei, wn, wd, t_wei, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_img, 4, sd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_out, 4, dd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_wei, wn, wd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
      (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
    goto done;
  const bool fwd_bias = k->pass == LT__DNNL_CONV_FWD && k->has_bias; /* BWD_W: has_bias is the bias gradient */
  if ((s = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                      fw0 ? &a_img : &h_img, fw0 ? &a_wei : &h_wei,
                                                      fwd_bias ? &e->md_bias : NULL, fw0 ? &a_out : &h_out, st, dil,
                                                      pl, pr)) != dnnl_success ||
      (s = dnnl_primitive_desc_create(&fpd, &fd, k->pass == LT__DNNL_CONV_FWD ? attr : NULL, lt__dnnl_engine(), NULL)) !=
          dnnl_success)
    goto done;
  if (k->pass == LT__DNNL_CONV_BWD_X) {
    if ((s = dnnl_dilated_convolution_backward_data_desc_init(&bd_, dnnl_convolution_direct, &a_img, &a_wei, &a_out,
                                                              st, dil, pl, pr)) != dnnl_success ||
        (s = dnnl_primitive_desc_create(&pd, &bd_, attr, lt__dnnl_engine(), fpd)) != dnnl_success)
      goto done;
  } else if (k->pass == LT__DNNL_CONV_BWD_W) {
    if ((s = dnnl_dilated_convolution_backward_weights_desc_init(&bd_, dnnl_convolution_direct, &a_img, &a_wei,
                                                                 k->has_bias ? &e->md_bias : NULL, &a_out, st, dil,
                                                                 pl, pr)) != dnnl_success ||
        (s = dnnl_primitive_desc_create(&pd, &bd_, attr, lt__dnnl_engine(), fpd)) != dnnl_success)
      goto done;
  } else {
    pd = fpd, fpd = NULL;
  }
  const char *impl = NULL;
  /* im2col + GEMM or reference: nn/conv.c's own path is as good. bf16 also
   * takes oneDNN's brgemm convolutions ("brg", AMX). */
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
      (strncmp(impl, "jit", 3) != 0 && !(b16 && strncmp(impl, "brg", 3) == 0)))
    goto done;
  const bool fw = k->pass == LT__DNNL_CONV_FWD, bx = k->pass == LT__DNNL_CONV_BWD_X;
  e->md_img = *dnnl_primitive_desc_query_md(pd, bx ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
  e->md_out = *dnnl_primitive_desc_query_md(pd, fw ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0);
  e->md_wei = *dnnl_primitive_desc_query_md(pd, k->pass == LT__DNNL_CONV_BWD_W ? dnnl_query_diff_weights_md
                                                                               : dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if ((s = dnnl_primitive_create(&e->conv, pd)) != dnnl_success ||
      (s = bx ? reorder_prim(&e->md_img, &e->pl_img, &e->r_img) : reorder_prim(&e->pl_img, &e->md_img, &e->r_img)) !=
          dnnl_success ||
      (s = fw ? reorder_prim(&e->md_out, &e->pl_out, &e->r_out) : reorder_prim(&e->pl_out, &e->md_out, &e->r_out)) !=
          dnnl_success ||
      (s = k->pass == LT__DNNL_CONV_BWD_W ? reorder_prim(&e->md_wei, &e->pl_wei, &e->r_wei)
                                          : reorder_prim(&e->pl_wei, &e->md_wei, &e->r_wei)) != dnnl_success)
    goto done;
  e->ok = true;
done:
  if (s != dnnl_success || !e->ok) { /* unimplemented is "not taken", not an error */
    if (s == dnnl_unimplemented) s = dnnl_success;
    dnnl_primitive_t *p[4] = {&e->conv, &e->r_img, &e->r_out, &e->r_wei};
    for (int i = 0; i < 4; i++)
      if (*p[i]) dnnl_primitive_destroy(*p[i]), *p[i] = NULL;
    e->ok = false;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

/* The cached entry of k, built on first use (on one thread). NULL with an
 * error set when building failed for another reason than "unimplemented". */
static const cv_entry *cv_get(const cv_key *k) {
  const cv_entry *e = NULL;
  pthread_rwlock_rdlock(&cv_lock);
  for (int i = ncv - 1; i >= 0 && !e; i--)
    if (memcmp(&cv_cache[i].key, k, sizeof *k) == 0) e = &cv_cache[i];
  pthread_rwlock_unlock(&cv_lock);
  if (e) return e;
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  cv_entry fresh;
  const dnnl_status_t s = cv_build(k, &fresh);
  omp_set_num_threads(nt);
  if (s != dnnl_success) {
    lt__err(s == dnnl_out_of_memory ? LT_ERR_NOMEM : LT_ERR_BACKEND,
            "conv2d: x [%lld,%lld,%lld,%lld], weight [%lld,%lld,%lld,%lld]: oneDNN primitive creation failed "
            "(status %d)",
            (long long)k->g.N, (long long)k->g.C, (long long)k->g.H, (long long)k->g.W, (long long)k->g.O,
            (long long)(k->g.C / k->g.G), (long long)k->g.kh, (long long)k->g.kw, (int)s);
    return NULL;
  }
  pthread_rwlock_wrlock(&cv_lock);
  for (int i = 0; i < ncv && !e; i++)
    if (memcmp(&cv_cache[i].key, k, sizeof *k) == 0) e = &cv_cache[i];
  if (!e && ncv < CV_MAX) {
    cv_cache[ncv] = fresh;
    e = &cv_cache[ncv++];
  } else {
    dnnl_primitive_t p[4] = {fresh.conv, fresh.r_img, fresh.r_out, fresh.r_wei};
    for (int i = 0; i < 4; i++)
      if (p[i]) dnnl_primitive_destroy(p[i]);
  }
  pthread_rwlock_unlock(&cv_lock);
  if (!e) { /* the cache is full: such geometries take nn/conv.c's path */
    static const cv_entry none = {.ok = false};
    e = &none;
  }
  return e;
}

static dnnl_status_t reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from_md, const void *from,
                             const dnnl_memory_desc_t *to_md, void *to) {
  return lt__dnnl_exec(r, 2, (const int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (const dnnl_memory_desc_t *const[]){from_md, to_md},
                   (void *const[]){(void *)from, to});
}

/* `src` (plain md pl) as the primitive's layout md: itself, or its reorder
 * into this thread's buffer slot. NULL when out of memory. */
static void *as_blocked(dnnl_primitive_t r, const dnnl_memory_desc_t *pl, const dnnl_memory_desc_t *md,
                        const void *src, int slot, dnnl_status_t *s) {
  if (!r) return (void *)src;
  void *b = lt__dnnl_buf(slot, dnnl_memory_desc_get_size(md));
  if (!b) return *s = dnnl_out_of_memory, NULL;
  *s = reorder(r, pl, src, md, b);
  return b;
}

/* One chunk of a pass: img, out, wei are the chunk's plain arrays (inputs or
 * the output), wei_blk the weights already in the primitive's layout (FWD,
 * BWD_X); bias: FWD's bias, or BWD_W's bias gradient (out). */
static dnnl_status_t cv_chunk(const cv_entry *e, const float *img_in, float *img_out, const float *out_in,
                              float *out_out, const void *wei_blk, float *wei_out, const float *bias) {
  dnnl_status_t s = dnnl_success;
  void *scr = e->scratch ? lt__dnnl_scratch(e->scratch) : NULL;
  if (e->scratch && !scr) return dnnl_out_of_memory;
  dnnl_memory_desc_t smd;
  dnnl_memory_desc_init_by_tag(&smd, 1, (dnnl_dims_t){(dnnl_dim_t)(e->scratch ? e->scratch : 1)}, dnnl_u8, dnnl_a);
  int arg[5], n = 0;
  const dnnl_memory_desc_t *md[5];
  void *ptr[5];
#define ARG(a, m, p) (arg[n] = (a), md[n] = (m), ptr[n] = (void *)(p), n++)
  switch ((lt__dnnl_conv_pass)e->key.pass) {
  case LT__DNNL_CONV_FWD: {
    void *src = as_blocked(e->r_img, &e->pl_img, &e->md_img, img_in, 3, &s);
    void *dst = e->r_out ? lt__dnnl_buf(4, dnnl_memory_desc_get_size(&e->md_out)) : out_out;
    if (!src || s != dnnl_success) return s;
    if (!dst) return dnnl_out_of_memory;
    ARG(DNNL_ARG_SRC, &e->md_img, src), ARG(DNNL_ARG_WEIGHTS, &e->md_wei, wei_blk), ARG(DNNL_ARG_DST, &e->md_out, dst);
    if (bias) ARG(DNNL_ARG_BIAS, &e->md_bias, bias);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = lt__dnnl_exec(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_out ? reorder(e->r_out, &e->md_out, dst, &e->pl_out, out_out) : dnnl_success;
  }
  case LT__DNNL_CONV_BWD_X: {
    void *ddst = as_blocked(e->r_out, &e->pl_out, &e->md_out, out_in, 4, &s);
    void *dsrc = e->r_img ? lt__dnnl_buf(3, dnnl_memory_desc_get_size(&e->md_img)) : img_out;
    if (!ddst || s != dnnl_success) return s;
    if (!dsrc) return dnnl_out_of_memory;
    ARG(DNNL_ARG_DIFF_DST, &e->md_out, ddst), ARG(DNNL_ARG_WEIGHTS, &e->md_wei, wei_blk);
    ARG(DNNL_ARG_DIFF_SRC, &e->md_img, dsrc);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = lt__dnnl_exec(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_img ? reorder(e->r_img, &e->md_img, dsrc, &e->pl_img, img_out) : dnnl_success;
  }
  case LT__DNNL_CONV_BWD_W: {
    void *src = as_blocked(e->r_img, &e->pl_img, &e->md_img, img_in, 3, &s);
    if (!src || s != dnnl_success) return s;
    void *ddst = as_blocked(e->r_out, &e->pl_out, &e->md_out, out_in, 4, &s);
    if (!ddst || s != dnnl_success) return s;
    void *dwei = e->r_wei ? lt__dnnl_buf(5, dnnl_memory_desc_get_size(&e->md_wei)) : wei_out;
    if (!dwei) return dnnl_out_of_memory;
    ARG(DNNL_ARG_SRC, &e->md_img, src), ARG(DNNL_ARG_DIFF_DST, &e->md_out, ddst);
    ARG(DNNL_ARG_DIFF_WEIGHTS, &e->md_wei, dwei);
    if (e->key.has_bias) ARG(DNNL_ARG_DIFF_BIAS, &e->md_bias, bias);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = lt__dnnl_exec(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_wei ? reorder(e->r_wei, &e->md_wei, dwei, &e->pl_wei, wei_out) : dnnl_success;
  }
  }
#undef ARG
  return dnnl_invalid_arguments;
}

/* Chunks of the batch, from the shapes only: at least min(N, 8) (work for
 * two threads and more), more when a chunk's larger side (input or output)
 * would pass 1 MiB (it then stays in L2 between its reorders and the
 * kernel); nb images each, the last one rem. */
static void chunk_plan(const lt__dnnl_conv *g, int64_t *nch, int64_t *nb, int64_t *rem) {
  const int64_t in = g->C * g->H * g->W, out = g->O * g->OH * g->OW, per = 4 * (in > out ? in : out);
  int64_t n = (g->N * per + ((int64_t)1 << 20) - 1) >> 20;
  if (n < (g->N < 8 ? g->N : 8)) n = g->N < 8 ? g->N : 8;
  if (n > g->N) n = g->N;
  *nb = (g->N + n - 1) / n;
  *nch = (g->N + *nb - 1) / *nb;
  *rem = g->N - (*nch - 1) * *nb;
}

static int64_t conv_runs = 0, conv_bf16_runs = 0;
static int64_t read_counter(const int64_t *c) {
  int64_t n;
#pragma omp atomic read
  n = *c;
  return n;
}
int64_t lt__dnnl_conv_runs(void) { return read_counter(&conv_runs); }
int64_t lt__dnnl_conv_bf16_runs(void) { return read_counter(&conv_bf16_runs); }

/* lt__dnnl_conv_f32 (bf16 false; w f32) and lt__dnnl_conv_bf16 (w bf16). */
static lt_status conv_pass(lt__dnnl_conv_pass pass, bool bf16, const lt__dnnl_conv *g, const float *x,
                           const void *w, const float *bias, float *y, float *dx, float *dw, float *db,
                           const float *dy, bool *taken) {
  *taken = false;
  if (!lt__path_on(LT__PATH_conv_dnnl) || g->N < 1 || (bf16 && !lt__dnnl_bf16_available())) return LT_OK;
  if (lt__dnnl_engine_status() != dnnl_success) return LT_OK;
  int64_t nch, nb, rem;
  chunk_plan(g, &nch, &nb, &rem);
  cv_key k;
  memset(&k, 0, sizeof k);
  k.g = *g, k.g.N = nb, k.pass = (int32_t)pass, k.has_bias = (pass == LT__DNNL_CONV_BWD_W ? db : bias) != NULL;
  k.bf16 = bf16;
  const cv_entry *ef = cv_get(&k), *er = ef;
  if (ef && rem != nb) k.g.N = rem, er = cv_get(&k);
  if (!ef || !er) return lt_last_status();
  if (!ef->ok || !er->ok) return LT_OK;
  const int64_t img = g->C * g->H * g->W, out = g->O * g->OH * g->OW, wnum = g->O * (g->C / g->G) * g->kh * g->kw;
  const int64_t pnum = wnum + (db ? g->O : 0); /* a chunk's partial gradient: dw, then db */
  /* The weights in each entry's layout (FWD, BWD_X), or the chunks' weight
   * gradients (BWD_W), in this thread's buffers 6 and 7. */
  const void *wf = w, *wr = w;
  float *part = NULL;
  dnnl_status_t s = dnnl_success;
  if (pass != LT__DNNL_CONV_BWD_W) {
    wf = as_blocked(ef->r_wei, &ef->pl_wei, &ef->md_wei, w, 6, &s);
    if (wf && s == dnnl_success) wr = er == ef ? wf : as_blocked(er->r_wei, &er->pl_wei, &er->md_wei, w, 7, &s);
    if (!wf || !wr || s != dnnl_success) goto fail;
  } else if (nch > 1 && !(part = lt__dnnl_buf(6, (size_t)(nch * pnum) * sizeof(float)))) {
    s = dnnl_out_of_memory;
    goto fail;
  }
  int bad = 0;
  const int nt = lt__threads_for(g->N * (img > out ? img : out), nch);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t j = 0; j < nch; j++) {
    const cv_entry *e = j == nch - 1 ? er : ef;
    const int64_t n0 = j * nb;
    dnnl_status_t sj;
    if (pass == LT__DNNL_CONV_FWD)
      sj = cv_chunk(e, x + n0 * img, NULL, NULL, y + n0 * out, j == nch - 1 ? wr : wf, NULL, bias);
    else if (pass == LT__DNNL_CONV_BWD_X)
      sj = cv_chunk(e, NULL, dx + n0 * img, dy + n0 * out, NULL, j == nch - 1 ? wr : wf, NULL, NULL);
    else
      sj = cv_chunk(e, x + n0 * img, NULL, dy + n0 * out, NULL, NULL, part ? part + j * pnum : dw,
                    part ? part + j * pnum + wnum : db);
    if (sj != dnnl_success) {
#pragma omp atomic write
      bad = (int)sj;
    }
  }
  if (bad) {
    s = (dnnl_status_t)bad;
    goto fail;
  }
  if (part) { /* the chunks' weight (and bias) gradients, summed in chunk order */
    memcpy(dw, part, (size_t)wnum * sizeof(float));
    if (db) memcpy(db, part + wnum, (size_t)g->O * sizeof(float));
    for (int64_t j = 1; j < nch; j++) {
      for (int64_t i = 0; i < wnum; i++) dw[i] += part[j * pnum + i];
      for (int64_t i = 0; db && i < g->O; i++) db[i] += part[j * pnum + wnum + i];
    }
  }
  *taken = true;
  if (bf16) {
#pragma omp atomic update
    conv_bf16_runs++;
  }
#pragma omp atomic update
  conv_runs++;
  return LT_OK;
fail:
  return lt__err(s == dnnl_out_of_memory ? LT_ERR_NOMEM : LT_ERR_BACKEND,
                 "conv2d: x [%lld,%lld,%lld,%lld], weight [%lld,%lld,%lld,%lld]: oneDNN %s pass failed (status %d)",
                 (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->O,
                 (long long)(g->C / g->G), (long long)g->kh, (long long)g->kw,
                 pass == LT__DNNL_CONV_FWD ? "forward" : pass == LT__DNNL_CONV_BWD_X ? "input-gradient" : "weight-gradient",
                 (int)s);
}

lt_status lt__dnnl_conv_f32(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const float *w,
                            const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                            bool *taken) {
  return conv_pass(pass, false, g, x, w, bias, y, dx, dw, db, dy, taken);
}

lt_status lt__dnnl_conv_bf16(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const uint16_t *w,
                             const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                             bool *taken) {
  return conv_pass(pass, true, g, x, w, bias, y, dx, dw, db, dy, taken);
}

const char *lt__dnnl_conv_bf16_path(void) {
  if (!lt__dnnl_bf16_available())
    return "f32 (no oneDNN bf16 convolution on this CPU: autocast leaves convolutions in f32)";
  if (!lt__path_on(LT__PATH_conv_dnnl))
    return "f32 im2col path (conv=im2col forced; its products in bf16 through the matmul engine)";
  return lt__dnnl_bf16_native() ? "native (oneDNN direct kernels; f32 for geometries oneDNN lacks)"
                                : "fallback (oneDNN emulates bf16 on AVX-512; f32 for geometries it lacks)";
}
