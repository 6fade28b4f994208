/*
 * fuzz/fuzz_hf_index.c: the reader of a sharded Hugging Face directory's
 * model.safetensors.index.json (models/transformer/hf_weights.c,
 * lt__hf_weights_open) on arbitrary bytes. The whole input is the index,
 * written into a directory that also holds two small valid shards,
 * "a.safetensors" (tensors x [2], y [3]) and "b.safetensors" (z [1]), and no
 * model.safetensors, so the index is what is read.
 *
 * Checked promises (hf_internal.h): a refusal has a message and leaves the
 * weights empty; an accepted index opened at least one shard, and every
 * tensor of every opened shard is found by name in that very shard (the
 * index and the shards agree); nothing outside the directory is opened (a
 * shard name with '/' is refused before any open).
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "models/transformer/hf_internal.h"

static void write_shard(const char *dir, const char *file, int n, const char *const *names, const int64_t *sizes) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  lt_tensor *ts[3] = {0};
  for (int i = 0; i < n; i++) ts[i] = lt_ones(LT_DTYPE_F32, 1, &sizes[i]);
  FUZZ_ASSERT(lt_st_save(path, n, names, (const lt_tensor *const *)ts, 0, NULL, NULL) == LT_OK, "seed shard: %s",
              lt_last_error());
  for (int i = 0; i < n; i++) lt_tensor_free(ts[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  static char dir[512];
  static bool ready;
  if (!ready) { /* the shards, once */
    snprintf(dir, sizeof dir, "%s", fuzz_temp_path("hf_index"));
    mkdir(dir, 0700);
    write_shard(dir, "a.safetensors", 2, (const char *const[]){"x", "y"}, (const int64_t[]){2, 3});
    write_shard(dir, "b.safetensors", 1, (const char *const[]){"z"}, (const int64_t[]){1});
    ready = true;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, LT_HF_WEIGHTS_INDEX_FILE);
  fuzz_write_file(path, "", 0, data, size);
  lt__hf_weights w;
  lt_status s = fuzz_check_status(lt__hf_weights_open(dir, &w), "hf_weights_open");
  if (s != LT_OK) {
    FUZZ_ASSERT(w.n == 0 && w.f == NULL, "a refused index left %d files open", w.n);
  } else {
    FUZZ_ASSERT(w.n >= 1 && w.n <= 2, "accepted with %d shards", w.n);
    for (int i = 0; i < w.n; i++) {
      FUZZ_ASSERT(strncmp(w.file[i], dir, strlen(dir)) == 0 && !strchr(w.file[i] + strlen(dir) + 1, '/'),
                  "a shard outside the directory: %s", w.file[i]);
      for (int k = 0; k < lt_st_count(w.f[i]); k++) {
        lt__hf_ref r = lt__hf_weights_find(&w, lt_st_info(w.f[i], k)->name);
        FUZZ_ASSERT(r.file == i && r.k == k, "tensor '%s' of shard %d found at %d/%d", lt_st_info(w.f[i], k)->name, i,
                    r.file, r.k);
      }
    }
    fuzz_log("hf_index: %d shards\n", w.n);
  }
  lt__hf_weights_close(&w);
  lt_clear_error();
  remove(path);
  return 0;
}
