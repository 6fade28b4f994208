/*
 * tests/train_settings.h: train's saved settings in a checkpoint, for the
 * programs that check a resume as train does it without launching train:
 * the crafted-checkpoint suite (tests/test_crafted_ckpt.c), the checkpoint
 * metadata fuzzer (fuzz/fuzz_ckpt_meta.c) and its seed writer
 * (fuzz/make_ckpt_seeds.c). Linked with models/transformer/programs/train_cli.c (the
 * option table) and cli/cli_ckpt.c.
 *
 * What this is not: a test helper that fails the test (no Check calls here).
 */
#ifndef LT_TEST_TRAIN_SETTINGS_H
#define LT_TEST_TRAIN_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "checkpoint/checkpoint.h"
#include "models/transformer/programs/train_cli.h"
#include "models/transformer/transformer.h"

/* The loader fingerprint trainset_extra saves (any constant: the data of
 * the pretended run, compared by a resume's set_position hook). */
#define TRAINSET_FINGERPRINT 0x5eed5eedLL

/* train's settings of a default run of architecture arch (with a data file
 * where the architecture needs one), resolved as train resolves them before
 * it saves (opt.* through the option table), and the trainer's loader keys
 * (seed 1234, offset 6, TRAINSET_FINGERPRINT, bad streak 0), added to extra.
 * Its signature is tfckpt_extra_hook's. */
lt_status trainset_extra(lt_tf_arch arch, lt_ckpt_meta *extra);

/* train --resume's restore of the settings: *saved gets the defaults, the
 * configuration's model options, then the opt.* of extra
 * (lt_cli_from_meta, each value checked against its flag's range; path for
 * messages). Returns its status (message set on failure). */
lt_status trainset_restore(const lt_tf_config *cfg, const lt_ckpt_meta *extra, const char *path, options *saved);

/* The oracle after an accepted restore: every saved setting in its flag's
 * range, or (an option marked LT_CLI_UNSET_SAVED) its "not given" default.
 * Only the settings extra holds are judged when only_present (a checkpoint
 * without opt.* restores the defaults, some of which mean "resolve later").
 * False with why (why_size bytes) naming the first that is not. */
bool trainset_in_range(const options *saved, const lt_ckpt_meta *extra, bool only_present, char *why,
                       size_t why_size);

#endif
