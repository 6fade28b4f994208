/*
 * models/transformer/programs/export_main.c: the `export` program: a checkpoint of
 * train (or a model-only checkpoint) to a Hugging Face directory
 * (models/transformer/hf.h; docs/interop.md), or a checkpoint or a Hugging
 * Face directory to a GGUF file for llama.cpp (models/transformer/gguf_model.h):
 *     export --checkpoint CKPT|DIR --format gguf [--weights f32|bf16|q8_0|q4_0] --out FILE
 *     export --checkpoint CKPT --format hf --out DIR
 * writes DIR/model.safetensors, DIR/config.json and, when the checkpoint
 * holds one, the tokenizer twice: DIR/libtensor-tokenizer.bin (as the
 * checkpoint holds it; what generate and train read back) and
 * DIR/tokenizer.json (lt_tokenizer_to_json, for other tools). A configuration that is neither GPT-2's nor Llama's is refused,
 * naming the option that does not fit.
 *     export --checkpoint CKPT|HF_DIR --format onnx --out FILE
 * writes the model (a decoder-only or encoder-only checkpoint, or a Hugging
 * Face GPT-2, Llama or BERT directory) as one ONNX file (models/transformer/
 * onnx.h): input_ids -> logits, or input_ids, attention_mask
 * [, token_type_ids] -> last_hidden_state [, pooler_output].
 *     export --checkpoint CKPT --list
 * prints what any libtensor checkpoint holds (its configuration, the name,
 * dtype and shape of every model tensor and optimizer state) from the
 * file's metadata (lt_ckpt_describe), building and writing nothing.
 *
 * What this is not: an importer (generate and train read such directories
 * themselves), nor a loader: the model comes from lt_tf_load (load.h), as in
 * the other programs.
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
  int format, weights;
  bool allow_unchecksummed, list, overwrite;
  int64_t max_memory; /* MiB; -1: lt_ckpt_default_memory_cap(); 0: no cap */
} options;

enum { FORMAT_HF, FORMAT_ONNX, FORMAT_GGUF };
static const char *format_name(int i) {
  static const char *const names[] = {"hf", "onnx", "gguf"};
  return i >= 0 && i < 3 ? names[i] : "unknown";
}
/* --weights: the GGUF matrices' type (ggml's), in the option's order. */
static const int WEIGHT_TYPES[] = {LT_GGML_F32, LT_GGML_BF16, LT_GGML_Q8_0, LT_GGML_Q4_0};
static const char *weights_name(int i) {
  static const char *const names[] = {"f32", "bf16", "q8_0", "q4_0"};
  return i >= 0 && i < 4 ? names[i] : "unknown";
}

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "checkpoint", checkpoint, "FILE", PATH_MAX_LEN,
                    "the checkpoint to export (a ckpt-*.h5 of train, a run directory for its newest, or a model-only "
                    "checkpoint; with --format onnx or gguf also a Hugging Face directory); required"),
  LT_CLI_OPT_ENUM(options, "format", format, format_name, 3, "the output format: hf (a Hugging Face directory, "
                  "GPT-2, Llama, Qwen2 or Mistral layout), onnx (one ONNX file, opset 17: decoder-only and encoder-only models) or "
                  "gguf (one GGUF file for llama.cpp: GPT-2 and Llama layouts)"),
  LT_CLI_OPT_ENUM(options, "weights", weights, weights_name, 4, "gguf: the matrices' type (vectors stay f32)"),
  LT_CLI_OPT_STRING(options, "out", out, "PATH", PATH_MAX_LEN, "the directory to write (created if absent; --format "
                    "hf) or the file (--format onnx, gguf); required"),
  LT_CLI_OPT_BOOL(options, "overwrite", overwrite, "replace the export a --out directory already holds (config.json, "
                  "model.safetensors, the tokenizer files) or the --out file; without it they are refused"),
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
                "       " PROG " --checkpoint FILE|HF_DIR --format onnx --out FILE\n"
                "       " PROG " --checkpoint FILE|DIR --format gguf [--weights f32|bf16|q8_0|q4_0] --out FILE\n"
                "       " PROG " --checkpoint FILE --list\n"
                "\n"
                "Writes a decoder-only checkpoint as a Hugging Face directory: model.safetensors (GPT-2's, Llama's,\n"
                "Qwen2's or Mistral's tensor names), config.json (their configs' keys) and\n"
                "the checkpoint's tokenizer (libtensor-tokenizer.bin, tokenizer.json). generate --checkpoint DIR and\n"
                "train --init-from DIR read it back (docs/interop.md). --format onnx writes a decoder-only or\n"
                "encoder-only model as one ONNX file for onnxruntime (inputs input_ids [, attention_mask,\n"
                "token_type_ids], outputs logits or last_hidden_state [, pooler_output]; dynamic batch and sequence).\n"
                "--format gguf writes one GGUF file with llama.cpp's names and keys and the tokenizer (generate\n"
                "--checkpoint FILE.gguf reads it).\n"
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
/* Whether --out path exists (*st filled; stat, or lstat when !follow);
 * false when it does not, and an exit for any other failure. */
static bool out_exists(const char *path, bool follow, struct stat *st) {
  if ((follow ? stat(path, st) : lstat(path, st)) == 0) return true;
  if (errno != ENOENT) lt_cli_die(LT_CLI_EXIT_FAILURE, "--out '%s': %s", path, strerror(errno));
  return false;
}

