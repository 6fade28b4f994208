/*
 * checkpoint/internal.h: what the files of checkpoint/ share. Not installed.
 *
 *   seal.c    the integrity header (size + CRC32 in the 512-byte user block)
 *             and the durable file dance (temporary, fsync, rename, fsync dir,
 *             rotation, stale temporaries);
 *   h5.c      HDF5 plumbing: error silencing and stack capture, types,
 *             typed attributes, tensor datasets written;
 *   h5_check.c  the checked reader: object headers read before HDF5 reads
 *             them, the tree walk, dataset checks and reads;
 *   meta.c    lt_ckpt_meta;
 *   rules.c   what the metadata must be, judged on the values HDF5 returned
 *             (no hid_t): root attributes, datasets' storage, type and dims,
 *             group names, optimizer and schedule attributes, blobs, values;
 *   checkpoint.c  the layout, and loading and describing checkpoints;
 *   save.c    saving parameters and training state in that layout.
 */
#ifndef LT_CHECKPOINT_INTERNAL_H
#define LT_CHECKPOINT_INTERNAL_H

#include <hdf5.h>

#include "checkpoint/checkpoint.h"

/* ---- integrity header (seal.c) ----------------------------------------- */

#define LT__CKPT_UB 512 /* user block size = integrity header size */

/* Opens path read-only as a regular file (tensor/file.c: a FIFO, device or
 * directory is refused at once, LT_ERR_FORMAT), checks the header (magic,
 * version, its CRC, size, payload CRC) on that descriptor and returns it in
 * *fd (the caller closes it; -1 on failure) with the file's size (size may
 * be NULL). HDF5 then opens the same file through /proc/self/fd/<fd>, so
 * what it parses is what was verified. */
lt_status lt__ckpt_open_verified(const char *path, int *fd, uint64_t *size);
/* lt__ckpt_open_verified, descriptor closed. */
lt_status lt__ckpt_verify(const char *path);
/* Writes the header into the open file fd (HDF5 data from byte 512 on) and
 * fsyncs it. */
lt_status lt__ckpt_seal_fd(int fd, const char *path);
/* Fills buf[0, 512) with the header of the size-byte file image buf. */
void lt__ckpt_seal_buffer(unsigned char *buf, size_t size);

/* A save in progress: a locked temporary in the destination directory. */
typedef struct lt__tmpfile {
  int fd;             /* our descriptor on the temporary, holding its flock */
  char *final_path;
  char *tmp_path;
  char *dir;
} lt__tmpfile;
/* Cleans up stale temporaries in path's directory and creates a new locked
 * temporary for path. */
lt_status lt__tmp_begin(const char *final_path, lt__tmpfile *t);
/* Writes the (sealed) file image buf, fsyncs, renames over final_path,
 * fsyncs the directory. On failure the temporary is removed and final_path
 * is untouched. Always releases t. */
lt_status lt__tmp_commit(lt__tmpfile *t, const unsigned char *buf, size_t size);
/* Removes the temporary and releases t. */
void lt__tmp_abort(lt__tmpfile *t);
/* True for names of our temporaries (".<name>.lttmp.<pid>.<n>"). */
bool lt__is_tmp_name(const char *name);

/* ---- HDF5 plumbing (h5.c; the checked reader: h5_check.c) ------------- */

/* Entered around every public call: HDF5 error printing off, plugin loading
 * off, both restored on leave. */
typedef struct lt__h5_guard {
  H5E_auto2_t old_func;
  void *old_data;
  unsigned old_plugins;
  bool have_auto, have_plugins;
} lt__h5_guard;
void lt__h5_enter(lt__h5_guard *g);
void lt__h5_leave(lt__h5_guard *g);

/* lt__err with ": HDF5: <innermost error stack entries>" appended (and the
 * stack cleared). */
