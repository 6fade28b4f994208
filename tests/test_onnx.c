/*
 * tests/test_onnx.c: models/transformer/onnx.h without a Python: the files
 * lt_onnx_export writes are read back with protobuf-c (the same generated
 * schema) and checked as an ONNX consumer would: IR version and opset, the
 * graph's inputs and outputs with their dynamic axes, nodes in topological
 * order (every input defined before its use, as the ONNX IR requires), unique
 * names, and every parameter once as an f32 initializer with the model's
 * values (Linear weights transposed); then the refusals (encoder-decoder,
 * NULL arguments, an unwritable path), which leave no file. Runs under
 * ASan/UBSan. tests/reference/test_onnx_export.py runs the same files in
 * onnxruntime (docs/testing.md).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libtensor_transformer.h"
#include "onnx/onnx.pb-c.h"
#include "test_util.h"
#include "util_tfckpt.h"

static char tmp[64];

static void tmp_make(void) { lt_test_mkdtemp(tmp, sizeof tmp, "onnx"); }
static void tmp_remove(void) { lt_test_rmtree(tmp); }

static lt_transformer *model(const lt_tf_config *c, uint64_t seed) { return LT_NNP(tfckpt_random_model(c, seed)); }

/* The file of m read back, checked by check_graph (below); free with done(). */
static void check_graph(const Onnx__ModelProto *mp, lt_transformer *m);
static Onnx__ModelProto *export_and_read(lt_transformer *m, const char *name) {
  const char *path = lt_test_join(tmp, name);
  lt_onnx_summary sum;
  LT_OK_OR_FAIL(lt_onnx_export(m, path, &sum));
  char *buf = NULL;
  size_t size = 0;
  LT_OK_OR_FAIL(lt_ckpt_read_file(path, 1u << 30, &buf, &size));
  ck_assert_uint_eq(size, sum.bytes);
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, (const uint8_t *)buf);
  free(buf);
  ck_assert_ptr_nonnull(mp);
  ck_assert_int_eq((int64_t)mp->graph->n_node, sum.nodes);
  ck_assert_int_eq((int64_t)mp->graph->n_initializer, sum.initializers);
  check_graph(mp, m);
  return mp;
}

static void done(Onnx__ModelProto *mp, lt_transformer *m) {
  onnx__model_proto__free_unpacked(mp, NULL);
  lt_transformer_free(m);
}

static bool in_list(char **names, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return true;
  return false;
}

/* The value info v: name, int64/float, dims as given (-1 batch, -2 sequence). */
static void check_value(const Onnx__ValueInfoProto *v, const char *name, int32_t elem, int ndim, const int64_t *dims) {
  ck_assert_str_eq(v->name, name);
  ck_assert_int_eq(v->type->value_case, ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE);
  const Onnx__TypeProto__Tensor *t = v->type->tensor_type;
  ck_assert_int_eq(t->elem_type, elem);
  ck_assert_uint_eq(t->shape->n_dim, (size_t)ndim);
  for (int i = 0; i < ndim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = t->shape->dim[i];
    if (dims[i] > 0) {
      ck_assert_int_eq(d->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE);
      ck_assert_int_eq(d->dim_value, dims[i]);
    } else {
      ck_assert_int_eq(d->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
      ck_assert_str_eq(d->dim_param, dims[i] == -1 ? "batch" : "sequence");
    }
  }
}

/* Topological order, unique names, every parameter as an initializer with its values. */
static void check_graph(const Onnx__ModelProto *mp, lt_transformer *m) {
  ck_assert_int_eq(mp->ir_version, LT_ONNX_IR_VERSION);
  ck_assert_uint_eq(mp->n_opset_import, 1);
  ck_assert_str_eq(mp->opset_import[0]->domain, "");
  ck_assert_int_eq(mp->opset_import[0]->version, LT_ONNX_OPSET);
  ck_assert_str_eq(mp->producer_name, "libtensor");
  const Onnx__GraphProto *g = mp->graph;
  const size_t cap = g->n_input + g->n_initializer + 2 * g->n_node + 1;
  char **defined = calloc(cap, sizeof *defined);
  size_t n = 0;
  for (size_t i = 0; i < g->n_input; i++) defined[n++] = g->input[i]->name;
  for (size_t i = 0; i < g->n_initializer; i++) {
    ck_assert_msg(!in_list(defined, n, g->initializer[i]->name), "initializer %s twice", g->initializer[i]->name);
    defined[n++] = g->initializer[i]->name;
  }
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *nd = g->node[i];
    for (size_t j = 0; j < nd->n_input; j++)
      ck_assert_msg(in_list(defined, n, nd->input[j]), "node %s (%s): input '%s' used before it is defined", nd->name,
                    nd->op_type, nd->input[j]);
    for (size_t j = 0; j < nd->n_output; j++) {
      ck_assert_msg(!in_list(defined, n, nd->output[j]), "value %s defined twice", nd->output[j]);
      ck_assert_uint_lt(n, cap);
      defined[n++] = nd->output[j];
    }
  }
  for (size_t i = 0; i < g->n_output; i++) ck_assert(in_list(defined, n, g->output[i]->name));
  free(defined);
  /* every parameter, once, f32, with its values */
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) {
    const lt_param *p = lt_params_at(P, i);
    const Onnx__TensorProto *t = NULL;
    for (size_t k = 0; k < g->n_initializer && !t; k++)
      if (strcmp(g->initializer[k]->name, p->name) == 0) t = g->initializer[k];
    ck_assert_msg(t != NULL, "parameter %s is no initializer", p->name);
    ck_assert_int_eq(t->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    ck_assert_uint_eq(t->n_dims, (size_t)p->value->ndim);
    ck_assert_uint_eq(t->raw_data.len, (size_t)p->value->numel * sizeof(float));
    /* a Linear weight [out, in] is stored [in, out]; the embeddings and vectors as they are */
    const bool transposed = p->value->ndim == 2 && strstr(p->name, "embed") == NULL;
    lt_tensor *want = transposed ? LT_NN(lt_transpose(p->value, 0, 1)) : LT_NN(lt_contiguous(p->value));
    lt_tensor *w = LT_NN(lt_contiguous(want));
    for (int d = 0; d < w->ndim; d++) ck_assert_int_eq(t->dims[d], w->shape[d]);
    ck_assert_msg(memcmp(t->raw_data.data, w->data, t->raw_data.len) == 0, "%s: values differ", p->name);
    LT_FREE_ALL(want, w);
  }
}

