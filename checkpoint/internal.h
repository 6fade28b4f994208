/*
 * checkpoint/internal.h: what the files of checkpoint/ share. Not installed.
 *
 *   seal.c    the integrity header (size + CRC32 in the 512-byte user block)
 *             and the durable file dance (temporary, fsync, rename, fsync dir,
 *             rotation, stale temporaries);
 *   h5.c      HDF5 plumbing: error silencing and stack capture, typed
 *             attributes, tensor datasets, the checked tree walk;
 *   meta.c    lt_ckpt_meta;
 *   checkpoint.c  the layout: save/load of parameters and training state.
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

/* ---- HDF5 plumbing (h5.c) ---------------------------------------------- */

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

/* What a dataset must be. */
typedef struct lt__h5_expect {
  lt_dtype dtype;                /* LT_DTYPE_COUNT: raw_type instead */
  hid_t raw_type;                /* the exact file type when dtype is LT_DTYPE_COUNT (e.g. H5T_STD_U8LE) */
  int ndim;                      /* -1: any rank */
  const int64_t *shape;          /* NULL: any dims */
  const char *model_name;        /* for messages: "the model's 'x'" */
} lt__h5_expect;
/* Checks layout (no virtual, no external storage), filters (deflate only),
 * type (exact), rank and dims (overflow-checked, capped by file_size) and
 * that the data was written, before anything is allocated. Sets *bytes and
 * the dims (ndim and shape, at least LT_MAX_DIMS entries). */
lt_status lt__h5_check_dataset(hid_t dset, const char *path, const lt__h5_expect *e, uint64_t file_size,
                               int *ndim, int64_t *shape, size_t *bytes);
/* Reads the whole dataset (already checked) into buf. */
lt_status lt__h5_read_dataset(hid_t dset, const char *path, lt_dtype dtype, void *buf);

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
