/* tests/util_fixtures.c: the fixture reader; see util_fixtures.h. */
#include "util_fixtures.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#define FX_MAX_NAME 4096

typedef struct fx_record {
  char *name;                /* NUL-terminated copy */
  lt_dtype dtype;
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  int64_t numel;
  void *data;                /* own aligned copy, host byte order */
} fx_record;

struct lt_fixture {
  int n;
  fx_record *rec;
};

void lt_fixture_free(lt_fixture *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) {
    free(f->rec[i].name);
    free(f->rec[i].data);
  }
  free(f->rec);
  free(f);
}

/* A bounded little-endian reader over the file bytes. */
typedef struct cursor {
  const unsigned char *p;
  size_t left;
} cursor;

static bool take(cursor *c, size_t n, const unsigned char **out) {
  if (c->left < n) return false;
  *out = c->p;
  c->p += n;
  c->left -= n;
  return true;
}
static bool take_u32(cursor *c, uint32_t *v) {
  const unsigned char *b;
  if (!take(c, 4, &b)) return false;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return true;
}
static bool take_u64(cursor *c, uint64_t *v) {
  const unsigned char *b;
  if (!take(c, 8, &b)) return false;
  *v = 0;
  for (int i = 7; i >= 0; i--) *v = *v << 8 | b[i];
  return true;
}

static bool host_is_little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

lt_fixture *lt_fixture_parse(const void *buf, size_t size, const char *what) {
  if (!buf && size) {
    lt__err_null("fixture", "buf");
    return NULL;
  }
  if (!what) what = "fixture";
  cursor c = {buf, size};
  const unsigned char *magic;
  uint32_t version, count;
  if (!take(&c, 4, &magic) || memcmp(magic, "LTFX", 4) != 0) {
    lt__err(LT_ERR_FORMAT, "fixture %s: no LTFX magic (%zu bytes)", what, size);
    return NULL;
  }
  if (!take_u32(&c, &version) || !take_u32(&c, &count)) {
    lt__err(LT_ERR_FORMAT, "fixture %s: truncated header (%zu bytes)", what, size);
    return NULL;
  }
  if (version != 1) {
    lt__err(LT_ERR_FORMAT, "fixture %s: version %u, expected 1", what, version);
    return NULL;
  }
  /* Each record takes at least 4 + 1 + 2 bytes: a count beyond that is corrupt. */
  if (count > c.left / 7) {
    lt__err(LT_ERR_FORMAT, "fixture %s: %u records cannot fit in %zu bytes", what, count, c.left);
    return NULL;
  }
  lt_fixture *f = calloc(1, sizeof *f);
  if (!f || !(f->rec = calloc(count ? count : 1, sizeof *f->rec))) {
    free(f);
    lt__err(LT_ERR_NOMEM, "fixture %s: out of memory for %u records", what, count);
    return NULL;
  }
  bool swap = !host_is_little_endian();
  for (uint32_t i = 0; i < count; i++) {
    fx_record *r = &f->rec[i];
    const char *prev = i ? f->rec[i - 1].name : "(start)";
    uint32_t nlen;
    const unsigned char *name, *hdr, *data;
    if (!take_u32(&c, &nlen)) {
      lt__err(LT_ERR_FORMAT, "fixture %s: truncated at record %u of %u (after \"%s\")", what, i, count, prev);
      goto fail;
    }
    if (nlen == 0 || nlen > FX_MAX_NAME) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record %u (after \"%s\"): name length %u not in [1, %d]", what, i,
              prev, nlen, FX_MAX_NAME);
      goto fail;
    }
    if (!take(&c, nlen, &name)) {
      lt__err(LT_ERR_FORMAT, "fixture %s: truncated in the name of record %u (after \"%s\")", what, i, prev);
      goto fail;
    }
    if (memchr(name, 0, nlen)) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record %u (after \"%s\"): name contains a NUL byte", what, i, prev);
      goto fail;
    }
    if (!(r->name = malloc(nlen + 1))) {
      lt__err(LT_ERR_NOMEM, "fixture %s: out of memory", what);
      goto fail;
    }
    memcpy(r->name, name, nlen);
    r->name[nlen] = '\0';
    f->n = (int)i + 1; /* r->name is owned from here */
    if (!take(&c, 2, &hdr)) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": truncated before dtype/ndim", what, r->name);
      goto fail;
    }
    if (hdr[0] >= LT_DTYPE_COUNT) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": dtype code %u is not an lt_dtype", what, r->name, hdr[0]);
      goto fail;
    }
    if (hdr[1] > LT_MAX_DIMS) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": ndim %u > LT_MAX_DIMS %d", what, r->name, hdr[1],
              LT_MAX_DIMS);
      goto fail;
    }
    r->dtype = (lt_dtype)hdr[0];
    r->ndim = hdr[1];
    r->numel = 1;
    for (int d = 0; d < r->ndim; d++) {
      uint64_t s;
      if (!take_u64(&c, &s)) {
        lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": truncated in the shape", what, r->name);
        goto fail;
      }
      if (s > (uint64_t)INT64_MAX) {
        lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": negative size in dim %d", what, r->name, d);
        goto fail;
      }
      r->shape[d] = (int64_t)s;
      if (r->numel && r->shape[d] > INT64_MAX / r->numel) {
        lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": element count overflows", what, r->name);
        goto fail;
      }
      r->numel *= r->shape[d];
    }
    size_t esz = lt_dtype_size(r->dtype);
    if ((uint64_t)r->numel > SIZE_MAX / esz || (size_t)r->numel * esz > c.left) {
      lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": %s %s needs %llu bytes, %zu left (truncated?)", what,
              r->name, LT__S(r->ndim, r->shape), lt_dtype_name(r->dtype),
              (unsigned long long)r->numel * (unsigned long long)esz, c.left);
      goto fail;
    }
    size_t nbytes = (size_t)r->numel * esz;
    take(&c, nbytes, &data);
    if (!(r->data = malloc(nbytes ? nbytes : 1))) {
      lt__err(LT_ERR_NOMEM, "fixture %s: out of memory for \"%s\"", what, r->name);
      goto fail;
    }
    memcpy(r->data, data, nbytes);
    if (swap && esz > 1) {
      unsigned char *b = r->data;
      for (size_t k = 0; k < nbytes; k += esz)
        for (size_t j = 0; j < esz / 2; j++) {
          unsigned char t = b[k + j];
          b[k + j] = b[k + esz - 1 - j];
          b[k + esz - 1 - j] = t;
        }
    }
    if (r->dtype == LT_DTYPE_BOOL)
      for (size_t k = 0; k < nbytes; k++)
        if (((unsigned char *)r->data)[k] > 1) {
          lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\": bool element %zu is %u, not 0 or 1", what, r->name,
                  k, ((unsigned char *)r->data)[k]);
          goto fail;
        }
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(f->rec[j].name, r->name) == 0) {
        lt__err(LT_ERR_FORMAT, "fixture %s: record \"%s\" appears twice (records %u and %u)", what, r->name, j, i);
        goto fail;
      }
  }
  if (c.left) {
    lt__err(LT_ERR_FORMAT, "fixture %s: %zu trailing bytes after %u records", what, c.left, count);
    goto fail;
  }
  return f;
