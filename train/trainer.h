/*
 * train/trainer.h: the training loop as a library module. The model's code
 * supplies its part through hooks (a micro-batch's loss, an evaluation, its
 * own checkpoint values); the trainer owns the rest:
 *   - the step: gradient accumulation over micro-batches, the non-finite
 *     skip (a NaN/Inf loss or gradient norm skips the update; too many in a
 *     row stop the run), global-norm clipping, the schedule's learning rate
 *     and the optimizer step, each step inside one lt_scope;
 *   - the cadence: evaluation every N steps and a full one at the end,
 *     checkpoints every N steps and at the end, keeping the newest N;
 *   - the run directory: numbered checkpoints "<prefix>-<step>.h5", resume
 *     from the newest, the metrics CSV (one row per step, rewritten
 *     atomically up to the resumed step), the progress line;
 *   - stop requests: lt_trainer_request_stop (async-signal-safe), and an
 *     opt-in helper that installs SIGINT/SIGTERM handlers calling it; a stop
 *     saves a checkpoint and returns;
 *   - the data loader's position, the token counter and the training time in
 *     the checkpoint (keys below), range-checked on resume;
 *   - the choice between all cores and one thread (lt_autothreads, tensor.h).
 * The split follows Keras' Model.fit and Lightning's Trainer: the model gives
 * the step's loss, the trainer the loop. docs/trainer.md shows a complete
 * program (examples/fashion_mnist_mlp.c uses it; so does
 * models/transformer/programs/train_main.c).
 *
 * What this is not: a model builder (the caller passes its parameters,
 * optimizer, schedule and generators, all borrowed), a data pipeline (the
 * micro-batch hook fetches its own batches), or a scheduler of threads:
 * everything runs in the calling thread, and one process trains one trainer
 * at a time (the stop request is process-wide, as a signal is).
 *
 * Several processes (mpirun -np N, dist/dist.h; docs/distributed.md): when
 * lt_dist_size() > 1 the trainer checks at the first fit that every rank has
 * the same steps, accum, clip, optimizer and model size, broadcasts rank 0's
 * parameters, agrees at every step on the loss (mean over ranks), tokens
 * (sum), finiteness and stop requests, and averages the gradients in
 * buckets that start during the last micro-batch's backward (lt_dist_grads;
 * the micro-batches before it send nothing); rank 0 alone prints, writes the
 * CSV and saves checkpoints (after checking that every rank's parameters
 * equal its own). The generators (dropout) become each rank's own stream at
 * the first fit (seed lt_dist_rank_seed(seed): rank 0 keeps its own);
 * every rank's state is saved (keys "dist.gen.<rank>.<name>.seed/offset")
 * and restored by resume with the same N; a rank the checkpoint has no state
 * for starts from the saved state with its own seed. The hooks shard their batches
 * (lt_dist_shard) and reduce their evaluations; fit, save and resume are
 * then collective: every rank calls them, in the same order.
 *
 * Errors follow tensor/tensor.h: every function returns an lt_status with a
 * message in lt_last_error() naming what failed (the file, the key, the
 * value and its range). A hook that fails returns its status with its own
 * message set (any lt_ call's, or lt_error_set's); the trainer returns it
 * unchanged after cleaning up the step. The trainer never exits and never
 * prints to stderr; it prints the progress line, skipped steps, evaluations
 * and thread switches to the configured stream (stdout by default).
 */
#ifndef LT_TRAINER_H
#define LT_TRAINER_H

#include <stdio.h>

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Checkpoint keys the trainer writes into /extra (one home for each name)  */
/* ======================================================================== */

