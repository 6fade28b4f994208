/*
 * examples/gru_lm.c: a character-level GRU language model (nn.GRU, two
 * layers by default) on a text file, on the library's training loop, with
 * the evaluation written as the trainer's eval_batch hook (one validation
 * batch per call, each in a scope the trainer opens: nothing to free).
 *
 * The model, batch-first as a PyTorch user often writes it:
 *   ids [B, T] -> Embedding(V, E) -> GRU(E, H, layers, batch_first) -> Linear(H, V) -> logits [B, T, V]
 * The data: the text's bytes (V 256, no tokenizer), the first 90% for
 * training in random windows of T + 1 bytes, the last 10% for validation in
 * consecutive windows. No state is carried between batches.
 *
 *   gru_lm                                  # /usr/share/common-licenses/GPL-3, 200 steps
 *   gru_lm --data file.txt --steps 1000 --hidden 256 --layers 2
 * The last line is machine-readable:
 *   summary: steps=N first_loss=A last_loss=B val_loss=C
 * (first/last: the mean training loss of the first and last 10 steps).
 *
 * What this is not: a benchmark (examples/char_lstm.c and docs/lstm.md have
 * the LSTM's against PyTorch) or a sampler.
 */
#include <libtensor/libtensor.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void die(const char *what) {
  fprintf(stderr, "gru_lm: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()), lt_last_error());
  exit(1);
}
#define TRY(expr)                    \
  do {                               \
    if ((expr) != LT_OK) die(#expr); \
  } while (0)

typedef struct opts {
  const char *data;
  long steps, batch, seq, embed, hidden, layers, eval_every;
  double lr;
  unsigned long seed;
} opts;

typedef struct model {
  lt_embedding_m embed; /* "embed.weight" [256, E] */
  lt_gru_m gru;         /* "gru.weight_ih_l0" [3H, E], ... (PyTorch's names) */
  lt_linear_m head;     /* "head.weight" [256, H], "head.bias" [256] */
} model;

/* ids [B, T] i64 -> logits [B, T, 256] */
static lt_tensor *forward(const model *m, const lt_tensor *ids) {
  lt_tensor *x = lt_embedding_forward(&m->embed, ids);      /* [B, T, E] */
  lt_tensor *h = lt_gru_forward(&m->gru, x, NULL, NULL, NULL); /* [B, T, H] */
  return lt_linear_forward(&m->head, h);                      /* [B, T, 256] */
}

typedef struct run {
  const opts *o;
  model m;
  const unsigned char *text;
  long n_train, n_val;
  lt_generator *pick;          /* the training windows */
  double losses[100000];       /* per step, for the summary */
  long n_losses;
  double val_sum;              /* eval_batch's running sums */
  long val_count;
} run;

/* B windows of T + 1 bytes starting at starts[b]: inputs [B, T], targets [B, T]. */
static void windows(const run *r, const long *starts, lt_tensor **x, lt_tensor **y) {
  const long B = r->o->batch, T = r->o->seq;
  int64_t *a = malloc(sizeof *a * (size_t)(B * T)), *b = malloc(sizeof *b * (size_t)(B * T));
  if (!a || !b) fprintf(stderr, "gru_lm: out of memory\n"), exit(1);
  for (long i = 0; i < B; i++)
    for (long t = 0; t < T; t++) a[i * T + t] = r->text[starts[i] + t], b[i * T + t] = r->text[starts[i] + t + 1];
  *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, T}, a);
  *y = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, T}, b);
  free(a), free(b);
}

static lt_status micro_batch(void *user, lt_trainer_micro *mb) {
  run *r = user;
  const long B = r->o->batch, T = r->o->seq;
  long starts[4096];
  double u[4096];
  lt_tensor *draw = lt_rand(r->pick, LT_DTYPE_F64, 1, (int64_t[]){B});
  if (!draw || lt_tensor_read(draw, LT_DTYPE_F64, u, B) != LT_OK) return lt_last_status();
  for (long i = 0; i < B; i++) starts[i] = (long)(u[i] * (double)(r->n_train - T - 1));
  lt_tensor *x, *y;
  windows(r, starts, &x, &y);
  mb->tokens = B * T;
  if (!mb->forward) return LT_OK;
  mb->loss = lt_cross_entropy(forward(&r->m, x), y, NULL); /* mean over B T: the class dim is the last */
  mb->weight = 1.0 / (double)mb->accum;
  double v;
  if (!mb->loss || lt_item(mb->loss, &v) != LT_OK) return lt_last_status();
  if (r->n_losses < 100000) r->losses[r->n_losses++] = v;
  return LT_OK;
}

/* One validation batch: consecutive windows from the held-out tail. The
 * trainer opens a scope around the call and runs it under no-grad. */
static lt_status eval_batch(void *user, lt_trainer_eval *ev, int64_t batch, bool *more) {
  run *r = user;
  const long B = r->o->batch, T = r->o->seq, per = B * T;
  if (batch == 0) r->val_sum = 0, r->val_count = 0;
  long starts[4096];
  for (long i = 0; i < B; i++) starts[i] = r->n_train + (batch * B + i) * T;
  lt_tensor *x, *y;
  windows(r, starts, &x, &y);
  double v;
  lt_tensor *loss = lt_cross_entropy(forward(&r->m, x), y, NULL);
  if (!loss || lt_item(loss, &v) != LT_OK) return lt_last_status();
  r->val_sum += v * (double)per, r->val_count += per;
  *more = r->n_train + ((batch + 2) * B) * T + 1 < r->n_train + r->n_val; /* room for another batch */
  ev->values[0] = r->val_sum / (double)r->val_count;
  return LT_OK;
}

