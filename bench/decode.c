/*
 * bench/decode.c: tokens/s of greedy decoding (lt_transformer_generate) with and
 * without the KV cache, for a small and a medium decoder-only model and an
 * encoder-decoder, at several output lengths. docs/decoding.md records the
 * results.
 *
 *   bench_decode                 every model, lengths 64 and 256, batch 1
 *   bench_decode --quick         lengths 32 and 64 (a smoke run)
 *   bench_decode --lengths 64,256,512 --batch 4 --repeat 3 --threads 2
 *   bench_decode --only medium --cached-only   (profiling the cached path)
 *   bench_decode --weights f32,bf16,q8_0,q4_0 --only decoder-only --lengths 128
 *                                (weight-only quantization: the cached path
 *                                per weight format, lt_params_quantize)
 *
 * Models are randomly initialised (speed does not depend on the weights) and
 * never stop early (eos -1), so every run makes exactly the requested number
 * of tokens. Decoder-only prompts are 8 tokens, encoder-decoder sources 32.
 * Each figure is the best of --repeat runs (default 3 for the cached path,
 * 1 for the uncached one, which is slow by design). tokens/s counts the new
 * tokens of all rows. The load line gives how many cores other processes
 * used during the run, from /proc/stat: figures on a busy machine are low.
 *
 * With --weights, each model is decoded with the KV cache in each format,
 * the formats alternating within each of --repeat rounds (default 3), and
 * the median per format is printed with the weight bytes read per token
 * (every parameter except the learned position table, of which a step
 * reads one row; the KV cache not counted) and the bandwidth those bytes
 * at that speed mean.
 *
 * What this is not: a comparison with other frameworks, or a measurement of
 * sampling / beam search (they share the model calls; their bookkeeping is a
 * small part of a step).
 */
#include "bench/bench_util.h"
#include "libtensor_transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
  fprintf(stderr, "bench_decode: %s: %s\n", what, lt_last_error());
  exit(1);
}


typedef struct model_spec {
  const char *name;
  lt_tf_arch arch;
  int64_t C, NH, L, V, d_ff;
} model_spec;

static const model_spec MODELS[] = {
    {"small decoder-only", LT_TF_DECODER_ONLY, 256, 4, 4, 1024, 1024},
    {"medium decoder-only", LT_TF_DECODER_ONLY, 512, 8, 6, 8192, 2048},
    {"encoder-decoder", LT_TF_ENCODER_DECODER, 256, 4, 3, 1024, 1024},
};

static lt_transformer *build(const model_spec *s) {
  lt_tf_config c = lt_tf_config_default(s->arch);
  c.vocab_size = s->V, c.d_model = s->C, c.n_heads = s->NH, c.n_kv_heads = s->NH, c.d_ff = s->d_ff;
  c.max_len = 1024, c.dropout = 0.0;
  c.n_enc_layers = s->arch == LT_TF_DECODER_ONLY ? 0 : s->L;
  c.n_dec_layers = s->L;
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = lt_transformer_new(&c, g);
  lt_generator_free(g);
  if (!m) die("building a model");
  return m;
}

/* A copy of m (same configuration and weights). */
static lt_transformer *copy_model(const lt_transformer *m) {
  lt_generator *g = lt_generator_new(1);
  lt_transformer *c = g ? lt_transformer_new(lt_transformer_config(m), g) : NULL;
  lt_generator_free(g);
  if (!c) die("copying a model");
  if (lt_params_copy(lt_transformer_params(c), lt_transformer_params((lt_transformer *)m)) != LT_OK)
    die("copying a model");
  return c;
}

/* Bytes of weights a decoding step reads: every parameter in its format,
 * except the learned position table (one row of it per step). */
static double step_bytes(lt_transformer *m) {
  lt_params *p = lt_transformer_params(m);
  double b = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *e = lt_params_at(p, i);
    if (!strcmp(e->name, "pos_embed.weight")) continue;
    const lt_qmatrix *q = lt_tensor_qmatrix(e->value);
    b += q ? (double)lt_qmatrix_bytes(q) : (double)e->value->numel * (double)lt_dtype_size(e->value->dtype);
  }
  return b;
}