#define LT_TRAINER_KEY_LOADER_EPOCH "loader.epoch"             /* int: the loader's 0-based epoch */
#define LT_TRAINER_KEY_LOADER_INDEX "loader.index"             /* int: batches returned in that epoch */
#define LT_TRAINER_KEY_LOADER_SEED "loader.seed"               /* int: its generator's seed (bits of a u64) */
#define LT_TRAINER_KEY_LOADER_OFFSET "loader.offset"           /* int: its generator's offset (bits of a u64) */
#define LT_TRAINER_KEY_LOADER_FINGERPRINT "loader.fingerprint" /* int: the data's fingerprint (bits of a u64) */
#define LT_TRAINER_KEY_TOKENS "run.tokens"                     /* int: tokens trained on, all processes */
#define LT_TRAINER_KEY_TRAIN_SECONDS "run.train_seconds"       /* double: time in training steps */
#define LT_TRAINER_KEY_BAD_STREAK "run.bad_streak"             /* int: non-finite steps in a row */
#define LT_TRAINER_KEY_RANKS "dist.ranks"                    /* int: ranks that trained it (dist/dist.h; absent: 1) */

/* The largest accumulation count the trainer accepts. */
#define LT_TRAINER_MAX_ACCUM ((int64_t)1 << 20)

/* ======================================================================== */
/* Hooks: the model's part                                                  */
/* ======================================================================== */

/* One micro-batch, passed to the micro_batch hook. The trainer fills the
 * first block; the hook fills the second. */
typedef struct lt_trainer_micro {
  int64_t step;     /* the optimizer step being made, 1-based */
  int64_t index;    /* this micro-batch, in [0, accum) */
  int64_t accum;    /* micro-batches in the step */
  bool forward;     /* false: an earlier micro-batch of this step was non-finite; consume the
                       batch (so the data order stays that of a clean run), set tokens, no loss */
  /* set by the hook */
  lt_tensor *loss;  /* the scalar loss, made inside the step's scope (the trainer's lt_scope
                       frees it); the trainer calls lt_backward(loss * weight) */
  double weight;    /* its weight in the step's gradient and in the reported loss: 1/accum for
                       equal micro-batches, or this batch's share of the step's tokens */
  int64_t tokens;   /* work units of this micro-batch (tokens, examples) for throughput and the
                       token counter; set also when !forward */
} lt_trainer_micro;

/* One evaluation, passed to the evaluate hook. */
typedef struct lt_trainer_eval {
  int64_t step;       /* optimizer steps done */
  bool final;         /* the end of the run (the hook may evaluate more data, keep outputs, ...) */
  double *values;     /* out: values[i] of metric i of lt_trainer_config.metrics; NAN (preset)
                         leaves the CSV field empty */
  bool interrupted;   /* out: a stop request cut it short: nothing is printed or written */
  double seconds;     /* set by the trainer after the hook: the evaluation's wall time */
} lt_trainer_eval;

/* A metric the evaluate hook returns: a CSV column and a part of the
 * evaluation line. */
typedef struct lt_trainer_metric {
  const char *name;        /* CSV column name, e.g. "val_loss" (borrowed, static) */
  const char *csv_format;  /* printf format of the value in the CSV; NULL: "%.9g" */
} lt_trainer_metric;

/* The model's part. Only micro_batch is required; every other hook may be
 * NULL. Each is called with user as its first argument, from the thread that
 * called lt_trainer_fit, and returns LT_OK or an error status with its
 * message set. */
