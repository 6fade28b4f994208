/*
 * checkpoint/checkpoint.h: saving and loading models and training runs as
 * HDF5 files, safely. The format is documented in docs/checkpoint-format.md
 * (format version LT_CKPT_FORMAT_VERSION).
 *
 * What this is:
 * - One HDF5 file per checkpoint. Every tensor of an lt_params store is a
 *   dataset under /model at the path given by its state_dict name with dots
 *   as separators ("encoder.layers.0.self_attn.q_proj.weight" ->
 *   /model/encoder/layers/0/self_attn/q_proj/weight), so h5dump and h5py
 *   list the same names and shapes as the equivalent PyTorch state_dict.
 *   A training checkpoint adds the optimizer state (/optim/<param path>/<state>),
 *   the optimizer's step and hyperparameters, the schedule and its position,
 *   named generator states, and caller-given "extra" values and byte blobs
 *   (data-loader position, tokenizer).
 * - Checked before it is trusted (docs/security.md states the trust model):
 *   only a regular file is opened (a FIFO or device is refused at once); a
 *   512-byte integrity header in the HDF5 user block records the file's size
 *   and a CRC32, checked before HDF5 parses a single byte (it catches
 *   accidents, not attackers); HDF5 layouts without checksums (h5py's
 *   default) are refused unless allow_unchecksummed; then links, layouts,
 *   filters, types, ranks and dimensions are checked and sizes summed against
 *   the caps before anything is allocated, everything is read into scratch
 *   memory and checked (NaN/Inf refused by default, optimizer and schedule
 *   state range-checked always), and only then copied into the model. A
 *   failed load changes nothing.
 * - Durable to save: HDF5 builds the file in memory; it is then written to a
 *   temporary file in the destination directory, fsynced, renamed over the
 *   final name, and the directory fsynced. A crash leaves either the old
 *   checkpoint or the new one, never a torn file under a checkpoint's name;
 *   leftover temporaries are cleaned up by later saves. A failed write (disk
 *   full) is an error and leaves the previous file intact. A save needs
 *   memory for the file image (about the size of the tensors written).
 *
 * What this is not: a general HDF5 reader. Only files laid out as documented
 * (written by this module, or by h5py following docs/checkpoint-format.md and
 * sealed with lt_ckpt_seal) are accepted. Not thread-safe with respect to
 * other HDF5 use in the same process: during a call, HDF5's automatic error
 * printing and plugin loading are switched off and restored afterwards.
 *
 * Errors follow tensor/tensor.h: a status code and lt_last_error(). Codes used:
 *   LT_ERR_IO        the file or directory cannot be opened, read, written,
 *                    synced or renamed (disk full, file size limit, ...);
 *   LT_ERR_FORMAT    not a regular file (FIFO, device, directory), not a
 *                    checkpoint, damaged (size or checksum), an unchecksummed
 *                    HDF5 layout, not laid out as documented (links, layouts,
 *                    filters, versions), optimizer or schedule values out of
 *                    range (the message names group, attribute, value, range);
 *   LT_ERR_DTYPE     a dataset's element type differs from the model tensor's;
 *   LT_ERR_SHAPE     a dataset's rank or dimensions differ from the model's;
 *   LT_ERR_OVERFLOW  a dataset's dimensions overflow size arithmetic or exceed
 *                    the hard caps;
 *   LT_ERR_INVALID   bad arguments, names that do not match the model in
 *                    strict mode, configuration values that differ;
 *   LT_ERR_NUMERIC   NaN or infinite values without allow_nonfinite, and
 *                    non-finite optimizer moments always;
 *   LT_ERR_NOMEM     out of memory, or over the memory cap (max_bytes).
 */
#ifndef LT_CHECKPOINT_H
#define LT_CHECKPOINT_H

#include "nn/nn.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format this library writes and the newest it reads. */
#define LT_CKPT_FORMAT_NAME "libtensor-checkpoint"
#define LT_CKPT_FORMAT_VERSION 2

/* ======================================================================== */
/* Named values: configuration and "extra" training state                   */
/* ======================================================================== */

/* An ordered map from key to an int64, a double, a string or a byte blob.
 * Used for the model configuration (saved as attributes of /model: int, double
 * and string only) and for extra training state (attributes of /extra; blobs
 * as uint8 datasets /extra/<key>). Keys: 1 to 255 bytes, no '/', not "." or
 * "..". Setting an existing key replaces its value (and kind). */
typedef struct lt_ckpt_meta lt_ckpt_meta;

typedef enum {
  LT_CKPT_INT,
  LT_CKPT_DOUBLE,
  LT_CKPT_STRING,
  LT_CKPT_BYTES,
} lt_ckpt_kind;

