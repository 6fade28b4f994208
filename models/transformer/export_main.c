/*
 * models/transformer/export_main.c: the `export` program: a checkpoint of
 * train (or a model-only checkpoint) to a Hugging Face directory
 * (models/transformer/hf.h; docs/interop.md):
 *     export --checkpoint CKPT --format hf --out DIR
 * writes DIR/model.safetensors, DIR/config.json and, when the checkpoint
 * holds one, the tokenizer twice: DIR/libtensor-tokenizer.bin (as the
 * checkpoint holds it; what generate and train read back) and
 * DIR/tokenizer.json (lt_tokenizer_to_json, for other tools). A configuration that is neither GPT-2's nor Llama's is refused,
 * naming the option that does not fit.
 *     export --checkpoint CKPT --list
 * prints what any libtensor checkpoint holds (its configuration, the name,
 * dtype and shape of every model tensor and optimizer state) from the
 * file's metadata (lt_ckpt_describe), building and writing nothing.
 *
 * What this is not: an importer (generate and train read such directories
 * themselves).
 *
 * Exit status (cli/cli.h): 0 on success, 1 for data errors (the checkpoint,
 * a configuration without a Hugging Face layout, a failed write), 2 for
 * usage errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/cli_ckpt.h"
#include "libtensor_transformer.h"

#define PROG "export"
#define PATH_MAX_LEN 4000

typedef struct options {
  const char *checkpoint, *out;
  int format;
  bool allow_unchecksummed, list, overwrite;
  int64_t max_memory; /* MiB; -1: lt_ckpt_default_memory_cap(); 0: no cap */
} options;

static const char *format_name(int i) { return i == 0 ? "hf" : "unknown"; }

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "checkpoint", checkpoint, "FILE", PATH_MAX_LEN,
                    "the checkpoint to export (a ckpt-*.h5 of train, a run directory for its newest, or a model-only "
                    "checkpoint); required"),
  LT_CLI_OPT_ENUM(options, "format", format, format_name, 1, "the output format: hf (a Hugging Face directory, "
                  "GPT-2, Llama, Qwen2 or Mistral layout)"),
  LT_CLI_OPT_STRING(options, "out", out, "DIR", PATH_MAX_LEN, "the directory to write (created if absent); required"),
  LT_CLI_OPT_BOOL(options, "overwrite", overwrite, "replace the export a --out directory already holds (config.json, "
                  "model.safetensors, the tokenizer files); without it such a directory is refused"),
  LT_CLI_OPT_BOOL(options, "list", list, "print the checkpoint's configuration and tensors (names, dtypes, shapes) "
                  "from its metadata, and write nothing (--format and --out are then not needed)"),
  LT_CLI_OPT_INT(options, "max-memory", max_memory, "MIB", 0, INT64_MAX >> 20, "refuse a checkpoint whose model needs "
                 "more memory (0: no cap)", .default_text = "half of physical memory"),
  LT_CLI_OPT_BOOL(options, "allow-unchecksummed", allow_unchecksummed, "accept an HDF5 file without object header "
                  "checksums (only from a trusted source, docs/security.md)"),
};
enum { N_OPTS = (int)(sizeof OPTS / sizeof OPTS[0]) };

static const options DEFAULTS = {.format = 0, .max_memory = -1};

static const lt_cli CLI = {
    .prog = PROG,
    .synopsis = "Usage: " PROG " --checkpoint FILE --format hf --out DIR\n"
                "       " PROG " --checkpoint FILE --list\n"
                "\n"
                "Writes a decoder-only checkpoint as a Hugging Face directory: model.safetensors (GPT-2's, Llama's,\n"
                "Qwen2's or Mistral's tensor names), config.json (their configs' keys) and\n"
                "the checkpoint's tokenizer (libtensor-tokenizer.bin, tokenizer.json). generate --checkpoint DIR and\n"
                "train --init-from DIR read it back (docs/interop.md).\n"
                "\n"
                "Options (--flag VALUE or --flag=VALUE):\n",
    .epilogue = LT_CLI_EXIT_HELP,
    .opts = OPTS,
    .n_opts = N_OPTS,
    .defaults = &DEFAULTS,
};

/* What a path is, for messages. */
static const char *kind_of(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISREG(m) ? "a regular file" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ?
         "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a directory";
}

/* --out: absent (created by the export), or a directory that holds no export
 * yet, or --overwrite; checked before the checkpoint is read. */
static void check_out(const char *dir, bool overwrite) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT) return;
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--out '%s': %s", dir, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    lt_cli_die(LT_CLI_EXIT_USAGE, "--out '%s' is %s, not a directory: give a directory to create or fill", dir,
               kind_of(st.st_mode));
  static const char *const files[] = {LT_HF_CONFIG_FILE, LT_HF_WEIGHTS_FILE, LT_HF_TOKENIZER_FILE, "tokenizer.json"};
  for (size_t i = 0; i < sizeof files / sizeof files[0] && !overwrite; i++) {
    char path[PATH_MAX_LEN + 64];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (lstat(path, &st) == 0)
      lt_cli_die(LT_CLI_EXIT_USAGE, "--out '%s' already holds %s (%s): --overwrite replaces the export there, or "
                 "choose another directory", dir, files[i], kind_of(st.st_mode));
  }
}

