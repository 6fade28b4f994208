/*
 * tests/doc_snippets/tutorial.h: what docs/tutorial.md's snippets leave to
 * the reader or take from the files they quote (train/classify.c's run
 * struct and hooks, fashion_mnist_mlp.c's options), declared only:
 * tests/doc_snippets.py compiles the snippets, it does not link them.
 */
#include <libtensor/libtensor.h>
#include <stdio.h>
#include <stdlib.h>

/* train/classify.c's state of one run (shortened) */
typedef struct run {
  const lt_classifier *m;
  lt_tensor_loader *loader;
} run;
lt_status evaluate_hook(void *user, lt_trainer_eval *ev); /* train/classify.c's evaluate hook */
typedef struct doc_options { bool sgd; double lr, weight_decay; uint64_t seed; const char *dir; int64_t batch; } doc_options;

/* Section 3: inside main, the options parsed */
#define DOC_CONTEXT_main lt_classify_opts opt = LT_CLASSIFY_DEFAULTS("fashion_mnist_mlp", 10);
/* Section 5: lt_classify_fit's locals */
#define DOC_CONTEXT_fit                                                                      \
  const lt_classifier *m = NULL;                                                             \
  const doc_options *o = NULL;                                                               \
  lt_optimizer *optim = NULL;                                                                \
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);                                    \
  lt_schedule sched = {0};                                                                   \
  int64_t total = 0, steps_per_epoch = 0;                                                    \
  run r = {0};                                                                               \
  lt_trainer_result tr;
/* Section 5: the trainer's step */
#define DOC_CONTEXT_step                                                                     \
  lt_params *params = NULL;                                                                  \
  lt_optimizer *optim = NULL;                                                                \
  lt_schedule sched = {0};                                                                   \
  lt_tensor *loss = NULL;                                                                    \
  double max_norm = 1.0, norm;                                                               \
  int64_t step = 0;
/* Section 7 */
#define DOC_CONTEXT_optim                                                                    \
  const lt_classifier *m = NULL;                                                             \
  const doc_options *o = NULL;                                                               \
  int64_t total = 0;
/* Section 8 */
#define DOC_CONTEXT_loader                                                                   \
  lt_classify_opts opt = LT_CLASSIFY_DEFAULTS("fashion_mnist_mlp", 10);                      \
  const doc_options *o = NULL;                                                               \
  const lt_classify_data *d = NULL;                                                          \
  lt_tensor *xb, *yb;
/* Section 9: lt_classify_evaluate's locals */
#define DOC_CONTEXT_evaluate                                                                 \
  const lt_classifier *m = NULL;                                                             \
  const lt_tensor *x = NULL, *y = NULL;                                                      \
  int64_t N = 0, batch = 1000, pred[1000];
/* Section 13: a generator for the gradcheck's inputs (TRY comes from section 9's snippet) */
#define DOC_CONTEXT_custom lt_generator *g = NULL;
