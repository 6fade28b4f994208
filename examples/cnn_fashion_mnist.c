/*
 * examples/cnn_fashion_mnist.c: a convolutional network on Fashion-MNIST,
 * the CNN of issue 18, on the library's training loop (train/trainer.h):
 *
 *   conv 3x3 1->16 (pad 1) -> BatchNorm2d -> ReLU -> max pool 2   [B, 16, 14, 14]
 *   conv 3x3 16->32 (pad 1) -> BatchNorm2d -> ReLU -> max pool 2  [B, 32, 7, 7]
 *   flatten -> linear 1568->128 -> ReLU -> linear 128->10
 *
 * What it shows: lt_conv2d_m and lt_max_pool2d (nn/conv.h) in a model that
 * is a plain struct of layers; the rest (command line, data loader with its
 * checkpointed position, the trainer hooks, evaluation, resume, metrics CSV,
 * Ctrl-C) is the library's run of a classifier (train/classify.h), shared
 * with the MLP example (examples/fashion_mnist_mlp.c, docs/tutorial.md), so
 * only the model differs. bench/cnn_fashion_mnist_torch.py is the same run in PyTorch
 * (same configuration, seed handling and data order: a permutation per
 * epoch, batches of 128, AdamW 1e-3 with warmup + cosine).
 *
 * BatchNorm2d is composed here from lt_ ops (batch statistics in training,
 * running statistics, momentum 0.1, eps 1e-5, in evaluation, as PyTorch's),
 * with the running statistics as buffers under PyTorch's names
 * (bn1.running_mean, bn1.running_var); it moves to the library's BatchNorm
 * when that lands.
 *
 * Data: Debian's dataset-fashion-mnist package, or --data DIR.
 *
 *   cnn_fashion_mnist --epochs 3            # the measured run (docs/vision.md)
 *   cnn_fashion_mnist --max-steps 100       # a quick check that it learns
 *   cnn_fashion_mnist --dir run [--resume]  # checkpoints, metrics.csv, resume
 */
#include <libtensor/libtensor.h>
#include <libtensor/nn/nn.h>
#include <libtensor/nn/conv.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- error handling: a program may exit, the library never does ---------- */

