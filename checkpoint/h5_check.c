/*
 * checkpoint/h5_check.c: the checked reader of checkpoint files, what runs
 * before HDF5 is trusted with a file's bytes.
 *
 * - Object headers read from the file before HDF5 parses them: the
 *   superblock, and every object's header must be a checksummed one.
 * - A walk that accepts only hard links to groups and datasets (no soft,
 *   external or user-defined links, no cycles, bounded depth and size).
 * - A dataset check that refuses virtual datasets, external storage and
 *   every filter but deflate, and compares type, rank and dimensions
 *   (overflow-checked, capped) with what the model expects, before anything
 *   is allocated; then the dataset's read.
 *
 * What this is not: the HDF5 plumbing shared with saving (guard, errors,
 * types, attributes, writing: h5.c), or the rules on the facts gathered here
 * (rules.c), which need no HDF5 handle.
 */
#include "checkpoint/internal.h"
#include "tensor/byteorder_internal.h"
#include "tensor/error_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- object headers read before HDF5 reads them ------------------------ */

static bool raw_read(const lt__h5_raw *r, uint64_t off, void *buf, size_t n) {
  if (off > r->size || n > r->size - off) return false;
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(r->fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    got += (size_t)k;
  }
  return true;
}

lt_status lt__h5_check_ohdr(const lt__h5_raw *r, haddr_t addr, const char *obj) {
  if (!r || !r->check) return LT_OK;
  unsigned char sig[5];
  uint64_t off;
  if (addr == HADDR_UNDEF || __builtin_add_overflow(r->base, (uint64_t)addr, &off) || !raw_read(r, off, sig, 5))
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': the object header of %s (address %llu) is outside the file",
                   r->path, obj, (unsigned long long)addr);
  if (memcmp(sig, "OHDR", 4) != 0 && sig[0] == 1)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s has a version-1 object header without a checksum (h5py's "
                   "default layout), which libhdf5 1.10 cannot parse safely: refused; " LT__H5_REWRITE_HINT,
                   r->path, obj);
  if (memcmp(sig, "OHDR", 4) != 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s (address %llu) does not start with an object header (byte "
                   "0x%02x): damaged", r->path, obj, (unsigned long long)addr, sig[0]);
  if (sig[4] != 2)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s has an object header of version %u (expected 2)", r->path,
                   obj, sig[4]);
  return LT_OK;
}

lt_status lt__h5_raw_init(lt__h5_raw *r, int fd, uint64_t size, const char *path, bool allow_unchecksummed) {
  *r = (lt__h5_raw){.fd = fd, .size = size, .base = 0, .check = false, .path = path};
  /* Superblock version 2 and 3 (48 bytes with 8-byte offsets): signature,
   * version, offset size, length size, flags, then the base, superblock
   * extension, end-of-file and root group header addresses and a checksum. */
  unsigned char sb[48];
  if (!raw_read(r, LT__CKPT_UB, sb, 9) || memcmp(sb, "\x89HDF\r\n\x1a\n", 8) != 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no HDF5 superblock at byte %d", path, LT__CKPT_UB);
  unsigned version = sb[8];
  if (version < 2) {
    if (allow_unchecksummed) return LT_OK;
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': an HDF5 file with a version-%u superblock and unchecksummed "
                   "object headers (h5py's default layout), which libhdf5 1.10 cannot parse safely: refused; "
                   LT__H5_REWRITE_HINT, path, version);
  }
  if (version > 3 || !raw_read(r, LT__CKPT_UB, sb, sizeof sb))
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': HDF5 superblock version %u is not supported", path, version);
  if (sb[9] != 8 || sb[10] != 8)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': the HDF5 superblock uses %u-byte addresses and %u-byte lengths "
                   "(only 8 are accepted)", path, sb[9], sb[10]);
  r->base = lt__get_le64(sb + 12);
  uint64_t ext = lt__get_le64(sb + 20), root = lt__get_le64(sb + 36);
  r->check = true;
  if (allow_unchecksummed) {
    r->check = false;
    return LT_OK;
  }
  lt_status s = lt__h5_check_ohdr(r, (haddr_t)root, "the root group");
  if (!s && ext != UINT64_MAX) s = lt__h5_check_ohdr(r, (haddr_t)ext, "the superblock extension");
  return s;
}

/* ---- the checked walk -------------------------------------------------- */

void lt__h5_list_free(lt__h5_list *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->v[i].path);
    free(l->v[i].name);
  }
  free(l->v);
  *l = (lt__h5_list){0};
}

