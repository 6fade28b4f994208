/*
 * examples/char_lstm.c: a character-level LSTM language model on a text file
 * (default /usr/share/common-licenses/GPL-3), trained with 64-step truncated
 * backpropagation through time on the library's training loop
 * (train/trainer.h), then sampled with lt_multinomial.
 *
 * The model, time-major as nn.LSTM's default:
 *   ids [T, B] -> Embedding(V, E) -> LSTM(E, H, layers) -> Linear(H, V) -> logits [T, B, V]
 * The data order has no randomness, so bench/char_lstm_torch.py (the PyTorch
 * twin: same model, configuration, data order, loss, optimizer, clipping and
 * validation) sees exactly the same batches: the first 90% of the text is
 * split into B contiguous streams; step k reads characters [k*T, k*T + T) of
 * every stream (targets one further), carrying the LSTM state (h, c) from
 * step to step, detached (truncated BPTT); past a stream's end it starts
 * over from position 0 with a zero state. Validation runs the last 10% as 4
 * streams the same way (no gradient) and reports the mean cross-entropy in
 * nats per character. Only the initial weights differ (each side draws from
 * its own generator seeded with --seed).
 *
 *   char_lstm                         # 300 steps, B 32, T 64, E 64, H 256, Adam 2e-3, clip 1
 *   char_lstm --steps 1000 --hidden 512 --layers 2 --sample 500
 *   char_lstm --data file.txt --seed 3
 * The last line is machine-readable: "result: steps N ms_per_step X val_loss Y"
 * (ms per training step: the trainer's time in steps, evaluations excluded).
 */
#include <libtensor/libtensor.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void die(const char *what) {
  fprintf(stderr, "char_lstm: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()), lt_last_error());
  exit(1);
}
#define TRY(expr)                    \
  do {                               \
    if ((expr) != LT_OK) die(#expr); \
  } while (0)

/* ---- options --------------------------------------------------------------- */

typedef struct opts {
  const char *data;
  int64_t steps, batch, seq, embed, hidden, layers, sample, eval_every, threads;
  double lr;
  uint64_t seed;
} opts;

static void usage(FILE *f) {
  fprintf(f, "usage: char_lstm [--data FILE] [--steps N] [--batch B] [--seq T] [--embed E] [--hidden H]\n"
             "                 [--layers L] [--lr LR] [--seed S] [--sample N] [--eval-every N] [--threads N]\n");
}

/* A bad command line: the message naming the flag, the usage, exit 2 (as the
 * other programs). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static _Noreturn void bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "char_lstm: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  usage(stderr);
  exit(2);
}

/* Each flag's range: a value outside it (or one that does not fit in 64
 * bits: strtoll's ERANGE) is a usage error naming the flag, never a
 * saturated or wrapped count. --sample generates that many characters. */
static const struct {
  const char *flag;
  long long lo, hi;
} RANGES[] = {{"--steps", 1, 1000000000000LL}, {"--batch", 1, 65536},   {"--seq", 1, 1 << 20},
              {"--embed", 1, 65536},             {"--hidden", 1, 65536}, {"--layers", 1, 1024},
              {"--seed", 0, INT64_MAX},          {"--sample", 0, 1 << 20}, {"--eval-every", 0, 1000000000000LL},
              {"--threads", 0, 1024}};

static opts parse(int argc, char **argv) {
  opts o = {"/usr/share/common-licenses/GPL-3", 300, 32, 64, 64, 256, 1, 200, 0, 0, 2e-3, 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(stdout), exit(0);
    int k = -1;
    for (int j = 0; j < (int)(sizeof RANGES / sizeof RANGES[0]); j++)
      if (!strcmp(a, RANGES[j].flag)) k = j;
    if (k < 0 && strcmp(a, "--data") && strcmp(a, "--lr")) bad_usage("unknown flag '%s'", a);
    if (!v) bad_usage("%s needs a value", a);
    i++;
    if (!strcmp(a, "--data")) {
      o.data = v;
      continue;
    }
    char *end = NULL;
    errno = 0;
    if (!strcmp(a, "--lr")) {
      o.lr = strtod(v, &end);
      if (!*v || *end || errno == ERANGE || !isfinite(o.lr) || !(o.lr > 0) || o.lr > 1e3)
        bad_usage("--lr %s: must be a number in (0, 1000]", v);
      continue;
    }
    const long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno == ERANGE || n < RANGES[k].lo || n > RANGES[k].hi)
      bad_usage("%s %s: must be a whole number in [%lld, %lld]", a, v, RANGES[k].lo, RANGES[k].hi);
    int64_t *field[] = {&o.steps, &o.batch, &o.seq, &o.embed, &o.hidden, &o.layers, NULL, &o.sample,
                        &o.eval_every, &o.threads};
    if (field[k]) *field[k] = n;
    else o.seed = (uint64_t)n; /* --seed */
  }
  int64_t tokens;
  if (__builtin_mul_overflow(o.batch, o.seq, &tokens) || tokens > (int64_t)1 << 24)
    bad_usage("--batch %lld x --seq %lld: at most 2^24 characters per step", (long long)o.batch, (long long)o.seq);
  return o;
}

