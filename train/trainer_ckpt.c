/*
 * train/trainer_ckpt.c: the trainer's checkpoints: lt_trainer_save (the
 * model's store, optimizer, schedule, generators, the loader's position and
 * the trainer's own counters, with every rank's generator streams under
 * data parallelism, rotated in the run directory) and lt_trainer_resume
 * (the same read back and range-checked; the run is marked resumed, so
 * that the CSV keeps its rows up to that step).
 *
 * What this is not: the checkpoint format (checkpoint/), or the cadence of
 * saves (train/trainer.c's loop decides when).
 */
#include "train/trainer_internal.h"

#include "tensor/error_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Checkpoints                                                              */
/* ======================================================================== */

static lt_status put_extra(const lt_trainer *t, lt_ckpt_meta *extra) {
  lt_status s = LT_OK;
  if (lt__trainer_has_position(t)) {
    lt_loader_position pos = lt__trainer_get_position(t);
    s = lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_EPOCH, pos.epoch);
    s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_INDEX, pos.index);
    s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_SEED, (int64_t)pos.gen.seed);
    s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_OFFSET, (int64_t)pos.gen.offset);
    s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_FINGERPRINT, (int64_t)pos.fingerprint);
  }
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_TOKENS, t->tokens);
  s = s ? s : lt_ckpt_meta_set_double(extra, LT_TRAINER_KEY_TRAIN_SECONDS, t->train_seconds);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_BAD_STREAK, t->bad_streak);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_RANKS, lt_dist_size());
  return s;
}

static lt_train_state train_state(const lt_trainer *t, lt_schedule *sched, int64_t step) {
  return (lt_train_state){.params = t->c.params, .optim = t->c.optim, .optim_config = t->c.optim_config,
                          .schedule = sched, .step = step, .n_generators = t->c.n_generators,
                          .generator_names = t->c.generator_names, .generators = t->c.generators};
}

/* With several ranks: every rank's parameters must equal rank 0's, which the
 * checkpoint holds. The generators (dropout) are each rank's own stream
 * (lt_dist_rank_seed): their states are gathered to rank 0, into rank_gens
 * (N x n_generators x {seed, offset}; NULL without several ranks; free it). */
static lt_status check_ranks_agree(const lt_trainer *t, int64_t **rank_gens) {
  *rank_gens = NULL;
  if (lt_dist_size() == 1) return LT_OK;
  lt_status s = lt_dist_check_params_same(t->c.params);
  const int N = lt_dist_size(), R = lt_dist_rank(), n = t->c.n_generators;
  if (s != LT_OK || n == 0) return s;
  if ((int64_t)N * n * 2 > 4096)
    return lt__err(LT_ERR_INVALID, "trainer: %d generators x %d ranks: too many states to gather (at most 2048)", n, N);
  int64_t *v = calloc((size_t)N * (size_t)n * 2, sizeof *v);
  if (!v) return lt__err(LT_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < n; i++) { /* this rank's slot; the others are 0: the sum gathers */
    lt_generator_state g = lt_generator_get_state(t->c.generators[i]);
    v[((size_t)R * n + i) * 2] = (int64_t)g.seed, v[((size_t)R * n + i) * 2 + 1] = (int64_t)g.offset;
  }
  s = lt_dist_allreduce_i64(v, N * n * 2, LT_DIST_SUM);
  if (s != LT_OK) return free(v), s;
  *rank_gens = v;
  return LT_OK;
}

/* The checkpoint key of rank r's state of generator name: "dist.gen.<r>.<name>.seed". */
static void rank_gen_key(char *buf, size_t size, int r, const char *name, const char *what) {
  snprintf(buf, size, "dist.gen.%d.%s.%s", r, name, what);
}