/* Object addresses seen (open addressing), to refuse cycles and aliases. */
typedef struct addr_set {
  haddr_t *v;
  size_t cap, n;
} addr_set;

static bool addr_insert(addr_set *s, haddr_t a, bool *was_there) {
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    haddr_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    for (size_t i = 0; i < cap; i++) v[i] = HADDR_UNDEF;
    for (size_t i = 0; i < s->cap; i++)
      if (s->v[i] != HADDR_UNDEF) {
        size_t h = (size_t)(s->v[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
        while (v[h] != HADDR_UNDEF) h = (h + 1) & (cap - 1);
        v[h] = s->v[i];
      }
    free(s->v);
    s->v = v;
    s->cap = cap;
  }
  size_t h = (size_t)(a * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
  while (s->v[h] != HADDR_UNDEF) {
    if (s->v[h] == a) {
      *was_there = true;
      return true;
    }
    h = (h + 1) & (s->cap - 1);
  }
  s->v[h] = a;
  s->n++;
  *was_there = false;
  return true;
}

typedef struct walk_ctx {
  lt__h5_list *out;
  const lt__h5_raw *raw;
  addr_set seen;
  int64_t count;
  int depth;
  char path[LT__CKPT_MAX_PATH + 1];  /* HDF5 path of the group being listed */
  char name[LT__CKPT_MAX_PATH + 1];  /* its dotted name ("" at the top) */
  lt_status s;
} walk_ctx;

static herr_t walk_cb(hid_t g, const char *name, const H5L_info_t *info, void *data);

/* An old-style group (symbol table: a version-1 B-tree and a local heap, no
 * checksums) is refused like a version-1 object header. */
static lt_status check_group_storage(hid_t g, const lt__h5_raw *raw, const char *path) {
  H5G_info_t gi;
  if (H5Gget_info(g, &gi) < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot inspect group %s", path);
  if (gi.storage_type == H5G_STORAGE_TYPE_SYMBOL_TABLE)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': group %s keeps its links in an old-style symbol table (no "
                   "checksums): refused; " LT__H5_REWRITE_HINT, raw->path, path);
  return LT_OK;
}

static lt_status walk_group(hid_t g, walk_ctx *c) {
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_cb, c) < 0) {
    if (!c->s) c->s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: listing group %s", c->path);
    H5Eclear2(H5E_DEFAULT);
  }
  return c->s;
}

static bool push_entry(lt__h5_list *l, const char *path, const char *name) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    lt__h5_entry *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  char *p = strdup(path), *n = strdup(name);
  if (!p || !n) {
    free(p);
    free(n);
    return false;
  }
  l->v[l->n++] = (lt__h5_entry){p, n};
  return true;
}

static herr_t walk_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  walk_ctx *c = data;
  if (++c->count > LT__CKPT_MAX_OBJECTS) {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: more than %d objects: refused", LT__CKPT_MAX_OBJECTS);
    return -1;
  }
  if (info->type != H5L_TYPE_HARD) {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: %s/%s is a %s link: only hard links are accepted", c->path, name,
                   info->type == H5L_TYPE_SOFT ? "soft" : info->type == H5L_TYPE_EXTERNAL ? "external" : "user-defined");
    return -1;
  }
  if (strchr(name, '.')) {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: %s/%s: a name component contains '.', which separates components",
                   c->path, name);
    return -1;
  }
  size_t pl = strlen(c->path), nl = strlen(c->name), ml = strlen(name);
  if (pl + 1 + ml > LT__CKPT_MAX_PATH) {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: a path under %.64s is longer than %d bytes", c->path,
                   LT__CKPT_MAX_PATH);
    return -1;
  }
  bool dup;
  if (!addr_insert(&c->seen, info->u.address, &dup)) {
    c->s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    return -1;
  }
  if (dup) {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: %s/%s is linked more than once (a cycle or an alias): refused",
                   c->path, name);
    return -1;
  }
  if (c->raw && c->raw->check) {
    char obj[LT__CKPT_MAX_PATH + 8];
    snprintf(obj, sizeof obj, "%s/%s", c->path, name);
    if ((c->s = lt__h5_check_ohdr(c->raw, info->u.address, obj))) return -1;
  }
  H5O_info_t oi;
  if (H5Oget_info_by_name2(g, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
    c->s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot inspect %s/%s", c->path, name);
    return -1;
  }
  /* Extend path and name in place; restored before returning. */
  c->path[pl] = '/';
  memcpy(c->path + pl + 1, name, ml + 1);
  if (nl) c->name[nl] = '.';
  memcpy(c->name + nl + (nl ? 1 : 0), name, ml + 1);
  if (oi.type == H5O_TYPE_GROUP) {
    if (c->depth + 1 > LT__CKPT_MAX_DEPTH) {
      c->s = lt__err(LT_ERR_FORMAT, "checkpoint: groups nested deeper than %d at %s", LT__CKPT_MAX_DEPTH, c->path);
    } else {
      hid_t sub = H5Gopen2(g, name, H5P_DEFAULT);
      if (sub < 0) {
        c->s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot open group %s", c->path);
      } else if (c->raw && c->raw->check && (c->s = check_group_storage(sub, c->raw, c->path))) {
        H5Gclose(sub);
      } else {
        c->depth++;
        walk_group(sub, c);
        c->depth--;
        H5Gclose(sub);
      }
    }
  } else if (oi.type == H5O_TYPE_DATASET) {
    if (!push_entry(c->out, c->path, c->name)) c->s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  } else {
    c->s = lt__err(LT_ERR_FORMAT, "checkpoint: %s is a %s, not a group or dataset: refused", c->path,
                   oi.type == H5O_TYPE_NAMED_DATATYPE ? "named datatype" : "unknown object");
  }
  c->path[pl] = '\0';
  c->name[nl] = '\0';
  return c->s ? -1 : 0;
}

