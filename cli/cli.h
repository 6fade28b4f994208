/*
 * cli/cli.h: the command-line helper of libtensor's programs (train and
 * generate in models/transformer/): the exit codes, the error exit, checked
 * allocation and output, and a table-driven option parser (typed values,
 * documented ranges, enum value tables, defaults, --help text, `--flag value`
 * and `--flag=value`).
 *
 * What this is not: part of libtensor. lt_cli_die, the lt_cli_x* allocators,
 * lt_cli_write and lt_cli_parse_or_exit end the process, which a library never
 * does; so this is a small static library of its own (CMake target lt_cli) that
 * programs link. The parser proper, lt_cli_parse, never exits: it returns a
 * status and a message, so that tests and fuzzers can drive it.
 *
 * An option table is an array of lt_cli_opt, one entry per flag, each naming a
 * field of the caller's options struct by offset. The same table drives
 * parsing, range checks, --help, and whatever else the program does per flag
 * (train saves its settings into checkpoints from it). Every value a user can
 * give is bounded: integers and numbers by [min, max], strings by a length.
 */
#ifndef LT_CLI_H
#define LT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- exit codes: the one place they are written down ----------------------- */

/* The exit status of every program. LT_CLI_EXIT_SIGNAL + N is the status after
 * signal N stopped a run cleanly (train: 130 after SIGINT, 143 after SIGTERM). */
enum {
  LT_CLI_EXIT_OK = 0,        /* success */
  LT_CLI_EXIT_FAILURE = 1,   /* a runtime or data error: a file, a checkpoint, memory, a failed write */
  LT_CLI_EXIT_USAGE = 2,     /* a bad command line or configuration */
  LT_CLI_EXIT_NONFINITE = 3, /* train: too many non-finite steps in a row */
  LT_CLI_EXIT_SIGNAL = 128,  /* + the signal number (130 SIGINT, 143 SIGTERM) */
};

/* The exit codes in words, for --help texts (a complete sentence per line). */
#define LT_CLI_EXIT_HELP                                                                        \
  "Exit status: 0 success; 1 runtime or data error (a file, the checkpoint, memory, a failed\n" \
  "write); 2 bad flags or configuration; 3 too many non-finite steps in a row (train); 128+N\n" \
  "after signal N stopped the run (130 SIGINT, 143 SIGTERM; train saves a checkpoint first).\n"

/* ---- the error exit and checked allocation -------------------------------- */

/* Sets the program name that prefixes every message ("train: ...") and an
 * optional function run before lt_cli_die prints (train uses it to end its
 * progress line). Both are borrowed and must live until exit. Call once, first. */
void lt_cli_init(const char *prog, void (*before_die)(void));

/* Flushes stdout, prints "<prog>: <message>" and a newline to stderr and exits
 * with code. With LT_CLI_EXIT_USAGE it adds "Try '<prog> --help'.". */
_Noreturn void lt_cli_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* malloc / calloc / strdup that exit (LT_CLI_EXIT_FAILURE, "out of memory (N
 * bytes)") on failure. lt_cli_xmalloc_n and lt_cli_xcalloc compute n * size
 * with an overflow check (an overflow is the same failure). n == 0 gives a
 * valid pointer. Return new memory (free with free()). */
void *lt_cli_xmalloc(size_t bytes);
void *lt_cli_xmalloc_n(size_t n, size_t size);
void *lt_cli_xcalloc(size_t n, size_t size);
char *lt_cli_xstrdup(const char *s);

/* Writes n bytes to f; on a write error (EPIPE with SIGPIPE ignored, ENOSPC, ...)
 * exits with LT_CLI_EXIT_FAILURE and "writing <what>: <reason>". */
void lt_cli_write(FILE *f, const void *p, size_t n, const char *what);
/* fflush(f), with the same failure as lt_cli_write. */
void lt_cli_flush(FILE *f, const char *what);

/* ---- --precision, the same option in every program ---------------------------- */

/* The values of an LT_CLI_ENUM --precision option (train, generate,
 * bench_train_step): f32, or bf16 = autocast on (the program calls
 * lt_set_autocast(LT_DTYPE_BF16); docs/mixed-precision.md). */
