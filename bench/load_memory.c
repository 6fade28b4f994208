/*
 * bench/load_memory.c: the memory a model takes when it is loaded straight
 * into a weight format (models/transformer/load.h's .weights), against f32
 * (docs/decoding.md, "Memory").
 *
 *   bench_load_memory [--gpt2] [--check] [DIR]
 *
 * Writes a Hugging Face GPT-2 directory of random weights (f32
 * safetensors, lt_hf_export) in DIR (default: a new directory under /tmp,
 * removed at the end): GPT-2 124M's shape with --gpt2 (vocabulary 50,257,
 * 12 layers of 768, 1024 positions), else a small one (vocabulary 8,192, 4
 * layers of 512, 128 positions: 17 M parameters, 67 MB in f32). Then, for
 * f32, bf16, q8_0 and q4_0, each in a fresh child process: the resident
 * memory before loading, and the peak (getrusage ru_maxrss) after lt_tf_load
 * and one greedy step of an 8-token prompt; printed with the peak's growth
 * as a ratio to f32's. The parent never holds a model (the directory is
 * written by a child too), so a child's peak starts from the parent's few
 * MB. With --check the ratios must be at most LIMIT[f] (below): the ctest
 * load_memory runs the small model so.
 * Resident memory is not a timing: the figures do not depend on the
 * machine's load.
 *
 * What this is not: a speed benchmark (bench/decode.c), or meaningful under
 * AddressSanitizer (its allocator keeps freed memory: --check says so and
 * passes nothing, it skips).
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libtensor.h"
#include "libtensor_transformer.h"

/* --check's bounds on the small model, whose fixed costs (a transposed
 * tensor's f32 scratch while it is converted, the step's activations) weigh
 * more than on GPT-2 124M (docs/decoding.md gives both): measured 0.53,
 * 0.33, 0.23. */
static const double LIMIT[LT_QFORMAT_COUNT] = {1.0, 0.56, 0.36, 0.26};

static void die(const char *what) {
  fprintf(stderr, "bench_load_memory: %s: %s\n", what, lt_last_error());
  exit(1);
}

/* Resident memory now, in kB (/proc/self/statm), and the peak so far. */
static long rss_kb(void) {
  long size = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
  if (f) fclose(f);
  return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}
static long peak_kb(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static lt_tf_config config(bool gpt2) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.act = LT_ACT_GELU_TANH, c.dropout = 0.0, c.pad_id = -1;
  if (gpt2) c.vocab_size = 50257, c.d_model = 768, c.n_heads = 12, c.n_kv_heads = 12, c.n_dec_layers = 12,
            c.d_ff = 3072, c.max_len = 1024;
  else c.vocab_size = 8192, c.d_model = 512, c.n_heads = 8, c.n_kv_heads = 8, c.n_dec_layers = 4, c.d_ff = 2048,
       c.max_len = 128;
  return c;
}

/* The child's work: write the directory. */
static void write_dir(const char *dir, bool gpt2) {
  lt_tf_config c = config(gpt2);
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = g ? lt_transformer_new(&c, g) : NULL;
  if (!m) die("building the model");
  if (lt_hf_export(m, dir) != LT_OK) die("writing the directory");
  lt_transformer_free(m);
  lt_generator_free(g);
}

/* The child's work: load as f, one greedy step; *before and *peak in kB. */
static void load_step(const char *dir, lt_qformat f, long out[2]) {
  /* the library's own start-up (its threads, BLIS's and oneDNN's state) is not the model's: made first */
  lt_tensor *a = lt_ones(LT_DTYPE_F32, 2, (int64_t[]){64, 64}), *b = a ? lt_matmul(a, a) : NULL;
  if (lt_init() != LT_OK || !b) die("starting the library");
  lt_tensor_free(b);
  lt_tensor_free(a);
  out[0] = rss_kb();
  lt_tf_load_opts o = LT_TF_LOAD_DEFAULTS;
  o.weights = f;
  lt_tf_loaded l;
  if (lt_tf_load(dir, &o, &l) != LT_OK) die("loading");
  const int64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, 8}, ids);
  lt_generate_opts d = lt_generate_defaults();
  d.strategy = LT_GENERATE_GREEDY, d.max_new = 1, d.eos_id = -1;
  lt_generate_result r = {0};
  lt_set_grad_enabled(false);
  if (!x || lt_transformer_generate(l.model, NULL, NULL, x, &d, NULL, &r) != LT_OK) die("one step");
  out[1] = peak_kb();
  lt_generate_result_free(&r);
  lt_tensor_free(x);
  lt_tf_loaded_free(&l);
}

/* Runs fn in a child; its two figures through a pipe (NULL: none). */
static void in_child(const char *dir, bool gpt2, int f, long out[2]) {
  int p[2];
  if (pipe(p) != 0) exit(1);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) exit(1);
  if (pid == 0) {
    close(p[0]);
    long v[2] = {0, 0};
    if (f < 0) write_dir(dir, gpt2);
    else load_step(dir, (lt_qformat)f, v);
    _exit(write(p[1], v, sizeof v) == (ssize_t)sizeof v ? 0 : 1);
  }
  close(p[1]);
  long v[2];
  const bool got = read(p[0], v, sizeof v) == (ssize_t)sizeof v;
  close(p[0]);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !got) {
    fprintf(stderr, "bench_load_memory: the child for %s failed\n", f < 0 ? "the directory" : lt_qformat_name(f));
    exit(1);
  }
  if (out) out[0] = v[0], out[1] = v[1];
}

int main(int argc, char **argv) {
  bool gpt2 = false, check = false;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gpt2") == 0) gpt2 = true;
    else if (strcmp(argv[i], "--check") == 0) check = true;
    else dir = argv[i];
  }
#ifdef __SANITIZE_ADDRESS__
  if (check) {
    printf("bench_load_memory: skipped under AddressSanitizer (its allocator keeps freed memory)\n");
    return 0;
  }
#endif
  char tmp[64] = "/tmp/lt_load_memory_XXXXXX";
  const bool own = !dir;
  if (own && !(dir = mkdtemp(tmp))) return 1;
  char model[4200];
  snprintf(model, sizeof model, "%s/model", dir);
  in_child(model, gpt2, -1, NULL);
  int64_t n_params;
  size_t bytes;
  lt_tf_config c = config(gpt2);
  if (lt_tf_config_size(&c, &n_params, &bytes) != LT_OK) die("the size");
  printf("model: %s, %.1f M parameters, %.1f MB in f32 (a Hugging Face directory, f32 safetensors)\n",
         gpt2 ? "GPT-2 124M's shape" : "small GPT-2", (double)n_params / 1e6, (double)bytes / 1e6);
  printf("%-6s %12s %12s %12s %8s\n", "format", "before MB", "peak MB", "growth MB", "ratio");
  long f32_growth = 0;
  int bad = 0;
  for (int f = 0; f < LT_QFORMAT_COUNT; f++) {
    long v[2];
    in_child(model, gpt2, f, v);
    const long growth = v[1] - v[0];
    if (f == 0) f32_growth = growth;
    const double ratio = f32_growth > 0 ? (double)growth / (double)f32_growth : 0;
    printf("%-6s %12.1f %12.1f %12.1f %8.3f%s\n", lt_qformat_name(f), v[0] / 1024.0, v[1] / 1024.0, growth / 1024.0,
           ratio, check && ratio > LIMIT[f] ? "  over the limit" : "");
    if (check && ratio > LIMIT[f]) bad++;
  }
  if (own) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
  }
  return bad ? 1 : 0;
}