typedef struct lt_trainer_hooks {
  void *user;
  /* Required. Fetches the next micro-batch and (if m->forward) runs the
   * forward pass in training mode, setting m->loss, m->weight, m->tokens.
   * Called accum times per step, inside the step's lt_scope, after
   * begin_step. */
  lt_status (*micro_batch)(void *user, lt_trainer_micro *m);
  /* Optional. Called at the start of each step inside its scope, before the
   * micro-batches: a hook that weights micro-batches by their share of the
   * step's tokens fetches them all here. step is 1-based. */
  lt_status (*begin_step)(void *user, int64_t step, int64_t accum);
  /* Optional. Evaluates the model (under lt_set_grad_enabled(false), which
   * the trainer sets) and fills ev->values. Should check
   * lt_trainer_stop_requested() between batches and set ev->interrupted.
   * Ownership: the trainer opens an lt_scope around the call, so every tensor
   * the hook makes and does not free is released when it returns (memory is
   * flat from one evaluation to the next); lt_tensor_keep takes out one to
   * keep. A hook that loops over many batches itself should open an lt_scope
   * per batch (as lt_classify_evaluate does), or else the whole evaluation's
   * intermediates live until it returns; eval_batch below does that for it.
   * With eval_batch set, evaluate runs after the last batch (in the same
   * evaluation scope) to turn the sums into ev->values, and may be NULL. */
  lt_status (*evaluate)(void *user, lt_trainer_eval *ev);
  /* Optional. Writes the evaluation line's text after "validation at step N: "
   * into buf (size bytes, NUL-terminated); the trainer adds " [duration]".
   * NULL: "name value" pairs of the metrics. */
  void (*eval_line)(void *user, const lt_trainer_eval *ev, char *buf, size_t size);
  /* Optional. Adds the caller's own values (tokenizer, class names,
   * settings) to a checkpoint's extra map before the trainer's keys. */
  lt_status (*save_extra)(void *user, lt_ckpt_meta *extra);
  /* Optional. Reads the caller's values back (lt_trainer_resume), after the
   * trainer's own state is restored. extra is borrowed for the call. */
  lt_status (*load_extra)(void *user, const lt_ckpt_meta *extra);
  /* Optional, together: the data loader's position (saved under the
   * loader.* keys, restored on resume) and its batches per epoch (for the
   * epoch column and the range check on resume). Without them the epoch
   * column is 0 and no loader.* keys are written. */
  lt_loader_position (*get_position)(void *user);
  lt_status (*set_position)(void *user, lt_loader_position pos);
  int64_t (*batches_per_epoch)(void *user);
  /* Optional: one evaluation batch, the loop written by the trainer. Called
   * with batch = 0, 1, ... each inside its own lt_scope (every tensor made in
   * it is released after the call) under no-grad, until it sets *more =
   * false or returns an error; the trainer checks lt_trainer_stop_requested()
   * before each batch and sets ev->interrupted. Accumulate sums in user's
   * state (reset them at batch 0), then write ev->values here at the last
   * batch or in evaluate. *more is preset to false. */
  lt_status (*eval_batch)(void *user, lt_trainer_eval *ev, int64_t batch, bool *more);
} lt_trainer_hooks;

/* ======================================================================== */
/* Configuration                                                            */
/* ======================================================================== */

typedef enum {
  LT_TRAINER_PROGRESS_AUTO,   /* redraw one line in place on a terminal, else lines */
  LT_TRAINER_PROGRESS_LINES,  /* a line every log_every steps (and at the last step) */
  LT_TRAINER_PROGRESS_REDRAW, /* one line redrawn in place with \r */
  LT_TRAINER_PROGRESS_OFF,    /* no progress line (skips, evaluations still print) */
} lt_trainer_progress;