START_TEST(decoder_only) {
  tmp_make();
  for (int variant = 0; variant < 3; variant++) {
    lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
    c.vocab_size = 17, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_dec_layers = 2, c.d_ff = 24;
    c.max_len = 12, c.dropout = 0.0, c.pad_id = -1;
    if (variant == 1) { /* Llama: RMSNorm, SwiGLU, RoPE, GQA, untied, no biases */
      c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.n_kv_heads = 2;
      c.tie_embeddings = false, c.bias = false;
    } else if (variant == 2) { /* post-norm, sinusoidal, ReLU, scaled, MQA */
      c.pre_norm = false, c.pos = LT_TF_POS_SINUSOIDAL, c.act = LT_ACT_RELU, c.scale_embeddings = true;
      c.n_kv_heads = 1;
    }
    lt_transformer *m = model(&c, 7 + (uint64_t)variant);
    Onnx__ModelProto *mp = export_and_read(m, "dec.onnx");
    ck_assert_uint_eq(mp->graph->n_input, 1);
    ck_assert_uint_eq(mp->graph->n_output, 1);
    check_value(mp->graph->input[0], "input_ids", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, (int64_t[]){-1, -2});
    check_value(mp->graph->output[0], "logits", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3,
                (int64_t[]){-1, -2, c.vocab_size});
    done(mp, m);
  }
  tmp_remove();
}
END_TEST

START_TEST(encoder_only) {
  tmp_make();
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.vocab_size = 23, c.d_model = 12, c.n_heads = 3, c.n_kv_heads = 3, c.n_enc_layers = 2, c.d_ff = 20;
  c.max_len = 10, c.dropout = 0.0, c.pad_id = 0, c.n_classes = 4, c.type_vocab_size = 2, c.embed_norm = true;
  c.pooler = true, c.norm_eps = 1e-12;
  lt_transformer *m = model(&c, 3);
  Onnx__ModelProto *mp = export_and_read(m, "enc.onnx");
  const Onnx__GraphProto *g = mp->graph;
  ck_assert_uint_eq(g->n_input, 3);
  const char *ins[] = {"input_ids", "attention_mask", "token_type_ids"};
  for (int i = 0; i < 3; i++)
    check_value(g->input[i], ins[i], ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, (int64_t[]){-1, -2});
  ck_assert_uint_eq(g->n_output, 3);
  check_value(g->output[0], "last_hidden_state", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){-1, -2, 12});
  check_value(g->output[1], "pooler_output", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){-1, 12});
  check_value(g->output[2], "logits", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){-1, 4});
  done(mp, m);
  /* no token types, no pooler, no classifier: two inputs, one output */
  c.type_vocab_size = 0, c.pooler = false, c.n_classes = 0;
  m = model(&c, 4);
  mp = export_and_read(m, "enc2.onnx");
  ck_assert_uint_eq(mp->graph->n_input, 2);
  ck_assert_uint_eq(mp->graph->n_output, 1);
  done(mp, m);
  tmp_remove();
}
END_TEST

START_TEST(refusals) {
  tmp_make();
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.vocab_size = 11, c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.n_enc_layers = 1, c.n_dec_layers = 1;
  c.d_ff = 16, c.max_len = 8;
  lt_transformer *m = model(&c, 1);
  const char *path = lt_test_join(tmp, "ed.onnx");
  LT_EXPECT_ERR(lt_onnx_export(m, path, NULL), LT_ERR_INVALID, "encoder-decoder");
  ck_assert_int_ne(access(path, F_OK), 0);
  LT_EXPECT_ERR(lt_onnx_export(NULL, path, NULL), LT_ERR_NULL, "model");
  LT_EXPECT_ERR(lt_onnx_export(m, NULL, NULL), LT_ERR_NULL, "path");
  lt_transformer_free(m);
  c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 11, c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.n_dec_layers = 1, c.d_ff = 16, c.max_len = 8;
  m = model(&c, 2);
  ck_assert_int_eq(lt_onnx_export(m, lt_test_join(tmp, "no/such/dir/m.onnx"), NULL), LT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(lt_last_error(), "no/such/dir/m.onnx"));
  lt_transformer_free(m);
  tmp_remove();
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx");
  LT_TEST_CASE(s, "core", 120, decoder_only, encoder_only, refusals);
  return lt_test_run(s);
}
