/*
 * tests/test_cli.c: the programs' option parser (cli/cli.h) on its own: every
 * kind of value, the ranges, the strings an attacker tries (1e18, 20 nines,
 * -1, nan, inf, empty, an unknown enum name, a missing value), aliases,
 * operands, --help, the range check of values from elsewhere and the help
 * text, on the example table of cli_example.h; and the values of a table in
 * a checkpoint's key-value map (cli/cli_ckpt.h): a round trip of every kind,
 * skipped flags, a wrong kind, an unknown enum name, a value out of range
 * and the default outside its range. The programs' use of it is
 * tested in test_train_e2e.c and test_decode.c, which run them.
 */
#include "cli/cli.h"
#include "cli/cli_ckpt.h"
#include "cli_example.h"
#include "test_util.h"

#include <float.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* Parses the words of line (split at spaces; "_" stands for an empty word). */
static lt_cli_status parse(const char *line, vals *v, bool *given, char *msg, size_t msg_size, bool positional,
                           const char **pos, int *n_pos) {
  static char buf[1024];
  static char *argv[64];
  snprintf(buf, sizeof buf, "%s", line);
  int argc = 0;
  argv[argc++] = "prog";
  for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = !strcmp(t, "_") ? "" : t;
  argv[argc] = NULL;
  *v = DEFAULTS;
  memset(given, 0, sizeof(bool) * N);
  lt_cli cli = cli_of(positional);
  return lt_cli_parse(&cli, argc, argv, v, given, pos, n_pos, msg, msg_size);
}

static void expect_ok(const char *line, vals *v, bool *given) {
  char msg[512];
  lt_cli_status st = parse(line, v, given, msg, sizeof msg, false, NULL, NULL);
  ck_assert_msg(st == LT_CLI_PARSED, "'%s': status %d, message '%s'", line, (int)st, msg);
}

static void expect_bad(const char *line, const char *want) {
  vals v;
  bool given[N];
  char msg[512];
  lt_cli_status st = parse(line, &v, given, msg, sizeof msg, false, NULL, NULL);
  ck_assert_msg(st == LT_CLI_BAD, "'%s': status %d, expected LT_CLI_BAD", line, (int)st);
  ck_assert_msg(strstr(msg, want), "'%s': message '%s' lacks '%s'", line, msg, want);
}

START_TEST(values_in_range) {
  vals v;
  bool given[N];
  expect_ok("--n 7 --x=2.5 --p 0 --path abc --color green", &v, given);
  ck_assert_int_eq(v.n, 7);
  ck_assert(v.x == 2.5 && v.p == 0.0);
  ck_assert_str_eq(v.path, "abc");
  ck_assert_int_eq(v.color, 1);
  ck_assert(given[1] && given[3] && given[4] && given[6] && given[9]);
  ck_assert(!given[2] && !given[7] && !given[8]);
  expect_ok("--n=1 --x 10 --big -9223372036854775808", &v, given); /* both ends of the ranges */
  ck_assert_int_eq(v.n, 1);
  ck_assert(v.x == 10.0);
  ck_assert(v.big == INT64_MIN);
  expect_ok("--n 100 --big 9223372036854775807 --p 1e-999", &v, given); /* an underflow is a tiny number */
  ck_assert_int_eq(v.n, 100);
  ck_assert(v.big == INT64_MAX);
  ck_assert(v.p >= 0 && v.p < DBL_MIN);
  expect_ok("--color grn", &v, given); /* an alias spelling of an enum value */
  ck_assert_int_eq(v.color, 1);
  expect_ok("--path 12345678", &v, given); /* the longest string allowed */
  /* switches: --flag, --no-flag, --flag=VALUE; an alias that negates */
  expect_ok("--off --no-on", &v, given);
  ck_assert(v.off && !v.on && given[7] && given[8]);
  expect_ok("--on=off --off=yes", &v, given);
  ck_assert(!v.on && v.off);
  expect_ok("--dark", &v, given);
  ck_assert(!v.on && given[7]);
  expect_ok("--dark=false", &v, given);
  ck_assert(v.on);
  /* an alias of two options sets both */
  expect_ok("--both 42", &v, given);
  ck_assert(v.n == 42 && v.big == 42 && given[1] && given[2]);
  /* a value may start with "--" after "=" */
  expect_ok("--path=--x", &v, given);
  ck_assert_str_eq(v.path, "--x");
  /* nothing given: the defaults stay */
  expect_ok("", &v, given);
  ck_assert(v.n == 5 && v.x == 1 && v.on && v.color == 2);
}
END_TEST

