/*
 * models/transformer/programs/train_cli.c: the command line of `train` (train_cli.h):
 * the option table that drives parsing, --help, the settings saved in
 * checkpoints and their checks on resume; the defaults of the default run;
 * the defaults that follow from other flags; the checks across flags; and
 * what a resumed run or --init-from takes from the checkpoint.
 *
 * What this is not: part of libtensor_transformer (the model library's
 * CMake glob leaves out *_cli.c and *_main.c): it exits on a bad flag, as
 * only a program may. It is compiled into train with train_main.c.
 */
#include "models/transformer/programs/train_cli.h"

#include "libtensor.h"
#include "models/transformer/config.h"

#include <math.h>
#include <string.h>

#define die lt_cli_die
enum { EXIT_USAGE = LT_CLI_EXIT_USAGE };
#define PROG "train"




static const char *arch_ename(int i) { return lt_tf_arch_name((lt_tf_arch)i); }
static const char *norm_ename(int i) { return lt_tf_norm_name((lt_tf_norm)i); }
static const char *act_ename(int i) { return lt_tf_act_name((lt_activation)i); }
static const char *pos_ename(int i) { return lt_tf_pos_name((lt_tf_pos)i); }
static const char *task_ename(int i) { return lt_task_name((lt_task_kind)i); }
const char *tok_ename(int i) { return lt_tokenizer_kind_name((lt_tokenizer_kind)i); }
const char *from_ename(int i) { return lt_tf_tokenizer_from_name(i); }
const char *optim_ename(int i) { return lt_optim_kind_name((lt_optim_kind)i); }
const char *sched_ename(int i) { return lt_schedule_kind_name((lt_schedule_kind)i); }
const char *overlong_ename(int i) { return lt_overlong_name((lt_overlong)i); }
static const char *recompute_ename(int i) { return lt_recompute_mode_name((lt_recompute_mode)i); }
static bool arch_alias(const char *text, int *value) { /* encdec, decoder, encoder */
  lt_tf_arch a;
  return lt_tf_arch_parse(text, &a) == LT_OK ? (*value = (int)a, true) : false;
}

/* Table entries: O and OD give LO..HI (an INT's or DOUBLE's range; a STRING's
 * length in bytes; 0, 0 for a BOOL), OD and OE a --help default text, OE's
 * tail more fields (.parse_alias). */
#define OD(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_, DEF_)                                                   \
  {.name = N_, .kind = K_, .offset = offsetof(options, FIELD_), .flags = FLAGS_, .arg = ARG_, .help = HELP_,     \
   .min = I64_(LO_), .max = I64_(HI_), .dmin = (double)(LO_), .dmax = (double)(HI_), .default_text = DEF_}
#define I64_(x) ((x) >= 9e18 ? INT64_MAX : (int64_t)(x)) /* an INT's bound; a DOUBLE's may be larger */
#define O(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_) OD(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_, NULL)
#define OE(N_, FIELD_, FLAGS_, FN_, COUNT_, HELP_, DEF_, ...)                                                  \
  {.name = N_, .kind = LT_CLI_ENUM, .offset = offsetof(options, FIELD_), .flags = FLAGS_, .help = HELP_,      \
   .value_name = FN_, .n_values = COUNT_, .default_text = DEF_, __VA_ARGS__}
/* A model flag: its range is that of the configuration field CFG_ (LT_TF_CONFIG_RANGES,
 * transformer.h), the one table that config.json and checkpoints are checked against too. */