static const char *FALLBACK =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair. ";

static unsigned char *read_text(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  if (f && fseek(f, 0, SEEK_END) == 0) {
    long len = ftell(f);
    if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) == (size_t)len)
      *n = len;
    else
      free(buf), buf = NULL;
  }
  if (f) fclose(f);
  if (!buf) { /* no file: the fallback text, 40 times */
    const size_t l = strlen(FALLBACK);
    buf = malloc(l * 40);
    if (!buf) exit(1);
    for (int i = 0; i < 40; i++) memcpy(buf + l * (size_t)i, FALLBACK, l);
    *n = (long)(l * 40);
    fprintf(stderr, "gru_lm: cannot read %s: training on a built-in text\n", path);
  }
  return buf;
}

int main(int argc, char **argv) {
  opts o = {"/usr/share/common-licenses/GPL-3", 200, 16, 64, 32, 128, 2, 100, 3e-3, 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) fprintf(stderr, "gru_lm: %s needs a value\n", a), exit(2);
    if (!strcmp(a, "--data")) o.data = v;
    else if (!strcmp(a, "--steps")) o.steps = atol(v);
    else if (!strcmp(a, "--batch")) o.batch = atol(v);
    else if (!strcmp(a, "--seq")) o.seq = atol(v);
    else if (!strcmp(a, "--hidden")) o.hidden = atol(v);
    else if (!strcmp(a, "--layers")) o.layers = atol(v);
    else if (!strcmp(a, "--eval-every")) o.eval_every = atol(v);
    else if (!strcmp(a, "--lr")) o.lr = atof(v);
    else if (!strcmp(a, "--seed")) o.seed = strtoul(v, NULL, 10);
    else fprintf(stderr, "gru_lm: unknown flag %s\n", a), exit(2);
    i++;
  }
  if (o.steps < 10 || o.steps > 100000 || o.batch < 1 || o.batch > 4096 || o.seq < 2 || o.hidden < 1 ||
      o.layers < 1 || o.layers > LT_LSTM_MAX_LAYERS || !(o.lr > 0))
    fprintf(stderr, "gru_lm: a value is out of range (steps 10..100000, batch 1..4096, seq >= 2, ...)\n"), exit(2);
  run *r = calloc(1, sizeof *r);
  if (!r) return 1;
  r->o = &o;
  long n;
  unsigned char *text = read_text(o.data, &n);
  r->text = text, r->n_train = n * 9 / 10, r->n_val = n - r->n_train;
  if (r->n_val < 2 * o.batch * o.seq + 2 || r->n_train < o.seq + 2)
    fprintf(stderr, "gru_lm: %ld bytes are too few for batch %ld x seq %ld\n", n, o.batch, o.seq), exit(2);

  lt_params *params = lt_params_new();
  lt_generator *g = lt_generator_new(o.seed);
  r->pick = lt_generator_new(o.seed + 1);
  if (!params || !g || !r->pick) die("setup");
  lt_gru_opts go = LT_GRU_DEFAULTS;
  go.num_layers = o.layers, go.batch_first = true;
  TRY(lt_embedding_init(&r->m.embed, params, "embed", 256, o.embed, -1, g));
  TRY(lt_gru_init(&r->m.gru, params, "gru", o.embed, o.hidden, &go, g));
  TRY(lt_linear_init(&r->m.head, params, "head", o.hidden, 256, true, g));
  printf("gru_lm: %ld bytes, GRU(%ld, %ld, %ld layers), %lld parameters\n", n, o.embed, o.hidden, o.layers,
         (long long)lt_params_numel(params, false));

  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAM);
  oc.lr = o.lr;
  lt_optimizer *opt = lt_optimizer_new(params, &oc);
  if (!opt) die("lt_optimizer_new");
  lt_schedule sched = {.kind = LT_SCHED_WARMUP_COSINE, .base_lr = o.lr, .min_lr = o.lr * 0.1, .warmup = 10,
                       .total = o.steps};
  static const lt_trainer_metric metrics[] = {{"val_loss", NULL}};
  lt_trainer_config c = LT_TRAINER_DEFAULTS;
  c.params = params, c.optim = opt, c.optim_config = &oc, c.schedule = &sched;
  c.steps = o.steps, c.clip = 1.0, c.eval_every = o.eval_every, c.log_every = 50;
  c.n_metrics = 1, c.metrics = metrics;
  c.progress = LT_TRAINER_PROGRESS_LINES;
  lt_trainer_hooks h = {.user = r, .micro_batch = micro_batch, .eval_batch = eval_batch};
  lt_trainer *t = lt_trainer_new(&c, &h);
  if (!t) die("lt_trainer_new");
  lt_trainer_result res;
  TRY(lt_trainer_fit(t, &res));
  double first = 0, last = 0;
  const long k = r->n_losses < 10 ? r->n_losses : 10;
  for (long i = 0; i < k; i++) first += r->losses[i] / (double)k, last += r->losses[r->n_losses - 1 - i] / (double)k;
  printf("summary: steps=%lld first_loss=%.4f last_loss=%.4f val_loss=%.4f\n", (long long)res.step, first, last,
         r->val_count ? r->val_sum / (double)r->val_count : NAN);
  lt_trainer_free(t);
  lt_optimizer_free(opt);
  lt_params_free(params);
  lt_generator_free(g), lt_generator_free(r->pick);
  free(text);
  free(r);
  return 0;
}
