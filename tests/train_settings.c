/*
 * tests/train_settings.c: train's saved settings in a checkpoint
 * (train_settings.h).
 */
#include "train_settings.h"

#include <stdio.h>

#include "cli/cli_ckpt.h"
#include "train/trainer.h"

/* parse_args sets the table's defaults (CLI.defaults): an empty command line, as train starts. */
static options started(bool *given) {
  options o = default_options();
  char *argv[] = {"train", NULL};
  parse_args(1, argv, &o, given);
  return o;
}

lt_status trainset_extra(lt_tf_arch arch, lt_ckpt_meta *extra) {
  bool given[MAX_OPTS] = {false};
  options o = started(given);
  o.arch = (int)arch;
  if (arch == LT_TF_DECODER_ONLY) o.text = "corpus.txt";
  if (arch == LT_TF_ENCODER_ONLY) o.tsv = "labels.tsv";
  finalize_options(&o, given);
  o.eval_every = o.steps / 10, o.ckpt_every = o.steps / 5; /* as train_main resolves them */
  lt_status s = lt_cli_to_meta(&CLI, &o, NOT_SAVED, OPT_PREFIX, extra);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_SEED, 1234);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_OFFSET, 6);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_LOADER_FINGERPRINT, TRAINSET_FINGERPRINT);
  s = s ? s : lt_ckpt_meta_set_int(extra, LT_TRAINER_KEY_BAD_STREAK, 0);
  return s;
}

lt_status trainset_restore(const lt_tf_config *cfg, const lt_ckpt_meta *extra, const char *path, options *saved) {
  static bool have_defaults;
  if (!have_defaults) {
    bool given[MAX_OPTS] = {false};
    started(given);
    have_defaults = true;
  }
  *saved = default_options();
  options_from_config(saved, cfg);
  return lt_cli_from_meta(&CLI, saved, NOT_SAVED, OPT_PREFIX, extra, path);
}

bool trainset_in_range(const options *saved, const lt_ckpt_meta *extra, bool only_present, char *why,
                       size_t why_size) {
  for (int i = 0; i < CLI.n_opts; i++) {
    const lt_cli_opt *d = &CLI.opts[i];
    if (d->kind == LT_CLI_GROUP || (d->flags & NOT_SAVED)) continue;
    char key[160];
    snprintf(key, sizeof key, "%s%s", OPT_PREFIX, d->name);
    if (only_present && lt_ckpt_meta_kind(extra, key) < 0) continue;
    bool unset = (d->flags & LT_CLI_UNSET_SAVED) && lt_cli_same_value(d, saved, CLI.defaults);
    if (!unset && !lt_cli_check(d, saved, why, why_size)) return false;
  }
  return true;
}