static _Noreturn void die(const char *what) {
  fprintf(stderr, "cnn_fashion_mnist: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()),
          lt_last_error());
  exit(1);
}
#define TRY(expr)                              \
  do {                                         \
    if ((expr) != LT_OK) die(#expr);           \
  } while (0)

/* ---- the model ------------------------------------------------------------ */

/* BatchNorm2d over [B, C, H, W]: weight/bias [C] (parameters), running_mean /
 * running_var [C] (buffers). */
typedef struct bn2d {
  lt_tensor *weight, *bias, *running_mean, *running_var;
} bn2d;

static lt_status bn_init(bn2d *m, lt_params *p, const char *name, int64_t C) {
  char n[64];
  const int64_t shape[1] = {C};
  lt_tensor *t[4] = {lt_tensor_keep(lt_ones(LT_DTYPE_F32, 1, shape)), lt_tensor_keep(lt_zeros(LT_DTYPE_F32, 1, shape)),
                     lt_tensor_keep(lt_zeros(LT_DTYPE_F32, 1, shape)), lt_tensor_keep(lt_ones(LT_DTYPE_F32, 1, shape))};
  const char *leaf[4] = {"weight", "bias", "running_mean", "running_var"};
  const unsigned flags[4] = {LT_PARAM_NO_DECAY, LT_PARAM_NO_DECAY, LT_PARAM_BUFFER, LT_PARAM_BUFFER};
  for (int i = 0; i < 4; i++) {
    snprintf(n, sizeof n, "%s.%s", name, leaf[i]);
    lt_status s = t[i] ? lt_params_add(p, n, t[i], flags[i]) : lt_last_status();
    if (s != LT_OK) return s;
  }
  m->weight = t[0], m->bias = t[1], m->running_mean = t[2], m->running_var = t[3];
  return LT_OK;
}

/* y = (x - mean) / sqrt(var + eps) * weight + bias, per channel: the batch's
 * biased statistics in training (and the running ones updated with momentum
 * 0.1, the variance unbiased, as PyTorch), the running ones in evaluation. */
static lt_tensor *bn_forward(const bn2d *m, const lt_tensor *x, bool training) {
  const int64_t C = m->weight->shape[0], cshape[4] = {1, C, 1, 1};
  lt_tensor *mean, *var;
  if (training) {
    mean = lt_mean(x, LT_DIMS(0, 2, 3), true);      /* [1, C, 1, 1] */
    var = lt_var(x, LT_DIMS(0, 2, 3), false, true);
    if (!mean || !var) return NULL;
    const double n = (double)(x->numel / C), mom = 0.1;
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *rm = lt_view(m->running_mean, 4, cshape), *rv = lt_view(m->running_var, 4, cshape);
    lt_status s = rm && rv ? LT_OK : lt_last_status();
    if (s == LT_OK) s = lt_mul_scalar_(rm, 1 - mom);
    if (s == LT_OK) s = lt_add_(rm, lt_mul_scalar(mean, mom));
    if (s == LT_OK) s = lt_mul_scalar_(rv, 1 - mom);
    if (s == LT_OK) s = lt_add_(rv, lt_mul_scalar(var, mom * n / (n - 1)));
    lt_set_grad_enabled(prev);
    if (s != LT_OK) return NULL;
  } else {
    mean = lt_view(m->running_mean, 4, cshape);
    var = lt_view(m->running_var, 4, cshape);
  }
  lt_tensor *xhat = lt_mul(lt_sub(x, mean), lt_rsqrt(lt_add_scalar(var, 1e-5)));
  return lt_add(lt_mul(xhat, lt_view(m->weight, 4, cshape)), lt_view(m->bias, 4, cshape));
}

typedef struct cnn {
  lt_conv2d_m conv1, conv2; /* [16, 1, 3, 3], [32, 16, 3, 3] */
  bn2d bn1, bn2;
  lt_linear_m fc1, fc2;     /* [128, 1568], [10, 128] */
  const lt_params *params;  /* borrowed: its train/eval mode */
} cnn;

/* Registers conv1.*, bn1.*, conv2.*, bn2.*, fc1.*, fc2.* (PyTorch's names and
 * default initialisation, in PyTorch's order, from g). */
static lt_status cnn_init(cnn *m, lt_params *p, lt_generator *g) {
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  o.padding[0] = o.padding[1] = 1;
  lt_status s;
  m->params = p;
  if ((s = lt_conv2d_init(&m->conv1, p, "conv1", 1, 16, 3, 3, &o, true, g)) != LT_OK) return s;
  if ((s = bn_init(&m->bn1, p, "bn1", 16)) != LT_OK) return s;
  if ((s = lt_conv2d_init(&m->conv2, p, "conv2", 16, 32, 3, 3, &o, true, g)) != LT_OK) return s;
  if ((s = bn_init(&m->bn2, p, "bn2", 32)) != LT_OK) return s;
  if ((s = lt_linear_init(&m->fc1, p, "fc1", 32 * 7 * 7, 128, true, g)) != LT_OK) return s;
  return lt_linear_init(&m->fc2, p, "fc2", 128, 10, true, g);
}

/* x [B, 784] -> logits [B, 10]. Intermediates belong to the open scope; a
 * failure anywhere gives NULL with the first message. */
static lt_tensor *cnn_forward(const cnn *m, const lt_tensor *x, bool training) {
  const lt_pool_opts pool = LT_POOL_OPTS(2, 2);
  lt_tensor *h = lt_view(x, 4, (const int64_t[]){x ? x->shape[0] : 0, 1, 28, 28});
  h = lt_max_pool2d(lt_relu(bn_forward(&m->bn1, lt_conv2d_forward(&m->conv1, h), training)), &pool, NULL);
  h = lt_max_pool2d(lt_relu(bn_forward(&m->bn2, lt_conv2d_forward(&m->conv2, h), training)), &pool, NULL);
  h = lt_relu(lt_linear_forward(&m->fc1, lt_flatten(h, 1, -1))); /* [B, 128] */
  return lt_linear_forward(&m->fc2, h);
}

/* ---- the run: the library's (train/classify.h) ---------------------------- */

static lt_tensor *forward(void *m, const lt_tensor *x) {
  const cnn *c = m;
  return cnn_forward(c, x, lt_params_training(c->params));
}

int main(int argc, char **argv) {
  lt_classify_opts opt = LT_CLASSIFY_DEFAULTS("cnn_fashion_mnist", 3);
  if (lt_classify_parse_args(&opt, argc, argv) != LT_OK) {
    if (!opt.help) fprintf(stderr, "cnn_fashion_mnist: %s\n", lt_last_error());
    lt_classify_usage(&opt, opt.help ? stdout : stderr);
    return opt.help ? 0 : 2;
  }
  signal(SIGXFSZ, SIG_IGN); /* a file over the size limit is a write error, not a kill */
  lt_classify_data data;
  if (lt_classify_load_fashion_mnist(opt.data, &data) != LT_OK) {
    fprintf(stderr, "cnn_fashion_mnist: %s\n(install Debian's dataset-fashion-mnist package or pass --data DIR)\n",
            lt_last_error());
    return 1;
  }
  lt_generator *gen = lt_generator_new(opt.seed); /* initialisation; the loader shuffles from its own */
  lt_params *params = lt_params_new();
  cnn model;
  if (!gen || !params) die("setup");
  TRY(cnn_init(&model, params, gen));
  lt_classifier clf = {&model, forward, params, "CNN conv16-bn-pool conv32-bn-pool fc128 fc10"};
  lt_classify_result res;
  if (lt_classify_fit(&clf, &data, &opt, stdout, &res) != LT_OK) die("training");
  lt_params_free(params);
  lt_generator_free(gen);
  lt_classify_data_free(&data);
  return res.end == LT_TRAINER_DONE ? 0 : 128 + res.stop_reason;
}