typedef struct lt_trainer_config {
  /* The model's state: borrowed, must outlive the trainer. */
  lt_params *params;                     /* required */
  lt_optimizer *optim;                   /* required */
  const lt_optim_config *optim_config;   /* required: the optimizer's kind and hyperparameters */
  const lt_schedule *schedule;           /* required: the learning rate of step s is lt_schedule_lr(schedule, s) */
  int n_generators;                      /* generators saved and restored by name (dropout, ...) */
  const char *const *generator_names;
  lt_generator *const *generators;
  const lt_ckpt_meta *model_config;      /* saved as each checkpoint's configuration; may be NULL */
  /* The step. */
  int64_t steps;          /* optimizer steps of the whole run (>= 1) */
  int64_t accum;          /* micro-batches per step, 1..LT_TRAINER_MAX_ACCUM */
  double clip;            /* clip the global gradient norm to this (0: off; the norm is still measured) */
  int64_t max_nonfinite;  /* stop after this many non-finite steps in a row (>= 1) */
  /* The cadence. */
  int64_t eval_every;     /* evaluate every N steps (0: only at the end; needs the evaluate hook) */
  int64_t ckpt_every;     /* save every N steps (0: only at the end and on a stop) */
  int64_t keep;           /* keep the newest N checkpoints (0: all) */
  int64_t stop_after;     /* stop after this step with a checkpoint, as a stop request would (0: off) */
  /* Files. */
  const char *dir;        /* run directory: checkpoints (and metrics.csv); NULL: none of either */
  const char *ckpt_prefix;/* numbered checkpoints "<prefix>-<step>.h5"; NULL: "ckpt" */
  bool no_ckpt;           /* write no checkpoint (the CSV is still written) */
  const char *csv_path;   /* metrics CSV; NULL: <dir>/metrics.csv (none without dir) */
  const lt_ckpt_load_opts *load_opts; /* lt_trainer_resume's checks (memory cap, unchecksummed files);
                                       * NULL: LT_CKPT_LOAD_DEFAULTS. Borrowed. */
  /* Metrics of the evaluate hook: CSV columns between elapsed_s and rss_mb. */
  int n_metrics;
  const lt_trainer_metric *metrics;
  /* Output. */
  FILE *out;              /* progress, skipped steps, evaluations; NULL: stdout */
  lt_trainer_progress progress;
  int64_t log_every;      /* LINES: a progress line every N steps (>= 1) */
  bool auto_threads;      /* choose between lt_get_num_threads() and 1 as it goes (lt_autothreads) */
  /* Data parallelism (dist/dist.h). */
  int zero;               /* 1: ZeRO-1 with several ranks: each rank keeps the optimizer state of its
                             1/N of the parameters only, updates them and broadcasts them
                             (lt_dist_zero); checkpoints gather the state to rank 0 (the same file
                             as without it). 0 (default): every rank updates every parameter. */
  /* Token shards (datasets.h's lt_shard_loader). */
  lt_shard_loader *shards; /* borrowed, may be NULL: the training loader when it is one; the trainer then
                              saves and restores its position (the loader.* keys) and reads its batches per
                              epoch itself, without the get_position / set_position / batches_per_epoch
                              hooks (giving both is an error). The micro_batch hook still fetches the
                              batches (lt_shard_loader_next). */
  /* Mixed precision (docs/mixed-precision.md). */
  lt_dtype autocast;      /* LT_DTYPE_BF16: the trainer turns autocast on (lt_set_autocast) for every
                             step (forward and backward) and evaluation, and restores the caller's mode
                             after each; LT_DTYPE_F32 (default): it leaves the mode as the caller set it
                             (wrapping lt_trainer_fit in lt_set_autocast(LT_DTYPE_BF16) is the same).
                             Parameters, gradients and optimizer state stay f32 either way. */
} lt_trainer_config;

/* Defaults: no model state (set params, optim, optim_config, schedule), 1
 * step, no accumulation, clip 1.0, max_nonfinite 5, evaluation and
 * checkpoints only at the end, keep 3, no directory, progress AUTO every 100
 * steps, no automatic threads. */
#define LT_TRAINER_DEFAULTS                                                                 \
  ((lt_trainer_config){.steps = 1, .accum = 1, .clip = 1.0, .max_nonfinite = 5, .keep = 3,      \
                       .progress = LT_TRAINER_PROGRESS_AUTO, .log_every = 100,                   \
                       .autocast = LT_DTYPE_F32})

/* ======================================================================== */
/* The trainer                                                              */
/* ======================================================================== */

typedef struct lt_trainer lt_trainer;

/* How lt_trainer_fit ended. */
typedef enum {
  LT_TRAINER_DONE,        /* all steps made; the final evaluation and checkpoint are done */
  LT_TRAINER_STOPPED,     /* stop_after reached: checkpoint saved */
  LT_TRAINER_INTERRUPTED, /* lt_trainer_request_stop: checkpoint saved */
  LT_TRAINER_NONFINITE,   /* max_nonfinite non-finite steps in a row (the status is LT_ERR_NUMERIC) */
  LT_TRAINER_FAILED,      /* an error (a hook's, a file's): the status says which */
} lt_trainer_end;