LT_API lt_ckpt_meta *lt_ckpt_meta_new(void);      /* returns new; free with lt_ckpt_meta_free */
LT_API void lt_ckpt_meta_free(lt_ckpt_meta *m);   /* NULL is a no-op */
LT_API lt_status lt_ckpt_meta_set_int(lt_ckpt_meta *m, const char *key, int64_t value);
LT_API lt_status lt_ckpt_meta_set_double(lt_ckpt_meta *m, const char *key, double value);
LT_API lt_status lt_ckpt_meta_set_string(lt_ckpt_meta *m, const char *key, const char *value); /* copied */
LT_API lt_status lt_ckpt_meta_set_bytes(lt_ckpt_meta *m, const char *key, const void *data, size_t size); /* copied */
LT_API int lt_ckpt_meta_count(const lt_ckpt_meta *m);
/* Key and kind of entry i (in insertion order); NULL / -1 if out of range. */
LT_API const char *lt_ckpt_meta_key(const lt_ckpt_meta *m, int i);
LT_API int lt_ckpt_meta_kind(const lt_ckpt_meta *m, const char *key); /* an lt_ckpt_kind, or -1 if absent */
/* Getters: LT_ERR_INDEX if the key is absent, LT_ERR_DTYPE if it holds
 * another kind. Strings and blobs are borrowed (valid until the entry is
 * replaced or the map freed). */
LT_API lt_status lt_ckpt_meta_get_int(const lt_ckpt_meta *m, const char *key, int64_t *value);
LT_API lt_status lt_ckpt_meta_get_double(const lt_ckpt_meta *m, const char *key, double *value);
LT_API lt_status lt_ckpt_meta_get_string(const lt_ckpt_meta *m, const char *key, const char **value);
LT_API lt_status lt_ckpt_meta_get_bytes(const lt_ckpt_meta *m, const char *key, const void **data, size_t *size);

/* ======================================================================== */
/* Options and what a load reports                                          */
/* ======================================================================== */

typedef struct lt_ckpt_save_opts {
  bool uncompressed;   /* store every tensor contiguous and uncompressed */
  int deflate_level;   /* 1..9; 0 means the default (1, fast) */
} lt_ckpt_save_opts;
/* Compressed chunks at deflate level 1. */
#define LT_CKPT_SAVE_DEFAULTS ((lt_ckpt_save_opts){.uncompressed = false})

typedef struct lt_ckpt_load_opts {
  /* Strict (false, the default): every model name must be in the file and
   * every file name in the model; the error lists them. Non-strict: missing
   * ones keep their values, unexpected ones are skipped (fine-tuning); both
   * lists are returned in lt_ckpt_info. Also applies to optimizer states and
   * generators of a training load (listed as "optim/<param>.<state>" and
   * "rng/<name>"; an optimizer state absent from the file is never missing:
   * the parameter simply had no update yet). */
  bool non_strict;
  /* Accept NaN and infinities in model tensors. Optimizer state is always
   * checked (finite moments, exp_avg_sq >= 0, steps in [0, LT_OPTIM_MAX_STEP]):
   * a non-finite moment would turn every later update into NaN. */
  bool allow_nonfinite;
  bool allow_hparam_change;           /* training load: optimizer hyperparameters may differ */
  const lt_ckpt_meta *expect_config;  /* keys whose values the file's config must equal, or NULL */
  /* Accept HDF5 files whose object headers carry no checksums (version-0/1
   * superblock, version-1 object headers, old-style groups: h5py's default
   * layout). Refused by default: libhdf5 1.10 has known parser faults on
   * crafted files of that layout (docs/security.md). Only for files from a
   * source you trust; better rewrite them (h5repack --latest). */
  bool allow_unchecksummed;
  /* Memory cap in bytes for what a load allocates for the file's tensors
   * and blobs (summed from the HDF5 metadata and refused, LT_ERR_NOMEM,
   * before anything is allocated); 0: no cap. See also
   * lt_ckpt_check_model_size and lt_ckpt_default_memory_cap. */
  uint64_t max_bytes;
} lt_ckpt_load_opts;
/* Strict, every check on, no expected configuration, no memory cap. */
#define LT_CKPT_LOAD_DEFAULTS ((lt_ckpt_load_opts){.non_strict = false})