/* ---- data: bytes -> ids over the file's own alphabet ----------------------- */

typedef struct text {
  int64_t *ids, n; /* the whole file as ids */
  int64_t V;       /* alphabet size */
  unsigned char alphabet[256];
} text;

static text load_text(const char *path) {
  /* the library's reader: regular files only (a FIFO or device is refused at
   * once), size-bounded (datasets/datasets.h) */
  char *data;
  size_t n;
  if (lt_text_file_read(path, &data, &n) != LT_OK) fprintf(stderr, "char_lstm: %s\n", lt_last_error()), exit(1);
  const unsigned char *buf = (const unsigned char *)data;
  text t = {0};
  int64_t map[256];
  bool seen[256] = {0};
  for (size_t i = 0; i < n; i++) seen[buf[i]] = true;
  for (int c = 0; c < 256; c++)
    if (seen[c]) t.alphabet[t.V] = (unsigned char)c, map[c] = t.V++;
  if (!(t.ids = malloc(sizeof *t.ids * (n ? n : 1)))) die("reading the text");
  for (size_t i = 0; i < n; i++) t.ids[i] = map[buf[i]];
  t.n = (int64_t)n;
  free(data);
  return t;
}

/* S contiguous streams over ids[lo, hi): stream s is [lo + s*len, lo + (s+1)*len + 1). */
typedef struct streams {
  const int64_t *ids;
  int64_t lo, S, len, pos;
} streams;

/* Fills x, y [T, S] with the chunk at pos (y one character further);
 * returns true when the streams started over (the caller zeroes the state). */
static bool next_chunk(streams *st, int64_t T, int64_t *x, int64_t *y) {
  bool reset = false;
  if (st->pos + T > st->len) st->pos = 0, reset = true;
  for (int64_t t = 0; t < T; t++)
    for (int64_t s = 0; s < st->S; s++) {
      const int64_t i = st->lo + s * st->len + st->pos + t;
      x[t * st->S + s] = st->ids[i], y[t * st->S + s] = st->ids[i + 1];
    }
  st->pos += T;
  return reset;
}

/* ---- the model ------------------------------------------------------------- */

typedef struct model {
  lt_embedding_m embed; /* "embed.weight" [V, E] */
  lt_lstm_m lstm;       /* "lstm.weight_ih_l0" ... */
  lt_linear_m head;     /* "head.weight" [V, H], "head.bias" */
} model;

/* ids [T, B] i64, state h, c [L, B, H] (NULL: zeros) -> logits [T, B, V];
 * *hn, *cn get the final state. Intermediates belong to the open scope. */
static lt_tensor *model_forward(const model *m, const lt_tensor *ids, const lt_tensor *h, const lt_tensor *c,
                                lt_tensor **hn, lt_tensor **cn) {
  lt_tensor *e = lt_embedding_forward(&m->embed, ids);
  lt_tensor *out = e ? lt_lstm_forward(&m->lstm, e, h, c, NULL, hn, cn) : NULL;
  return out ? lt_linear_forward(&m->head, out) : NULL;
}

/* ---- the trainer's hooks --------------------------------------------------- */

