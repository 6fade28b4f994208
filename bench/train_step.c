/*
 * bench/train_step.c: times full training steps of fixed Transformer
 * configurations (forward, cross-entropy loss, backward, AdamW step,
 * zero-grad) and prints tokens/s, ms/step (median and min), peak RSS, the
 * parameter count and the step's GFLOP/s as a fraction of the single-GEMM
 * peak measured in the same process. bench/train_step_torch.py runs the same
 * models in PyTorch; bench/run_train_bench.sh runs both and prints the ratios
 * (docs/benchmarks.md keeps the table).
 *
 * Usage: bench_train_step [--config small|medium|encdec|gpt2|gpt2-1024|gpt2-350m-1024|all] [--steps N]
 *                         [--warmup N] [--threads N] [--no-peak] [--bound] [--csv]
 *                         [--precision f32|bf16] [--recompute none|attention|layer] [--chunked-head]
 * --recompute sets what every layer recomputes in its backward
 * (lt_transformer_set_recompute); --chunked-head takes the loss through the
 * chunked cross-entropy head (lt_transformer_decode_loss: no B x T x V
 * logits); --head-only times the output head alone (its loss and
 * backward on random hidden states) and prints what it adds to the peak
 * RSS; --batch N overrides every configuration's B. docs/train.md holds
 * their memory and speed figures.
 * --bound measures the memory bandwidth (a triad) and prints each
 * configuration's physical bound: its products at the GEMM peak plus
 * AdamW's 7 x 4 bytes per parameter at that bandwidth (issue 33).
 * --precision bf16 runs the steps (and the GEMM peak) under autocast
 * (lt_set_autocast: bf16 products with f32 accumulation; docs/mixed-precision.md).
 *
 * The configurations (issue 7):
 *   small   GPT-style: V 256, C 256, 4 layers, 4 heads, T 128, B 16
 *   medium  GPT-style: V 8192, C 512, 6 layers, 8 heads, T 256, B 8
 *   encdec  encoder-decoder: C 256, 3+3 layers, 4 heads, d_ff 1024,
 *           S = T = 64, B 32, V 1000
 *   gpt2    GPT-2 124M (issue 33): V 50257, C 768, 12 layers, 12 heads,
 *           1,024 learned positions, B 4, T 64 (llm.c's CPU default)
 *   gpt2-1024  the same at T 1,024, B 4
 *   gpt2-350m-1024  GPT-2 medium (350M): C 1024, 24 layers, 16 heads, T 1,024, B 4
 * ("all" is the first three; the GPT-2 rows run by name.)
 * GPT: pre-norm, learned positions, tanh GELU, biases on every Linear, tied
 * output head, no dropout, d_ff 4C. Encoder-decoder: nn.Transformer's
 * defaults (post-norm, ReLU, dropout 0.1, final encoder and decoder norms)
 * with learned positions, unscaled embeddings and an untied head. Tokens are
 * uniform random ids from a fixed seed (no padding); the GPT target is the
 * input shifted by one. AdamW with PyTorch's defaults (lr 1e-3, wd 0.01).
 *
 * Tokens per step: B*T for the GPT models; B*(S+T) for the encoder-decoder
 * (source and target tokens, as models/transformer/train counts them).
 *
 * FLOPs per step (the usual estimate, PaLM appendix B): 6 FLOPs per matrix
 * parameter per token that goes through it (2 forward, 4 backward), plus
 * attention: 12 * B * Lq * Lk * C per attention layer (q·k^T and p·v, 2*2
 * forward, twice that backward), counting the full Lq x Lk square even when
 * causal. Every parameter counts once per token of the stack it belongs to
 * (encoder: source tokens; decoder and head: target tokens); the token
 * embedding counts only when tied to the head (a lookup is not a product),
 * and position embeddings do not count. For the GPT models this is
 * 6 * (params - positions) * B*T + 12 * L * B * T^2 * C.
 *
 * Peak RSS is getrusage's ru_maxrss of the whole process when the last step
 * of a configuration ends: the library, BLIS and OpenMP runtimes, the model,
 * its gradients and AdamW state, the autograd graph's saved tensors and
 * libtensor's storage cache. With --config all it is the maximum so far;
 * run one configuration per process for per-configuration peaks (as
 * run_train_bench.sh does). The GEMM-peak measurement runs after it is read.
 *
 * Threads: on a machine shared with other work, run with
 * OMP_WAIT_POLICY=PASSIVE (libgomp reads it at start-up): with the default,
 * a thread waiting at one of the step's many parallel-region barriers spins
 * while the thread it waits for has lost its core, and two threads can be
 * several times slower than one (docs/benchmarks.md).
 *
 * Data parallel (dist/dist.h): under mpirun -np N, each rank trains on its
 * B/N rows of the same global batch (so tokens per step stay B*T), the
 * gradients are averaged in buckets that start during backward (the
 * post-accumulate hooks; --no-overlap starts them after backward instead),
 * and rank 0 prints, per configuration, the exposed communication (time in
 * lt_dist_grads_finish, median per step) against the whole reduction's
 * time measured alone (start + finish with nothing to overlap): the hidden
 * share is the difference (--bucket-mb X sets the bucket size). Tokens/s are the global batch's over the slowest
 * rank's step. For np=2 x 1 thread against np=1 x 2 threads:
 *   mpirun --bind-to none -np 2 bench_train_step --config medium --threads 1 --no-peak
 * (bench/run_dist_bench.sh runs the comparison.) --zero 1 adds ZeRO-1
 * (dist/dist.h's lt_dist_zero: each rank keeps AdamW's state for its shard
 * of the parameters and broadcasts them after its update); every run under
 * mpirun prints each rank's optimizer-state bytes and peak RSS, and with
 * --zero 1 the parameter broadcast's time per step (median).
 *
 * What this is not: a convergence test (the tokens are noise), nor a
 * benchmark of the data loader or of the rest of the training program.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "bench/triad.h"
#include "libtensor_transformer.h"

static void die(const char *what) {
  fprintf(stderr, "bench_train_step: %s: %s: %s\n", what, lt_status_name(lt_last_status()), lt_last_error());
  exit(1);
}

#define TRY(call, what) \
  do {                  \
    if ((call) != LT_OK) die(what); \
  } while (0)

/* Current RSS from /proc/self/statm (MiB), 0 if unreadable. */
static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  fclose(f);
  return (double)res * 4096.0 / (1024.0 * 1024.0);
}

