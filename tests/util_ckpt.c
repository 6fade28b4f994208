/* tests/util_ckpt.c: see util_ckpt.h. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "util_ckpt.h"

#include "test_util.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char ckpt_tmpdir[256];

void ckpt_tmpdir_make(void) {
  snprintf(ckpt_tmpdir, sizeof ckpt_tmpdir, "/tmp/lt_ckpt_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(ckpt_tmpdir));
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ckpt_rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) ckpt_rm_rf(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

void ckpt_tmpdir_remove(void) { ckpt_rm_rf(ckpt_tmpdir); }

char *ckpt_path(const char *name) { return lt_test_join(ckpt_tmpdir, name); }

unsigned char *ckpt_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
  b[sz] = 0; /* so a text file can be read as a string */
  fclose(f);
  *n = (size_t)sz;
  return b;
}

void ckpt_write_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot create %s", path);
  ck_assert_int_eq(fwrite(b, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

off_t ckpt_file_size(const char *path) {
  struct stat st;
  ck_assert_msg(stat(path, &st) == 0, "no file %s", path);
  return st.st_size;
}

int ckpt_count_tmp_files(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".lttmp.")) n++;
  closedir(d);
  return n;
}

void ckpt_write_h5py(const char *path, const lt_params *p, bool latest) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_userblock(fcpl, 512);
  H5Pset_libver_bounds(fapl, latest ? H5F_LIBVER_LATEST : H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
  ck_assert_int_ge(f, 0);
  hid_t st = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
  H5Tset_size(st, H5T_VARIABLE);
  const char *keys[3] = {"format", "library_version", "content"}, *vals[3] = {"libtensor-checkpoint", "h5py", "model"};
  for (int i = 0; i < 3; i++) {
    hid_t a = H5Acreate2(f, keys[i], st, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, &vals[i]);
    H5Aclose(a);
  }
  long long one = 1;
  hid_t a = H5Acreate2(f, "format_version", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_LLONG, &one);
  H5Aclose(a);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *q = lt_params_at(p, i);
    ck_assert(q->value->dtype == LT_DTYPE_F32 && lt_is_contiguous(q->value));
    char h5path[256];
    snprintf(h5path, sizeof h5path, "/model/%s", q->name);
    for (char *c = h5path; *c; c++)
      if (*c == '.') *c = '/';
    hsize_t dims[LT_MAX_DIMS];
    for (int d = 0; d < q->value->ndim; d++) dims[d] = (hsize_t)q->value->shape[d];
    hid_t dsp = H5Screate_simple(q->value->ndim, dims, NULL);
    hid_t d = H5Dcreate2(f, h5path, H5T_IEEE_F32LE, dsp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, q->value->data), 0);
    H5Dclose(d);
    H5Sclose(dsp);
  }
  H5Pclose(lcpl);
  /* h5py writes a Python bool as an enum of int8 (FALSE = 0, TRUE = 1) */
  hid_t bt = H5Tenum_create(H5T_STD_I8LE), g = H5Gopen2(f, "/model", H5P_DEFAULT);
  signed char no = 0, yes = 1;
  H5Tenum_insert(bt, "FALSE", &no);
  H5Tenum_insert(bt, "TRUE", &yes);
  const char *bkeys[2] = {"pre_norm", "bias"};
  for (int i = 0; i < 2; i++) {
    hid_t ba = H5Acreate2(g, bkeys[i], bt, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(H5Awrite(ba, bt, i == 0 ? &yes : &no), 0);
    H5Aclose(ba);
  }
  H5Gclose(g);
  H5Tclose(bt);
  H5Sclose(sp);
  H5Tclose(st);
  H5Pclose(fapl);
  H5Pclose(fcpl);
  H5Fclose(f);
}