fail:
  lt_fixture_free(f);
  return NULL;
}

char *lt_fixture_path(const char *file, char *buf, size_t size) {
#ifdef LT_TEST_DATA_DIR
  const char *data = LT_TEST_DATA_DIR;
#else
  const char *data = "tests/data";
#endif
  const char *slash = strrchr(data, '/');
  int dir = slash ? (int)(slash - data) : 0;
  if (size) snprintf(buf, size, "%.*s%sfixtures/%s", dir, data, slash ? "/" : "", file ? file : "");
  return buf;
}

lt_fixture *lt_fixture_load(const char *path) {
  if (!path) {
    lt__err_null("fixture_load", "path");
    return NULL;
  }
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    lt__err(LT_ERR_IO, "fixture %s: cannot open (regenerate with tests/fixtures/make_nn_fixtures.py)", path);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, fp);
    if (n < cap) break;
    unsigned char *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  bool err = ferror(fp);
  fclose(fp);
  if (!buf) {
    lt__err(LT_ERR_NOMEM, "fixture %s: out of memory reading", path);
    return NULL;
  }
  if (err) {
    free(buf);
    lt__err(LT_ERR_IO, "fixture %s: read error", path);
    return NULL;
  }
  lt_fixture *f = lt_fixture_parse(buf, n, path);
  free(buf);
  return f;
}

int lt_fixture_count(const lt_fixture *f) { return f ? f->n : 0; }

const char *lt_fixture_name(const lt_fixture *f, int i) {
  return f && i >= 0 && i < f->n ? f->rec[i].name : NULL;
}

static const fx_record *find(const lt_fixture *f, const char *name) {
  if (!f || !name) return NULL;
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->rec[i].name, name) == 0) return &f->rec[i];
  return NULL;
}

bool lt_fixture_has(const lt_fixture *f, const char *name) { return find(f, name) != NULL; }

lt_tensor *lt_fixture_get(const lt_fixture *f, const char *name) {
  if (!f || !name) {
    lt__err_null("fixture_get", !f ? "f" : "name");
    return NULL;
  }
  const fx_record *r = find(f, name);
  if (!r) {
    lt__err(LT_ERR_INDEX, "fixture: no record \"%s\"", name);
    return NULL;
  }
  return lt_tensor_from_copy(r->dtype, r->ndim, r->shape, r->data);
}

lt_status lt_fixture_scalar(const lt_fixture *f, const char *name, double *out) {
  if (!f || !name || !out) return lt__err_null("fixture_scalar", !f ? "f" : !name ? "name" : "out");
  const fx_record *r = find(f, name);
  if (!r) return lt__err(LT_ERR_INDEX, "fixture: no record \"%s\"", name);
  if (r->numel != 1)
    return lt__err(LT_ERR_SHAPE, "fixture: record \"%s\" is %s, not one element", name, LT__S(r->ndim, r->shape));
  *out = lt__load(r->data, r->dtype);
  return LT_OK;
}