typedef struct bench_config {
  const char *name;
  bool encdec;
  int64_t V, C, L, NH, dff, B, T; /* encdec: L layers in each stack, S = T */
  int64_t P;                       /* learned positions (max_len); 0: T */
} bench_config;

static const bench_config configs[] = {
    {"small", false, 256, 256, 4, 4, 1024, 16, 128, 0},
    {"medium", false, 8192, 512, 6, 8, 2048, 8, 256, 0},
    {"encdec", true, 1000, 256, 3, 4, 1024, 32, 64, 0},
    /* GPT-2 124M (llm.c's model, vocabulary unpadded): llm.c's CPU default
     * B 4, T 64, and the full context T 1,024. */
    {"gpt2", false, 50257, 768, 12, 12, 3072, 4, 64, 1024},
    {"gpt2-1024", false, 50257, 768, 12, 12, 3072, 4, 1024, 1024},
    /* GPT-2 medium (350M): C 1024, 24 layers, 16 heads, T 1,024. */
    {"gpt2-350m-1024", false, 50257, 1024, 24, 16, 4096, 4, 1024, 1024},
};

static lt_tf_config model_config(const bench_config *b) {
  lt_tf_config c;
  if (!b->encdec) {
    c = lt_tf_config_default(LT_TF_DECODER_ONLY);
    c.pre_norm = true;
    c.act = LT_ACT_GELU_TANH;
    c.pos = LT_TF_POS_LEARNED;
    c.tie_embeddings = true;
    c.scale_embeddings = false;
    c.dropout = 0.0;
    c.n_dec_layers = b->L;
    c.pad_id = -1;
  } else {
    c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
    c.pre_norm = false;
    c.act = LT_ACT_RELU;
    c.pos = LT_TF_POS_LEARNED;
    c.tie_embeddings = false;
    c.scale_embeddings = false;
    c.dropout = 0.1;
    c.n_enc_layers = c.n_dec_layers = b->L;
    c.pad_id = -1;
  }
  c.bias = true;
  c.vocab_size = b->V;
  c.d_model = b->C;
  c.n_heads = c.n_kv_heads = b->NH;
  c.d_ff = b->dff;
  c.max_len = b->P ? b->P : b->T;
  c.norm = LT_TF_LAYER_NORM;
  c.norm_eps = 1e-5;
  return c;
}

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The FLOP estimate of the header comment. */
static double step_flops(const bench_config *b, lt_params *p) {
  const double BT = (double)(b->B * b->T); /* S = T for the encoder-decoder */
  double f = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    const double n = (double)pr->value->numel;
    if (starts(pr->name, "pos_embed")) continue;
    if (starts(pr->name, "embed") && b->encdec) continue; /* untied: a lookup only */
    f += 6.0 * n * BT; /* encoder params see B*S tokens, decoder ones B*T, S = T */
  }
  const double attn_layers = b->encdec ? 3.0 * (double)b->L /* enc self, dec self, dec cross */ : (double)b->L;
  f += attn_layers * 12.0 * (double)b->B * (double)b->T * (double)b->T * (double)b->C;
  return f;
}