/* One line per tensor: name, dtype, shape. */
static void print_tensors(const lt_ckpt_tensor_desc *v, int n) {
  for (int i = 0; i < n; i++) {
    char shape[160];
    printf("  %-48s %-4s %s\n", v[i].name, v[i].dtype == LT_DTYPE_COUNT ? "?" : lt_dtype_name(v[i].dtype),
           lt_shape_str(v[i].ndim, v[i].shape, shape, sizeof shape));
  }
}

/* --list: what lt_ckpt_describe read, nothing built. */
static void print_desc(const char *path, const lt_ckpt_desc *d) {
  printf("checkpoint %s: format version %lld, written by libtensor %s, %s\n", path, (long long)d->format_version,
         d->library_version, d->training ? "training state" : "model only");
  printf("config (%d entries):\n", lt_ckpt_meta_count(d->config));
  for (int i = 0; i < lt_ckpt_meta_count(d->config); i++) {
    const char *k = lt_ckpt_meta_key(d->config, i), *sv;
    int64_t iv;
    double dv;
    if (lt_ckpt_meta_get_int(d->config, k, &iv) == LT_OK) printf("  %s = %lld\n", k, (long long)iv);
    else if (lt_ckpt_meta_get_double(d->config, k, &dv) == LT_OK) printf("  %s = %.17g\n", k, dv);
    else if (lt_ckpt_meta_get_string(d->config, k, &sv) == LT_OK) printf("  %s = '%s'\n", k, sv);
  }
  printf("model: %d tensors, %lld elements, %llu bytes\n", d->n_tensors, (long long)d->model_elements,
         (unsigned long long)d->model_bytes);
  print_tensors(d->tensors, d->n_tensors);
  if (d->optim_kind) {
    printf("optimizer: %s, step %lld, %d state tensors\n", d->optim_kind, (long long)d->optim_step, d->n_optim);
    print_tensors(d->optim, d->n_optim);
  }
}

int main(int argc, char **argv) {
  options o = DEFAULTS;
  bool given[N_OPTS] = {false};
  lt_cli_init(PROG, NULL);
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, NULL, NULL);
  if (!o.checkpoint) lt_cli_die(LT_CLI_EXIT_USAGE, "--checkpoint FILE is required");
  if (!o.out && !o.list) lt_cli_die(LT_CLI_EXIT_USAGE, "--out DIR is required (or --list)");
  char ckpt[PATH_MAX_LEN + 64]; /* a run directory stands for its newest valid checkpoint, as train --resume */
  if (lt_trainer_find_resume(o.checkpoint, "ckpt", ckpt, sizeof ckpt) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--checkpoint %s", lt_last_error());
  o.checkpoint = ckpt;
  if (!o.list) check_out(o.out, o.overwrite);

  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_unchecksummed = o.allow_unchecksummed;
  lo.max_bytes = lt_cli_memory_cap(o.max_memory);
  if (o.list) {
    lt_ckpt_desc *d = NULL;
    if (lt_ckpt_describe(o.checkpoint, &lo, &d) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
    print_desc(o.checkpoint, d);
    lt_ckpt_desc_free(d);
    return fflush(stdout) == 0 ? 0 : LT_CLI_EXIT_FAILURE;
  }
  /* the configuration and the extra values (tokenizer) first, then the model */
  lt_ckpt_info *info = NULL;
  if (lt_tf_read_checkpoint_info(o.checkpoint, &lo, true, &info, NULL) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "checkpoint '%s': %s", o.checkpoint, lt_last_error());
  lt_tf_config cfg;
  int64_t n_params;
  size_t bytes;
  if (lt_tf_config_from_meta(info->config, &cfg) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "checkpoint '%s': not a Transformer checkpoint of train: %s", o.checkpoint,
               lt_last_error());
  lt_hf_family fam;
  if (lt_hf_family_of(&cfg, &fam) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "checkpoint '%s': no Hugging Face layout: %s", o.checkpoint, lt_last_error());
  if (lt_tf_config_size(&cfg, &n_params, &bytes) != LT_OK ||
      lt_ckpt_check_model_size(info, o.checkpoint, n_params, bytes, lo.max_bytes) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  lt_transformer *m = lt_tf_load_model(o.checkpoint, &cfg, &lo);
  if (!m) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());

  if (lt_hf_export(m, o.out) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "export to '%s': %s", o.out, lt_last_error());
  const void *blob;
  size_t size;
  char path[PATH_MAX_LEN + 64];
  snprintf(path, sizeof path, "%s/%s", o.out, LT_HF_TOKENIZER_FILE);
  const bool has_tok = info->extra && lt_ckpt_meta_get_bytes(info->extra, LT_TF_CKPT_TOKENIZER, &blob, &size) == LT_OK;
  if (has_tok && lt_ckpt_write_file(path, blob, size) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "export to '%s': %s", o.out, lt_last_error());
  if (has_tok) { /* and in the Hugging Face tokenizers format, for other tools (docs/datasets.md) */
    lt_tokenizer *tok = lt_tokenizer_deserialize(blob, size);
    char *json = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", o.out);
    if (!tok || lt_tokenizer_to_json(tok, &json, &len) != LT_OK || lt_ckpt_write_file(path, json, len) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "export to '%s': tokenizer.json: %s", o.out, lt_last_error());
    free(json);
    lt_tokenizer_free(tok);
  }
  printf("export: %s -> %s/ (%s layout, %lld parameters%s)\n", o.checkpoint, o.out,
         lt_hf_family_name(fam), (long long)n_params,
         has_tok ? ", tokenizer" : ", no tokenizer in the checkpoint");
  lt_ckpt_info_free(info);
  lt_transformer_free(m);
  return 0;
}
