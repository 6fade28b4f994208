/*
 * fuzz/fuzz_cli.c: the programs' option parser (cli/cli.h, lt_cli_parse) on
 * arbitrary command lines. The first input byte chooses whether operands are
 * allowed (bit 0); the rest is the command line, its words separated by '\0'
 * (at most 64 words, each at most 4096 bytes). The option table is that of
 * tests/cli_example.h (shared with tests/test_cli.c): every kind of value, an
 * alias of two options and a negating alias, like train's and generate's.
 *
 * Checked promises (cli/cli.h): lt_cli_parse never exits and returns one of
 * its three statuses; a refusal has a message that starts by naming the flag
 * or argument; a parsed command line leaves every option inside its range
 * (lt_cli_check accepts every value, given or default), operands are argv
 * words in order, and given[] marks only options; the value and range texts
 * and --help are written without fault.
 *
 * The parser is compiled into the harness (below): cli/ is a small static
 * library of the programs (lt_cli), which the fuzz targets do not link.
 */
#include "cli/cli.c"

#include <string.h>

#include "cli_example.h" /* tests/: the option table */
#include "fuzz_util.h"

enum { MAX_WORDS = 64, MAX_WORD = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size == 0) return 0;
  const lt_cli cli = cli_of(data[0] & 1);
  /* the words: copies of the '\0'-separated pieces (the last one terminated here) */
  static char words[MAX_WORDS][MAX_WORD + 1];
  char *argv[MAX_WORDS + 2] = {"fuzz"};
  int argc = 1;
  for (size_t i = 1; i < size && argc <= MAX_WORDS;) {
    const uint8_t *end = memchr(data + i, 0, size - i);
    size_t len = end ? (size_t)(end - (data + i)) : size - i;
    size_t keep = len < MAX_WORD ? len : MAX_WORD;
    memcpy(words[argc - 1], data + i, keep);
    words[argc - 1][keep] = '\0';
    argv[argc] = words[argc - 1];
    argc++;
    i += len + 1;
  }
  argv[argc] = NULL;

  vals v = DEFAULTS;
  bool given[N] = {false};
  const char *pos[MAX_WORDS + 2];
  int n_pos = -1;
  char msg[256];
  memset(msg, 'x', sizeof msg);
  lt_cli_status st = lt_cli_parse(&cli, argc, argv, &v, given, pos, &n_pos, msg, sizeof msg);
  FUZZ_ASSERT(st == LT_CLI_PARSED || st == LT_CLI_HELP || st == LT_CLI_BAD, "status %d", (int)st);
  FUZZ_ASSERT(memchr(msg, '\0', sizeof msg), "the message is not terminated");
  FUZZ_ASSERT(n_pos >= 0 && n_pos < argc, "%d operands of %d arguments", n_pos, argc);
  if (st == LT_CLI_BAD)
    FUZZ_ASSERT(!strncmp(msg, "--", 2) || !strncmp(msg, "unknown flag", 12) || !strncmp(msg, "unexpected argument", 19),
                "a refusal that names nothing: '%s'", msg);
  else
    FUZZ_ASSERT(msg[0] == '\0', "a message without a refusal: '%s'", msg);
  if (st == LT_CLI_PARSED) {
    char why[256], text[512];
    for (int i = 0; i < N; i++) {
      FUZZ_ASSERT(!given[i] || OPTS[i].kind != LT_CLI_GROUP, "a heading marked given");
      if (OPTS[i].kind == LT_CLI_GROUP) continue;
      FUZZ_ASSERT(lt_cli_check(&OPTS[i], &v, why, sizeof why), "parsed, yet out of range: %s", why);
      lt_cli_value_text(&OPTS[i], &v, text, sizeof text);
      lt_cli_range_text(&OPTS[i], text, sizeof text);
      if (!given[i]) FUZZ_ASSERT(lt_cli_same_value(&OPTS[i], &v, &DEFAULTS), "--%s changed, not given", OPTS[i].name);
    }
    if (v.path) { /* a string borrows an argv word */
      bool found = false;
      for (int i = 1; i < argc && !found; i++) found = v.path >= argv[i] && v.path <= argv[i] + strlen(argv[i]);
      FUZZ_ASSERT(found, "--path does not point into argv");
    }
    for (int k = 0; k < n_pos; k++) { /* operands in order */
      int i = 1;
      while (i < argc && argv[i] != pos[k]) i++;
      FUZZ_ASSERT(i < argc, "operand %d is not an argv word", k);
      FUZZ_ASSERT(k == 0 || pos[k - 1] < pos[k], "operands out of order"); /* words[] ascends in memory */
    }
  }
  if (st == LT_CLI_HELP) {
    FILE *f = fopen("/dev/null", "w");
    if (f) {
      FUZZ_ASSERT(lt_cli_usage(&cli, f) == 0, "--help to /dev/null failed");
      fclose(f);
    }
  }
  fuzz_log("cli: status %d, %d words, %d operands", (int)st, argc - 1, n_pos);
  return 0;
}