typedef struct result {
  double tok_s, ms_med, ms_min, peak_mib, base_mib, gflop, loss0, loss1;
  int buckets;
  double exposed_ms, comm_ms; /* data parallel: in lt_dist_grads_finish per step (median); the reduction alone */
  int64_t params, tokens;
  double zero_ms;             /* ZeRO-1: the parameters' broadcast per step (median) */
  double *rank_opt_mib, *rank_peak_mib; /* data parallel: per rank (malloc'd, N each) */
} result;

/* ids [B, L] i64 uniform in [0, V) from a fixed-seed LCG. */
static lt_tensor *random_ids(uint64_t *state, int64_t B, int64_t L, int64_t V) {
  int64_t *buf = malloc(sizeof *buf * (size_t)(B * L));
  if (!buf) die("malloc");
  for (int64_t i = 0; i < B * L; i++) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    buf[i] = (int64_t)((*state >> 33) % (uint64_t)V);
  }
  lt_tensor *t = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, buf);
  free(buf);
  if (!t) die("ids");
  return t;
}

static bool g_overlap = true; /* --no-overlap clears it */
static lt_recompute_mode g_recompute; /* --recompute none|attention|layer */
static bool g_chunked;                /* --chunked-head: the loss through lt_transformer_decode_loss */
static bool g_head_only;              /* --head-only: the output head alone (run_head) */
static int64_t g_batch;               /* --batch N: B of every configuration (0: its own) */
static int g_zero;            /* --zero 1: ZeRO-1 */

/* --head-only: the output head alone on a configuration's shapes: h [B, T,
 * C] and the tied w [V, C] (random, requiring grad), the loss (plain: the
 * logits and lt_cross_entropy; --chunked-head: lt_linear_cross_entropy) and
 * its backward, per step; what the head adds to the peak RSS is the peak
 * minus the RSS before the first step. */
