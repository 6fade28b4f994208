/* tests/util_ckpt.c: see util_ckpt.h. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "util_ckpt.h"

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

char *ckpt_path(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ & 3];
  snprintf(b, 512, "%s/%s", ckpt_tmpdir, name);
  return b;
}

unsigned char *ckpt_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
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