START_TEST(bad_values) {
  /* integers: the syntax, then the range, both in the message */
  expect_bad("--n 1e18", "--n: '1e18' is not an integer in [1, 100]");
  expect_bad("--n 99999999999999999999", "--n 99999999999999999999: must be in [1, 100]");
  expect_bad("--big 99999999999999999999", "must be in [-9223372036854775808, 9223372036854775807]");
  expect_bad("--big -99999999999999999999", "must be in");
  expect_bad("--n -1", "--n -1: must be in [1, 100]");
  expect_bad("--n 0", "--n 0: must be in [1, 100]");
  expect_bad("--n 101", "--n 101: must be in [1, 100]");
  expect_bad("--n=", "--n: '' is not an integer");
  expect_bad("--n _", "--n: '' is not an integer");
  expect_bad("--n 0x10", "is not an integer");
  expect_bad("--n 5.0", "is not an integer");
  expect_bad("--n 5abc", "is not an integer");
  expect_bad("--n= 5", "is not an integer"); /* "--n=" has an empty value; " 5" is an operand */
  expect_bad("--n=+", "is not an integer");
  expect_bad("--n=-", "is not an integer");
  expect_bad("--n nan", "is not an integer");
  /* numbers: finite and in range, open ends excluded */
  expect_bad("--x nan", "--x: 'nan' is not a finite number in (0, 10]");
  expect_bad("--x inf", "not a finite number");
  expect_bad("--x -inf", "not a finite number");
  expect_bad("--x infinity", "not a finite number");
  expect_bad("--x 1e999", "--x 1e999: must be in (0, 10]");
  expect_bad("--x 0", "--x 0: must be in (0, 10]");
  expect_bad("--x -1", "--x -1: must be in (0, 10]");
  expect_bad("--x 10.5", "must be in (0, 10]");
  expect_bad("--p 1", "--p 1: must be in [0, 1)");
  expect_bad("--x _", "not a finite number");
  expect_bad("--x 1,5", "not a finite number");
  expect_bad("--x=", "not a finite number");
  /* strings: not empty, bounded */
  expect_bad("--path=", "--path: the value is empty");
  expect_bad("--path 123456789", "--path: the value is longer than 8 bytes");
  /* switches and enums */
  expect_bad("--on=maybe", "--on: 'maybe' is not on/off");
  expect_bad("--no-on=2", "--no-on: '2' is not on/off");
  expect_bad("--color purple", "--color: unknown value 'purple' (one of: red, green, blue)");
  expect_bad("--color _", "unknown value ''");
  /* missing values, unknown flags, operands */
  expect_bad("--n", "--n needs a value (N)");
  expect_bad("--n --x 1", "--n needs a value (N)");
  expect_bad("--color", "--color needs a value (NAME)");
  expect_bad("--bogus", "unknown flag --bogus");
  expect_bad("--no-n 3", "unknown flag --no-n"); /* only switches have --no- */
  expect_bad("--no-bogus", "unknown flag --no-bogus");
  expect_bad("--", "unexpected argument '--'");
  expect_bad("word", "unexpected argument 'word'");
  expect_bad("-n 3", "unexpected argument '-n'");
  expect_bad("--both 0", "--both 0: must be in [1, 100]"); /* an alias is named as written */
  expect_bad("--dark=x", "--dark: 'x' is not on/off");
  char longname[300];
  memset(longname, 'a', sizeof longname);
  memcpy(longname, "--", 2);
  longname[sizeof longname - 1] = '\0';
  expect_bad(longname, "unknown flag");
}
END_TEST