static result run_head(const bench_config *b, int warmup, int steps) {
  result R = {0};
  lt_generator *g = lt_generator_new(7);
  lt_tensor *h = g ? lt_randn(g, LT_DTYPE_F32, 3, (int64_t[]){b->B, b->T, b->C}) : NULL;
  lt_tensor *w = h ? lt_randn(g, LT_DTYPE_F32, 2, (int64_t[]){b->V, b->C}) : NULL;
  uint64_t rng = 42;
  lt_tensor *y = random_ids(&rng, b->B, b->T, b->V);
  if (!w || lt_mul_scalar_(w, 0.02) != LT_OK || lt_requires_grad_(h, true) != LT_OK ||
      lt_requires_grad_(w, true) != LT_OK)
    die("head inputs");
  R.tokens = b->B * b->T;
  R.params = w->numel;
  R.gflop = 6.0 * (double)w->numel * (double)R.tokens * 1e-9;
  lt_cross_entropy_opts ce = LT_CROSS_ENTROPY_DEFAULTS;
  double *ms = malloc(sizeof *ms * (size_t)(steps > 0 ? steps : 1));
  if (!ms) die("malloc");
  R.base_mib = rss_mib();
  for (int s = 0; s < warmup + steps; s++) {
    const double t0 = lt_monotonic_seconds();
    lt_scope *scope = lt_scope_begin();
    lt_tensor *loss = g_chunked ? lt_linear_cross_entropy(h, w, y, &ce, 0)
                                : lt_cross_entropy(lt_linear(h, w, NULL), y, &ce);
    double v;
    if (!loss || lt_item(loss, &v) != LT_OK) die("head loss");
    TRY(lt_backward(loss, NULL, false), "head backward");
    lt_zero_grad(h), lt_zero_grad(w);
    lt_scope_end(scope);
    if (s == 0) R.loss0 = v;
    R.loss1 = v;
    if (s >= warmup) ms[s - warmup] = (lt_monotonic_seconds() - t0) * 1e3;
  }
  R.peak_mib = lt_bench_peak_rss_mib();
  qsort(ms, (size_t)steps, sizeof *ms, lt_bench_cmp_double);
  R.ms_med = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
  R.ms_min = ms[0];
  R.tok_s = (double)R.tokens / (R.ms_med * 1e-3);
  free(ms);
  printf("head %s: peak RSS %.1f MiB, %.1f MiB before the first step: the head adds %.1f MiB\n",
         g_chunked ? "chunked" : "plain", R.peak_mib, R.base_mib, R.peak_mib - R.base_mib);
  lt_tensor_free(h);
  lt_tensor_free(w);
  lt_tensor_free(y);
  lt_generator_free(g);
  return R;
}

