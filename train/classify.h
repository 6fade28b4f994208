/*
 * train/classify.h: the run of an image (or feature) classifier, so that a
 * program writes only its model. One home for what the Fashion-MNIST
 * examples (examples/fashion_mnist_mlp.c, cnn_fashion_mnist.c,
 * vit_fashion_mnist.c) share:
 *   - their command line (--data, --epochs, --batch, --max-steps, --optim,
 *     --lr, --weight-decay, --seed, --threads, --log-every, --dir, --resume,
 *     --precision), parsed without exiting;
 *   - the data: Fashion-MNIST normalised with the training set's mean and
 *     std, images [N, 784] f32 and labels [N] i64;
 *   - the shuffled mini-batches with their checkpointed position
 *     (lt_tensor_loader, datasets/datasets.h);
 *   - the trainer hooks of a classifier (train/trainer.h): the mean
 *     cross-entropy of a batch in training mode, the test accuracy (overall
 *     and per class) in evaluation mode (lt_params_train), the loader's
 *     position;
 *   - the run: AdamW (or SGD with Nesterov momentum) with linear warmup for
 *     total/50 steps then cosine decay to 1% at the last step, an evaluation
 *     and a checkpoint per epoch (the 2 newest kept), the metrics CSV, resume,
 *     Ctrl-C, and the summary line tests and scripts read.
 * docs/tutorial.md walks through a program built on it.
 *
 * What this is not: a model builder (the model's forward is the caller's
 * function) or a general data pipeline (the data is in memory). Nothing here
 * exits; the program decides what a failure does.
 *
 * Errors follow tensor/tensor.h: an lt_status and a message in
 * lt_last_error() naming the call, the flag or the tensor.
 */
#ifndef LT_CLASSIFY_H
#define LT_CLASSIFY_H

#include <stdio.h>

#include "datasets/datasets.h"
#include "nn/nn.h"
#include "tensor/tensor.h"
#include "train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-class accuracies are reported for at most this many classes. */
#define LT_CLASSIFY_MAX_CLASSES 100

/* The model: forward(model, x) returns logits [B, K] for x [B, ...] (rows of
 * the data), new and owned by the open scope. It follows params' mode
 * (lt_params_training: BatchNorm and dropout read it); the run switches it
 * to evaluation for the test set and back. All borrowed. */
typedef struct lt_classifier {
  void *model;
  lt_tensor *(*forward)(void *model, const lt_tensor *x);
  lt_params *params;      /* the model's parameters and buffers */
  const char *name;       /* one line for the banner ("CNN conv16-bn-pool ...") */
} lt_classifier;

/* The run's settings: the command line of the examples. */
typedef struct lt_classify_opts {
  const char *program;    /* the program's name, in messages and the usage text (borrowed) */
  const char *data;       /* the directory of the four *-ubyte.gz files */
  int epochs;
  int64_t batch;          /* training batch size */
  int64_t eval_batch;     /* evaluation batch size */
  int64_t max_steps;      /* stop after this many optimizer steps (0: all epochs) */
  int log_every;          /* progress line every N steps */
  double lr;              /* <= 0: 1e-3 for AdamW, 0.05 for SGD (lt_classify_fit and parse_args fill it in);
                             a program may set its own default before parse_args (the usage text shows it) */
  double weight_decay;    /* < 0: 0.01 for AdamW, 5e-4 for SGD */
  bool sgd;               /* SGD with Nesterov momentum 0.9 instead of AdamW */
  uint64_t seed;          /* the program's generator (initialisation) and the loader's */
  int threads;            /* 0: libtensor's default (LT_NUM_THREADS or all cores) */
  const char *dir;        /* run directory: checkpoints and metrics.csv (NULL: none) */
  bool resume;            /* continue from dir's newest checkpoint */
  bool help;              /* set by lt_classify_parse_args for --help / -h */
  const char *(*class_name)(int64_t label); /* for the per-class lines; NULL: "class <k>" */
  int64_t stop_after;     /* stop after this step with a checkpoint in dir, as Ctrl-C would (0: off) */
  bool bf16;              /* --precision bf16: the run (training and evaluation) under autocast
                           * (lt_set_autocast(LT_DTYPE_BF16): products in bf16 with f32 accumulation,
                           * weights, gradients, optimizer state and checkpoints f32;
                           * docs/mixed-precision.md). Not saved: give it again with --resume. */
  int zero;               /* --zero 1: under mpirun, ZeRO-1 (lt_trainer_config.zero: each rank keeps the
                           * optimizer state of its 1/N of the parameters; docs/distributed.md). 0: off */
} lt_classify_opts;

/* Defaults: Fashion-MNIST in LT_FASHION_MNIST_DIR with its class names,
 * batch 128, evaluation batch 1000, AdamW lr 1e-3 weight decay 0.01, seed
 * 42, a progress line every 100 steps, no directory, f32. */
#define LT_CLASSIFY_DEFAULTS(prog, n_epochs)                                                                  \
  ((lt_classify_opts){.program = (prog), .data = LT_FASHION_MNIST_DIR, .epochs = (n_epochs), .batch = 128, \
                      .eval_batch = 1000, .log_every = 100, .weight_decay = -1, .seed = 42, \
                      .class_name = lt_fashion_mnist_class_name})