lt_status lt_trainer_save(lt_trainer *t) {
  if (!t) return lt__err(LT_ERR_NULL, "trainer_save: t is NULL");
  if (t->c.no_ckpt || !t->dir[0]) return LT_OK;
  int64_t *rank_gens = NULL;
  lt_status s = check_ranks_agree(t, &rank_gens);
  if (s != LT_OK) return s;
  if (t->zero && (s = lt_dist_zero_gather_state(t->zero)) != LT_OK) { /* rank 0: every shard's state */
    free(rank_gens);
    return s;
  }
  if (lt_dist_rank() != 0) { /* rank 0 writes the checkpoint of every rank */
    free(rank_gens);
    t->last_saved = t->step;
    return LT_OK;
  }
  char path[LT__TRAINER_PATH_LEN];
  s = lt_ckpt_step_path(path, sizeof path, t->dir, t->prefix, t->step);
  if (s != LT_OK) return s;
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  if (!extra) return lt__err(LT_ERR_NOMEM, "trainer: saving step %lld: out of memory", (long long)t->step);
  if (t->h.save_extra) s = t->h.save_extra(t->h.user, extra);
  s = s ? s : put_extra(t, extra);
  for (int r = 0; rank_gens && r < lt_dist_size() && s == LT_OK; r++) /* every rank's own streams */
    for (int i = 0; i < t->c.n_generators && s == LT_OK; i++) {
      char key[160];
      const int64_t *g = &rank_gens[((size_t)r * t->c.n_generators + i) * 2];
      rank_gen_key(key, sizeof key, r, t->c.generator_names[i], "seed");
      s = lt_ckpt_meta_set_int(extra, key, g[0]);
      rank_gen_key(key, sizeof key, r, t->c.generator_names[i], "offset");
      s = s ? s : lt_ckpt_meta_set_int(extra, key, g[1]);
    }
  free(rank_gens);
  if (s == LT_OK) {
    lt_schedule sched = *t->c.schedule;
    lt_train_state st = train_state(t, &sched, t->step);
    s = lt_ckpt_save_training(path, &st, t->c.model_config, extra, NULL);
  }
  lt_ckpt_meta_free(extra);
  if (t->zero) { /* rank 0 holds its own shard's state again */
    lt_status s2 = lt_dist_zero_release_state(t->zero);
    s = s ? s : s2;
  }
  if (s != LT_OK) return s;
  if (t->c.keep > 0) {
    s = lt_ckpt_rotate(t->dir, t->prefix, t->c.keep > INT32_MAX ? INT32_MAX : (int)t->c.keep);
    if (s != LT_OK) return s;
  }
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path);
  t->last_saved = t->step;
  return LT_OK;
}

/* An integer training value of the checkpoint, or an error naming it. */
static lt_status get_int(const lt_ckpt_meta *m, const char *key, const char *path, int64_t *v) {
  if (lt_ckpt_meta_get_int(m, key, v) != LT_OK)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s' lacks the training value '%s' (not written by a trainer?)", path,
                   key);
  return LT_OK;
}

static lt_status out_of_range(const char *path, const char *key, double v, const char *range) {
  return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s = %.17g is outside %s", path, key, v, range);
}