static result run_config(const bench_config *b, int warmup, int steps) {
  result R = {0};
  R.base_mib = rss_mib();
  lt_tf_config cfg = model_config(b);
  lt_generator *g = lt_generator_new(1234);
  if (!g) die("generator");
  lt_transformer *m = lt_transformer_new(&cfg, g);
  if (!m) die("transformer_new");
  lt_params *params = lt_transformer_params(m);
  TRY(lt_transformer_set_recompute(m, g_recompute), "--recompute");
  R.params = lt_params_numel(params, true);
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
  lt_optimizer *opt = lt_optimizer_new(params, &oc);
  if (!opt) die("optimizer_new");

  /* The batch: GPT x = ids[:, :T], y = ids[:, 1:]; encdec src, tgt_in, labels. */
  uint64_t rng = 42;
  lt_tensor *x = NULL, *y = NULL, *src = NULL;
  if (!b->encdec) {
    lt_tensor *ids = random_ids(&rng, b->B, b->T + 1, b->V);
    lt_tensor *xv = lt_narrow(ids, 1, 0, b->T), *yv = lt_narrow(ids, 1, 1, b->T);
    x = xv ? lt_contiguous(xv) : NULL;
    y = yv ? lt_contiguous(yv) : NULL;
    if (!x || !y) die("batch");
    lt_tensor_free(xv);
    lt_tensor_free(yv);
    lt_tensor_free(ids);
    R.tokens = b->B * b->T;
  } else {
    src = random_ids(&rng, b->B, b->T, b->V);
    x = random_ids(&rng, b->B, b->T, b->V);
    y = random_ids(&rng, b->B, b->T, b->V);
    R.tokens = 2 * b->B * b->T;
  }
  R.gflop = step_flops(b, params) * 1e-9;
  /* Data parallel: this rank's rows of the global batch, rank 0's parameters. */
  lt_dist_grads *dg = NULL;
  if (lt_dist_size() > 1) {
    int64_t r0, nr;
    lt_dist_shard(b->B, &r0, &nr);
    lt_tensor **rows[3] = {&x, &y, &src};
    for (int k = 0; k < 3; k++) {
      if (!*rows[k]) continue;
      lt_tensor *v = lt_narrow(*rows[k], 0, r0, nr), *c = v ? lt_contiguous(v) : NULL;
      if (!c) die("shard");
      lt_tensor_free(v);
      lt_tensor_free(*rows[k]);
      *rows[k] = c;
    }
    TRY(lt_dist_broadcast_params(params), "broadcast");
    if (!(dg = lt_dist_grads_new(params, 0))) die("dist_grads_new");
    lt_dist_grads_set_sync(dg, g_overlap);
  }
  lt_dist_zero *zz = NULL;
  if (lt_dist_size() > 1 && g_zero && !(zz = lt_dist_zero_new(opt))) die("dist_zero_new");
  double *exposed = calloc((size_t)(steps > 0 ? steps : 1), sizeof *exposed);
  double *zms = calloc((size_t)(steps > 0 ? steps : 1), sizeof *zms);
  if (!exposed || !zms) die("malloc");

  lt_cross_entropy_opts ce = LT_CROSS_ENTROPY_DEFAULTS;
  lt_nn_ctx ctx = {true, g};
  const int total = warmup + steps;
  double *ms = malloc(sizeof *ms * (size_t)(steps > 0 ? steps : 1));
  if (!ms) die("malloc");
  for (int s = 0; s < total; s++) {
    const double t0 = lt_monotonic_seconds();
    lt_scope *scope = lt_scope_begin();
    if (!scope) die("scope");
    lt_tensor *loss;
    lt_tensor *mem = b->encdec ? lt_transformer_encode(m, src, NULL, &ctx) : NULL; /* [B, S, C] */
    if (b->encdec && !mem) die("forward");
    if (g_chunked) { /* no [B, T, V] logits */
      loss = lt_transformer_decode_loss(m, x, NULL, mem, NULL, y, &ce, 0, &ctx);
    } else {
      lt_tensor *logits = lt_transformer_decode(m, x, NULL, mem, NULL, 0, &ctx); /* [B, T, V] */
      if (!logits) die("forward");
      loss = lt_cross_entropy(logits, y, &ce);
    }
    double v;
    if (!loss || lt_item(loss, &v) != LT_OK) die("loss");
    TRY(lt_backward(loss, NULL, false), "backward");
    if (dg) {
      const double t1 = lt_monotonic_seconds();
      if (!g_overlap) TRY(lt_dist_grads_start(dg), "dist_grads_start");
      TRY(lt_dist_grads_finish(dg), "dist_grads_finish");
      if (s >= warmup) exposed[s - warmup] = (lt_monotonic_seconds() - t1) * 1e3;
    }
    TRY(lt_optimizer_step(opt), "optimizer step");
    if (zz) {
      const double t1 = lt_monotonic_seconds();
      TRY(lt_dist_zero_broadcast_params(zz), "ZeRO-1 broadcast");
      if (s >= warmup) zms[s - warmup] = (lt_monotonic_seconds() - t1) * 1e3;
    }
    lt_params_zero_grad(params);
    lt_scope_end(scope);
    double dt = lt_monotonic_seconds() - t0;
    TRY(lt_dist_allreduce_f64(&dt, 1, LT_DIST_MAX), "step time"); /* the slowest rank's */
    if (s == 0) R.loss0 = v;
    R.loss1 = v;
    if (s >= warmup) ms[s - warmup] = dt * 1e3;
  }
  R.peak_mib = lt_bench_peak_rss_mib();
  if (steps > 0) {
    qsort(ms, (size_t)steps, sizeof *ms, lt_bench_cmp_double);
    R.ms_med = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
    R.ms_min = ms[0];
    R.tok_s = (double)R.tokens / (R.ms_med * 1e-3);
    qsort(exposed, (size_t)steps, sizeof *exposed, lt_bench_cmp_double);
    R.exposed_ms = exposed[steps / 2];
    qsort(zms, (size_t)steps, sizeof *zms, lt_bench_cmp_double);
    R.zero_ms = zms[steps / 2];
  }
  if (lt_dist_size() > 1) { /* every rank's optimizer state and peak RSS, gathered by a sum of slots */
    const int N = lt_dist_size(), r = lt_dist_rank();
    double *v = calloc((size_t)N * 2, sizeof *v);
    if (!v) die("malloc");
    v[r] = (double)lt_optimizer_state_bytes(opt) / 1048576.0;
    v[N + r] = R.peak_mib;
    TRY(lt_dist_allreduce_f64(v, 2 * N, LT_DIST_SUM), "memory per rank");
    R.rank_opt_mib = v;
    R.rank_peak_mib = v + N;
  }
  lt_dist_zero_free(zz);
  free(zms);
  if (dg) { /* the reduction alone: what overlap hides at most */
    double c[5];
    for (int k = 0; k < 5; k++) {
      TRY(lt_dist_barrier(), "barrier");
      const double t1 = lt_monotonic_seconds();
      TRY(lt_dist_grads_start(dg), "dist_grads_start");
      TRY(lt_dist_grads_finish(dg), "dist_grads_finish");
      c[k] = (lt_monotonic_seconds() - t1) * 1e3;
      TRY(lt_dist_allreduce_f64(&c[k], 1, LT_DIST_MAX), "comm time");
    }
    qsort(c, 5, sizeof *c, lt_bench_cmp_double);
    R.comm_ms = c[2];
    R.buckets = lt_dist_grads_buckets(dg);
    lt_dist_grads_free(dg);
  }
  free(exposed);
  free(ms);
  lt_tensor_free(x);
  lt_tensor_free(y);
  lt_tensor_free(src);
  lt_optimizer_free(opt);
  lt_transformer_free(m);
  lt_generator_free(g);
  return R;
}