/* What a successful load read besides the tensors it copied. */
typedef struct lt_ckpt_info {
  int64_t format_version;
  char *library_version;     /* lt_version() of the writer */
  bool training;             /* a full training state (else model only) */
  lt_ckpt_meta *config;      /* the model configuration (attributes of /model) */
  lt_ckpt_meta *extra;       /* training: the extra values and blobs; else empty */
  int n_missing;             /* names in the model but not in the file (non-strict; see non_strict) */
  char **missing;
  int n_unexpected;          /* names in the file but not in the model (non-strict) */
  char **unexpected;
  /* What the file's /model holds, from the HDF5 metadata of every dataset
   * (types and dataspaces checked; no data read), whatever the model given
   * to the load: so a caller can size a model from the configuration and
   * compare before building it (lt_ckpt_check_model_size). */
  int64_t model_tensors;     /* datasets under /model */
  int64_t model_elements;    /* their elements, summed */
  uint64_t model_bytes;      /* their bytes in memory, summed */
} lt_ckpt_info;
LT_API void lt_ckpt_info_free(lt_ckpt_info *info); /* NULL is a no-op */

/* Before building a model from a checkpoint's configuration: n_params
 * elements (bytes bytes in memory) are what the configuration describes
 * (e.g. lt_tf_config_size). Refuses, naming both sides, a model with more
 * elements than the file's /model holds (LT_ERR_FORMAT: the configuration
 * claims more than the file can fill, such as 100,000 layers in a small
 * file) and a model of more than max_bytes bytes (LT_ERR_NOMEM; max_bytes 0:
 * no cap). path is for messages (may be NULL). Allocates nothing. */
LT_API lt_status lt_ckpt_check_model_size(const lt_ckpt_info *info, const char *path, int64_t n_params, uint64_t bytes,
                                   uint64_t max_bytes);
/* The default memory cap of the programs: half of the physical memory
 * (sysconf), or 0 (no cap) if it cannot be found. */
LT_API uint64_t lt_ckpt_default_memory_cap(void);

/* ======================================================================== */
/* Model parameters                                                         */
/* ======================================================================== */

/* Saves every parameter and buffer of p (each in its own dtype, f32 for
 * ordinary models) and the configuration (int/double/string values, may be
 * NULL) durably to path. */
LT_API lt_status lt_ckpt_save_params(const char *path, const lt_params *p, const lt_ckpt_meta *config,
                              const lt_ckpt_save_opts *opts);
/* Loads the tensors of /model into p (opts may be NULL for the defaults).
 * On success, if info is not NULL, *info is set to a new lt_ckpt_info. On
 * failure p is unchanged and *info is NULL. Works on model and training
 * checkpoints alike. */
LT_API lt_status lt_ckpt_load_params(const char *path, lt_params *p, const lt_ckpt_load_opts *opts,
                              lt_ckpt_info **info);

/* ======================================================================== */
/* Describing a checkpoint without building anything                       */
/* ======================================================================== */

/* One tensor of a checkpoint, from its HDF5 metadata (no data read). */
typedef struct lt_ckpt_tensor_desc {
  char *name;                  /* state_dict name ("fc1.weight"); optimizer states "<param>.<state>"
                                  ("fc1.weight.exp_avg") */
  lt_dtype dtype;              /* LT_DTYPE_COUNT: a type no libtensor dtype has (a load refuses it) */
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  int64_t numel;
  uint64_t bytes;              /* in memory */
} lt_ckpt_tensor_desc;

/* What a checkpoint holds: its configuration and its tensors. */
typedef struct lt_ckpt_desc {
  int64_t format_version;
  char *library_version;       /* lt_version() of the writer */
  bool training;               /* a full training state (else model only) */
  lt_ckpt_meta *config;        /* the model configuration (attributes of /model) */
  int n_tensors;               /* the datasets under /model, sorted by name */
  lt_ckpt_tensor_desc *tensors;
  int64_t model_elements;      /* their elements, summed (as lt_ckpt_info's) */
  uint64_t model_bytes;        /* their bytes in memory, summed */
  /* Training checkpoints with optimizer state (/optim); else NULL, 0, 0, NULL. */
  char *optim_kind;            /* "adamw", "sgd", ... (lt_optim_kind_name) */
  int64_t optim_step;          /* optimizer steps done, in [0, LT_OPTIM_MAX_STEP] */
  int n_optim;                 /* the state tensors, sorted by name */
  lt_ckpt_tensor_desc *optim;
} lt_ckpt_desc;
LT_API void lt_ckpt_desc_free(lt_ckpt_desc *d); /* frees d and everything in it; NULL is a no-op */

/* Reads path's configuration and the name, dtype and shape of every tensor
 * under /model (and, for a training checkpoint, of every optimizer state),
 * from the HDF5 metadata only: no tensor data is read and no model built,
 * so a program can list a checkpoint or size a model before building it.
 * The file is checked as a load checks it (regular file, integrity header,
 * checksummed layout unless opts->allow_unchecksummed, links, layouts,
 * filters, ranks and dimensions overflow-checked and capped by the file's
 * size), with the same walker and checks. opts may be NULL for the
 * defaults; only allow_unchecksummed and max_bytes apply (max_bytes caps
 * what the description itself allocates: its names and entries).
 * On success *desc is new (free with lt_ckpt_desc_free); on failure *desc
 * is NULL, with the loader's codes and messages (LT_ERR_IO, LT_ERR_FORMAT,
 * LT_ERR_OVERFLOW, LT_ERR_NOMEM; LT_ERR_NULL for a NULL path or desc). */