typedef struct run {
  const opts *o;
  const model *m;
  streams train, val;
  int64_t *x, *y;         /* [T, B] scratch */
  lt_tensor *h, *c;       /* carried state (owned, detached) or NULL */
} run;

static void keep_state(lt_tensor **dst, lt_tensor *src) {
  lt_tensor_free(*dst);
  *dst = src ? lt_tensor_keep(lt_detach(src)) : NULL;
}

static lt_status micro_batch(void *user, lt_trainer_micro *mb) {
  run *r = user;
  const int64_t T = r->o->seq, B = r->o->batch;
  if (next_chunk(&r->train, T, r->x, r->y)) keep_state(&r->h, NULL), keep_state(&r->c, NULL);
  mb->weight = 1.0, mb->tokens = T * B;
  if (!mb->forward) return LT_OK;
  lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(T, B), r->x);
  lt_tensor *y = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(T, B), r->y);
  lt_tensor *hn = NULL, *cn = NULL;
  lt_tensor *logits = x && y ? model_forward(r->m, x, r->h, r->c, &hn, &cn) : NULL;
  if (!logits || !(mb->loss = lt_cross_entropy(logits, y, NULL))) return lt_last_status();
  keep_state(&r->h, hn), keep_state(&r->c, cn);
  return LT_OK;
}

/* Mean cross-entropy over the validation streams (state carried, no grad). */
static lt_status evaluate(void *user, lt_trainer_eval *ev) {
  run *r = user;
  const int64_t T = r->o->seq, S = r->val.S;
  r->val.pos = 0;
  double sum = 0;
  int64_t count = 0;
  lt_tensor *h = NULL, *c = NULL;
  int64_t *x = malloc(sizeof *x * (size_t)(T * S)), *y = malloc(sizeof *y * (size_t)(T * S));
  if (!x || !y) return free(x), free(y), lt_error_set(LT_ERR_NOMEM, "char_lstm: evaluation buffers");
  lt_status s = LT_OK;
  while (r->val.pos + T <= r->val.len) {
    lt_scope *sc = lt_scope_begin();
    next_chunk(&r->val, T, x, y);
    lt_tensor *xt = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(T, S), x);
    lt_tensor *yt = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(T, S), y);
    lt_tensor *hn = NULL, *cn = NULL;
    lt_tensor *logits = xt && yt ? model_forward(r->m, xt, h, c, &hn, &cn) : NULL;
    lt_tensor *loss = logits ? lt_cross_entropy(logits, yt, NULL) : NULL;
    double v = 0;
    if (!loss || (s = lt_item(loss, &v)) != LT_OK) {
      s = lt_last_status();
      lt_scope_end(sc);
      break;
    }
    sum += v * (double)(T * S), count += T * S;
    keep_state(&h, hn), keep_state(&c, cn);
    lt_scope_end(sc);
  }
  lt_tensor_free(h), lt_tensor_free(c);
  free(x), free(y);
  ev->values[0] = count ? sum / (double)count : NAN;
  return s;
}

/* ---- sampling ---------------------------------------------------------------- */

