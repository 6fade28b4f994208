/*
 * train/trainer_internal.h: the trainer object as the files of train/ see it
 * (train/trainer.c: the loop; train/trainer_ckpt.c: its checkpoints and
 * resume), and where the data loader stands. Not installed.
 */
#ifndef LT_TRAIN_TRAINER_INTERNAL_H
#define LT_TRAIN_TRAINER_INTERNAL_H

#include "train/trainer.h"

#include "dist/dist.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define LT__TRAINER_PATH_LEN 4096

/* Moving averages for the progress line and the CSV's tokens_per_s. */
typedef struct lt__trainer_meter {
  double loss_ema, time_ema, tokens_ema; /* over steps (the plain mean of the first 20) */
  int64_t n, n_loss;
  double last_eval_s;                    /* duration of the last periodic evaluation */
  int64_t win_steps, win_tokens;         /* since the last printed line (LINES) */
  double win_time, win_loss;
  int64_t win_finite;
} lt__trainer_meter;

struct lt_trainer {
  lt_trainer_config c;
  lt_trainer_hooks h;
  char prefix[64];
  char dir[LT__TRAINER_PATH_LEN];
  char csv_path[LT__TRAINER_PATH_LEN];
  FILE *csv;
  bool csv_opened;      /* the first fit opened (or rewrote) the CSV */
  bool resumed;         /* lt_trainer_resume succeeded: the CSV keeps rows up to step */
  FILE *out;
  bool redraw, line_open;
  int64_t step, start_step, last_saved, tokens, bad_streak;
  double train_seconds;
  char last_ckpt[LT__TRAINER_PATH_LEN];
  lt__trainer_meter M;
  double *values;       /* [n_metrics] of the last evaluation */
  /* Data parallelism (dist/dist.h; all unused with one rank). */
  bool dist_ready;      /* the first fit checked the configuration and broadcast the parameters */
  bool rank_streams;    /* the generators are this rank's own streams (set up, or resumed) */
  bool has_buffers;     /* several ranks and the store has buffers: rank 0's after every step */
  lt_dist_grads *grads; /* the gradient reducer */
  lt_dist_zero *zero;   /* ZeRO-1 (cfg.zero 1 and several ranks): this rank's optimizer shard */
  int stop;             /* the stop request agreed by every rank (a signal number), or 0 */
  FILE *devnull;        /* ranks other than 0 print here */
};

/* The data loader's position: the hooks', or cfg.shards' (a model on token
 * shards needs no position hooks of its own). */
static inline bool lt__trainer_has_position(const lt_trainer *t) { return t->h.get_position || t->c.shards; }
static inline lt_loader_position lt__trainer_get_position(const lt_trainer *t) {
  return t->h.get_position ? t->h.get_position(t->h.user) : lt_shard_loader_get_position(t->c.shards);
}
static inline lt_status lt__trainer_set_position(lt_trainer *t, lt_loader_position pos) {
  return t->h.set_position ? t->h.set_position(t->h.user, pos) : lt_shard_loader_set_position(t->c.shards, pos);
}
static inline int64_t lt__trainer_batches_per_epoch(const lt_trainer *t, int64_t none) {
  if (t->c.shards && !t->h.get_position) return lt_shard_loader_batches_per_epoch(t->c.shards);
  return t->h.batches_per_epoch ? t->h.batches_per_epoch(t->h.user) : none;
}

#endif