lt_status lt__h5_walk(hid_t file, const lt__h5_raw *raw, const char *path, lt__h5_list *out) {
  *out = (lt__h5_list){0};
  walk_ctx *c = calloc(1, sizeof *c);
  if (!c) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  c->out = out;
  c->raw = raw;
  snprintf(c->path, sizeof c->path, "%s", path);
  hid_t g = H5Gopen2(file, path, H5P_DEFAULT);
  lt_status s;
  if (g < 0) {
    s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot open group %s", path);
  } else {
    H5O_info_t oi;
    bool dup;
    if (H5Oget_info2(g, &oi, H5O_INFO_BASIC) < 0)
      c->s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot inspect %s", path);
    else if (raw && raw->check && (c->s = check_group_storage(g, raw, path)))
      ;
    else if (!addr_insert(&c->seen, oi.addr, &dup))
      c->s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    s = c->s ? c->s : walk_group(g, c);
    H5Gclose(g);
  }
  free(c->seen.v);
  free(c);
  if (s) lt__h5_list_free(out);
  return s;
}

/* ---- checking and reading datasets ------------------------------------- */

void lt__h5_dset_facts(hid_t dset, lt__ckpt_dset *d) {
  *d = (lt__ckpt_dset){.dtype = LT_DTYPE_COUNT};
  hid_t dcpl = H5Dget_create_plist(dset), type = -1, space = -1;
  if (dcpl < 0) {
    d->failed = LT__DSET_FAILED_PLIST;
    lt__h5_stack_tail(d->h5_stack, sizeof d->h5_stack);
    goto done;
  }
  H5D_layout_t layout = H5Pget_layout(dcpl);
  d->layout_code = (int)layout;
  d->layout = layout == H5D_COMPACT ? LT__LAYOUT_COMPACT : layout == H5D_CONTIGUOUS ? LT__LAYOUT_CONTIGUOUS
              : layout == H5D_CHUNKED ? LT__LAYOUT_CHUNKED : layout == H5D_VIRTUAL ? LT__LAYOUT_VIRTUAL
              : LT__LAYOUT_OTHER;
  if (d->layout == LT__LAYOUT_VIRTUAL || d->layout == LT__LAYOUT_OTHER) goto done;
  d->n_external = H5Pget_external_count(dcpl);
  if (d->n_external) goto done;
  d->n_filters = H5Pget_nfilters(dcpl);
  if (d->n_filters < 0 || d->n_filters > LT__CKPT_MAX_FILTERS) { /* a bad filter pipeline */
    lt__h5_stack_tail(d->h5_stack, sizeof d->h5_stack);
    goto done;
  }
  for (int i = 0; i < d->n_filters; i++) {
    unsigned flags = 0, config = 0;
    size_t ncd = 0;
    d->filters[i] = (int)H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, 0, NULL, &config);
    if (d->filters[i] != H5Z_FILTER_DEFLATE) goto done;
  }
  type = H5Dget_type(dset);
  if (type < 0) {
    d->failed = LT__DSET_FAILED_TYPE;
    lt__h5_stack_tail(d->h5_stack, sizeof d->h5_stack);
    goto done;
  }
  d->dtype = lt__h5_dtype_of(type);
  d->raw = H5Tequal(type, H5T_STD_U8LE) > 0 ? LT__RAW_U8 : H5Tequal(type, H5T_STD_U64LE) > 0 ? LT__RAW_U64
           : LT__RAW_NONE;
  d->type_size = H5Tget_size(type);
  d->float_class = H5Tget_class(type) == H5T_FLOAT;
  lt__h5_type_desc(type, d->type_desc, sizeof d->type_desc);
  space = H5Dget_space(dset);
  H5S_class_t sc = space < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(space);
  if (sc == H5S_SCALAR) {
    d->space = LT__SPACE_SCALAR;
  } else if (sc == H5S_SIMPLE) {
    d->space = LT__SPACE_SIMPLE;
    d->ndim = H5Sget_simple_extent_ndims(space);
    if (d->ndim < 0) lt__h5_stack_tail(d->h5_stack, sizeof d->h5_stack); /* a bad dataspace */
    if (d->ndim < 0 || d->ndim > LT_MAX_DIMS) goto done;             /* judged on the rank alone */
    hsize_t dims[H5S_MAX_RANK];
    if (H5Sget_simple_extent_dims(space, dims, NULL) != d->ndim) {
      d->failed = LT__DSET_FAILED_DIMS;
      lt__h5_stack_tail(d->h5_stack, sizeof d->h5_stack);
      goto done;
    }
    for (int i = 0; i < d->ndim; i++) d->dims[i] = (uint64_t)dims[i];
  } else {
    d->space = LT__SPACE_OTHER;
  }