#define OM(N_, K_, FIELD_, CFG_, ARG_, HELP_, DEF_)                                                           \
  OD(N_, K_, FIELD_, F_MODEL | (LT_TF_LO_OPEN_##CFG_ ? LT_CLI_MIN_OPEN : 0), ARG_, LT_TF_LO_##CFG_,            \
     LT_TF_HI_##CFG_, HELP_, DEF_)
#define GROUP(TITLE_) LT_CLI_GROUP_TITLE(TITLE_) /* a --help heading */
#define PATH_MAX_LEN (PATH_LEN - 1)

static const lt_cli_opt OPTS[] = {
    GROUP("Model (every lt_tf_config field; vocab_size, n_classes and pad_id come from the data)"),
    OE("arch", arch, F_MODEL, arch_ename, 3, "architecture (or encdec, decoder, encoder)", NULL,
       .parse_alias = arch_alias),
    OM("d-model", LT_CLI_INT, d_model, d_model, "N", "model width C", "by --arch"),
    OM("heads", LT_CLI_INT, heads, n_heads, "N", "attention heads", "by --arch"),
    OM("kv-heads", LT_CLI_INT, kv_heads, n_kv_heads, "N", "key/value heads (GQA; 1 = MQA)", "= --heads"),
    OM("enc-layers", LT_CLI_INT, enc_layers, n_enc_layers, "N", "encoder layers (--layers N sets both)",
       "by --arch"),
    OM("dec-layers", LT_CLI_INT, dec_layers, n_dec_layers, "N", "decoder layers", "by --arch"),
    OM("d-ff", LT_CLI_INT, d_ff, d_ff, "N", "feed-forward hidden size", "by --arch"),
    OM("max-len", LT_CLI_INT, max_len, max_len, "N", "longest sequence the model takes (positions)",
       "--seq-len for --text, else by --arch"),
    OM("dropout", LT_CLI_DOUBLE, dropout, dropout, "P", "dropout probability (PyTorch's places)",
       "0 for built-in tasks, else by --arch"),
    OE("norm", norm, F_MODEL, norm_ename, 2, "normalisation", "by --arch"),
    OD("pre-norm", LT_CLI_BOOL, pre_norm, F_MODEL, NULL, 0, 0, "pre-norm (--post-norm or --no-pre-norm: post-norm)",
       "by --arch"),
    OE("act", act, F_MODEL, act_ename, 4, "feed-forward activation", "by --arch"),
    OD("swiglu", LT_CLI_BOOL, swiglu, F_MODEL, NULL, 0, 0, "gated feed-forward: SwiGLU with --act silu, GEGLU with gelu_tanh",
       "by --arch"),
    OE("pos", pos, F_MODEL, pos_ename, 4, "positions (relative: T5's learned bucketed bias)", "by --arch"),
    OM("rel-buckets", LT_CLI_INT, rel_buckets, rel_buckets, "N", "--pos relative: buckets of each stack's bias table",
       "by --arch"),
    OM("rel-max-distance", LT_CLI_INT, rel_max_distance, rel_max_distance, "N",
       "--pos relative: the distance from which the last bucket is used", "by --arch"),
    OM("attn-scale", LT_CLI_DOUBLE, attn_scale, attn_scale, "X", "attention score scale (0: 1/sqrt(head size); T5: 1)",
       "by --arch"),
    OD("head-rescale", LT_CLI_BOOL, head_rescale, F_MODEL, NULL, 0, 0,
       "scale the decoder output by d_model^-0.5 before a tied head (T5)", "by --arch"),
    OD("tie", LT_CLI_BOOL, tie, F_MODEL, NULL, 0, 0, "tie the output projection to the embedding", "by --arch"),
    OD("scale-emb", LT_CLI_BOOL, scale_emb, F_MODEL, NULL, 0, 0, "multiply embeddings by sqrt(d_model)", "by --arch"),
    OD("bias", LT_CLI_BOOL, bias, F_MODEL, NULL, 0, 0, "biases on every Linear", "by --arch"),
    OM("norm-eps", LT_CLI_DOUBLE, norm_eps, norm_eps, "X", "epsilon of the norms", "by --arch"),
    OM("rope-base", LT_CLI_DOUBLE, rope_base, rope_base, "X", "RoPE base", "by --arch"),

    GROUP("Data (one source: a built-in task, --tsv or --text)"),
    OE("task", task, F_STATE, task_ename, LT_TASK_COUNT, "built-in seq2seq task, generated from --data-seed", NULL),
    O("tsv", LT_CLI_STRING, tsv, F_STATE, "FILE", 1, PATH_MAX_LEN,
      "parallel corpus, one 'source<TAB>target' per line (encoder-only: 'text<TAB>label')"),
    OD("valid-tsv", LT_CLI_STRING, valid_tsv, F_STATE, "FILE", 1, PATH_MAX_LEN,
       "validation pairs (else --valid-fraction of --tsv)", "none"),
    O("text", LT_CLI_STRING, text, F_STATE, "FILE", 1, PATH_MAX_LEN, "plain text for decoder-only language modelling"),
    O("data", LT_CLI_STRING, data, F_STATE, "GLOB", 1, PATH_MAX_LEN,
      "token shards for decoder-only language modelling, e.g. 'DIR/train_*.bin' (the tokenize program's; with the "
      "--tokenizer byte or --tokenizer-file it used)"),
    O("val-data", LT_CLI_STRING, val_data, F_STATE, "GLOB", 1, PATH_MAX_LEN,
      "validation shards for --data, e.g. 'DIR/val_*.bin' (loss and perplexity, split over ranks)"),
    O("task-train", LT_CLI_INT, task_train, F_STATE, "N", 1, 10000000, "training examples to generate"),
    O("task-valid", LT_CLI_INT, task_valid, F_STATE, "N", 1, 10000000, "held-out examples to generate"),
    OD("task-min-len", LT_CLI_INT, task_min_len, F_STATE | LT_CLI_UNSET_SAVED, "N", 1, 200,
       "shortest source (symbols; digits for number_words)", "by task"),
    OD("task-max-len", LT_CLI_INT, task_max_len, F_STATE | LT_CLI_UNSET_SAVED, "N", 1, 200, "longest source", "by task"),
    O("task-symbols", LT_CLI_INT, task_symbols, F_STATE, "N", 2, 36, "alphabet size of copy/reverse/sort (2..36)"),
    O("data-seed", LT_CLI_INT, data_seed, F_STATE, "N", 0, INT64_MAX,
      "seed of the generated training data (validation: N + 1)"),
    O("dump-data", LT_CLI_STRING, dump_data, F_RUN | F_NOSAVE, "DIR", 1, PATH_MAX_LEN,
      "write the task's train.tsv and valid.tsv into DIR, print the flags that train on them, and exit"),
    O("valid-fraction", LT_CLI_DOUBLE, valid_fraction, F_STATE | LT_CLI_MIN_OPEN | LT_CLI_MAX_OPEN, "X", 0, 1,
      "share held out for validation"),
    OE("tokenizer", tokenizer, F_STATE, tok_ename, 3, "tokenizer (char and bpe learn from the training text)",
       "bpe for number_words (whole words), else char"),
    OE("tokenizer-from", tokenizer_from, F_STATE, from_ename, 3, "pairs: the side(s) char and bpe learn from",
       "target for number_words, else both"),
    O("tokenizer-file", LT_CLI_STRING, tokenizer_file, F_RUN | F_NOSAVE, "FILE", 1, PATH_MAX_LEN,
      "use this tokenizer.json (Hugging Face tokenizers; docs/datasets.md) instead of --tokenizer (the checkpoint "
      "stores it)"),
    O("bpe-vocab", LT_CLI_INT, bpe_vocab, F_STATE, "N", 261, 1 << 20,
      "BPE vocabulary size (>= 261; learning stops early when no pair repeats)"),
    OD("seq-len", LT_CLI_INT, seq_len, F_STATE, "N", 2, 1 << 20,
       "language modelling: context length; seq2seq: most source tokens and target positions",
       "128 (LM), --max-len (seq2seq)"),
    OE("overlong", overlong, F_STATE, overlong_ename, 3, "what to do with a sequence longer than --seq-len", NULL),
    O("skip-bad-lines", LT_CLI_BOOL, skip_bad_lines, F_STATE, NULL, 0, 0,
      "skip (and count) bad TSV lines instead of failing"),
    O("bucket", LT_CLI_INT, bucket, F_STATE, "N", 0, 1 << 20, "sort by length within windows of N batches (0: off)"),
    O("shuffle", LT_CLI_BOOL, shuffle, F_STATE, NULL, 0, 0,
      "draw the training batches in a new order each epoch (--no-shuffle: the data's order, e.g. to train the same "
      "batches as another framework)"),

    GROUP("Training"),
    O("batch", LT_CLI_INT, batch, F_STATE, "N", 1, 65536, "examples (LM: sequences) per micro-batch"),
    O("steps", LT_CLI_INT, steps, F_RUN, "N", 1, COUNT_MAX, "optimizer steps"),
    OD("epochs", LT_CLI_INT, epochs, F_RUN, "N", 0, 1000000, "train for N epochs instead of --steps", "0: use --steps"),
    O("accum", LT_CLI_INT, accum, F_STATE, "N", 1, 65536, "micro-batches per optimizer step (gradient accumulation)"),
    OE("optim", optim, F_STATE, optim_ename, 3, "optimizer", "adam (encoder-decoder, as the paper), else adamw"),
    OD("lr", LT_CLI_DOUBLE, lr, F_STATE | LT_CLI_MIN_OPEN, "X", 0, 1e30,
       "learning rate (with noam: the peak, setting --noam-scale)", "1e-3"),
    OD("beta1", LT_CLI_DOUBLE, beta1, F_STATE | LT_CLI_MAX_OPEN, "X", 0, 1, "Adam beta1", "0.9"),
    OD("beta2", LT_CLI_DOUBLE, beta2, F_STATE | LT_CLI_MAX_OPEN, "X", 0, 1, "Adam beta2",
       "0.98 (encoder-decoder), else 0.999"),
    OD("eps", LT_CLI_DOUBLE, eps, F_STATE, "X", 0, 1, "Adam epsilon", "1e-9 (encoder-decoder), else 1e-8"),
    OD("weight-decay", LT_CLI_DOUBLE, weight_decay, F_STATE, "X", 0, 100,
       "weight decay (decoupled for adamw; not on norms, biases, embeddings)", "0.01 (adamw), else 0"),
    O("momentum", LT_CLI_DOUBLE, momentum, F_STATE, "X", 0, 1, "SGD momentum"),
    O("nesterov", LT_CLI_BOOL, nesterov, F_STATE, NULL, 0, 0, "SGD Nesterov momentum"),
    OE("schedule", schedule, F_STATE, sched_ename, 5, "learning-rate schedule",
       "noam (encoder-decoder, the paper's warmup), else cosine"),
    OD("warmup", LT_CLI_INT, warmup, F_STATE, "N", 0, COUNT_MAX, "warmup steps", "by --schedule"),
    O("min-lr", LT_CLI_DOUBLE, min_lr, F_STATE, "X", 0, 100, "final learning rate of linear and cosine"),
    O("noam-scale", LT_CLI_DOUBLE, noam_scale, F_STATE | LT_CLI_MIN_OPEN, "X", 0, 1e300,
      "noam: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)"),
    O("step-size", LT_CLI_INT, step_size, F_STATE, "N", 1, COUNT_MAX, "step schedule: decay every N steps"),
    O("gamma", LT_CLI_DOUBLE, gamma, F_STATE, "X", 0, 1e3, "step schedule: decay factor"),
    OD("label-smoothing", LT_CLI_DOUBLE, label_smoothing, F_STATE, "X", 0, 1, "label smoothing of the training loss",
       "0.1 (encoder-decoder), else 0"),
    O("clip", LT_CLI_DOUBLE, clip, F_STATE, "X", 0, 1e6, "clip the global gradient norm to X (0: off)"),
    O("seed", LT_CLI_INT, seed, F_STATE, "N", 0, INT64_MAX, "seed of initialisation, dropout and shuffling"),
    O("max-nonfinite", LT_CLI_INT, max_nonfinite, F_RUN, "N", 1, 1000000,
      "stop after N non-finite steps in a row (each is skipped)"),

    GROUP("Evaluation"),
    OD("eval-every", LT_CLI_INT, eval_every, F_RUN, "N", 0, COUNT_MAX, "validate every N steps (0: only at the end)",
       "by --steps"),
    O("eval-examples", LT_CLI_INT, eval_examples, F_RUN, "N", 1, 10000000,
      "held-out examples decoded for exact match during training (the end uses all)"),
    O("eval-batch", LT_CLI_INT, eval_batch, F_RUN, "N", 1, 65536, "batch size of validation and decoding"),
    O("examples", LT_CLI_INT, examples, F_RUN, "N", 0, 10000, "decoded examples printed at the end"),
    O("gen-tokens", LT_CLI_INT, gen_tokens, F_RUN, "N", 0, 1 << 20, "decoder-only: tokens generated at the end"),
    OD("prompt", LT_CLI_STRING, prompt, F_RUN, "TEXT", 1, 1 << 16, "decoder-only: prompt of the generated text",
       "the start of the validation text"),
    O("temperature", LT_CLI_DOUBLE, temperature, F_RUN, "X", 0, 100, "decoder-only: sampling temperature (0: greedy)"),
    O("top-k", LT_CLI_INT, top_k, F_RUN, "N", 0, 1 << 24,
      "decoder-only: sample among the N most likely tokens (0: all)"),

    GROUP("Checkpoints"),
    OD("ckpt-dir", LT_CLI_STRING, ckpt_dir, F_RUN | F_NOSAVE, "DIR", 1, PATH_MAX_LEN,
       "run directory: checkpoints and metrics.csv", "runs/<date>-<time>-<data>, or the resumed run's"),
    OD("ckpt-every", LT_CLI_INT, ckpt_every, F_RUN, "N", 0, COUNT_MAX, "save every N steps (0: only at the end)",
       "by --steps"),
    O("keep", LT_CLI_INT, keep, F_RUN, "N", 0, 1000000, "keep the N newest checkpoints (0: all)"),
    O("resume", LT_CLI_STRING, resume, F_RUN | F_NOSAVE, "PATH", 1, PATH_MAX_LEN,
      "continue from a checkpoint file, or the newest in a run directory"),
    O("init-from", LT_CLI_STRING, init_from, F_RUN | F_NOSAVE, "PATH", 1, PATH_MAX_LEN,
      "start from the weights (and model configuration and tokenizer) of a checkpoint file or a Hugging Face "
      "directory (export's, docs/interop.md), with a fresh optimizer and schedule"),
    O("overwrite", LT_CLI_BOOL, overwrite, F_RUN | F_NOSAVE, NULL, 0, 0,
      "start over in a --ckpt-dir that holds checkpoints (deletes them)"),
    O("no-ckpt", LT_CLI_BOOL, no_ckpt, F_RUN | F_NOSAVE, NULL, 0, 0, "write no checkpoint"),
    O("eval-only", LT_CLI_BOOL, eval_only, F_RUN | F_NOSAVE, NULL, 0, 0,
      "with --resume: only validate and print examples"),
    OD("stop-after", LT_CLI_INT, stop_after, F_RUN | F_NOSAVE, "N", 0, COUNT_MAX,
       "stop after step N with a checkpoint, as Ctrl-C would (for resume)", "0: off"),

    GROUP("Run"),
    OD("threads", LT_CLI_INT, threads, F_RUN | F_NOSAVE, "N", 0, 1024,
       "threads for BLIS and libtensor's kernels (results do not depend on it)",
       "LT_NUM_THREADS, else auto: all cores or 1, whichever trains faster (measured as it goes)"),
    OD("dist-timeout", LT_CLI_DOUBLE, dist_timeout, F_RUN | F_NOSAVE, "SECONDS", 0, 1e9,
       "under mpirun: a rank waiting this long for the others ends the job, naming the hung rank (0: never)",
       "LT_DIST_TIMEOUT, else 1800"),
    OD("bucket-mb", LT_CLI_DOUBLE, bucket_mb, F_RUN | F_NOSAVE, "MB", 0.0625, 4096,
       "under mpirun: gradients are averaged in buckets of about this size, each reduced as soon as backward has "
       "made it final (larger for many ranks over a slow network; docs/distributed.md)", "1"),
    OD("zero", LT_CLI_INT, zero, F_RUN | F_NOSAVE, "STAGE", 0, 1,
       "under mpirun: 1 keeps each rank's optimizer state for its 1/N of the parameters only (ZeRO-1: same "
       "results, less memory; checkpoints unchanged; docs/distributed.md)", "0: off"),
    O("log-every", LT_CLI_INT, log_every, F_RUN, "N", 1, COUNT_MAX,
      "progress line every N steps when stdout is not a terminal"),
    OE("precision", precision, F_RUN, lt_cli_precision_name, LT_CLI_PRECISION_COUNT,
       "matrix products in f32, or bf16 with f32 accumulation (autocast; master weights, gradients and "
       "optimizer state stay f32; docs/mixed-precision.md)", "f32"),
    OE("recompute", recompute, F_RUN, recompute_ename, 3,
       "what each layer recomputes in the backward instead of keeping: none, its attention sublayers, or the whole "
       "layer (less memory, one more forward of it; the same gradients bit for bit; docs/train.md)", "none"),
    O("chunked-head", LT_CLI_BOOL, chunked_head, F_RUN, NULL, 0, 0,
      "decoder losses through the chunked cross-entropy head: the B x T x V logits never exist (the same loss "
      "within rounding; docs/train.md)"),
    OD("csv", LT_CLI_STRING, csv, F_RUN | F_NOSAVE, "FILE", 1, PATH_MAX_LEN, "metrics CSV, one row per step",
       "<ckpt-dir>/metrics.csv"),
    OD("max-memory", LT_CLI_INT, max_memory, F_RUN | F_NOSAVE, "MIB", 0, INT64_MAX >> 20,
       "refuse a model (built or resumed) whose parameters need more memory (0: no cap)", "half of physical memory"),
    O("allow-unchecksummed", LT_CLI_BOOL, allow_unchecksummed, F_RUN | F_NOSAVE, NULL, 0, 0,
      "--resume: accept an HDF5 file without object header checksums (h5py's default layout; trusted sources "
      "only, docs/security.md)"),
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))
_Static_assert(N_OPTS <= MAX_OPTS, "raise MAX_OPTS in train_cli.h");

/* The defaults of the default run (an encoder-decoder on numbers in words,
 * docs/train.md "The default run"). Model fields left at -1 / NAN take
 * lt_tf_config_default(arch) unless given. */
options default_options(void) {
  options o;
  memset(&o, 0, sizeof o);
  o.max_memory = -1; /* lt_ckpt_default_memory_cap() */
  o.arch = LT_TF_ENCODER_DECODER;
  o.d_model = o.heads = o.kv_heads = o.enc_layers = o.dec_layers = o.d_ff = o.max_len = -1;
  o.dropout = o.norm_eps = o.rope_base = o.attn_scale = NAN;
  o.rel_buckets = o.rel_max_distance = -1;
  o.norm = o.act = o.pos = -1;
  o.task = LT_TASK_NUMBER_WORDS;
  o.task_train = 200000;
  o.task_valid = 1000;
  o.task_min_len = o.task_max_len = -1;
  o.task_symbols = 10;
  o.data_seed = 1234;
  o.valid_fraction = 0.1;
  o.tokenizer = o.tokenizer_from = -1;
  o.bpe_vocab = 1024;
  o.seq_len = -1;
  o.overlong = LT_OVERLONG_SKIP;
  o.bucket = 8;
  o.shuffle = true;
  o.batch = 64;
  o.steps = 4000;
  o.accum = 1;
  o.optim = -1;
  o.lr = o.beta1 = o.beta2 = o.eps = o.weight_decay = NAN;
  o.momentum = 0;
  o.schedule = -1;
  o.warmup = -1;
  o.min_lr = 0;
  o.noam_scale = 0.5;
  o.step_size = 1000;
  o.gamma = 0.1;
  o.label_smoothing = NAN;
  o.clip = 1.0;
  o.seed = 42;
  o.max_nonfinite = 5;
  o.eval_every = -1;
  o.eval_examples = 200;
  o.eval_batch = 128;
  o.examples = 8;
  o.gen_tokens = 200;
  o.temperature = 0;
  o.top_k = 0;
  o.ckpt_every = -1;
  o.keep = 3;
  o.threads = 0;
  o.dist_timeout = -1; /* not given: lt_dist's (LT_DIST_TIMEOUT, else the default) */
  o.bucket_mb = 0;     /* not given: lt_dist's default (LT_DIST_BUCKET_BYTES) */
  o.log_every = 100;
  return o;
}

static const lt_cli_alias ALIASES[] = {
  {"layers", {"enc-layers", "dec-layers"}, false, "sets --enc-layers and --dec-layers"},
  {"post-norm", {"pre-norm", NULL}, true, "the same as --no-pre-norm"},
};

static options g_defaults; /* default_options(), for --help */

const lt_cli CLI = {
  .prog = PROG,
  .synopsis = "usage: " PROG " [--FLAG VALUE | --FLAG=VALUE | --[no-]SWITCH]...\n"
              "\n"
              "Trains a Transformer and reports validation loss, token accuracy and exact match (greedy\n"
              "decoding). With no flags: an encoder-decoder learns to write numbers in words (about five\n"
              "minutes on 2 cores). Ctrl-C saves a checkpoint; --resume continues bit-exactly.\n",
  .epilogue = "Cross-flag limits: --batch x --seq-len and --eval-batch x --seq-len at most 2^24 tokens per\n"
              "micro-batch; --batch x --seq-len x --accum at most 2^32 tokens per step.\n"
              LT_CLI_EXIT_HELP
              "docs/train.md describes the flags, the CSV columns and checkpoints in full.\n",
  .opts = OPTS,
  .n_opts = N_OPTS,
  .aliases = ALIASES,
  .n_aliases = (int)(sizeof ALIASES / sizeof ALIASES[0]),
  .defaults = &g_defaults,
};

int opt_index(const char *name) { return lt_cli_find(&CLI, name); }

/* Parses argv into *o; given[i] says which options the command line set.
 * --help prints the flags and exits 0; a bad flag exits 2. */
void parse_args(int argc, char **argv, options *o, bool *given) {
  g_defaults = default_options();
  lt_cli_parse_or_exit(&CLI, argc, argv, o, given, NULL, NULL);
}

bool G(const bool *given, const char *name) { return given[opt_index(name)]; }

/* The model configuration the options describe, over base (the source's with
 * --init-from: its fields without a flag, such as pad_id, qkv_bias or
 * rope scaling, stay the source's), or over the architecture's defaults with
 * pad_id LT_TOKEN_PAD when base is NULL (vocab_size etc. set by the caller). */
lt_tf_config config_of(const options *o, const lt_tf_config *base) {
  lt_tf_config c = base ? *base : lt_tf_config_default((lt_tf_arch)o->arch);
  if (!base) c.pad_id = LT_TOKEN_PAD;
  c.d_model = o->d_model, c.n_heads = o->heads, c.n_kv_heads = o->kv_heads;
  c.n_enc_layers = o->enc_layers, c.n_dec_layers = o->dec_layers, c.d_ff = o->d_ff, c.max_len = o->max_len;
  c.dropout = o->dropout, c.norm = (lt_tf_norm)o->norm, c.pre_norm = o->pre_norm, c.act = (lt_activation)o->act;
  c.swiglu = o->swiglu, c.pos = (lt_tf_pos)o->pos, c.tie_embeddings = o->tie, c.scale_embeddings = o->scale_emb;
  c.bias = o->bias, c.norm_eps = o->norm_eps, c.rope_base = o->rope_base;
  c.rel_buckets = o->rel_buckets, c.rel_max_distance = o->rel_max_distance, c.attn_scale = o->attn_scale;
  c.head_rescale = o->head_rescale;
  return c;
}

void options_from_config(options *o, const lt_tf_config *c) {
  o->arch = (int)c->arch;
  o->d_model = c->d_model, o->heads = c->n_heads, o->kv_heads = c->n_kv_heads;
  o->enc_layers = c->n_enc_layers, o->dec_layers = c->n_dec_layers, o->d_ff = c->d_ff, o->max_len = c->max_len;
  o->dropout = c->dropout, o->norm = (int)c->norm, o->pre_norm = c->pre_norm, o->act = (int)c->act;
  o->swiglu = c->swiglu, o->pos = (int)c->pos, o->tie = c->tie_embeddings, o->scale_emb = c->scale_embeddings;
  o->bias = c->bias, o->norm_eps = c->norm_eps, o->rope_base = c->rope_base;
  o->rel_buckets = c->rel_buckets, o->rel_max_distance = c->rel_max_distance, o->attn_scale = c->attn_scale;
  o->head_rescale = c->head_rescale;
}

/* Fills every default that depends on other flags (fresh runs only: a resumed
 * run takes its settings from the checkpoint). */
void finalize_options(options *o, const bool *given) {
  /* model: lt_tf_config_default(arch) for every field not given */
  options m = *o;
  lt_tf_config dc = lt_tf_config_default((lt_tf_arch)o->arch);
  options_from_config(&m, &dc);
  for (int i = 0; i < N_OPTS; i++)
    if ((OPTS[i].flags & F_MODEL) && OPTS[i].kind != LT_CLI_GROUP && !given[i]) lt_cli_copy_value(&OPTS[i], o, &m);
  if (given[opt_index("heads")] && !given[opt_index("kv-heads")]) o->kv_heads = o->heads;
  /* generated tasks never repeat an epoch's worth of data much: no dropout needed (and it slows learning) */
  if (!given[opt_index("dropout")] && !o->tsv && !o->text && !o->data) o->dropout = 0.0;

  bool encdec = o->arch == LT_TF_ENCODER_DECODER;
  int n_src = G(given, "task") + (o->tsv != NULL) + (o->text != NULL) + (o->data != NULL);
  if (n_src > 1) die(EXIT_USAGE, "give one data source: --task, --tsv, --text or --data");
  if ((o->text || o->data) && o->arch != LT_TF_DECODER_ONLY)
    die(EXIT_USAGE, "--%s is language modelling: it needs --arch decoder-only", o->text ? "text" : "data");
  if (o->val_data && !o->data) die(EXIT_USAGE, "--val-data needs --data");
  if (o->data && !o->val_data) die(EXIT_USAGE, "--data needs --val-data (a glob of validation shards)");
  if (o->arch == LT_TF_DECODER_ONLY && !o->text && !o->data)
    die(EXIT_USAGE, "--arch decoder-only trains on a text file: give --text FILE (for example "
                    "--text /usr/share/common-licenses/GPL-3) or token shards: --data GLOB --val-data GLOB");
  if (o->arch == LT_TF_ENCODER_ONLY && !o->tsv)
    die(EXIT_USAGE, "--arch encoder-only classifies: give --tsv FILE with 'text<TAB>label' lines");
  if (o->valid_tsv && !o->tsv) die(EXIT_USAGE, "--valid-tsv needs --tsv");
  bool words = !o->tsv && !o->text && !o->data && o->task == LT_TASK_NUMBER_WORDS;
  if (o->tokenizer < 0) o->tokenizer = words ? LT_TOKENIZER_BPE : LT_TOKENIZER_CHAR;
  if (o->tokenizer_from < 0) o->tokenizer_from = words ? LT_TF_TOKENIZER_FROM_TARGET : LT_TF_TOKENIZER_FROM_BOTH;
  if (!o->tsv && !o->text && !o->data) { /* task lengths by task */
    lt_task_opts td = LT_TASK_DEFAULTS((lt_task_kind)o->task);
    if (o->task == LT_TASK_NUMBER_WORDS) td.min_len = 1, td.max_len = 6;
    if (!G(given, "task-min-len")) o->task_min_len = td.min_len;
    if (!G(given, "task-max-len")) o->task_max_len = td.max_len;
  }

  /* optimizer: the paper's Adam for the encoder-decoder, AdamW otherwise */
  if (o->optim < 0) o->optim = encdec ? LT_OPTIM_ADAM : LT_OPTIM_ADAMW;
  lt_optim_config od = lt_optim_defaults((lt_optim_kind)o->optim);
  if (encdec && o->optim != LT_OPTIM_SGD) od.beta2 = 0.98, od.eps = 1e-9;
  if (!G(given, "beta1")) o->beta1 = od.beta1;
  if (!G(given, "beta2")) o->beta2 = od.beta2;
  if (!G(given, "eps")) o->eps = od.eps;
  if (!G(given, "weight-decay")) o->weight_decay = od.weight_decay;
  if (!G(given, "momentum")) o->momentum = od.momentum;
  if (!G(given, "nesterov")) o->nesterov = od.nesterov;

  if (o->schedule < 0) o->schedule = encdec ? LT_SCHED_NOAM : LT_SCHED_WARMUP_COSINE;
  if (!G(given, "warmup")) {
    int64_t w = o->steps / 10 > 0 ? o->steps / 10 : 1;
    o->warmup = o->schedule == LT_SCHED_NOAM ? (w < 400 ? w : 400) : (w < 100 ? w : 100);
    if (o->schedule == LT_SCHED_CONSTANT || o->schedule == LT_SCHED_STEP) o->warmup = 0;
  }
  if (!G(given, "lr")) o->lr = 1e-3;
  if (o->schedule == LT_SCHED_NOAM && G(given, "lr")) {
    if (G(given, "noam-scale")) die(EXIT_USAGE, "with --schedule noam give --lr (the peak) or --noam-scale, not both");
    /* peak at step = warmup: scale * d_model^-0.5 * warmup^-0.5 = lr */
    double w = (double)(o->warmup > 0 ? o->warmup : 1);
    o->noam_scale = o->lr * sqrt((double)o->d_model) * sqrt(w);
  }
  if (!G(given, "label-smoothing")) o->label_smoothing = encdec ? 0.1 : 0.0;
  if (o->text || o->data) { /* language modelling: the model's positions are the context it trains on */
    if (!G(given, "seq-len")) o->seq_len = G(given, "max-len") && o->max_len < 128 ? o->max_len : 128;
    if (!G(given, "max-len")) o->max_len = o->seq_len;
  } else if (!G(given, "seq-len")) {
    o->seq_len = o->max_len;
  }
}

/* The checks across flags (each flag's own range is in OPTS and was checked
 * as it was parsed, or read from a checkpoint). */
void check_options(const options *o, const bool *given) {
#define NEED(cond, ...) \
  do {                  \
    if (!(cond)) die(EXIT_USAGE, __VA_ARGS__); \
  } while (0)
  NEED(!(G(given, "steps") && G(given, "epochs")), "give --steps or --epochs, not both");
  NEED(o->seq_len <= o->max_len, "--seq-len %lld is longer than the model's --max-len %lld", (long long)o->seq_len,
       (long long)o->max_len);
  NEED(!o->eval_only || o->resume, "--eval-only evaluates a checkpoint: give --resume PATH");
  NEED(!o->dump_data || (!o->tsv && !o->text && !o->data && !o->resume),
       "--dump-data writes a generated task's data: give no --tsv, --text, --data or --resume");
  NEED(!(o->resume && o->init_from), "--init-from starts a new run from weights; --resume continues one: not both");
  NEED(!(o->resume && o->tokenizer_file), "--tokenizer-file starts a new run; --resume continues with the "
       "checkpoint's tokenizer: not both");
  /* tokens per micro-batch and per step (sizes of the batches, logits and their counts) */
  const int64_t micro_max = (int64_t)1 << 24, step_max = (int64_t)1 << 32;
  int64_t micro, eval_micro, step;
  NEED(!__builtin_mul_overflow(o->batch, o->seq_len, &micro) && micro <= micro_max,
       "--batch %lld x --seq-len %lld: at most 2^24 (%lld) tokens per micro-batch", (long long)o->batch,
       (long long)o->seq_len, (long long)micro_max);
  NEED(!__builtin_mul_overflow(o->eval_batch, o->seq_len, &eval_micro) && eval_micro <= micro_max,
       "--eval-batch %lld x --seq-len %lld: at most 2^24 (%lld) tokens per validation batch", (long long)o->eval_batch,
       (long long)o->seq_len, (long long)micro_max);
  NEED(!__builtin_mul_overflow(micro, o->accum, &step) && step <= step_max,
       "--batch %lld x --seq-len %lld x --accum %lld: at most 2^32 (%lld) tokens per optimizer step",
       (long long)o->batch, (long long)o->seq_len, (long long)o->accum, (long long)step_max);
#undef NEED
}

/* The data flags as the library's options. */
lt_tf_data_opts data_opts(const options *o) {
  return (lt_tf_data_opts){
      .text = o->text, .data = o->data, .val_data = o->val_data, .eval_batch = o->eval_batch, .tsv = o->tsv, .valid_tsv = o->valid_tsv, .skip_bad_lines = o->skip_bad_lines,
      .classify = o->arch == LT_TF_ENCODER_ONLY, .task = (lt_task_kind)o->task, .task_train = o->task_train,
      .task_valid = o->task_valid, .task_min_len = o->task_min_len, .task_max_len = o->task_max_len,
      .task_symbols = o->task_symbols, .data_seed = (uint64_t)o->data_seed, .valid_fraction = o->valid_fraction,
      .tokenizer = (lt_tokenizer_kind)o->tokenizer, .tokenizer_from = (lt_tf_tokenizer_from)o->tokenizer_from,
      .bpe_vocab = o->bpe_vocab, .seq_len = o->seq_len, .overlong = (lt_overlong)o->overlong, .batch = o->batch,
      .bucket = o->bucket, .in_order = !o->shuffle, .seed = (uint64_t)o->seed};
}

/* Settings of a resumed run: saved holds the checkpoint's; the command
 * line's run flags go on top; a model, data or optimizer flag must not differ. */
void merge_resumed_options(options *saved, const options *cmd, const bool *given) {
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (d->kind == LT_CLI_GROUP) continue;
    if (d->flags & F_NOSAVE) {
      lt_cli_copy_value(d, saved, cmd); /* this process's own */
    } else if (given[i]) {
      if (d->flags & F_RUN) {
        lt_cli_copy_value(d, saved, cmd);
      } else if (!lt_cli_same_value(d, saved, cmd)) {
        char mine[256], theirs[256];
        die(EXIT_USAGE, "--%s %s differs from the checkpoint's %s: a resumed run keeps the %s it was started with "
            "(leave the flag out, or start a new run)", d->name, lt_cli_value_text(d, cmd, mine, sizeof mine),
            lt_cli_value_text(d, saved, theirs, sizeof theirs),
            d->flags & F_MODEL ? "model" : "data and optimizer settings");
      }
    }
  }
  if (given[opt_index("steps")]) saved->epochs = 0;
}

/* --init-from: the model flags come from src (a given one must agree), but
 * for --dropout: a rate of training, not of the weights, so a given one
 * replaces the source's (fine-tuning without dropout, as a comparison with
 * another framework needs). */
void take_model_options(options *o, bool *given, const options *src) {
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (!(d->flags & F_MODEL) || d->kind == LT_CLI_GROUP) continue;
    if (given[i] && d->offset == offsetof(options, dropout)) continue;
    if (given[i] && !lt_cli_same_value(d, src, o)) {
      char mine[256], theirs[256];
      die(EXIT_USAGE, "--%s %s differs from --init-from's %s (the model comes from it: leave the flag out)", d->name,
          lt_cli_value_text(d, o, mine, sizeof mine), lt_cli_value_text(d, src, theirs, sizeof theirs));
    }
    lt_cli_copy_value(d, o, src);
    given[i] = true; /* so that finalize_options keeps it */
  }
}