START_TEST(help_and_operands) {
  vals v;
  bool given[N];
  char msg[512];
  ck_assert_int_eq(parse("--n 3 --help", &v, given, msg, sizeof msg, false, NULL, NULL), LT_CLI_HELP);
  ck_assert_int_eq(parse("-h", &v, given, msg, sizeof msg, false, NULL, NULL), LT_CLI_HELP);
  /* an error before --help is reported first, in order */
  ck_assert_int_eq(parse("--n 0 --help", &v, given, msg, sizeof msg, false, NULL, NULL), LT_CLI_BAD);
  const char *pos[64];
  int n_pos = -1;
  ck_assert_int_eq(parse("a --n 3 -b - c -- --x d", &v, given, msg, sizeof msg, true, pos, &n_pos), LT_CLI_PARSED);
  ck_assert_int_eq(n_pos, 6);
  const char *want[] = {"a", "-b", "-", "c", "--x", "d"};
  for (int i = 0; i < 6; i++) ck_assert_str_eq(pos[i], want[i]);
  ck_assert_int_eq(v.n, 3);
  ck_assert(v.x == 1); /* "--x" after "--" is an operand */
  /* no message buffer: still a status */
  ck_assert_int_eq(parse("--n 0", &v, given, NULL, 0, false, NULL, NULL), LT_CLI_BAD);
  /* a long value is quoted in part: the message stays bounded */
  char line[1024] = "--n ";
  memset(line + 4, '9', 900);
  line[904] = '\0';
  ck_assert_int_eq(parse(line, &v, given, msg, sizeof msg, false, NULL, NULL), LT_CLI_BAD);
  ck_assert(strlen(msg) < 200);
}
END_TEST

START_TEST(check_and_text) {
  vals v = DEFAULTS;
  char msg[256], buf[256];
  for (int i = 0; i < N; i++) ck_assert_msg(lt_cli_check(&OPTS[i], &v, msg, sizeof msg), "%s", msg);
  v.n = 0;
  ck_assert(!lt_cli_check(&OPTS[1], &v, msg, sizeof msg));
  ck_assert_str_eq(msg, "--n 0: must be in [1, 100]");
  v.x = NAN;
  ck_assert(!lt_cli_check(&OPTS[3], &v, msg, sizeof msg));
  v.color = 3;
  ck_assert(!lt_cli_check(&OPTS[9], &v, msg, sizeof msg));
  ck_assert(strstr(msg, "one of: red, green, blue"));
  v.path = "123456789";
  ck_assert(!lt_cli_check(&OPTS[6], &v, msg, sizeof msg));
  ck_assert(strstr(msg, "at most 8 bytes"));
  ck_assert_str_eq(lt_cli_range_text(&OPTS[3], buf, sizeof buf), "(0, 10]");
  ck_assert_str_eq(lt_cli_range_text(&OPTS[4], buf, sizeof buf), "[0, 1)");
  ck_assert_str_eq(lt_cli_value_text(&OPTS[9], &DEFAULTS, buf, sizeof buf), "blue");
  ck_assert_str_eq(lt_cli_value_text(&OPTS[6], &DEFAULTS, buf, sizeof buf), "(none)");
  vals w = DEFAULTS;
  ck_assert(lt_cli_same_value(&OPTS[1], &w, &DEFAULTS));
  w.n = 9;
  ck_assert(!lt_cli_same_value(&OPTS[1], &w, &DEFAULTS));
  lt_cli_copy_value(&OPTS[1], &w, &DEFAULTS);
  ck_assert_int_eq(w.n, 5);
  lt_cli cli = cli_of(false);
  ck_assert_int_eq(lt_cli_find(&cli, "color"), 9);
  ck_assert_int_eq(lt_cli_find(&cli, "Numbers"), -1); /* a heading is not an option */
  ck_assert_int_eq(lt_cli_find(&cli, "both"), -1);    /* nor an alias */
}
END_TEST