done:
  H5Eclear2(H5E_DEFAULT);
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  if (dcpl >= 0) H5Pclose(dcpl);
}

void lt__h5_dset_written(hid_t dset, const lt__ckpt_dset *d, lt__ckpt_written *w) {
  *w = (lt__ckpt_written){0};
  if (d->layout == LT__LAYOUT_CHUNKED) {
    hid_t dcpl = H5Dget_create_plist(dset), space = H5Dget_space(dset);
    hsize_t cd[H5S_MAX_RANK], have = 0;
    int nd = d->space == LT__SPACE_SCALAR ? 0 : d->ndim;
    if (dcpl >= 0 && space >= 0 && nd > 0 && H5Pget_chunk(dcpl, nd, cd) == nd &&
        H5Dget_num_chunks(dset, space, &have) >= 0) {
      w->known = true;
      w->chunk_ndim = nd;
      for (int i = 0; i < nd; i++) w->chunk[i] = (uint64_t)cd[i];
      w->n_chunks = (uint64_t)have;
    }
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
  } else {
    H5D_space_status_t st;
    w->known = H5Dget_space_status(dset, &st) >= 0;
    w->allocated = w->known && st == H5D_SPACE_STATUS_ALLOCATED;
  }
  H5Eclear2(H5E_DEFAULT);
}

lt_status lt__h5_check_dataset(hid_t dset, const char *path, const lt__h5_expect *e, uint64_t file_size,
                               int *ndim, int64_t *shape, size_t *bytes) {
  lt__ckpt_dset *d = malloc(sizeof *d); /* about 1 KB: off the stack of the walk's callers */
  if (!d) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  lt__h5_dset_facts(dset, d);
  int nd;
  int64_t sh[LT_MAX_DIMS];
  size_t nb;
  lt_status s = lt__ckpt_check_dset(d, path, e, file_size, &nd, sh, &nb);
  if (!s) {
    lt__ckpt_written w;
    lt__h5_dset_written(dset, d, &w);
    s = lt__ckpt_check_written(d, path, &w);
  }
  free(d);
  if (s) return s;
  *ndim = nd;
  memcpy(shape, sh, (size_t)nd * sizeof *sh);
  *bytes = nb;
  return LT_OK;
}

lt_status lt__h5_read_dataset(hid_t dset, const char *path, lt_dtype dtype, void *buf) {
  hid_t mt = lt__h5_mem_type(dtype);
  if (mt < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading %s", path);
  lt_status s = LT_OK;
  if (H5Dread(dset, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading dataset %s", path);
  H5Tclose(mt);
  return s;
}