static void sample(const model *m, const text *tx, int64_t n, lt_generator *g) {
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *h = NULL, *c = NULL;
  int64_t id = 0;
  for (int64_t i = 0; i < tx->V; i++)
    if (tx->alphabet[i] == '\n') id = i;
  printf("sample:\n");
  for (int64_t k = 0; k < n; k++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1, 1), &id);
    lt_tensor *hn = NULL, *cn = NULL;
    lt_tensor *logits = x ? model_forward(m, x, h, c, &hn, &cn) : NULL;
    lt_tensor *p = logits ? lt_softmax(lt_reshape(logits, LT_SHAPE(1, tx->V)), -1) : NULL;
    lt_tensor *next = p ? lt_multinomial(g, p, 1, true) : NULL;
    if (!next) die("sampling");
    id = ((const int64_t *)next->data)[0];
    keep_state(&h, hn), keep_state(&c, cn);
    lt_scope_end(sc);
    putchar(tx->alphabet[id]);
  }
  printf("\n");
  lt_tensor_free(h), lt_tensor_free(c);
  lt_set_grad_enabled(prev);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv) {
  const opts o = parse(argc, argv);
  signal(SIGXFSZ, SIG_IGN);
  if (o.threads > 0) TRY(lt_set_num_threads((int)o.threads));
  text tx = load_text(o.data);
  const int64_t n_train = tx.n * 9 / 10, VS = 4;
  run r = {.o = &o};
  r.train = (streams){tx.ids, 0, o.batch, (n_train - 1) / o.batch, 0};
  r.val = (streams){tx.ids, n_train, VS, (tx.n - n_train - 1) / VS, 0};
  if (r.train.len < o.seq || r.val.len < o.seq) {
    fprintf(stderr, "char_lstm: '%s' (%lld bytes) is too short for %lld streams of %lld characters\n", o.data,
            (long long)tx.n, (long long)o.batch, (long long)o.seq);
    return 1;
  }
  r.x = malloc(sizeof *r.x * (size_t)(o.seq * o.batch)), r.y = malloc(sizeof *r.y * (size_t)(o.seq * o.batch));
  if (!r.x || !r.y) die("allocation");

  lt_generator *gen = lt_generator_new(o.seed);
  lt_params *params = lt_params_new();
  if (!gen || !params) die("setup");
  model m;
  lt_lstm_opts lo = LT_LSTM_DEFAULTS;
  lo.num_layers = o.layers;
  TRY(lt_embedding_init(&m.embed, params, "embed", tx.V, o.embed, -1, gen));
  TRY(lt_lstm_init(&m.lstm, params, "lstm", o.embed, o.hidden, &lo, gen));
  TRY(lt_linear_init(&m.head, params, "head", o.hidden, tx.V, true, gen));
  r.m = &m;
  printf("char_lstm: %s, %lld characters, alphabet %lld; B %lld, T %lld, E %lld, H %lld, layers %lld; "
         "%lld parameters; %d threads\n",
         o.data, (long long)tx.n, (long long)tx.V, (long long)o.batch, (long long)o.seq, (long long)o.embed,
         (long long)o.hidden, (long long)o.layers, (long long)lt_params_numel(params, false), lt_get_num_threads());

  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAM);
  oc.lr = o.lr;
  lt_optimizer *optim = lt_optimizer_new(params, &oc);
  if (!optim) die("optimizer");
  const lt_schedule sched = {.kind = LT_SCHED_CONSTANT, .base_lr = o.lr};
  static const lt_trainer_metric METRICS[] = {{"val_loss", NULL}};
  lt_trainer_config tc = LT_TRAINER_DEFAULTS;
  tc.params = params, tc.optim = optim, tc.optim_config = &oc, tc.schedule = &sched;
  tc.steps = o.steps, tc.clip = 1.0, tc.eval_every = o.eval_every, tc.no_ckpt = true;
  tc.n_metrics = 1, tc.metrics = METRICS;
  tc.progress = LT_TRAINER_PROGRESS_LINES, tc.log_every = 50;
  lt_trainer_hooks hooks = {.user = &r, .micro_batch = micro_batch, .evaluate = evaluate};
  lt_trainer *trainer = lt_trainer_new(&tc, &hooks);
  if (!trainer) die("trainer");
  lt_trainer_result res;
  TRY(lt_trainer_fit(trainer, &res));

  /* The final evaluation again, for the result line. */
  double val = NAN;
  lt_trainer_eval ev = {.step = res.step, .final = true, .values = &val};
  const bool prev = lt_set_grad_enabled(false);
  TRY(evaluate(&r, &ev));
  lt_set_grad_enabled(prev);
  if (o.sample > 0) sample(&m, &tx, o.sample, gen);
  printf("result: steps %lld ms_per_step %.3f val_loss %.4f\n", (long long)res.step,
         1e3 * res.train_seconds / (double)(res.step > 0 ? res.step : 1), val);

  lt_trainer_free(trainer);
  lt_optimizer_free(optim);
  lt_tensor_free(r.h), lt_tensor_free(r.c);
  lt_params_free(params);
  lt_generator_free(gen);
  free(r.x), free(r.y), free(tx.ids);
  return 0;
}