/* Parses argv[1..argc) into *o (which holds the defaults). --help or -h sets
 * o->help and returns LT_ERR_INVALID; an unknown flag, a missing or bad value
 * or --resume without --dir returns LT_ERR_INVALID naming the flag. Fills in
 * the optimizer's default lr and weight decay. Strings in *o point into argv. */
LT_API lt_status lt_classify_parse_args(lt_classify_opts *o, int argc, char **argv);
/* Writes the usage text of the flags above to f. */
LT_API void lt_classify_usage(const lt_classify_opts *o, FILE *f);

/* The data of a run: all four new, owned by it (lt_classify_data_free). */
typedef struct lt_classify_data {
  lt_tensor *train_x, *train_y; /* [N, D] f32, [N] i64 */
  lt_tensor *test_x, *test_y;
} lt_classify_data;

/* Loads Fashion-MNIST (or MNIST) from dir: images [N, 784] normalised with
 * LT_FASHION_MNIST_MEAN / STD, labels [N] i64, made outside any scope. On
 * failure *d is all NULL and the error names the file. */
LT_API lt_status lt_classify_load_fashion_mnist(const char *dir, lt_classify_data *d);
LT_API void lt_classify_data_free(lt_classify_data *d); /* frees the four and NULLs them; NULL is a no-op */

/* The accuracy of m on (x [N, ...], y [N] integer), in batches of batch,
 * under no-grad and in evaluation mode (the previous grad and train modes
 * are restored). *accuracy gets correct / N; per_class[k] (if not NULL, of
 * n_classes entries) the accuracy on label k (0 if there is none). Labels
 * outside [0, n_classes) count as wrong and are left out of per_class.
 * LT_ERR_SHAPE if x and y differ in N or the logits are not [b, K]. */
LT_API lt_status lt_classify_evaluate(const lt_classifier *m, const lt_tensor *x, const lt_tensor *y, int64_t batch,
                               int64_t n_classes, double *accuracy, double *per_class);

/* What a run ended with. */
typedef struct lt_classify_result {
  lt_trainer_end end;       /* DONE, or how it stopped */
  int stop_reason;          /* INTERRUPTED: the signal */
  int64_t steps;            /* optimizer steps done */
  double train_seconds;
  double test_accuracy;     /* of the last evaluation (NaN if none ran) */
  double per_class[LT_CLASSIFY_MAX_CLASSES];
  int64_t n_classes;        /* per_class entries (the logits' width, capped) */
  double first_loss, last_loss; /* mean of the first and last 20 training losses of this process */
  double eval_seconds;      /* wall time of the last evaluation (the test set, in eval mode, no-grad) */
} lt_classify_result;

/* Trains m on d with the settings o and the library's trainer: prints the
 * banner (threads, data, lt_params_summary, optimizer), the progress and evaluation
 * lines, then the test accuracy, per-class accuracies and the line
 * "summary: steps=N first_loss=X last_loss=X test_accuracy=X train_seconds=X eval_seconds=X"
 * to out (NULL: stdout). With o->dir: checkpoints every epoch, metrics.csv,
 * resume if o->resume. With o->bf16 the run is under autocast and the
 * caller's autocast mode is restored at the end (without it the caller's mode
 * is left as it is); the banner names the bf16 path (lt_runtime_info.bf16_gemm).
 * Installs the SIGINT/SIGTERM handlers (a stop saves a checkpoint and
 * returns LT_OK with r->end INTERRUPTED). Sets the thread
 * count if o->threads > 0. Everything is borrowed; *r (may be NULL) is filled
 * in every case. */
LT_API lt_status lt_classify_fit(const lt_classifier *m, const lt_classify_data *d, const lt_classify_opts *o,
                          FILE *out, lt_classify_result *r);

/* A program's model for lt_classify_main: init fills in the caller's storage
 * (registering its parameters in p, drawn from g); forward and name are as
 * in lt_classifier. All borrowed. */
typedef struct lt_classify_model {
  void *model;
  lt_status (*init)(void *model, lt_params *p, lt_generator *g);
  lt_tensor *(*forward)(void *model, const lt_tensor *x);
  const char *name;
} lt_classify_model;

/* The whole run of a Fashion-MNIST example, so that its main() is one call:
 * lt_dist_init (mpirun -np N: N ranks train on slices of each batch; a plain
 * start is a world of one), the command line parsed into *o (which holds the
 * program's defaults: LT_CLASSIFY_DEFAULTS and any changes), the data
 * (o->data), a generator seeded with o->seed for the initialisation (the
 * loader shuffles from its own), the parameters, lt_classify_fit to stdout,
 * then everything freed and lt_dist_finalize after a finished run (after a
 * signal, mpirun is ending the job: it is left alone).
 * Never exits: returns the program's exit code. 0: done, stopped by --stop-after, or --help (usage
 * to stdout); 2: a bad command line (the message and the usage to stderr);
 * 1: no data or a failure (the message to stderr, as
 * "<program>: <what> failed: <STATUS>: <detail>"); 128 + the signal: stopped
 * by SIGINT/SIGTERM (a checkpoint is saved with --dir). Ignores SIGXFSZ (a
 * file over the size limit is a write error, not a kill). Everything borrowed;
 * argc and argv as main's. */
LT_API int lt_classify_main(int argc, char **argv, lt_classify_opts *o, const lt_classify_model *m);

#ifdef __cplusplus
}
#endif
#endif /* LT_CLASSIFY_H */