enum { LT_CLI_PRECISION_F32, LT_CLI_PRECISION_BF16, LT_CLI_PRECISION_COUNT };
const char *lt_cli_precision_name(int i); /* "f32", "bf16"; "unknown" out of range */

/* ---- the option table -------------------------------------------------------- */

/* The type of an option's field in the caller's struct:
 *   LT_CLI_INT    int64_t, in [min, max]
 *   LT_CLI_DOUBLE double, finite, in [dmin, dmax] (ends open with the flags below)
 *   LT_CLI_STRING const char *, borrowed from argv; at most max bytes, at least min
 *   LT_CLI_BOOL   bool: --flag, --no-flag, --flag=on|off|true|false|yes|no|1|0
 *   LT_CLI_ENUM   int, the index of one of n_values names (value_name(i))
 *   LT_CLI_GROUP  no field: a heading in --help (name is its title) */
typedef enum { LT_CLI_INT, LT_CLI_DOUBLE, LT_CLI_STRING, LT_CLI_BOOL, LT_CLI_ENUM, LT_CLI_GROUP } lt_cli_kind;

/* lt_cli_opt.flags: the DOUBLE range excludes dmin / dmax. LT_CLI_UNSET_SAVED:
 * the default, when outside the range (a "not given" marker such as -1 "by
 * task"), is saved as it is, and lt_cli_from_meta reads it back; every other
 * saved value must be in its option's range. Bits from LT_CLI_USER up are the
 * caller's own (train marks model, state and run flags). */
enum { LT_CLI_MIN_OPEN = 1u, LT_CLI_MAX_OPEN = 2u, LT_CLI_UNSET_SAVED = 4u, LT_CLI_USER = 1u << 8 };

typedef struct lt_cli_opt {
  const char *name;                 /* the flag without "--"; LT_CLI_GROUP: the heading */
  lt_cli_kind kind;
  size_t offset;                    /* of the field in the caller's struct (offsetof) */
  const char *arg;                  /* --help placeholder of the value: "N", "FILE" (INT, DOUBLE, STRING) */
  const char *help;                 /* --help text */
  int64_t min, max;                 /* INT: the range (inclusive); STRING: the length range in bytes */
  double dmin, dmax;                /* DOUBLE: the range */
  unsigned flags;                   /* LT_CLI_MIN_OPEN, LT_CLI_MAX_OPEN, the caller's bits */
  const char *(*value_name)(int i); /* ENUM: the name of value i, 0 <= i < n_values */
  int n_values;                     /* ENUM */
  bool (*parse_alias)(const char *text, int *value); /* ENUM: more spellings, or NULL */
  /* --help: a default that depends on other flags, or NULL (the default is
   * then printed from lt_cli.defaults) */
  const char *default_text;
} lt_cli_opt;

/* Table entries. T is the caller's options struct, F the field; the variadic
 * tail adds designated initializers (.flags = ..., .default_text = ...). */
#define LT_CLI_OPT_INT(T, NAME, F, ARG, MIN, MAX, HELP, ...) \
  {.name = NAME, .kind = LT_CLI_INT, .offset = offsetof(T, F), .arg = ARG, .help = HELP, .min = MIN, .max = MAX, \
   __VA_ARGS__}
#define LT_CLI_OPT_DOUBLE(T, NAME, F, ARG, MIN, MAX, HELP, ...) \
  {.name = NAME, .kind = LT_CLI_DOUBLE, .offset = offsetof(T, F), .arg = ARG, .help = HELP, .dmin = MIN, \
   .dmax = MAX, __VA_ARGS__}
#define LT_CLI_OPT_STRING(T, NAME, F, ARG, MAXLEN, HELP, ...) \
  {.name = NAME, .kind = LT_CLI_STRING, .offset = offsetof(T, F), .arg = ARG, .help = HELP, .min = 1, \
   .max = MAXLEN, __VA_ARGS__}
#define LT_CLI_OPT_BOOL(T, NAME, F, HELP, ...) \
  {.name = NAME, .kind = LT_CLI_BOOL, .offset = offsetof(T, F), .help = HELP, __VA_ARGS__}