START_TEST(help_text) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  ck_assert(f);
  lt_cli cli = cli_of(false);
  ck_assert_int_eq(lt_cli_usage(&cli, f), 0);
  fclose(f);
  const char *want[] = {"usage: prog\n", "\nNumbers:\n", "--n N", "a count; N in [1, 100] (default: 5)",
                        "a number; X in (0, 10] (default: 1)", "(default: by --n)", "--[no-]on", "--off ",
                        "one of: red, green, blue (default: blue)", "not empty, at most 8 bytes", "--both N",
                        "sets --n and --big", "--dark", "-h, --help", "\nthe end\n"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]), "--help lacks '%s':\n%s", want[i], text);
  ck_assert(!strstr(text, "--[no-]off")); /* off by default: shown as --off */
  free(text);
  /* a failed write is reported */
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    setvbuf(full, NULL, _IONBF, 0);
    ck_assert_int_eq(lt_cli_usage(&cli, full), -1);
    fclose(full);
  }
}
END_TEST

/* The table's values in a checkpoint's map and back (cli/cli_ckpt.h). */
START_TEST(values_in_a_checkpoint) {
  lt_cli cli = cli_of(false);
  vals v = {.n = 42, .big = -7, .x = 2.5, .p = 0.25, .path = "a/b", .on = false, .off = true, .color = 1};
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  ck_assert_ptr_nonnull(m);
  ck_assert_int_eq(lt_cli_to_meta(&cli, &v, 0, "opt.", m), LT_OK);
  ck_assert_int_eq(lt_ckpt_meta_count(m), 8);
  const char *sv;
  ck_assert_int_eq(lt_ckpt_meta_get_string(m, "opt.color", &sv), LT_OK);
  ck_assert_str_eq(sv, "green"); /* an enum by its name */
  vals back = DEFAULTS;
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, 0, "opt.", m, "ck.h5"), LT_OK);
  ck_assert_int_eq(back.n, 42);
  ck_assert_int_eq(back.big, -7);
  ck_assert_double_eq(back.x, 2.5);
  ck_assert_double_eq(back.p, 0.25);
  ck_assert_str_eq(back.path, "a/b");
  ck_assert(!back.on && back.off);
  ck_assert_int_eq(back.color, 1);
  lt_ckpt_meta_free(m);

  /* skipped flags are neither written nor read; a NULL string is no entry and reads back as NULL */
  lt_cli_opt opts[N];
  memcpy(opts, OPTS, sizeof opts);
  opts[1].flags |= LT_CLI_USER; /* n */
  cli.opts = opts;
  v.path = NULL;
  m = lt_ckpt_meta_new();
  ck_assert_int_eq(lt_cli_to_meta(&cli, &v, LT_CLI_USER, "", m), LT_OK);
  ck_assert_int_eq(lt_ckpt_meta_count(m), 6);
  ck_assert_int_lt(lt_ckpt_meta_kind(m, "n"), 0);
  back = DEFAULTS;
  back.path = "kept?";
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_OK);
  ck_assert_int_eq(back.n, DEFAULTS.n);
  ck_assert_ptr_null(back.path);

  /* a wrong kind, an unknown enum name, a value out of range */
  ck_assert_int_eq(lt_ckpt_meta_set_string(m, "big", "many"), LT_OK);
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_ERR_FORMAT);
  ck_assert_str_eq(lt_last_error(), "checkpoint 'ck.h5': the saved setting 'big' is not of the type of --big");
  ck_assert_int_eq(lt_ckpt_meta_set_int(m, "big", 1), LT_OK);
  ck_assert_int_eq(lt_ckpt_meta_set_string(m, "color", "mauve"), LT_OK);
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_ERR_FORMAT);
  ck_assert_str_eq(lt_last_error(),
                   "checkpoint 'ck.h5': the saved setting 'color' is 'mauve', which this prog does not know");
  ck_assert_int_eq(lt_ckpt_meta_set_string(m, "color", "red"), LT_OK);
  ck_assert_int_eq(lt_ckpt_meta_set_double(m, "x", 11.0), LT_OK);
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_ERR_FORMAT);
  ck_assert_msg(strstr(lt_last_error(), "the saved setting 'x' is out of range: --x 11: must be in (0, 10]") != NULL,
                "%s", lt_last_error());
  /* the default outside the range (a default "by task", -1): refused unless the option says it may be
   * saved unset (a program saves resolved values: train's --ckpt-every -1 "by --steps" is never saved) */
  vals odd = DEFAULTS;
  odd.x = -1;
  cli.defaults = &odd;
  ck_assert_int_eq(lt_ckpt_meta_set_double(m, "x", -1.0), LT_OK);
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_ERR_FORMAT);
  ck_assert_msg(strstr(lt_last_error(), "the saved setting 'x' is out of range: --x -1: must be in (0, 10]") != NULL,
                "%s", lt_last_error());
  opts[3].flags |= LT_CLI_UNSET_SAVED; /* x */
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_OK);
  ck_assert_double_eq(back.x, -1.0);
  ck_assert_int_eq(lt_ckpt_meta_set_double(m, "x", -2.0), LT_OK); /* not the default: its range */
  ck_assert_int_eq(lt_cli_from_meta(&cli, &back, LT_CLI_USER, "", m, "ck.h5"), LT_ERR_FORMAT);
  lt_ckpt_meta_free(m);
}
END_TEST