static void check_out(const char *dir, bool overwrite) {
  struct stat st;
  if (!out_exists(dir, true, &st)) return;
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

/* --out of --format onnx or gguf: absent, or a regular file with --overwrite. */
static void check_out_file(const char *path, bool overwrite, const char *format) {
  struct stat st;
  if (!out_exists(path, false, &st)) return;
  if (!S_ISREG(st.st_mode))
    lt_cli_die(LT_CLI_EXIT_USAGE, "--out '%s' is %s: --format %s writes one file; give a file name", path,
               kind_of(st.st_mode), format);
  if (!overwrite)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--out '%s' already exists: --overwrite replaces it, or choose another name", path);
}

/* The model of --checkpoint (load.h: a checkpoint, a run directory's newest,
 * or with --format onnx or gguf a Hugging Face directory as it is), its
 * tokenizer and a checkpoint's metadata. Exits on failure. */
static void load_model(const options *o, const lt_tf_load_opts *lo, lt_tf_loaded *src) {
  if (lt_tf_load(o->checkpoint, lo, src) == LT_OK) return;
  if (strstr(lt_last_error(), o->checkpoint)) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  lt_cli_die(LT_CLI_EXIT_FAILURE, "--checkpoint %s: %s", o->checkpoint, lt_last_error());
}

/* --format onnx: the model of a checkpoint or a Hugging Face directory as one ONNX file. */
static int export_onnx(const options *o, const lt_tf_load_opts *lo) {
  lt_tf_loaded src;
  load_model(o, lo, &src);
  lt_transformer *m = src.model;
  lt_onnx_summary sum;
  if (lt_onnx_export(m, o->out, &sum) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "export to '%s': %s", o->out, lt_last_error());
  printf("export: %s -> %s (ONNX opset %d, %s, %lld nodes, %lld initializers, %llu bytes)\n", o->checkpoint, o->out,
         LT_ONNX_OPSET, lt_tf_arch_name(lt_transformer_config(m)->arch), (long long)sum.nodes,
         (long long)sum.initializers, (unsigned long long)sum.bytes);
  lt_tf_loaded_free(&src);
  return fflush(stdout) == 0 ? 0 : LT_CLI_EXIT_FAILURE;
}

/* --format gguf: the model (a checkpoint's or a Hugging Face directory's)
 * and its tokenizer as one GGUF file. */
static int export_gguf(const options *o, const lt_tf_load_opts *lo) {
  char *tok_json = NULL;
  size_t tok_len = 0;
  lt_tf_loaded src;
  load_model(o, lo, &src);
  lt_transformer *m = src.model;
  if (src.tok && lt_tokenizer_to_json(src.tok, &tok_json, &tok_len) != LT_OK) /* an hf tokenizer: its file as it is */
    lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': its tokenizer: %s", src.path, lt_last_error());
  if (lt_tf_gguf_export(m, o->out, WEIGHT_TYPES[o->weights], tok_json, tok_len) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "export to '%s': %s", o->out, lt_last_error());
  lt_hf_family fam = LT_HF_GPT2;
  lt_hf_family_of(lt_transformer_config(m), &fam);
  printf("export: %s -> %s (gguf, %s layout, %s weights%s)\n", o->checkpoint, o->out, lt_hf_family_name(fam),
         weights_name(o->weights), tok_json ? ", tokenizer" : ", no tokenizer");
  free(tok_json);
  lt_tf_loaded_free(&src);
  return 0;
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
  if (given[lt_cli_find(&CLI, "weights")] && o.format != FORMAT_GGUF)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--weights is for --format gguf (a Hugging Face directory is written in f32)");
  lt_tf_load_opts lo = LT_TF_LOAD_DEFAULTS; /* a model-only checkpoint too */
  lo.ckpt.allow_unchecksummed = o.allow_unchecksummed;
  lo.ckpt.max_bytes = lt_cli_memory_cap(o.max_memory);
  lo.gguf = false; /* a GGUF file is an output here */
  const bool to_file = !o.list && (o.format == FORMAT_ONNX || o.format == FORMAT_GGUF);
  char ckpt[PATH_MAX_LEN + 64]; /* a run directory stands for its newest valid checkpoint, as train --resume */
  if (!(to_file && lt_hf_is_dir(o.checkpoint))) { /* a Hugging Face directory is read as it is */
    if (lt_trainer_find_resume(o.checkpoint, LT_TF_CKPT_PREFIX, ckpt, sizeof ckpt) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "--checkpoint %s", lt_last_error());
    o.checkpoint = ckpt;
  }
  if (to_file) check_out_file(o.out, o.overwrite, format_name(o.format));
  else if (!o.list) check_out(o.out, o.overwrite);
  if (to_file) return o.format == FORMAT_ONNX ? export_onnx(&o, &lo) : export_gguf(&o, &lo);
  if (o.list) {
    lt_ckpt_desc *d = NULL;
    if (lt_ckpt_describe(o.checkpoint, &lo.ckpt, &d) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
    print_desc(o.checkpoint, d);
    lt_ckpt_desc_free(d);
    return fflush(stdout) == 0 ? 0 : LT_CLI_EXIT_FAILURE;
  }
  /* --format hf: a checkpoint (a Hugging Face directory is not re-exported) */
  lo.hf_dirs = false;
  lt_tf_loaded src;
  load_model(&o, &lo, &src);
  lt_transformer *m = src.model;
  const lt_ckpt_info *info = src.info;
  lt_hf_family fam;
  if (lt_hf_family_of(lt_transformer_config(m), &fam) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "checkpoint '%s': no Hugging Face layout: %s", o.checkpoint, lt_last_error());
  int64_t n_params;
  size_t bytes;
  if (lt_tf_config_size(lt_transformer_config(m), &n_params, &bytes) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
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
  lt_tf_loaded_free(&src);
  return 0;
}
