/*
 * tests/doc_snippets/decoding.h: what docs/decoding.md's snippets leave to
 * the reader (a model of one's own, the Transformer's inputs), declared only:
 * tests/doc_snippets.py compiles the snippets, it does not link them.
 */
#include <libtensor/libtensor.h>
#include <libtensor/libtensor_transformer.h> /* the first snippet's own include, hoisted after this */
#include <stdio.h>

typedef struct my_model my_model;  /* the reader's model */
typedef struct my_cache my_cache;  /* and its key/value cache */
/* the logits [R, V] of the last position of each of the R rows (new; NULL + error) */
lt_tensor *my_forward_last(my_model *m, my_cache *c, const int64_t *ids, int64_t stride, int64_t R, int64_t n);
lt_status my_cache_reorder(my_cache *c, const int64_t *rows, int64_t R);
int64_t my_vocab_size(const my_model *m);

/* "With the Transformer": a model loaded, an encoder-decoder's source and its padding mask */
#define DOC_CONTEXT_tf                 \
  const lt_transformer *model = NULL;  \
  const lt_tensor *src = NULL, *src_pad = NULL;