LT_API lt_status lt_ckpt_describe(const char *path, const lt_ckpt_load_opts *opts, lt_ckpt_desc **desc);

/* ======================================================================== */
/* Full training state                                                      */
/* ======================================================================== */

/* Everything a training run needs to resume, as borrowed pointers. Saving
 * reads it; loading writes it (tensors, optimizer state, learning rate and
 * step count, generator states, *schedule and step). */
typedef struct lt_train_state {
  lt_params *params;                    /* required */
  lt_optimizer *optim;                  /* optional */
  const lt_optim_config *optim_config;  /* required with optim: its kind and hyperparameters */
  lt_schedule *schedule;                /* optional */
  int64_t step;                         /* optimizer steps done = the schedule's position */
  int n_generators;                     /* named generators (dropout, data shuffling, ...) */
  const char *const *generator_names;
  lt_generator *const *generators;
} lt_train_state;

/* Saves the training state, the configuration and the extra values and blobs
 * (both may be NULL) durably to path. */
LT_API lt_status lt_ckpt_save_training(const char *path, const lt_train_state *st, const lt_ckpt_meta *config,
                                const lt_ckpt_meta *extra, const lt_ckpt_save_opts *opts);
/* Loads a training checkpoint into st (the optimizer's kind must match
 * st->optim_config's, and so must its hyperparameters unless
 * allow_hparam_change; the learning rate is restored from the file). The
 * extra values come back in (*info)->extra. On failure nothing in st changed. */
LT_API lt_status lt_ckpt_load_training(const char *path, lt_train_state *st, const lt_ckpt_load_opts *opts,
                                lt_ckpt_info **info);

/* ======================================================================== */
/* Files: integrity, numbered checkpoints, rotation                         */
/* ======================================================================== */

/* Checks the integrity header (size and CRC32) of path without parsing HDF5.
 * LT_OK, or LT_ERR_FORMAT / LT_ERR_IO naming the problem (a path that is not
 * a regular file is LT_ERR_FORMAT, refused without blocking). */
LT_API lt_status lt_ckpt_verify(const char *path);
/* Writes the integrity header into an HDF5 file that has a 512-byte user
 * block (h5py: File(path, "w", userblock_size=512)) and fsyncs it, so that
 * files written by other tools can be loaded. */
LT_API lt_status lt_ckpt_seal(const char *path);

/* "<dir>/<prefix>-<step as 12 digits>.h5" into buf. prefix: no '/'. */
LT_API lt_status lt_ckpt_step_path(char *buf, size_t size, const char *dir, const char *prefix, int64_t step);
/* The newest numbered checkpoint of prefix in dir (exact name pattern only,
 * regular files only: a FIFO or directory under such a name is ignored;
 * temporaries never match). With verify, candidates whose integrity check
 * fails are skipped for the next older one. Sets *step to -1 and path to ""
 * if there is none (that is not an error). path may be NULL. */
LT_API lt_status lt_ckpt_latest(const char *dir, const char *prefix, bool verify, int64_t *step, char *path,
                         size_t size);
/* Deletes all but the keep_last newest numbered checkpoints of prefix in dir
 * (keep_last <= 0 keeps all; regular files only, as lt_ckpt_latest) and
 * every leftover temporary of a crashed save. */
LT_API lt_status lt_ckpt_rotate(const char *dir, const char *prefix, int keep_last);

/* Whole files beside a checkpoint (config.json of an exported directory).
 * lt_ckpt_write_file writes size bytes of data (borrowed) to path durably,
 * as a save does (temporary in the same directory, fsync, rename, fsync of
 * the directory): a failure leaves the old file (LT_ERR_IO). */
LT_API lt_status lt_ckpt_write_file(const char *path, const void *data, size_t size);
/* Reads the regular file path (a FIFO, device or directory is refused
 * without blocking, LT_ERR_IO) of at most max_bytes bytes (LT_ERR_OVERFLOW
 * naming the bound) into new memory *data (free with free();
 * NUL-terminated after *size bytes; size may be NULL). */
LT_API lt_status lt_ckpt_read_file(const char *path, uint64_t max_bytes, char **data, size_t *size);

#ifdef __cplusplus
}
#endif
#endif /* LT_CHECKPOINT_H */
