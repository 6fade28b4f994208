/*
 * tests/test_gradcheck_table.c: every gradcheck case of every module, and the
 * check that the op table and the cases agree.
 *
 * The cases live in tests/gradcases_<module>.inc (format in their opening
 * comment), one X("<op name>", <function>) line each. This program:
 *   - runs each case as its own Check test (a failure names the case, its op
 *     and lt_gradcheck's message: input, element, analytic and numeric values);
 *   - walks lt__ops: every op with a backward must have at least one case
 *     (fewer than 3 prints a warning line listing them), every case must name
 *     an op of the table, and the ops without backward are listed;
 *   - checks that a case frees what it makes (live tensor count unchanged).
 * It is not where the engine itself is tested (tests/test_autograd.c).
 */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "tensor/storage_internal.h"

#include "gradcases_view.inc"
#include "gradcases_elementwise.inc"
#include "gradcases_reduce.inc"
#include "gradcases_matmul.inc"
#include "gradcases_index.inc"
#include "gradcases_nn.inc"
#include "gradcases_attention.inc"

typedef struct gradcase {
  const char *op;
  lt_status (*fn)(lt_generator *g);
  const char *label;
} gradcase;

#define GRADCASE_ENTRY(op, fn) {op, fn, #fn},
static const gradcase cases[] = {
    GRADCASES_VIEW(GRADCASE_ENTRY)
    GRADCASES_ELEMENTWISE(GRADCASE_ENTRY)
    GRADCASES_REDUCE(GRADCASE_ENTRY)
    GRADCASES_MATMUL(GRADCASE_ENTRY)
    GRADCASES_INDEX(GRADCASE_ENTRY)
    GRADCASES_NN(GRADCASE_ENTRY)
    GRADCASES_ATTENTION(GRADCASE_ENTRY)
    {NULL, NULL, NULL}};
#undef GRADCASE_ENTRY
#define NCASES ((int)(sizeof cases / sizeof cases[0]) - 1)

/* One Check test per case (a loop test: _i is the case index). */
START_TEST(test_case) {
  const gradcase *c = &cases[_i];
  lt_generator *g = lt_generator_new(0x5eed0000u + (uint64_t)_i);
  ck_assert(g);
  int64_t live = lt__live_tensors();
  lt_clear_error();
  lt_status s = c->fn(g);
  ck_assert_msg(s == LT_OK, "gradcheck case %s (op '%s') returned %s: %s", c->label, c->op,
                lt_status_name(s), lt_last_error());
  ck_assert_msg(lt__live_tensors() == live,
                "gradcheck case %s (op '%s') leaks %lld tensors", c->label, c->op,
                (long long)(lt__live_tensors() - live));
  ck_assert_msg(lt_grad_enabled(), "gradcheck case %s left grad mode off", c->label);
  lt_generator_free(g);
}
END_TEST

static int cases_for(const char *op) {
  int k = 0;
  for (int i = 0; i < NCASES; i++) k += strcmp(cases[i].op, op) == 0;
  return k;
}

/* Appends ", name" (or "name") to buf. */
static void append(char *buf, size_t size, const char *fmt, const char *name, int k) {
  size_t len = strlen(buf);
  if (len + 1 >= size) return;
  snprintf(buf + len, size - len, "%s", len ? ", " : "");
  len = strlen(buf);
  snprintf(buf + len, size - len, fmt, name, k);
}

START_TEST(test_table_coverage) {
  char missing[4096] = "", few[4096] = "", nobw[4096] = "", unknown[4096] = "";
  int nbw = 0;
  for (int op = 0; op < LT__OP_COUNT; op++) {
    const lt__op_def *d = &lt__ops[op];
    ck_assert_msg(d->name != NULL, "op table entry %d has no name", op);
    if (!d->backward) {
      append(nobw, sizeof nobw, "%s", d->name, 0);
      continue;
    }
    nbw++;
    int k = cases_for(d->name);
    if (k == 0) append(missing, sizeof missing, "%s", d->name, 0);
    else if (k < 3) append(few, sizeof few, "%s (%d)", d->name, k);
  }
  for (int i = 0; i < NCASES; i++) {
    bool found = false;
    for (int op = 0; op < LT__OP_COUNT && !found; op++) found = strcmp(lt__ops[op].name, cases[i].op) == 0;
    if (!found) append(unknown, sizeof unknown, "%s", cases[i].op, 0);
  }
  printf("gradcheck table: %d ops, %d with a backward, %d cases\n", (int)LT__OP_COUNT, nbw, NCASES);
  printf("gradcheck table: ops without backward: %s\n", nobw[0] ? nobw : "(none)");
  if (few[0]) printf("gradcheck table: warning: ops with fewer than 3 cases: %s\n", few);
  fflush(stdout);
  ck_assert_msg(!missing[0], "ops with a backward but no gradcheck case: %s", missing);
  ck_assert_msg(!unknown[0], "gradcheck cases naming ops that are not in the op table: %s", unknown);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gradcheck_table");
  TCase *tc = tcase_create("coverage");
  tcase_add_test(tc, test_table_coverage);
  suite_add_tcase(s, tc);
  TCase *tcc = tcase_create("cases");
  tcase_set_timeout(tcc, 600);
  tcase_add_loop_test(tcc, test_case, 0, NCASES);
  suite_add_tcase(s, tcc);
  return lt_test_run(s);
}