lt_status lt_trainer_resume(lt_trainer *t, const char *path) {
  if (!t || !path) return lt__err(LT_ERR_NULL, "trainer_resume: %s is NULL", t ? "path" : "t");
  /* the schedule stays the configured one: a resumed run may change its total steps */
  lt_train_state st = train_state(t, NULL, 0);
  lt_ckpt_info *info = NULL;
  lt_status s = lt_ckpt_load_training(path, &st, t->c.load_opts, &info);
  if (s != LT_OK) return s;
  const lt_ckpt_meta *x = info->extra;
  char range[96];
  int64_t tokens = 0, streak = 0;
  double secs = 0;
  snprintf(range, sizeof range, "[0, %lld] (the run's total steps)", (long long)t->c.steps);
  if (st.step < 0 || st.step > t->c.steps) s = out_of_range(path, "step", (double)st.step, range);
  s = s ? s : get_int(x, LT_TRAINER_KEY_TOKENS, path, &tokens);
  if (s == LT_OK && tokens < 0) s = out_of_range(path, LT_TRAINER_KEY_TOKENS, (double)tokens, "[0, inf)");
  s = s ? s : get_int(x, LT_TRAINER_KEY_BAD_STREAK, path, &streak);
  if (s == LT_OK && (streak < 0 || streak > st.step)) {
    snprintf(range, sizeof range, "[0, %lld] (the steps done)", (long long)st.step);
    s = out_of_range(path, LT_TRAINER_KEY_BAD_STREAK, (double)streak, range);
  }
  if (s == LT_OK && lt_ckpt_meta_kind(x, LT_TRAINER_KEY_TRAIN_SECONDS) >= 0) { /* optional */
    if (lt_ckpt_meta_get_double(x, LT_TRAINER_KEY_TRAIN_SECONDS, &secs) != LT_OK)
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': '%s' is not a number", path, LT_TRAINER_KEY_TRAIN_SECONDS);
    else if (!isfinite(secs) || secs < 0)
      s = out_of_range(path, LT_TRAINER_KEY_TRAIN_SECONDS, secs, "[0, inf) (finite)");
  }
  if (s == LT_OK && lt__trainer_has_position(t)) {
    int64_t v[5];
    static const char *const keys[5] = {LT_TRAINER_KEY_LOADER_EPOCH, LT_TRAINER_KEY_LOADER_INDEX,
                                        LT_TRAINER_KEY_LOADER_SEED, LT_TRAINER_KEY_LOADER_OFFSET,
                                        LT_TRAINER_KEY_LOADER_FINGERPRINT};
    for (int i = 0; i < 5 && s == LT_OK; i++) s = get_int(x, keys[i], path, &v[i]);
    int64_t bpe = lt__trainer_batches_per_epoch(t, INT64_MAX);
    if (s == LT_OK && v[0] < 0) s = out_of_range(path, keys[0], (double)v[0], "[0, inf)");
    if (s == LT_OK && v[3] < 0) s = out_of_range(path, keys[3], (double)v[3], "[0, 2^63) (Philox blocks drawn)");
    if (s == LT_OK && (v[1] < 0 || v[1] > bpe)) {
      snprintf(range, sizeof range, "[0, %lld] (the batches per epoch)", (long long)bpe);
      s = out_of_range(path, keys[1], (double)v[1], range);
    }
    if (s == LT_OK) {
      lt_loader_position pos = {.epoch = v[0], .index = v[1], .gen = {(uint64_t)v[2], (uint64_t)v[3]},
                                .fingerprint = (uint64_t)v[4]};
      if (lt__trainer_set_position(t, pos) != LT_OK)
        s = lt__err(lt_last_status() ? lt_last_status() : LT_ERR_STATE,
                    "checkpoint '%s': the data loader's position: %s (has the data changed?)", path,
                    lt_last_error());
    }
  }
  if (s == LT_OK && t->h.load_extra) s = t->h.load_extra(t->h.user, x);
  /* This rank's own generator streams: its saved state, or (a checkpoint of
   * fewer ranks, or of one) the loaded state with this rank's seed. */
  for (int i = 0; i < t->c.n_generators && s == LT_OK; i++) {
    char ks[160], ko[160];
    int64_t seed, off;
    rank_gen_key(ks, sizeof ks, lt_dist_rank(), t->c.generator_names[i], "seed");
    rank_gen_key(ko, sizeof ko, lt_dist_rank(), t->c.generator_names[i], "offset");
    lt_generator_state g = lt_generator_get_state(t->c.generators[i]);
    if (lt_ckpt_meta_kind(x, ks) >= 0 && lt_ckpt_meta_kind(x, ko) >= 0) {
      s = get_int(x, ks, path, &seed);
      s = s ? s : get_int(x, ko, path, &off);
      if (s == LT_OK && off < 0) s = out_of_range(path, ko, (double)off, "[0, 2^63) (Philox blocks drawn)");
      g = (lt_generator_state){(uint64_t)seed, (uint64_t)off};
    } else if (lt_dist_rank() != 0) {
      g.seed = lt_dist_rank_seed(g.seed);
    }
    s = s ? s : lt_generator_set_state(t->c.generators[i], g);
  }
  t->rank_streams = true;
  lt_ckpt_info_free(info);
  if (s == LT_OK && t->zero) s = lt_dist_zero_release_state(t->zero); /* the file holds every shard's */
  if (s != LT_OK) return s;
  t->step = t->start_step = t->last_saved = st.step;
  t->tokens = tokens;
  t->bad_streak = streak;
  t->train_seconds = secs;
  t->resumed = true;
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path);
  return LT_OK;
}
