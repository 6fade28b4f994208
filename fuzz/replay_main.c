/*
 * fuzz/replay_main.c: the regression side of a fuzz harness. Linked with one
 * fuzz/fuzz_<name>.c by the normal (gcc) build in place of libFuzzer, it
 * feeds every file of the directories it is given to LLVMFuzzerTestOneInput,
 * in name order, one at a time:
 *
 *     fuzz_<name>_replay <seed dir> [<findings dir> ...] [--known <known dir>]
 *
 * The seed directory must hold at least one file (an empty one would make a
 * test that cannot fail); the others may be missing or empty. Files whose
 * name starts with '.' (.gitkeep) are skipped. A harness check that fails
 * aborts, so the ctest test fails naming the input (printed before it runs).
 *
 * Known cases (fuzz/known/<name>/: inputs that still crash because of a bug
 * tracked elsewhere, see fuzz/README.md) each run in a child process: a crash
 * is reported as "still crashes", no crash as "did not crash in this build"
 * (move it to findings/ once fixed; a build without sanitizers may not notice
 * undefined behaviour). Neither fails the run, and neither is silent.
 * Exit status 0 when every input ran, 1 on a usage or I/O error.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz_util.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs one known case in a child and reports what happened. */
static void run_known(const char *path, const unsigned char *data, size_t size) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "replay: fork failed; known case %s not run\n", path);
    return;
  }
  if (pid == 0) {
    LLVMFuzzerTestOneInput(data, size);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    printf("replay: known case %s did not crash in this build (if it is fixed, move it to findings/)\n", path);
  else
    printf("replay: known case %s still crashes (%s %d; fuzz/README.md says where it is tracked)\n", path,
           WIFSIGNALED(st) ? "signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* Runs every file of dir (known: each in a child, see run_known); returns
 * how many, or -1 on an error. */
static long replay_dir(const char *dir, int required, int known) {
  DIR *d = opendir(dir);
  if (!d) {
    if (required) fprintf(stderr, "replay: cannot open seed directory %s\n", dir);
    return required ? -1 : 0;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) return fprintf(stderr, "replay: out of memory\n"), -1;
      names = nn;
    }
    if (!(names[n++] = strdup(de->d_name))) return fprintf(stderr, "replay: out of memory\n"), -1;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  long ran = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "replay: cannot open %s\n", path), -1;
    size_t size = 0, cap2 = 1 << 16;
    unsigned char *buf = malloc(cap2), *tmp;
    size_t got;
    while (buf && (got = fread(buf + size, 1, cap2 - size, f)) > 0) {
      size += got;
      if (size == cap2 && (tmp = realloc(buf, cap2 *= 2))) buf = tmp;
      else if (size == cap2) free(buf), buf = NULL;
    }
    fclose(f);
    if (!buf) return fprintf(stderr, "replay: out of memory reading %s\n", path), -1;
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    /* An exact-size copy, so that ASan sees reads past the input's end. */
    unsigned char *exact = malloc(size ? size : 1);
    if (!exact) return fprintf(stderr, "replay: out of memory\n"), -1;
    memcpy(exact, buf, size);
    free(buf);
    if (known) run_known(path, exact, size);
    else LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    free(names[i]);
    ran++;
  }
  free(names);
  return ran;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <seed dir> [<findings dir> ...]\n", argv[0]);
    return 1;
  }
  int known = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--known")) {
      known = 1;
      continue;
    }
    long n = replay_dir(argv[i], i == 1, known);
    if (n < 0) return 1;
    if (i == 1 && n == 0) {
      fprintf(stderr, "replay: the seed directory %s holds no input\n", argv[i]);
      return 1;
    }
    printf("replay: %ld %sinputs from %s\n", n, known ? "known " : "", argv[i]);
  }
  return 0;
}
