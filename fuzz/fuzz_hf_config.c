/*
 * fuzz/fuzz_hf_config.c: the config.json reader of a Hugging Face directory
 * (models/transformer/hf.c, lt_hf_read_config) on arbitrary bytes. The whole
 * input is config.json (no mode byte), written into a directory of its own.
 *
 * Checked promises (hf.h, transformer.h): a refusal has a message and leaves
 * the output configuration untouched; an accepted configuration passes
 * lt_tf_config_validate (every number in the range table LT_TF_CONFIG_RANGES,
 * the one train's flags use) and fits its layout (lt_hf_family_of, the same
 * family as returned); its size is computed or refused with LT_ERR_OVERFLOW,
 * never with undefined arithmetic (UBSan in both builds). Nothing is built
 * and no weights file is read, so one input costs microseconds. The same
 * bytes then go through lt_hf_read_gen_ids (eos/bos/pad ids): refused with
 * the output untouched, or every id in range.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "models/transformer/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s", fuzz_temp_path("hf_config"));
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/config.json", dir);
  fuzz_write_file(path, "", 0, data, size);
  lt_tf_config c, before;
  memset(&c, 0xa5, sizeof c);
  before = c;
  lt_hf_family fam = (lt_hf_family)-1;
  lt_status s = fuzz_check_status(lt_hf_read_config(dir, &c, &fam), "hf_read_config");
  if (s != LT_OK) {
    FUZZ_ASSERT(memcmp(&c, &before, sizeof c) == 0, "a refused config.json changed the output");
  } else {
    fuzz_log("hf_config: %s, d_model %lld, %lld layers, max_len %lld\n", lt_hf_family_name(fam),
             (long long)c.d_model, (long long)c.n_dec_layers, (long long)c.max_len);
    FUZZ_ASSERT(lt_tf_config_validate(&c) == LT_OK, "accepted, but: %s", lt_last_error());
    lt_hf_family again;
    FUZZ_ASSERT(lt_hf_family_of(&c, &again) == LT_OK && again == fam, "accepted, but its layout: %s",
                lt_last_error());
    int64_t n_params;
    size_t bytes;
    lt_status z = fuzz_check_status(lt_tf_config_size(&c, &n_params, &bytes), "tf_config_size");
    FUZZ_ASSERT(z == LT_OK || z == LT_ERR_OVERFLOW, "its size: %s", lt_last_error());
  }
  /* The same bytes as the generation ids (lt_hf_read_gen_ids reads config.json
   * when there is no generation_config.json): refused untouched, or ids in range. */
  lt_hf_gen_ids g, gbefore;
  memset(&g, 0x5a, sizeof g);
  gbefore = g;
  if (fuzz_check_status(lt_hf_read_gen_ids(dir, &g), "hf_read_gen_ids") != LT_OK) {
    FUZZ_ASSERT(memcmp(&g, &gbefore, sizeof g) == 0, "refused generation ids changed the output");
  } else {
    FUZZ_ASSERT(g.n_eos >= 0 && g.n_eos <= LT_HF_MAX_EOS, "n_eos %d", g.n_eos);
    for (int i = 0; i < g.n_eos; i++) FUZZ_ASSERT(g.eos[i] >= 0 && g.eos[i] <= INT32_MAX, "eos[%d]", i);
    FUZZ_ASSERT(g.bos >= -1 && g.pad >= -1 && g.decoder_start >= -1, "an id below -1");
  }
  lt_clear_error();
  remove(path);
  rmdir(dir);
  return 0;
}