typedef struct lt_trainer_result {
  lt_trainer_end end;
  int stop_reason;           /* INTERRUPTED: the value given to lt_trainer_request_stop (a signal number) */
  int64_t step;              /* optimizer steps done, including skipped ones */
  int64_t start_step;        /* where this process started (the resumed step, or 0) */
  int64_t tokens;            /* work units trained on, all processes */
  double train_seconds;      /* time in training steps, all processes */
  int64_t bad_streak;        /* non-finite steps in a row at the end */
  const char *last_checkpoint; /* the newest checkpoint written or loaded ("" if none); valid until lt_trainer_free */
  const char *csv_path;      /* the metrics CSV ("" if none); valid until lt_trainer_free */
} lt_trainer_result;

/* Checks cfg and returns a new trainer (free with lt_trainer_free) at step 0.
 * cfg and hooks are copied; what they point to is borrowed (strings too).
 * NULL with LT_ERR_NULL / LT_ERR_INVALID naming the field and its range. */
LT_API lt_trainer *lt_trainer_new(const lt_trainer_config *cfg, const lt_trainer_hooks *hooks);
LT_API void lt_trainer_free(lt_trainer *t); /* NULL is a no-op; closes the CSV */

/* Restores a training checkpoint written by a trainer: the parameters,
 * optimizer state and learning rate, the generators, the step, the token
 * counter, the training time, the non-finite streak, the loader position
 * (set_position) and then the caller's values (load_extra). The schedule is
 * not read from the file: the configured one is used, so a resumed run may
 * change its total steps. Every restored counter is range-checked (step in
 * [0, steps], loader epoch >= 0 and index in [0, batches per epoch], tokens
 * and train seconds finite and >= 0, streak in [0, max_nonfinite)); an
 * error names the file, the key, the value and the range. The next
 * lt_trainer_fit rewrites the CSV up to the restored step. On failure the
 * trainer's counters are unchanged (the model state may be partly restored:
 * do not train on after a failed resume). */
LT_API lt_status lt_trainer_resume(lt_trainer *t, const char *path);

/* Trains from the current step to cfg.steps (or to a stop), then runs the
 * final evaluation and saves the final checkpoint. Opens the CSV on its
 * first call (new with its header; after lt_trainer_resume, the existing
 * file's rows up to the resumed step, rewritten atomically: a kill at any
 * moment leaves a complete CSV). Fills *result (may be NULL) in every case.
 * Returns LT_OK for DONE, STOPPED and INTERRUPTED; LT_ERR_NUMERIC for
 * NONFINITE; else the failing status: a hook's, LT_ERR_IO for a CSV or
 * checkpoint write (disk full, file too large: the previous checkpoints
 * stay), ... A stop request between steps (or during an evaluation, which
 * is then not reported) ends the run after the current step. After an
 * error, do not call it again. */
LT_API lt_status lt_trainer_fit(lt_trainer *t, lt_trainer_result *result);

/* Saves a checkpoint of the current step now (rotating to cfg.keep), unless
 * no_ckpt or no dir. fit calls it on its cadence; a program may call it
 * between fits. */
LT_API lt_status lt_trainer_save(lt_trainer *t);


/* seconds as the progress line writes durations ("12.3s", "4m05s",
 * "1h02m"; "?" if negative, NaN or absurd) into buf (size bytes); returns
 * buf. For a program's own summary lines. */
LT_API char *lt_trainer_fmt_duration(double seconds, char *buf, size_t size);

/* Optimizer steps done so far (the restored step after lt_trainer_resume). */
LT_API int64_t lt_trainer_step(const lt_trainer *t);

/* Clears the progress line if one is open on the output stream (call before
 * printing elsewhere, e.g. an error message from a hook). */
LT_API void lt_trainer_end_line(lt_trainer *t);

/* ======================================================================== */
/* Language modelling on token shards                                       */
/* ======================================================================== */

/* The model's logits [b, T, V] for the ids x [b, T] i64 (borrowed), made in
 * the caller's scope (lt_trainer_lm_evaluate opens one per batch); NULL with
 * the error set on failure. */
typedef lt_tensor *(*lt_trainer_lm_logits)(void *user, const lt_tensor *x);

typedef struct lt_trainer_lm_eval {
  double loss;       /* mean cross-entropy per target token (nats); NAN if none */
  double perplexity; /* exp(loss) */
  double token_acc;  /* argmax accuracy */
  double tokens;     /* target tokens evaluated, all ranks */
  bool interrupted;  /* a stop request cut it short (one process only: with several ranks it runs to the end) */
} lt_trainer_lm_eval;