/* Seconds for one greedy decode of n tokens per row. */
static double time_decode(const lt_transformer *m, const lt_tensor *in, bool encdec, int64_t n, bool cache) {
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = n, o.eos_id = -1;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  tf.no_cache = !cache;
  lt_generate_result r = {0};
  const double t0 = lt_monotonic_seconds();
  if (lt_transformer_generate(m, encdec ? in : NULL, NULL, encdec ? NULL : in, &o, &tf, &r) != LT_OK) die("decoding");
  const double t = lt_monotonic_seconds() - t0;
  if (r.tokens->shape[1] != n) {
    fprintf(stderr, "bench_decode: made %lld tokens, not %lld\n", (long long)r.tokens->shape[1], (long long)n);
    exit(1);
  }
  lt_generate_result_free(&r);
  return t;
}

int main(int argc, char **argv) {
  int64_t lengths[8] = {64, 256}, batch = 1, repeat = 3, threads = 0;
  int n_len = 2;
  const char *only = NULL, *weights = NULL; /* only: a substring of a model's name */
  bool quick = false, cached_only = false;  /* cached_only: for profiling the cached path */
  const lt_bench_opt opts[] = {
      {"--quick", LT_BENCH_FLAG, &quick, 0, 0, NULL},
      {"--lengths", LT_BENCH_INT_LIST, lengths, 1, 8, &n_len},
      {"--batch", LT_BENCH_INT, &batch, 1, 0, NULL},
      {"--repeat", LT_BENCH_INT, &repeat, 1, 0, NULL},
      {"--threads", LT_BENCH_INT, &threads, 1, 0, NULL},
      {"--cached-only", LT_BENCH_FLAG, &cached_only, 0, 0, NULL},
      {"--weights", LT_BENCH_STRING, &weights, 0, 0, NULL},
      {"--only", LT_BENCH_STRING, &only, 0, 0, NULL},
  };
  const int bad = lt_bench_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts),
                                 "bench_decode [--quick] [--lengths N,N,..] [--batch B] [--repeat R] [--threads N] "
                                 "[--only NAME] [--cached-only] [--weights f32,bf16,q8_0,q4_0]",
                                 NULL, NULL);
  if (bad) return bad;
  if (quick) lengths[0] = 32, lengths[1] = 64, n_len = 2, repeat = 1;
  lt_qformat wf[LT_QFORMAT_COUNT];
  int n_wf = 0;
  char wbuf[128];
  if (weights && snprintf(wbuf, sizeof wbuf, "%s", weights) < (int)sizeof wbuf)
    for (char *save = NULL, *tok = strtok_r(wbuf, ",", &save); tok && n_wf < LT_QFORMAT_COUNT;
         tok = strtok_r(NULL, ",", &save))
      if (lt_qformat_parse(tok, &wf[n_wf++]) != LT_OK) die("--weights");
  if (threads > 0 && lt_set_num_threads((int)threads) != LT_OK) die("--threads");
  if (lt_bench_print_runtime(stdout) != LT_OK) die("runtime info");
  printf("batch %lld\n", (long long)batch);
  if (n_wf > 0) {
    printf("| model | output tokens | weights | MB read per token | tok/s (median of %lld) | vs f32 | GB/s of weights |\n",
           (long long)repeat);
    printf("|---|---|---|---|---|---|---|\n");
  } else {
    printf("| model | parameters | output tokens | cached tok/s | uncached tok/s | speed-up |\n");
    printf("|---|---|---|---|---|---|\n");
  }
  fflush(stdout);
  const lt_bench_mark mark0 = lt_bench_mark_now();
  for (size_t mi = 0; mi < sizeof MODELS / sizeof *MODELS; mi++) {
    const model_spec *s = &MODELS[mi];
    if (only && !strstr(s->name, only)) continue;
    lt_transformer *m = build(s);
    const bool encdec = s->arch == LT_TF_ENCODER_DECODER;
    const int64_t P = encdec ? 32 : 8;
    int64_t *ids = malloc(sizeof *ids * (size_t)(batch * P));
    for (int64_t i = 0; i < batch * P; i++) ids[i] = 4 + (i * 7919) % (s->V - 4);
    lt_tensor *in = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){batch, P}, ids);
    free(ids);
    if (!in) die("input");
    if (n_wf > 0) { /* one model per format, alternating within each round */
      lt_transformer *q[LT_QFORMAT_COUNT];
      double bytes[LT_QFORMAT_COUNT];
      for (int f = 0; f < n_wf; f++) {
        q[f] = copy_model(m);
        if (lt_params_quantize(lt_transformer_params(q[f]), wf[f], NULL, NULL) != LT_OK) die("quantizing");
        bytes[f] = step_bytes(q[f]);
        time_decode(q[f], in, encdec, 8, true); /* warm-up */
      }
      for (int64_t li = 0; li < n_len; li++) {
        const int64_t n = lengths[li];
        double t[LT_QFORMAT_COUNT][16];
        const int64_t R = repeat < 1 ? 1 : repeat > 16 ? 16 : repeat;
        for (int64_t r = 0; r < R; r++)
          for (int f = 0; f < n_wf; f++) t[f][r] = time_decode(q[f], in, encdec, n, true);
        double f32_tps = 0;
        for (int f = 0; f < n_wf; f++) {
          qsort(t[f], (size_t)R, sizeof(double), lt_bench_cmp_double);
          const double tps = (double)(n * batch) / t[f][R / 2];
          if (wf[f] == LT_QFORMAT_F32) f32_tps = tps;
          char vs[32] = "-";
          if (f32_tps > 0) snprintf(vs, sizeof vs, "%.2fx", tps / f32_tps);
          printf("| %s (d_model %lld, %lld layers, vocab %lld) | %lld | %s | %.2f | %.1f | %s | %.1f |\n", s->name,
                 (long long)s->C, (long long)s->L, (long long)s->V, (long long)n, lt_qformat_name(wf[f]),
                 bytes[f] / 1e6, tps, vs, bytes[f] * tps / batch / 1e9);
        }
        fflush(stdout);
      }
      for (int f = 0; f < n_wf; f++) lt_transformer_free(q[f]);
      lt_tensor_free(in);
      lt_transformer_free(m);
      continue;
    }
    time_decode(m, in, encdec, 8, true); /* warm-up: first-touch allocations, BLIS packing buffers */
    for (int64_t li = 0; li < n_len; li++) {
      const int64_t n = lengths[li];
      double best[2] = {1e30, 1e30};
      for (int c = 0; c < 2; c++)
        for (int64_t r = 0; r < (c == 0 ? repeat : cached_only ? 0 : 1); r++) {
          const double t = time_decode(m, in, encdec, n, c == 0);
          if (t < best[c]) best[c] = t;
        }
      const double tok = (double)(n * batch);
      char unc[32] = "-", sp[32] = "-";
      if (!cached_only) {
        snprintf(unc, sizeof unc, "%.0f", tok / best[1]);
        snprintf(sp, sizeof sp, "%.1fx", best[1] / best[0]);
      }
      printf("| %s (d_model %lld, %lld layers%s, vocab %lld) | %.1fM | %lld | %.0f | %s | %s |\n", s->name,
             (long long)s->C, (long long)s->L, encdec ? " each" : "", (long long)s->V,
             (double)lt_params_numel(lt_transformer_params(m), false) / 1e6, (long long)n, tok / best[0], unc, sp);
      fflush(stdout);
    }
    lt_tensor_free(in);
    lt_transformer_free(m);
  }
  printf("load: other processes used %.2f cores on average during the %.0f s run\n", lt_bench_others_cores(mark0),
         lt_monotonic_seconds() - mark0.wall);
  return 0;
}
