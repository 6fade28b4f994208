/*
 * tests/cli_example.h: an option table with every kind of value of cli/cli.h
 * (integers with a small and the full range, numbers with an open and a
 * closed end, a bounded string, switches on and off by default, an enum with
 * an alias spelling, headings), an alias of two options and a negating alias,
 * like the tables of train and generate. Shared by tests/test_cli.c and
 * fuzz/fuzz_cli.c; include it in one file of a program (it defines statics).
 */
#ifndef LT_TESTS_CLI_EXAMPLE_H
#define LT_TESTS_CLI_EXAMPLE_H

#include <string.h>

#include "cli/cli.h"

typedef struct vals {
  int64_t n, big;
  double x, p;
  const char *path;
  bool on, off;
  int color;
} vals;

static const char *color_name(int i) {
  static const char *const n[] = {"red", "green", "blue"};
  return i >= 0 && i < 3 ? n[i] : "unknown";
}
static bool color_alias(const char *t, int *v) { return !strcmp(t, "grn") ? (*v = 1, true) : false; }

/* Indices: 0 and 5 are headings; 1 n, 2 big, 3 x, 4 p, 6 path, 7 on, 8 off, 9 color. */
static const lt_cli_opt OPTS[] = {
    LT_CLI_GROUP_TITLE("Numbers"),
    LT_CLI_OPT_INT(vals, "n", n, "N", 1, 100, "a count"),
    LT_CLI_OPT_INT(vals, "big", big, "N", INT64_MIN, INT64_MAX, "any integer"),
    LT_CLI_OPT_DOUBLE(vals, "x", x, "X", 0, 10, "a number", .flags = LT_CLI_MIN_OPEN),
    LT_CLI_OPT_DOUBLE(vals, "p", p, "P", 0, 1, "a probability", .flags = LT_CLI_MAX_OPEN,
                      .default_text = "by --n"),
    LT_CLI_GROUP_TITLE("Others"),
    LT_CLI_OPT_STRING(vals, "path", path, "FILE", 8, "a short path"),
    LT_CLI_OPT_BOOL(vals, "on", on, "a switch on by default"),
    LT_CLI_OPT_BOOL(vals, "off", off, "a switch off by default"),
    LT_CLI_OPT_ENUM(vals, "color", color, color_name, 3, "a color", .parse_alias = color_alias),
};
enum { N = (int)(sizeof OPTS / sizeof OPTS[0]) };
static const lt_cli_alias ALIASES[] = {
    {"both", {"n", "big"}, false, "sets --n and --big"},
    {"dark", {"on", NULL}, true, "the same as --no-on"},
};
static const vals DEFAULTS = {.n = 5, .big = 0, .x = 1, .p = 0.5, .on = true, .color = 2};

/* The command line of the table; operands allowed or not. */
static lt_cli cli_of(bool positional) {
  return (lt_cli){.prog = "prog", .synopsis = "usage: prog\n", .epilogue = "the end\n", .opts = OPTS, .n_opts = N,
                  .aliases = ALIASES, .n_aliases = 2, .defaults = &DEFAULTS, .positional = positional};
}

#endif