#ifdef LT_CHAR_LSTM_EXE
/* examples/char_lstm's own parser: values that saturate strtoll (ERANGE),
 * counts beyond their range and numbers that are not finite exit 2 at once
 * with the flag named (--steps of 20 nines ran forever; --sample 1e12 had no
 * bound). Each run has 10 s (timeout): a run that starts training fails. */
START_TEST(char_lstm_flags) {
  static const struct {
    const char *args, *msg;
  } bad[] = {
      {"--steps 99999999999999999999", "--steps 99999999999999999999: must be a whole number in [1, 1000000000000]"},
      {"--steps -1", "--steps -1: must be a whole number in [1, "},
      {"--sample 1000000000000", "--sample 1000000000000: must be a whole number in [0, 1048576]"},
      {"--sample 1e12", "--sample 1e12: must be a whole number"},
      {"--batch 0", "--batch 0: must be a whole number in [1, 65536]"},
      {"--hidden 99999999999999999999", "--hidden 99999999999999999999: must be"},
      {"--seed 18446744073709551616", "--seed 18446744073709551616: must be"},
      {"--lr 1e999", "--lr 1e999: must be a number in (0, 1000]"},
      {"--lr nan", "--lr nan: must be a number"},
      {"--lr 0.1x", "--lr 0.1x: must be a number"},
      {"--seq 1048576 --batch 64", "--batch 64 x --seq 1048576: at most 2^24 characters per step"},
      {"--threads", "--threads needs a value"},
      {"--nope 1", "unknown flag '--nope'"},
  };
  char out[] = "/tmp/lt_cli_lstm_XXXXXX";
  int fd = mkstemp(out);
  ck_assert_int_ge(fd, 0);
  close(fd);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 10 '%s' %s > /dev/null 2> '%s'", LT_CHAR_LSTM_EXE, bad[i].args, out);
    int st = system(cmd);
    FILE *f = fopen(out, "r");
    char err[4096] = "";
    size_t n = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "char_lstm %s: exit %d\n%s", bad[i].args,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    ck_assert_msg(strstr(err, bad[i].msg), "char_lstm %s: stderr lacks '%s':\n%s", bad[i].args, bad[i].msg, err);
  }
  unlink(out);
  printf("cli: char_lstm: %zu bad command lines refused\n", sizeof bad / sizeof bad[0]);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("cli");
  tcase_add_test(tc, values_in_range);
  tcase_add_test(tc, bad_values);
  tcase_add_test(tc, help_and_operands);
  tcase_add_test(tc, check_and_text);
  tcase_add_test(tc, help_text);
  tcase_add_test(tc, values_in_a_checkpoint);
#ifdef LT_CHAR_LSTM_EXE
  tcase_add_test(tc, char_lstm_flags);
#endif
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