#define LT_CLI_OPT_ENUM(T, NAME, F, VALUE_NAME, N_VALUES, HELP, ...) \
  {.name = NAME, .kind = LT_CLI_ENUM, .offset = offsetof(T, F), .help = HELP, .value_name = VALUE_NAME, \
   .n_values = N_VALUES, __VA_ARGS__}
#define LT_CLI_GROUP_TITLE(TITLE) {.name = TITLE, .kind = LT_CLI_GROUP}

/* Another spelling of one or two options: "layers" sets "enc-layers" and
 * "dec-layers" to its value; with negate, a BOOL alias sets its target to the
 * opposite ("post-norm" is "no-pre-norm"). */
typedef struct lt_cli_alias {
  const char *name;      /* without "--" */
  const char *target[2]; /* option names; target[1] may be NULL */
  bool negate;
  const char *help; /* --help line */
} lt_cli_alias;

/* A program's command line. */
typedef struct lt_cli {
  const char *prog;     /* for messages */
  const char *synopsis; /* --help: the text before the options (ends with a newline) */
  const char *epilogue; /* --help: the text after the options, or NULL */
  const lt_cli_opt *opts;
  int n_opts;
  const lt_cli_alias *aliases;
  int n_aliases;
  const void *defaults; /* a struct of default values, for --help; or NULL */
  bool positional;      /* arguments not starting with "--" (and all after "--") are operands */
} lt_cli;

typedef enum {
  LT_CLI_PARSED, /* the command line was read into the values */
  LT_CLI_HELP,   /* --help or -h: print lt_cli_usage and stop */
  LT_CLI_BAD,    /* a usage error: msg says which flag, which value and what is allowed */
} lt_cli_status;

/* Parses argv[1..argc) into values (the caller's struct, holding the defaults).
 * given (n_opts entries, cleared by the caller) marks each option the command
 * line set; operands (cli->positional) go to pos[*n_pos] in order (pos has room
 * for argc entries; both may be NULL when cli->positional is false). Strings
 * borrow argv. Never exits and allocates nothing. On LT_CLI_BAD, msg (msg_size
 * bytes, always terminated) names the fault, e.g. "--batch 0: must be in [1,
 * 65536]", and values may be partly set. */
lt_cli_status lt_cli_parse(const lt_cli *cli, int argc, char *const *argv, void *values, bool *given, const char **pos,
                           int *n_pos, char *msg, size_t msg_size);

/* lt_cli_parse, then: LT_CLI_HELP prints lt_cli_usage to stdout and exits 0;
 * LT_CLI_BAD exits with LT_CLI_EXIT_USAGE and the message. */
void lt_cli_parse_or_exit(const lt_cli *cli, int argc, char *const *argv, void *values, bool *given, const char **pos,
                          int *n_pos);

/* Writes the --help text: the synopsis, every option with its placeholder,
 * help, range and default, the aliases, then the epilogue. Returns 0, or -1 if
 * a write to f failed (errno says why). */
int lt_cli_usage(const lt_cli *cli, FILE *f);

/* The index of the option named name (not a group), or -1. */
int lt_cli_find(const lt_cli *cli, const char *name);

/* Whether option o's value in values is allowed (its range; an enum in
 * [0, n_values); a string's length; NULL strings are allowed). For values
 * that come from elsewhere than argv, such as a checkpoint. On false, msg
 * says "--name V: must be in [...]". */
bool lt_cli_check(const lt_cli_opt *o, const void *values, char *msg, size_t msg_size);

/* o's allowed values in words: "[1, 65536]", "(0, 1]", "one of: a, b",
 * "on or off", "at most 4095 bytes". Returns buf. */
char *lt_cli_range_text(const lt_cli_opt *o, char *buf, size_t size);

/* o's value in values as text ("64", "0.001", "on", an enum's name, "(none)"
 * for a NULL string, "(auto)" for an enum below 0). Returns buf. */
char *lt_cli_value_text(const lt_cli_opt *o, const void *values, char *buf, size_t size);

/* Whether o's field holds the same value in a and b (strings by content). */
bool lt_cli_same_value(const lt_cli_opt *o, const void *a, const void *b);

/* Copies o's field from src to dst (a string's pointer, not its text). */
void lt_cli_copy_value(const lt_cli_opt *o, void *dst, const void *src);

#ifdef __cplusplus
}
#endif
#endif /* LT_CLI_H */