/* The sums of one evaluation batch, added to sums: sums[0] += the summed
 * cross-entropy of logits(user, x) against the targets y (ignore index
 * LT_IGNORE_INDEX), sums[1] += the argmax hits, sums[2] += the targets.
 * x, y [b, T] (borrowed). The hook runs on slices of rows (lt_narrow of dim
 * 0), as many as keep at most 16 Mi logits alive at once (at least one row),
 * so a large evaluation batch of a large vocabulary never holds its b x T x V
 * logits. Call under no-grad. Errors: NULL arguments, LT_ERR_SHAPE (x and y
 * differ, or logits not [rows, T, V]), the hook's and the loss's. */
LT_API lt_status lt_trainer_lm_batch_sums(lt_trainer_lm_logits logits, void *user, const lt_tensor *x,
                                   const lt_tensor *y, double sums[3]);

/* Validation of any language model on token shards: every window of L (an
 * evaluation loader: no shuffle, no drop_last; rewound first) once, under
 * no-grad, each batch in its own lt_scope. With N ranks (L opened with
 * rank / world = lt_dist_rank() / lt_dist_size()) each rank reads and runs
 * its own rows of each batch (through lt_trainer_lm_batch_sums: the logits
 * of a few rows at a time), and the sums are reduced (lt_dist_allreduce_f64):
 * collective, every rank calls it. Errors: the loader's, the logits hook's
 * (LT_ERR_SHAPE if its logits are not [b, T, V]), the reduction's. */
LT_API lt_status lt_trainer_lm_evaluate(lt_shard_loader *L, lt_trainer_lm_logits logits, void *user,
                                 lt_trainer_lm_eval *out);

/* ======================================================================== */
/* Stop requests                                                            */
/* ======================================================================== */

/* Asks every running lt_trainer_fit of the process to stop after its
 * current step and save a checkpoint. reason != 0 (a signal number, or any
 * positive value); 0 clears the request. Async-signal-safe: it only stores
 * to a volatile sig_atomic_t. */
LT_API void lt_trainer_request_stop(int reason);
/* The pending request's reason, or 0. Async-signal-safe. */
LT_API int lt_trainer_stop_requested(void);
/* Opt-in: installs SIGINT and SIGTERM handlers that call
 * lt_trainer_request_stop(signal) and write "\n<program>: signal received:
 * stopping after this step and saving a checkpoint (again to quit at
 * once)\n" to stderr. One-shot (SA_RESETHAND): a second signal kills at
 * once (checkpoint saves are atomic, so no file is torn). program is copied
 * (up to 64 bytes); NULL: "libtensor". LT_ERR_IO if sigaction fails. */
LT_API lt_status lt_trainer_install_signal_handlers(const char *program);

/* ======================================================================== */
/* Run directories                                                          */
/* ======================================================================== */

/* Creates dir and its missing parents (mkdir -p). LT_ERR_IO naming the
 * directory that cannot be created. */
LT_API lt_status lt_trainer_make_dir(const char *dir);
/* The checkpoint a resume names: path_or_dir itself if it is a file, else
 * the newest numbered checkpoint of prefix in that directory whose integrity
 * check passes, into path (size bytes). LT_ERR_INVALID if path_or_dir does
 * not exist ("'<path>': <reason>"); LT_ERR_STATE if the directory holds no
 * valid checkpoint; LT_ERR_IO / LT_ERR_OVERFLOW from reading the directory
 * or a path that does not fit. */
LT_API lt_status lt_trainer_find_resume(const char *path_or_dir, const char *prefix, char *path, size_t size);
/* Deletes the numbered checkpoints of prefix in dir (starting a run over);
 * a missing dir is not an error. LT_ERR_IO naming a file that cannot be
 * deleted. */
LT_API lt_status lt_trainer_clear_dir(const char *dir, const char *prefix);

#ifdef __cplusplus
}
#endif
#endif /* LT_TRAINER_H */