lt_status lt__h5_err(lt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The tail lt__h5_err appends, ": HDF5: <innermost entries>" (or "" for an
 * empty stack), written into buf, and the stack cleared. */
void lt__h5_stack_tail(char *buf, size_t size);

/* The HDF5 file type of a dtype (little-endian; bool is h5py's enum) and the
 * matching memory type. Both are new type ids (H5Tclose them). */
hid_t lt__h5_file_type(lt_dtype d);
hid_t lt__h5_mem_type(lt_dtype d);
/* The dtype whose file type (lt__h5_file_type) type is exactly, or
 * LT_DTYPE_COUNT for none. */
lt_dtype lt__h5_dtype_of(hid_t type);
/* "f32 (IEEE float, 4 bytes, little-endian)"-style description of a type. */
char *lt__h5_type_desc(hid_t type, char *buf, size_t size);

/* Property lists we use everywhere (new ids). */
hid_t lt__h5_fapl(void);  /* reading: sec2, no file locking, strong close */
/* Writing: the file is built in memory (core driver, no backing store) and
 * handed over at close, so HDF5 never does file I/O on a save (see seal.c). */
typedef struct lt__h5_image {
  unsigned char *buf;   /* the driver's buffer while the file is open */
  size_t cap, size;     /* allocated, and the driver's current size */
  size_t hint;          /* first allocation (an estimate of the file size) */
  unsigned char *final; /* the buffer, ours after a successful close */
  size_t final_size;
} lt__h5_image;
hid_t lt__h5_fapl_image(lt__h5_image *img); /* img must outlive the file */
/* The file's length: the superblock's end-of-file address when it can be
 * read, else the buffer's size. */
size_t lt__h5_image_length(const lt__h5_image *img);
hid_t lt__h5_gcpl(void);  /* links tracked and indexed by creation order */

/* The file under HDF5, for checks HDF5 cannot be trusted to make: HDF5
 * 1.10 has parser faults on crafted version-1 object headers (no checksum),
 * so before HDF5 reads an object's header, its first bytes are read from our
 * own descriptor and must be a version-2 header ("OHDR", checksummed). */
typedef struct lt__h5_raw {
  int fd;          /* the verified file (HDF5 opened the same one) */
  uint64_t size;   /* its size */
  uint64_t base;   /* HDF5's base address: file offset of address 0 */
  bool check;      /* false: unchecksummed files accepted (allow_unchecksummed), no checks */
  const char *path;
} lt__h5_raw;
/* Reads the superblock at byte 512 from r->fd: version 0 and 1 superblocks
 * (no checksums; h5py's default layout) are refused unless
 * allow_unchecksummed, with a message saying how to rewrite the file; for
 * version 2 and 3, sets r->base and checks the root group's header (and the
 * superblock extension's, if any). */
lt_status lt__h5_raw_init(lt__h5_raw *r, int fd, uint64_t size, const char *path, bool allow_unchecksummed);
/* Checks that the object header at HDF5 address addr is a version-2 header
 * ("OHDR") before HDF5 reads it; obj names it in the message (LT_ERR_FORMAT).
 * A no-op when r is NULL or r->check is false. */
lt_status lt__h5_check_ohdr(const lt__h5_raw *r, haddr_t addr, const char *obj);
/* The message part that says how to rewrite an unchecksummed file. */
#define LT__H5_REWRITE_HINT                                                                              \
  "rewrite it with checksummed headers (h5repack --latest --block=512 in.h5 out.h5, or h5py "           \
  "File(..., libver='latest', userblock_size=512)), then lt_ckpt_seal it; or accept it with "           \
  "allow_unchecksummed (--allow-unchecksummed) if you trust its source"

/* Attribute writers (scalar; strings fixed-length UTF-8). */
lt_status lt__h5_attr_int(hid_t obj, const char *name, int64_t v);
lt_status lt__h5_attr_double(hid_t obj, const char *name, double v);
lt_status lt__h5_attr_string(hid_t obj, const char *name, const char *v);
/* Writes every int/double/string entry of m as an attribute of obj and every
 * blob as a uint8 dataset (blobs refused when allow_bytes is false). */
lt_status lt__h5_write_meta(hid_t obj, const lt_ckpt_meta *m, bool allow_bytes, const char *what);
/* Reads every attribute of obj into m (int64 / double / string only) and,
 * with budget not NULL, every dataset child as a blob (each header checked
 * by lt__h5_check_ohdr first; each at most LT__CKPT_MAX_BLOB bytes and at
 * most *budget, which it is subtracted from; refused from the dataspace
 * before anything is read or inflated). what names obj in errors. */
lt_status lt__h5_read_meta(hid_t obj, const lt__h5_raw *raw, const char *what, lt_ckpt_meta *m,
                           uint64_t *budget);
/* Reads one attribute by name. LT_ERR_INDEX if absent, with the message
 * "checkpoint: <what> has no attribute '<name>'". */
lt_status lt__h5_get_attr_int(hid_t obj, const char *what, const char *name, int64_t *v);
lt_status lt__h5_get_attr_double(hid_t obj, const char *what, const char *name, double *v);
lt_status lt__h5_get_attr_string(hid_t obj, const char *what, const char *name, char **v); /* new (free) */

/* Opens "a/b/c" under loc, creating missing groups; a component that exists
 * but is not a group is an error naming full (the user's name). */
hid_t lt__h5_open_or_create_groups(hid_t loc, int n, char *const *comps, const char *full, const char *what);

/* Writes t (any dtype and layout) as dataset name under loc: contiguous
 * when small or when deflate does not pay, else chunked + deflate. */
lt_status lt__h5_write_tensor(hid_t loc, const char *name, const lt_tensor *t, const lt_ckpt_save_opts *opts,
                              const char *what);

/* One dataset found by the walk: its HDF5 path and dotted name. */
typedef struct lt__h5_entry {
  char *path;   /* "/model/a/b" */
  char *name;   /* "a.b" (relative to the walked group) */
} lt__h5_entry;
typedef struct lt__h5_list {
  lt__h5_entry *v;
  int n, cap;
} lt__h5_list;
void lt__h5_list_free(lt__h5_list *l);
/* Walks the group at path recursively (hard links only; groups and datasets
 * only; no dots in link names; depth, count and cycle checks; each object's
 * header checked by lt__h5_check_ohdr before HDF5 reads it, and groups with
 * an old-style symbol table refused when raw->check) and lists its
 * datasets. */
lt_status lt__h5_walk(hid_t file, const lt__h5_raw *raw, const char *path, lt__h5_list *out);

/* Raw (non-dtype) types a dataset may be asked to have. */
typedef enum lt__ckpt_raw {
  LT__RAW_NONE, /* none: the dataset holds one of our dtypes */
  LT__RAW_U8,   /* H5T_STD_U8LE (/extra blobs) */
  LT__RAW_U64,  /* H5T_STD_U64LE (/rng states) */
  LT__RAW_ANY   /* any type (a description, lt_ckpt_describe) */
} lt__ckpt_raw;
/* What a dataset must be. */
typedef struct lt__h5_expect {
  lt_dtype dtype;                /* LT_DTYPE_COUNT: raw instead */
  lt__ckpt_raw raw;              /* the exact file type when dtype is LT_DTYPE_COUNT */
  int ndim;                      /* -1: any rank */
  const int64_t *shape;          /* NULL: any dims */
  const char *model_name;        /* for messages: "the model's 'x'" */
} lt__h5_expect;
/* What HDF5 says of dset (rules.c's lt__ckpt_dset), asked in the order
 * lt__ckpt_check_dset judges it; a step HDF5 cannot answer is recorded
 * (d->failed, its error stack) and ends the questions. */
struct lt__ckpt_dset;
struct lt__ckpt_written;
void lt__h5_dset_facts(hid_t dset, struct lt__ckpt_dset *d);
/* Whether dset's data was written: its storage allocated, or (chunked) its
 * chunk dims and how many chunks are stored. Ask it only of a dataset that
 * lt__ckpt_check_dset accepted (HDF5 walks the chunk index). */
void lt__h5_dset_written(hid_t dset, const struct lt__ckpt_dset *d, struct lt__ckpt_written *w);
/* Checks layout (no virtual, no external storage), filters (deflate only),
 * type (exact), rank and dims (overflow-checked, capped by file_size) and
 * that the data was written, before anything is allocated: the facts from
 * lt__h5_dset_facts judged by lt__ckpt_check_dset, then (only if they pass)
 * lt__h5_dset_written judged by lt__ckpt_check_written. Sets *bytes and the
 * dims (ndim and shape, at least LT_MAX_DIMS entries). */
lt_status lt__h5_check_dataset(hid_t dset, const char *path, const lt__h5_expect *e, uint64_t file_size,
                               int *ndim, int64_t *shape, size_t *bytes);
/* Reads the whole dataset (already checked) into buf. */
lt_status lt__h5_read_dataset(hid_t dset, const char *path, lt_dtype dtype, void *buf);

/* ---- the rules on parsed values (rules.c) ------------------------------ */

/* Typed entries of a meta read from the object `what` (h5.c's messages):
 * LT_ERR_INDEX "checkpoint: <what> has no attribute '<key>'" when absent,
 * LT_ERR_FORMAT when of another kind. Strings are borrowed from m. */
lt_status lt__ckpt_attr_int(const lt_ckpt_meta *m, const char *what, const char *key, int64_t *out);
lt_status lt__ckpt_attr_double(const lt_ckpt_meta *m, const char *what, const char *key, double *out);
lt_status lt__ckpt_attr_string(const lt_ckpt_meta *m, const char *what, const char *key, const char **out);

/* The root's attributes (every one of them, as lt__h5_read_meta reads them):
 * format, format_version in [1, LT_CKPT_FORMAT_VERSION], library_version
 * (borrowed from root), content "model" or "training". */
lt_status lt__ckpt_check_root(const char *path, const lt_ckpt_meta *root, int64_t *version, const char **libver,
                              bool *training);
/* True for the names a checkpoint may hold at the top level. */
bool lt__ckpt_top_level_name(const char *name);
/* The caller's lt_train_state, checked before a save or a load touches a
 * file (op names the call in the message): params present, an optimizer
 * with its configuration, generators non-NULL with distinct names that are
 * valid keys without '.'. */
lt_status lt__ckpt_check_train_state(const char *op, const lt_train_state *st);

/* What HDF5 says of one dataset (lt__h5_dset_facts fills it; the fuzz
 * harness fuzz/fuzz_ckpt_meta.c makes them up). */
#define LT__H5_MAX_RANK 32     /* H5S_MAX_RANK */
#define LT__CKPT_MAX_FILTERS 8 /* filters in a pipeline */
#define LT__FILTER_DEFLATE 1   /* H5Z_FILTER_DEFLATE */
enum { LT__LAYOUT_COMPACT, LT__LAYOUT_CONTIGUOUS, LT__LAYOUT_CHUNKED, LT__LAYOUT_VIRTUAL, LT__LAYOUT_OTHER };
enum { LT__SPACE_SCALAR, LT__SPACE_SIMPLE, LT__SPACE_OTHER };
/* The step where HDF5 could not answer (the facts after it are unknown). */
enum { LT__DSET_OK, LT__DSET_FAILED_PLIST, LT__DSET_FAILED_TYPE, LT__DSET_FAILED_DIMS };
typedef struct lt__ckpt_dset {
  int failed;                 /* LT__DSET_*: where HDF5 failed */
  char h5_stack[600];         /* then ": HDF5: <its error stack>" (lt__h5_err's tail), or "" */
  int layout, layout_code;    /* LT__LAYOUT_*, and HDF5's own code for messages */
  int n_external;             /* external storage files */
  int n_filters;              /* -1: unreadable */
  int filters[LT__CKPT_MAX_FILTERS];
  lt_dtype dtype;             /* the dtype whose file type it is exactly, or LT_DTYPE_COUNT */
  lt__ckpt_raw raw;           /* LT__RAW_U8 / _U64 when it is exactly that type, else LT__RAW_NONE */
  size_t type_size;           /* bytes per element */
  bool float_class;           /* an HDF5 float (for the hint on a float dtype mismatch) */
  char type_desc[200];        /* lt__h5_type_desc */
  int space;                  /* LT__SPACE_* */
  int ndim;                   /* simple dataspace: its rank (may exceed LT_MAX_DIMS) */
  uint64_t dims[LT__H5_MAX_RANK];
} lt__ckpt_dset;
/* Whether its data was written (asked only after lt__ckpt_check_dset). */
typedef struct lt__ckpt_written {
  bool known;                 /* HDF5 answered */
  bool allocated;             /* contiguous and compact: the storage exists */
  int chunk_ndim;             /* chunked: the chunk's rank and dims, and the chunks stored */
  uint64_t chunk[LT__H5_MAX_RANK];
  uint64_t n_chunks;
} lt__ckpt_written;
/* The description lt__h5_type_desc gives the file type of dtype (raw
 * LT__RAW_NONE) or of a raw type; NULL when dtype has none. */
const char *lt__ckpt_type_desc(lt_dtype dtype, lt__ckpt_raw raw);
/* d against e and the file's size (lt__h5_check_dataset's checks but the
 * last): sets *ndim, shape and *bytes on success. */
lt_status lt__ckpt_check_dset(const lt__ckpt_dset *d, const char *path, const lt__h5_expect *e, uint64_t file_size,
                              int *ndim, int64_t *shape, size_t *bytes);
/* Every byte of d (already accepted by lt__ckpt_check_dset) written: the
 * storage allocated, or every chunk present. */
lt_status lt__ckpt_check_written(const lt__ckpt_dset *d, const char *path, const lt__ckpt_written *w);

/* The names a group holds (found, from the walk) against the names the
 * caller expects (want): match[i] is the index in want of found[i] or -1,
 * hit[j] whether want[j] was found (both caller-allocated). Unless
 * non_strict, a wanted name not found (unless missing_ok) or a found name
 * not wanted is LT_ERR_INVALID listing both ("/rng": the generators). */
lt_status lt__ckpt_match(const char *path, const char *group, const char *const *found, int n_found,
                         const char *const *want, int n_want, bool missing_ok, bool non_strict, int *match,
                         bool *hit);

/* The optimizer state tensors per parameter (all or none): "momentum_buffer"
 * for SGD with momentum, "exp_avg", "exp_avg_sq", "step" for Adam(W) ("step"
 * since format version 2). Returns how many (at most LT__CKPT_MAX_STATES). */
#define LT__CKPT_MAX_STATES 3
int lt__ckpt_optim_state_names(const lt_optim_config *c, const char **names);
/* /optim's 'step' in [0, LT_OPTIM_MAX_STEP]. */
lt_status lt__ckpt_check_optim_step(const char *path, const lt_ckpt_meta *attrs, int64_t *step);
/* /optim's attributes: kind c's, step, lr finite and >= 0, the
 * hyperparameters c's unless allow_hparam_change. */
lt_status lt__ckpt_check_optim(const char *path, const lt_ckpt_meta *attrs, const lt_optim_config *c,
                               bool allow_hparam_change, int64_t *step, double *lr);
/* One parameter's ns states (found[k]: state snames[k] in the file): all
 * that the format version stores or none (*any says which), and none when
 * the step count is 0. */
lt_status lt__ckpt_check_optim_sets(const char *path, int64_t version, int64_t step, int ns,
                                    const char *const *snames, const char *pname, const bool *found, bool *any);
/* /schedule's attributes: step in [0, LT_OPTIM_MAX_STEP]; kind "none"
 * (*have false) or a schedule whose values are finite and in range (*sc). */
lt_status lt__ckpt_check_schedule(const char *path, const lt_ckpt_meta *attrs, lt_schedule *sc, int64_t *step,
                                  bool *have);

/* An /extra blob's name (a valid key, not also an attribute of m) and size
 * (at most LT__CKPT_MAX_BLOB and *budget, which it is subtracted from). */
lt_status lt__ckpt_check_blob_name(const lt_ckpt_meta *m, const char *what, const char *name);
lt_status lt__ckpt_check_blob(const char *path, size_t bytes, uint64_t *budget);

/* A dataset's values: bools 0 or 1, floats finite (unless allow_nonfinite);
 * optimizer states by lt_optim_check_state whatever allow_nonfinite says. */
lt_status lt__ckpt_check_values(const char *path, const char *dpath, lt_dtype dt, const void *buf, int64_t n,
                                bool allow_nonfinite);
lt_status lt__ckpt_check_optim_values(const char *path, const char *dpath, const char *sname, lt_dtype dt,
                                      const void *buf, int64_t n);
/* Every entry of want present in file_cfg with the same kind and value. */
lt_status lt__ckpt_check_config(const char *path, const lt_ckpt_meta *file_cfg, const lt_ckpt_meta *want);

/* ---- meta (meta.c) ----------------------------------------------------- */

/* Validates a key; LT_ERR_INVALID naming what. */
lt_status lt__ckpt_check_key(const char *key, const char *what);
/* Entry i's value (kind-specific). */
typedef struct lt__meta_val {
  lt_ckpt_kind kind;
  int64_t i;
  double d;
  const char *s;
  const void *bytes;
  size_t size;
} lt__meta_val;
bool lt__ckpt_meta_at(const lt_ckpt_meta *m, int i, const char **key, lt__meta_val *v);

/* ---- limits ------------------------------------------------------------ */

#define LT__CKPT_MAX_DEPTH 64          /* group nesting */
#define LT__CKPT_MAX_OBJECTS (1 << 20) /* links walked per file */
#define LT__CKPT_MAX_PATH 4096         /* bytes in a dataset path */
#define LT__CKPT_MAX_ATTRS 65536       /* attributes per object */
#define LT__CKPT_MAX_STRING (1 << 20)  /* bytes in a string attribute */
#define LT__CKPT_MAX_BYTES ((uint64_t)1 << 40) /* bytes in one dataset (1 TiB) */
#define LT__CKPT_MAX_BLOB ((uint64_t)1 << 28)  /* bytes in one /extra blob (256 MiB; a tokenizer is ~1 MiB) */
/* Deflate expands at most ~1032:1; a dataset cannot decode to more than this
 * many bytes per byte of file. */
#define LT__CKPT_MAX_RATIO 1040

#endif /* LT_CHECKPOINT_INTERNAL_H */
