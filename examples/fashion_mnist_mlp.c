/*
 * examples/fashion_mnist_mlp.c: the first model to build with libtensor, a
 * multilayer perceptron 784-256-128-100-10 with ReLU that classifies the
 * Fashion-MNIST images (28x28 grey-scale pictures of clothes, 10 classes).
 * docs/tutorial.md walks through this file from top to bottom.
 *
 * What it shows: a model as a plain C struct of layers whose parameters live
 * in one lt_params store, and its forward function; everything else is the
 * library's run of a classifier (train/classify.h): the command line, the
 * data, mini-batches shuffled from a seeded generator whose position goes
 * into checkpoints, the loss of a mini-batch handed to the training loop
 * (train/trainer.h: the step inside an lt_scope, so no intermediate needs a
 * free of its own, the progress line, a metrics CSV, checkpoints, resume and
 * Ctrl-C), an optimizer (AdamW, or SGD with momentum) with a warmup + cosine
 * learning-rate schedule, evaluation under no-grad in evaluation mode; and
 * one exit code per outcome (lt_classify_main: main is one call). The CNN
 * (cnn_fashion_mnist.c) shares all of it and differs only in its model.
 *
 * What it is not: a benchmark of the best Fashion-MNIST model (a CNN does
 * better than an MLP's ~0.89).
 *
 * Data: Debian's dataset-fashion-mnist package (apt-get install
 * dataset-fashion-mnist), or --data DIR with the four *-ubyte.gz files.
 *
 *   fashion_mnist_mlp                      # the full run (10 epochs, AdamW)
 *   fashion_mnist_mlp --max-steps 300      # a quick check that it learns
 *   fashion_mnist_mlp --optim sgd --lr 0.05
 *   fashion_mnist_mlp --dir run            # checkpoints every epoch and run/metrics.csv
 *   fashion_mnist_mlp --dir run --resume   # continue from run's newest checkpoint
 *   mpirun -np 2 fashion_mnist_mlp --batch 64   # 2 ranks x 64 rows of each batch of 128
 */
#include <libtensor/libtensor.h>
#include <libtensor/nn/nn.h>

#include <stdio.h>

/* ---- the model ------------------------------------------------------------ */

#define N_LAYERS 4
static const int64_t layer_sizes[N_LAYERS + 1] = {784, 256, 128, 100, 10};

typedef struct mlp {
  lt_linear_m fc[N_LAYERS]; /* fc[i].weight [out, in], fc[i].bias [out], borrowed from the store */
} mlp;

/* Registers "fc1.weight", "fc1.bias", ... "fc4.bias" in params, initialised as
 * PyTorch's nn.Linear (Kaiming-uniform weights, uniform biases) from g. */
static lt_status mlp_init(mlp *m, lt_params *params, lt_generator *g) {
  for (int i = 0; i < N_LAYERS; i++) {
    char name[16];
    snprintf(name, sizeof name, "fc%d", i + 1);
    lt_status st = lt_linear_init(&m->fc[i], params, name, layer_sizes[i], layer_sizes[i + 1], true, g);
    if (st != LT_OK) return st;
  }
  return LT_OK;
}

/* x [B, 784] -> logits [B, 10]. Every intermediate is a new tensor owned by
 * the caller's open scope. An error anywhere makes the rest of the chain
 * return NULL too, keeping the first message, so one check at the end is
 * enough. */
static lt_tensor *mlp_forward(const mlp *m, const lt_tensor *x) {
  lt_tensor *h = lt_linear_forward(&m->fc[0], x);                             /* [B, 256] */
  for (int i = 1; i < N_LAYERS; i++) h = lt_linear_forward(&m->fc[i], lt_relu(h)); /* ... [B, 10] */
  return h;
}

/* ---- the run: the library's (train/classify.h) ---------------------------- */

static lt_tensor *forward(void *m, const lt_tensor *x) { return mlp_forward(m, x); }

static lt_status init(void *m, lt_params *p, lt_generator *g) { return mlp_init(m, p, g); }

int main(int argc, char **argv) {
  mlp model;
  lt_classify_opts opt = LT_CLASSIFY_DEFAULTS("fashion_mnist_mlp", 10);
  const lt_classify_model spec = {.model = &model, .init = init, .forward = forward, .name = "MLP 784-256-128-100-10"};
  return lt_classify_main(argc, argv, &opt, &spec);
}