/* GFLOP/s of one square f32 product through lt_matmul, best of a few. */
static double gemm_peak(int64_t n, int reps) {
  lt_generator *g = lt_generator_new(7);
  lt_tensor *a = lt_randn(g, LT_DTYPE_F32, 2, (int64_t[]){n, n});
  lt_tensor *bm = lt_randn(g, LT_DTYPE_F32, 2, (int64_t[]){n, n});
  if (!a || !bm) die("gemm operands");
  double best = INFINITY;
  for (int r = 0; r < reps + 1; r++) {
    const double t0 = lt_monotonic_seconds();
    lt_tensor *c = lt_matmul(a, bm);
    const double dt = lt_monotonic_seconds() - t0;
    if (!c) die("matmul");
    lt_tensor_free(c);
    if (r > 0 && dt < best) best = dt;
  }
  lt_tensor_free(a);
  lt_tensor_free(bm);
  lt_generator_free(g);
  return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_train_step [--config small|medium|encdec|gpt2|gpt2-1024|gpt2-350m-1024|all] [--steps N] [--warmup N] [--threads N]\n"
          "                        [--no-peak] [--bound] [--csv] [--precision f32|bf16] [--no-overlap] [--bucket-mb X] [--zero 0|1]\n"
          "                        [--recompute none|attention|layer] [--chunked-head] [--head-only] [--batch N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *which = "all", *precision = "f32", *recompute = NULL;
  int64_t steps64 = 10, warmup64 = 2, threads = 0, zero = 0;
  double bucket_mb = NAN;
  bool no_peak = false, no_overlap = false, csv = false, bound = false;
  const lt_bench_opt opts[] = {
      {"--config", LT_BENCH_STRING, &which, 0, 0, NULL},
      {"--steps", LT_BENCH_INT, &steps64, 1, 0, NULL},
      {"--warmup", LT_BENCH_INT, &warmup64, 0, 0, NULL},
      {"--threads", LT_BENCH_INT, &threads, 1, 0, NULL},
      {"--no-peak", LT_BENCH_FLAG, &no_peak, 0, 0, NULL},
      {"--bound", LT_BENCH_FLAG, &bound, 0, 0, NULL},
      {"--no-overlap", LT_BENCH_FLAG, &no_overlap, 0, 0, NULL},
      {"--bucket-mb", LT_BENCH_DOUBLE, &bucket_mb, 0, 0, NULL},
      {"--csv", LT_BENCH_FLAG, &csv, 0, 0, NULL},
      {"--chunked-head", LT_BENCH_FLAG, &g_chunked, 0, 0, NULL},
      {"--head-only", LT_BENCH_FLAG, &g_head_only, 0, 0, NULL},
      {"--batch", LT_BENCH_INT, &g_batch, 1, 0, NULL},
      {"--recompute", LT_BENCH_STRING, &recompute, 0, 0, NULL},
      {"--zero", LT_BENCH_INT, &zero, 0, 0, NULL},
      {"--precision", LT_BENCH_STRING, &precision, 0, 0, NULL},
  };
  if (lt_bench_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), "see below", NULL, NULL)) usage();
  if (steps64 > 1000000 || warmup64 > 1000000) usage();
  const int steps = (int)steps64, warmup = (int)warmup64;
  const bool peak = !no_peak, bf16 = !strcmp(precision, "bf16");
  g_overlap = !no_overlap;
  g_zero = zero == 1;
  if (!bf16 && strcmp(precision, "f32")) usage();
  if (recompute && lt_recompute_mode_parse(recompute, &g_recompute) != LT_OK) usage();
  if (!isnan(bucket_mb)) lt_dist_set_bucket_bytes((size_t)(bucket_mb * 1048576.0));
  TRY(lt_dist_init(&argc, &argv), "dist_init");
  if (lt_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) die("rank output");
  TRY(lt_init(), "init");
  if (threads > 0) TRY(lt_set_num_threads((int)threads), "set_num_threads");
  if (bf16) lt_set_autocast(LT_DTYPE_BF16); /* steps and the peak alike */
  lt_runtime_info info;
  TRY(lt_runtime_get_info(&info), "runtime info");
  if (!csv) {
    TRY(lt_bench_print_runtime(stdout), "runtime info");
    printf("%d ranks x %d threads (OMP_WAIT_POLICY=%s), %d warm-up + %d timed steps, precision %s%s\n", lt_dist_size(),
           info.num_threads, getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset", warmup, steps,
           bf16 ? "bf16 (autocast)" : "f32",
           lt_dist_size() == 1 ? "" : g_overlap ? ", gradients reduced during backward" : ", gradients reduced after backward");
  }

  enum { NCONF = (int)(sizeof configs / sizeof configs[0]) };
  result res[NCONF];
  bool ran[NCONF] = {false}, any = false;
  for (int k = 0; k < NCONF; k++) {
    if (strcmp(which, "all") && strcmp(which, configs[k].name)) continue;
    if (!strcmp(which, "all") && configs[k].P) continue; /* "all": the three small models; GPT-2 by name */
    bench_config bc = configs[k];
    if (g_batch > 0) bc.B = g_batch;
    res[k] = g_head_only ? run_head(&bc, warmup, steps) : run_config(&bc, warmup, steps);
    ran[k] = any = true;
  }
  if (!any) usage();
  /* After every step: the product's 3 x n^2 floats must not count in the peak RSS. */
  /* The peak as bench_gemm finds it: the best square size (512 is usually
   * the fastest here; 2048 is slower and noisier), best of several runs. */
  double gpeak = NAN;
  if (peak)
    for (int64_t n = 512; n <= 2048; n *= 2) {
      const double gf = gemm_peak(n, n == 512 ? 40 : n == 1024 ? 10 : 4);
      if (!(gpeak >= gf)) gpeak = gf;
    }
  if (!csv && peak)
    printf("GEMM peak (lt_matmul f32%s, best of 512^3, 1024^3, 2048^3, %d threads): %.1f GFLOP/s\n",
           bf16 ? " under autocast" : "", info.num_threads, gpeak);
  /* The physical bound of a step (issue 33): its products at the measured
   * product peak, plus AdamW's traffic (parameter, gradient, m, v read;
   * parameter, m, v written: 7 x 4 bytes per parameter) at the measured
   * bandwidth. */
  const double bw = bound ? lt_bench_triad_gbs(info.num_threads) : NAN;
  if (bound && !csv && peak) {
    printf("memory bandwidth (triad over 3 x 256 MiB, %d threads): %.1f GB/s\n", info.num_threads, bw);
    for (int k = 0; k < NCONF; k++) {
      if (!ran[k]) continue;
      const double prod_s = res[k].gflop / gpeak, adam_s = 28.0 * (double)res[k].params / (bw * 1e9);
      printf("%-9s bound: %.3f s = products %.2f GFLOP at %.1f GFLOP/s (%.3f s) + AdamW %.0f MB at %.1f GB/s (%.3f s); "
             "median step %.3f s = %.0f%% of the bound's speed\n",
             configs[k].name, prod_s + adam_s, res[k].gflop, gpeak, prod_s, 28.0 * (double)res[k].params * 1e-6, bw,
             adam_s, res[k].ms_med * 1e-3, 100.0 * (prod_s + adam_s) / (res[k].ms_med * 1e-3));
    }
  }
  if (csv) printf("config,threads,params,tokens,tok_s,ms_med,ms_min,peak_mib,base_mib,gflop,gflops,frac_peak,loss0,loss1\n");
  else
    printf("%-7s %10s %8s %10s %9s %9s %9s %10s %8s %7s %9s\n", "config", "params", "tokens", "tokens/s", "ms med",
           "ms min", "peak MiB", "GFLOP/step", "GFLOP/s", "peak %", "loss");
  for (int k = 0; k < NCONF; k++) {
    if (!ran[k]) continue;
    const result *R = &res[k];
    const double gfs = R->gflop / (R->ms_med * 1e-3);
    if (csv)
      printf("%s,%d,%lld,%lld,%.1f,%.2f,%.2f,%.1f,%.1f,%.2f,%.2f,%.4f,%.4f,%.4f\n", configs[k].name,
             info.num_threads, (long long)R->params, (long long)R->tokens, R->tok_s, R->ms_med, R->ms_min,
             R->peak_mib, R->base_mib, R->gflop, gfs, gfs / gpeak, R->loss0, R->loss1);
    else
      printf("%-7s %10lld %8lld %10.0f %9.1f %9.1f %9.1f %10.2f %8.1f %6.1f%% %4.2f->%4.2f\n", configs[k].name,
             (long long)R->params, (long long)R->tokens, R->tok_s, R->ms_med, R->ms_min, R->peak_mib, R->gflop, gfs,
             100.0 * gfs / gpeak, R->loss0, R->loss1);
    if (lt_dist_size() > 1) {
      const double hidden = R->comm_ms > R->exposed_ms ? R->comm_ms - R->exposed_ms : 0;
      printf("%-7s data parallel, %d ranks, %d buckets of <= %.1f MB: communication %.1f ms alone; exposed %.1f ms/step (%.1f%% of the step), "
             "hidden %.1f ms (%.0f%% of it)\n",
             configs[k].name, lt_dist_size(), R->buckets, (double)lt_dist_bucket_bytes() / 1048576.0, R->comm_ms, R->exposed_ms, 100.0 * R->exposed_ms / R->ms_med, hidden,
             R->comm_ms > 0 ? 100.0 * hidden / R->comm_ms : 0.0);
      printf("%-7s memory per rank%s: optimizer state", configs[k].name,
             g_zero ? " (ZeRO-1)" : " (no ZeRO)");
      for (int r = 0; r < lt_dist_size(); r++) printf(" %s%.1f", r ? "/ " : "", R->rank_opt_mib[r]);
      printf(" MiB; peak RSS");
      for (int r = 0; r < lt_dist_size(); r++) printf(" %s%.1f", r ? "/ " : "", R->rank_peak_mib[r]);
      printf(" MiB");
      if (g_zero) printf("; parameter broadcast %.1f ms/step (%.1f%% of the step)", R->zero_ms, 100.0 * R->zero_ms / R->ms_med);
      printf("\n");
      free(R->rank_opt_mib);
    }
  }
  lt_dist_finalize();
  return 0;
}
