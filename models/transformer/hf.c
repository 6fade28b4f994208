/*
 * models/transformer/hf.c: the Transformer as a Hugging Face GPT-2 or Llama
 * directory (Qwen2's and Mistral's are Llama's with q/k/v biases or a
 * sliding window; RoPE scaling for all three), and the shared machinery of BERT's (hf_bert.c)
 * and T5's (hf_t5.c) (hf.h): which layout a configuration fits, the
 * name and orientation mapping (one table of pieces per layout, used both
 * ways), config.json with jansson, and the checked load.
 *
 * A piece is one Hugging Face tensor made of one or more libtensor
 * parameters:
 *   SAME    the same tensor under another name;
 *   T       transposed (GPT-2's Conv1D stores [in, out], nn.Linear [out, in]);
 *   CAT_T   q, k, v weights concatenated along their rows, then transposed
 *           (GPT-2's c_attn.weight [C, 3C]);
 *   CAT     concatenated along the rows (c_attn.bias [3C]; GGUF's attn_qkv.weight [3C, C]);
 *   ROPE    GGUF's q and k rows, permuted from Hugging Face's half rotation
 *           to ggml's interleaved pairs (models/transformer/gguf_model.c).
 * Export builds each piece from the parameters; import checks every piece's
 * name, shape and dtype first, then splits it back.
 *
 * What this is not: the safetensors format (checkpoint/safetensors.c) or a
 * tokenizer converter.
 */
#include "models/transformer/hf.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/hf_internal.h"

#define NAME_LEN 256
#define PATH_LEN 4096
#define CONFIG_MAX_BYTES (1u << 20)

static const char *const family_names[] = {"gpt2", "llama", "bert", "qwen2", "mistral", "t5"}; /* lt_hf_family's order */
#define N_FAMILIES ((int)(sizeof family_names / sizeof family_names[0]))

const char *lt_hf_family_name(lt_hf_family f) {
  return (int)f >= 0 && (int)f < N_FAMILIES ? family_names[f] : "unknown";
}

/* ======================================================================== */
/* Which layout                                                             */
/* ======================================================================== */

#define NOFIT(...) lt_error_set(LT_ERR_INVALID, __VA_ARGS__)

lt_status lt_hf_family_of(const lt_tf_config *c, lt_hf_family *out) {
  if (!c) return lt_error_null_arg("hf_family_of", "cfg");
  lt_status s = lt_tf_config_validate(c);
  if (s != LT_OK) return s;
  if (c->arch == LT_TF_ENCODER_ONLY) { /* hf_bert.c */
    if ((s = lt__hf_bert_fits(c)) != LT_OK) return s;
    if (out) *out = LT_HF_BERT;
    return LT_OK;
  }
  if (c->arch == LT_TF_ENCODER_DECODER) { /* hf_t5.c */
    if ((s = lt__hf_t5_fits(c)) != LT_OK) return s;
    if (out) *out = LT_HF_T5;
    return LT_OK;
  }
  if (c->embed_norm) return NOFIT("hf: embed_norm true: GPT-2 and Llama have no norm over the embeddings");
  if (!c->pre_norm) return NOFIT("hf: pre_norm false (post-norm): GPT-2 and Llama are pre-norm");
  if (c->scale_embeddings)
    return NOFIT("hf: scale_embeddings true: GPT-2 and Llama do not scale embeddings by sqrt(d_model)");
  if (c->norm == LT_TF_LAYER_NORM) {
    const char *who = "hf: a LayerNorm model is exported as GPT-2, which needs";
    if (c->act != LT_ACT_GELU_TANH || c->swiglu)
      return NOFIT("%s act gelu_tanh without swiglu (GPT-2's gelu_new); this model has act %s%s", who,
                   lt_tf_act_name(c->act), c->swiglu ? " with swiglu" : "");
    if (c->pos != LT_TF_POS_LEARNED)
      return NOFIT("%s pos learned; this model has pos %s", who, lt_tf_pos_name(c->pos));
    if (!c->tie_embeddings) return NOFIT("%s tie_embeddings (GPT-2's head is the embedding)", who);
    if (!c->bias) return NOFIT("%s bias (GPT-2 has biases on every layer)", who);
    if (c->n_kv_heads != c->n_heads)
      return NOFIT("%s n_kv_heads == n_heads (no GQA); this model has %lld key/value heads for %lld", who,
                   (long long)c->n_kv_heads, (long long)c->n_heads);
    if (c->sliding_window > 0)
      return NOFIT("%s sliding_window 0 (GPT-2 attends to every earlier token); this model has %lld", who,
                   (long long)c->sliding_window);
    if (out) *out = LT_HF_GPT2;
    return LT_OK;
  }
  const char *who = "hf: an RMSNorm model is exported as Llama, which needs";
  if (!c->swiglu || c->act != LT_ACT_SILU)
    return NOFIT("%s swiglu with act silu; this model has act %s%s", who, lt_tf_act_name(c->act),
                 c->swiglu ? " with swiglu" : " without swiglu");
  if (c->pos != LT_TF_POS_ROPE) return NOFIT("%s pos rope; this model has pos %s", who, lt_tf_pos_name(c->pos));
  if (c->bias) return NOFIT("%s bias false (Llama has no biases; Qwen2's are qkv_bias)", who);
  if (c->qkv_bias && c->sliding_window > 0)
    return NOFIT("hf: qkv_bias with sliding_window %lld: Qwen2 (q/k/v biases) is exported without a sliding window, "
                 "Mistral (a window) without biases", (long long)c->sliding_window);
  if (out) *out = c->qkv_bias ? LT_HF_QWEN2 : c->sliding_window > 0 ? LT_HF_MISTRAL : LT_HF_LLAMA;
  return LT_OK;
}

/* ======================================================================== */
/* The name tables                                                          */
/* ======================================================================== */

/* piece and pieces: hf_internal.h (shared with hf_bert.c). */

static lt_status add_piece(pieces *ps, lt_params *params, const char *hf, piece_op op, int n, const char *l0,
                           const char *l1, const char *l2) {
  if (ps->n == ps->cap) {
    int cap = ps->cap ? 2 * ps->cap : 64;
    piece *np = realloc(ps->p, (size_t)cap * sizeof *np);
    if (!np) return lt_error_set(LT_ERR_NOMEM, "hf: out of memory");
    ps->p = np, ps->cap = cap;
  }
  piece *p = &ps->p[ps->n];
  memset(p, 0, sizeof *p);
  snprintf(p->hf, sizeof p->hf, "%s", hf);
  p->op = op, p->n = n;
  const char *l[3] = {l0, l1, l2};
  int64_t rows = 0;
  for (int k = 0; k < n; k++) {
    snprintf(p->lt[k], NAME_LEN, "%s", l[k]);
    if (!(p->src[k] = lt_params_find(params, l[k])))
      return lt_error_set(LT_ERR_INVALID, "hf: the model has no parameter '%s' (for '%s')", l[k], hf);
    rows += p->src[k]->shape[0];
  }
  const lt_tensor *t = p->src[0];
  switch (op) {
    case P_SAME: p->ndim = t->ndim, p->shape[0] = t->shape[0], p->shape[1] = t->ndim > 1 ? t->shape[1] : 0; break;
    case P_T: p->ndim = 2, p->shape[0] = t->shape[1], p->shape[1] = t->shape[0]; break;
    case P_CAT_T: p->ndim = 2, p->shape[0] = t->shape[1], p->shape[1] = rows; break;
    case P_CAT: p->ndim = t->ndim, p->shape[0] = rows, p->shape[1] = t->ndim > 1 ? t->shape[1] : 0; break;
    case P_ROPE: p->ndim = 2, p->shape[0] = t->shape[0], p->shape[1] = t->shape[1]; break;
  }
  ps->n++;
  return LT_OK;
}

lt_status lt__hf_add_piece(pieces *ps, lt_params *params, const char *hf, piece_op op, int n, const char *l0,
                           const char *l1, const char *l2) {
  return add_piece(ps, params, hf, op, n, l0, l1, l2);
}

/* The pieces of m's layout, in Hugging Face's order. */
static lt_status layout(lt_transformer *m, lt_hf_family fam, pieces *ps) {
  const lt_tf_config *c = lt_transformer_config(m);
  lt_params *P = lt_transformer_params(m);
  char h[NAME_LEN], l[4][NAME_LEN];
  lt_status s;
  if (fam == LT_HF_BERT) return lt__hf_bert_layout(m, ps);
  if (fam == LT_HF_T5) return lt__hf_t5_layout(m, ps);
#define LT(k, fmt) (snprintf(l[k], NAME_LEN, "decoder.layers.%lld." fmt, (long long)i), l[k])
#define HF(fmt) (snprintf(h, NAME_LEN, fmt, (long long)i), h)
  if (fam == LT_HF_GPT2) {
    if ((s = add_piece(ps, P, "transformer.wte.weight", P_SAME, 1, "embed.weight", 0, 0)) ||
        (s = add_piece(ps, P, "transformer.wpe.weight", P_SAME, 1, "pos_embed.weight", 0, 0)))
      return s;
    for (int64_t i = 0; i < c->n_dec_layers; i++) {
      if ((s = add_piece(ps, P, HF("transformer.h.%lld.ln_1.weight"), P_SAME, 1, LT(0, "norm1.weight"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.ln_1.bias"), P_SAME, 1, LT(0, "norm1.bias"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.attn.c_attn.weight"), P_CAT_T, 3,
                         LT(0, "self_attn.q_proj.weight"), LT(1, "self_attn.k_proj.weight"),
                         LT(2, "self_attn.v_proj.weight"))) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.attn.c_attn.bias"), P_CAT, 3, LT(0, "self_attn.q_proj.bias"),
                         LT(1, "self_attn.k_proj.bias"), LT(2, "self_attn.v_proj.bias"))) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.attn.c_proj.weight"), P_T, 1,
                         LT(0, "self_attn.out_proj.weight"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.attn.c_proj.bias"), P_SAME, 1, LT(0, "self_attn.out_proj.bias"),
                         0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.ln_2.weight"), P_SAME, 1, LT(0, "norm2.weight"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.ln_2.bias"), P_SAME, 1, LT(0, "norm2.bias"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.mlp.c_fc.weight"), P_T, 1, LT(0, "linear1.weight"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.mlp.c_fc.bias"), P_SAME, 1, LT(0, "linear1.bias"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.mlp.c_proj.weight"), P_T, 1, LT(0, "linear2.weight"), 0, 0)) ||
          (s = add_piece(ps, P, HF("transformer.h.%lld.mlp.c_proj.bias"), P_SAME, 1, LT(0, "linear2.bias"), 0, 0)))
        return s;
    }
    if ((s = add_piece(ps, P, "transformer.ln_f.weight", P_SAME, 1, "decoder.norm.weight", 0, 0)) ||
        (s = add_piece(ps, P, "transformer.ln_f.bias", P_SAME, 1, "decoder.norm.bias", 0, 0)))
      return s;
    return LT_OK;
  }
  if ((s = add_piece(ps, P, "model.embed_tokens.weight", P_SAME, 1, "embed.weight", 0, 0))) return s;
  for (int64_t i = 0; i < c->n_dec_layers; i++) {
    static const char *const attn[4][2] = {
        {"q_proj", "q_proj"}, {"k_proj", "k_proj"}, {"v_proj", "v_proj"}, {"o_proj", "out_proj"}};
    for (int k = 0; k < 4; k++) { /* each weight, then (Qwen2's q, k, v) its bias, as Qwen2 saves them */
      for (int b = 0; b < (c->qkv_bias && k < 3 ? 2 : 1); b++) {
        const char *what = b ? "bias" : "weight";
        char hn[NAME_LEN], ln[NAME_LEN];
        snprintf(hn, sizeof hn, "model.layers.%lld.self_attn.%s.%s", (long long)i, attn[k][0], what);
        snprintf(ln, sizeof ln, "decoder.layers.%lld.self_attn.%s.%s", (long long)i, attn[k][1], what);
        if ((s = add_piece(ps, P, hn, P_SAME, 1, ln, 0, 0))) return s;
      }
    }
    /* SwiGLU: w2(silu(w1 x) * w3 x) = down(silu(gate x) * up x) */
    if ((s = add_piece(ps, P, HF("model.layers.%lld.mlp.gate_proj.weight"), P_SAME, 1, LT(0, "w1.weight"), 0, 0)) ||
        (s = add_piece(ps, P, HF("model.layers.%lld.mlp.up_proj.weight"), P_SAME, 1, LT(0, "w3.weight"), 0, 0)) ||
        (s = add_piece(ps, P, HF("model.layers.%lld.mlp.down_proj.weight"), P_SAME, 1, LT(0, "w2.weight"), 0, 0)) ||
        (s = add_piece(ps, P, HF("model.layers.%lld.input_layernorm.weight"), P_SAME, 1, LT(0, "norm1.weight"), 0,
                       0)) ||
        (s = add_piece(ps, P, HF("model.layers.%lld.post_attention_layernorm.weight"), P_SAME, 1,
                       LT(0, "norm2.weight"), 0, 0)))
      return s;
  }
  if ((s = add_piece(ps, P, "model.norm.weight", P_SAME, 1, "decoder.norm.weight", 0, 0))) return s;
  if (!c->tie_embeddings && (s = add_piece(ps, P, "lm_head.weight", P_SAME, 1, "lm_head.weight", 0, 0))) return s;
  return LT_OK;
#undef LT
#undef HF
}

/* The layout's pieces cover every parameter of m exactly once (a check of
 * the tables against the model, so a new parameter cannot be left out). */
static lt_status check_cover(lt_transformer *m, const pieces *ps) {
  lt_params *P = lt_transformer_params(m);
  int used = 0;
  for (int i = 0; i < ps->n; i++) used += ps->p[i].n;
  if (used != lt_params_count(P))
    return lt_error_set(LT_ERR_INVALID, "hf: the layout maps %d tensors, the model has %d", used, lt_params_count(P));
  return LT_OK;
}

/* ======================================================================== */
/* Export                                                                   */
/* ======================================================================== */

/* The rows of a P_ROPE piece [H * HS, C] as [H, a, b, C] with a * b = HS:
 * a view of t, or NULL. */
static lt_tensor *rope_view(const lt_tensor *t, int64_t heads, int64_t a) {
  const int64_t shape[4] = {heads, a, t->shape[0] / heads / a, t->shape[1]};
  return lt_reshape(t, 4, shape);
}

/* Hugging Face's rows (h, j, i) of head h (j: which half, i: the pair) to
 * ggml's (h, i, j), or back (to_ggml false): convert_hf_to_gguf.py's
 * permute, w.reshape(H, 2, HS/2, C).swapaxes(1, 2). Returns new. */
static lt_tensor *rope_permute(const lt_tensor *t, int64_t heads, bool to_ggml) {
  const int64_t hs = t->shape[0] / heads;
  lt_tensor *v = rope_view(t, heads, to_ggml ? 2 : hs / 2), *sw = v ? lt_transpose(v, 1, 2) : NULL;
  lt_tensor *c = sw ? lt_contiguous(sw) : NULL, *r = c ? lt_reshape(c, 2, t->shape) : NULL;
  lt_tensor_free(c);
  lt_tensor_free(sw);
  lt_tensor_free(v);
  return r;
}

lt_tensor *lt__hf_piece_tensor(const piece *p) {
  switch (p->op) {
    case P_SAME: return lt_contiguous(p->src[0]);
    case P_T: {
      lt_tensor *t = lt_transpose(p->src[0], 0, 1), *c = lt_contiguous(t);
      lt_tensor_free(t);
      return c;
    }
    case P_CAT: return lt_cat(p->n, (lt_tensor *const *)p->src, 0);
    case P_CAT_T: {
      lt_tensor *cat = lt_cat(p->n, (lt_tensor *const *)p->src, 0);
      lt_tensor *t = cat ? lt_transpose(cat, 0, 1) : NULL, *c = t ? lt_contiguous(t) : NULL;
      lt_tensor_free(t);
      lt_tensor_free(cat);
      return c;
    }
    case P_ROPE: return rope_permute(p->src[0], p->heads, true);
  }
  return NULL;
}

lt_status lt__hf_piece_store(const piece *p, const lt_tensor *t) {
  bool prev = lt_set_grad_enabled(false);
  lt_status s = LT_OK;
  lt_tensor *v;
  switch (p->op) {
    case P_SAME: v = lt_reshape(t, t->ndim, t->shape); break;
    case P_ROPE: v = rope_permute(t, p->heads, false); break;
    case P_CAT: v = lt_reshape(t, t->ndim, t->shape); break;
    default: v = lt_transpose(t, 0, 1); break; /* back to [out, in] */
  }
  if (!v) s = lt_last_status();
  int64_t row = 0;
  for (int k = 0; k < p->n && s == LT_OK; k++) {
    lt_tensor *part = lt_narrow(v, 0, row, p->src[k]->shape[0]);
    s = part ? lt__tf_store_weight(p->src[k], part) : lt_last_status();
    row += p->src[k]->shape[0];
    lt_tensor_free(part);
  }
  lt_tensor_free(v);
  lt_set_grad_enabled(prev);
  return s;
}

/* config.json's rope_parameters for c (new reference): rope_theta and
 * rope_type, and the scaling's keys (docs/interop.md). */
static json_t *rope_parameters_json(const lt_tf_config *c) {
  json_t *r = json_object();
  if (!r) return NULL;
  json_object_set_new(r, "rope_theta", json_real(c->rope_base));
  json_object_set_new(r, "rope_type", json_string(lt_tf_rope_type_name(c->rope_type)));
  if (c->rope_type != LT_ROPE_DEFAULT) json_object_set_new(r, "factor", json_real(c->rope_factor));
  if (c->rope_type == LT_ROPE_LLAMA3) {
    json_object_set_new(r, "low_freq_factor", json_real(c->rope_low_freq_factor));
    json_object_set_new(r, "high_freq_factor", json_real(c->rope_high_freq_factor));
    json_object_set_new(r, "original_max_position_embeddings", json_integer(c->rope_original_max_len));
  }
  return r;
}

static json_t *config_json(const lt_tf_config *c, lt_hf_family fam) {
  if (fam == LT_HF_BERT) return lt__hf_bert_config_json(c);
  if (fam == LT_HF_T5) return lt__hf_t5_config_json(c);
  json_t *j = json_object();
  if (!j) return NULL;
#define SET(k, v) json_object_set_new(j, k, v)
  const json_int_t C = c->d_model;
  if (fam == LT_HF_GPT2) {
    SET("architectures", json_pack("[s]", "GPT2LMHeadModel"));
    SET("model_type", json_string("gpt2"));
    SET("vocab_size", json_integer(c->vocab_size));
    SET("n_positions", json_integer(c->max_len));
    SET("n_ctx", json_integer(c->max_len));
    SET("n_embd", json_integer(C));
    SET("n_layer", json_integer(c->n_dec_layers));
    SET("n_head", json_integer(c->n_heads));
    SET("n_inner", json_integer(c->d_ff));
    SET("activation_function", json_string("gelu_new"));
    SET("resid_pdrop", json_real(c->dropout));
    SET("embd_pdrop", json_real(c->dropout));
    SET("attn_pdrop", json_real(c->dropout));
    SET("layer_norm_epsilon", json_real(c->norm_eps));
    SET("initializer_range", json_real(0.02));
    SET("scale_attn_weights", json_true());
    SET("scale_attn_by_inverse_layer_idx", json_false());
    SET("reorder_and_upcast_attn", json_false());
    SET("tie_word_embeddings", json_true());
  } else {
    static const char *const arch[] = {[LT_HF_LLAMA] = "LlamaForCausalLM", [LT_HF_QWEN2] = "Qwen2ForCausalLM",
                                       [LT_HF_MISTRAL] = "MistralForCausalLM"};
    SET("architectures", json_pack("[s]", arch[fam]));
    SET("model_type", json_string(lt_hf_family_name(fam)));
    SET("vocab_size", json_integer(c->vocab_size));
    SET("hidden_size", json_integer(C));
    SET("intermediate_size", json_integer(c->d_ff));
    SET("num_hidden_layers", json_integer(c->n_dec_layers));
    SET("num_attention_heads", json_integer(c->n_heads));
    SET("num_key_value_heads", json_integer(c->n_kv_heads));
    SET("head_dim", json_integer(C / c->n_heads));
    SET("hidden_act", json_string("silu"));
    SET("max_position_embeddings", json_integer(c->max_len));
    SET("rms_norm_eps", json_real(c->norm_eps));
    json_t *rp = rope_parameters_json(c); /* transformers 5's key; rope_theta / rope_scaling: older versions' */
    SET("rope_theta", json_real(c->rope_base));
    SET("rope_scaling", c->rope_type == LT_ROPE_DEFAULT ? json_null() : json_deep_copy(rp));
    SET("rope_parameters", rp);
    if (fam == LT_HF_LLAMA) {
      SET("attention_bias", json_false());
      SET("mlp_bias", json_false());
    }
    if (fam == LT_HF_QWEN2) {
      SET("use_sliding_window", json_false());
      SET("sliding_window", json_null());
      SET("max_window_layers", json_integer(c->n_dec_layers));
    }
    if (fam == LT_HF_MISTRAL) SET("sliding_window", json_integer(c->sliding_window));
    SET("attention_dropout", json_real(c->dropout));
    SET("initializer_range", json_real(0.02));
    SET("pretraining_tp", json_integer(1));
    SET("tie_word_embeddings", json_boolean(c->tie_embeddings));
  }
  if (c->pad_id >= 0) SET("pad_token_id", json_integer(c->pad_id));
  SET("torch_dtype", json_string("float32"));
  SET("use_cache", json_true());
#undef SET
  return j;
}

static const char *join(char *buf, const char *dir, const char *file) {
  snprintf(buf, PATH_LEN, "%s/%s", dir, file);
  return buf;
}

lt_status lt_hf_export(lt_transformer *m, const char *dir) {
  if (!m) return lt_error_null_arg("hf_export", "m");
  if (!dir) return lt_error_null_arg("hf_export", "dir");
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf_export: directory name too long");
  const lt_tf_config *c = lt_transformer_config(m);
  lt_hf_family fam;
  lt_status s = lt_hf_family_of(c, &fam);
  if (s != LT_OK) return s;
  struct stat st;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return lt_error_set(LT_ERR_IO, "hf_export: cannot create directory '%s': %s", dir, strerror(errno));
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) /* it existed: a file or a device is no directory */
    return lt_error_set(LT_ERR_IO, "hf_export: '%s' exists and is not a directory", dir);
  pieces ps = {0};
  lt_tensor **ts = NULL;
  const char **names = NULL;
  char *text = NULL;
  json_t *cj = NULL;
  if ((s = layout(m, fam, &ps)) != LT_OK || (s = check_cover(m, &ps)) != LT_OK) goto out;
  ts = calloc((size_t)ps.n, sizeof *ts);
  names = calloc((size_t)ps.n, sizeof *names);
  if (!ts || !names) {
    s = lt_error_set(LT_ERR_NOMEM, "hf_export: out of memory");
    goto out;
  }
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < ps.n && s == LT_OK; i++) {
    names[i] = ps.p[i].hf;
    if (!(ts[i] = lt__hf_piece_tensor(&ps.p[i]))) s = lt_last_status();
  }
  lt_set_grad_enabled(prev);
  char path[PATH_LEN];
  const char *mk[] = {"format"}, *mv[] = {"pt"};
  if (s != LT_OK ||
      (s = lt_st_save(join(path, dir, LT_HF_WEIGHTS_FILE), ps.n, names, (const lt_tensor *const *)ts, 1, mk, mv)))
    goto out;
  if (!(cj = config_json(c, fam)) || !(text = json_dumps(cj, JSON_INDENT(2)))) {
    s = lt_error_set(LT_ERR_NOMEM, "hf_export: config.json");
    goto out;
  }
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves no newline; the NUL is ours to overwrite, written n + 1 bytes */
  s = lt_ckpt_write_file(join(path, dir, LT_HF_CONFIG_FILE), text, n + 1);
out:
  for (int i = 0; ts && i < ps.n; i++) lt_tensor_free(ts[i]);
  free(ts);
  free(names);
  free(ps.p);
  free(text);
  json_decref(cj);
  return s;
}

/* ======================================================================== */
/* config.json                                                              */
/* ======================================================================== */

bool lt_hf_is_dir(const char *path) {
  struct stat st;
  char p[PATH_LEN];
  if (!path || strlen(path) > PATH_LEN - 64 || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return stat(join(p, path, LT_HF_CONFIG_FILE), &st) == 0;
}

lt_status lt__hf_read_json(const char *path, size_t max_bytes, const char *what, bool array, json_t **out) {
  *out = NULL;
  char *text = NULL;
  size_t n = 0;
  lt_status s = lt_ckpt_read_file(path, max_bytes, &text, &n);
  if (s != LT_OK) return s;
  json_error_t jerr;
  json_t *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!j || (array ? !json_is_array(j) : !json_is_object(j))) {
    json_decref(j);
    return lt_error_set(LT_ERR_FORMAT, "hf %s '%s': not a JSON %s%s%s", what, path, array ? "array" : "object",
                        j ? "" : ": ", j ? "" : jerr.text);
  }
  *out = j;
  return LT_OK;
}

static void get_int(lt__hf_cfg *r, const char *key, int64_t *out, bool required) {
  lt__hf_get_int(r, key, out, required, NULL);
}

/* A key that must be absent, null, or one of the given values (strings). */
static void want_str(lt__hf_cfg *r, const char *key, const char *a, const char *b) {
  if (r->s != LT_OK) return;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) return;
  if (!json_is_string(v) || (strcmp(json_string_value(v), a) && (!b || strcmp(json_string_value(v), b))))
    r->s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key '%s' must be \"%s\"%s%s%s (libtensor runs nothing else)",
                        r->path, key, a, b ? " or \"" : "", b ? b : "", b ? "\"" : "");
}

static void want_bool(lt__hf_cfg *r, const char *key, bool want) {
  bool v = want;
  lt__hf_get_bool(r, key, &v);
  if (r->s == LT_OK && v != want)
    r->s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key '%s' is %s: libtensor's %s", r->path, key,
                        v ? "true" : "false", want ? "needs true" : "runs only false");
}

/* One id key of a generation file: absent or null leaves *v; an id, or (list)
 * a list of ids, sets it. */
static lt_status gen_id(json_t *j, const char *path, const char *key, int64_t *v, int *nv, bool list) {
  json_t *x = json_object_get(j, key);
  if (!x || json_is_null(x) || *nv >= 0) return LT_OK; /* *nv >= 0: an earlier file gave it */
  size_t k = json_is_array(x) && list ? json_array_size(x) : 1;
  if (json_is_array(x) && !list)
    return lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' must be an id, not a list", path, key);
  if (k < 1 || k > LT_HF_MAX_EOS)
    return lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' lists %zu ids (1 to %d)", path, key, k,
                        LT_HF_MAX_EOS);
  int64_t tmp[LT_HF_MAX_EOS];
  for (size_t i = 0; i < k; i++) {
    json_t *e = json_is_array(x) ? json_array_get(x, i) : x;
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
      return lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' must be %s in [0, 2^31)", path, key,
                          list ? "an id or a list of ids" : "an id");
    tmp[i] = (int64_t)json_integer_value(e);
  }
  memcpy(v, tmp, k * sizeof *v);
  *nv = (int)k;
  return LT_OK;
}

lt_status lt_hf_read_gen_ids(const char *dir, lt_hf_gen_ids *out) {
  if (!dir) return lt_error_null_arg("hf_read_gen_ids", "dir");
  if (!out) return lt_error_null_arg("hf_read_gen_ids", "out");
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf_read_gen_ids: directory name too long");
  lt_hf_gen_ids r = {.bos = -1, .pad = -1, .decoder_start = -1};
  int n_eos = -1, n_bos = -1, n_pad = -1, n_start = -1;
  static const char *const files[] = {"generation_config.json", LT_HF_CONFIG_FILE};
  for (int f = 0; f < 2; f++) {
    char path[PATH_LEN];
    join(path, dir, files[f]);
    struct stat st;
    if (lstat(path, &st) != 0) continue; /* the file is optional */
    json_t *j;
    lt_status s = lt__hf_read_json(path, CONFIG_MAX_BYTES, "config", false, &j);
    if (s != LT_OK) return s;
    s = gen_id(j, path, "eos_token_id", r.eos, &n_eos, true);
    if (s == LT_OK) s = gen_id(j, path, "bos_token_id", &r.bos, &n_bos, false);
    if (s == LT_OK) s = gen_id(j, path, "pad_token_id", &r.pad, &n_pad, false);
    if (s == LT_OK) s = gen_id(j, path, "decoder_start_token_id", &r.decoder_start, &n_start, false);
    json_decref(j);
    if (s != LT_OK) return s;
  }
  r.n_eos = n_eos < 0 ? 0 : n_eos;
  *out = r;
  return LT_OK;
}

/* RoPE's theta and scaling: transformers 5 writes rope_parameters {rope_theta,
 * rope_type, factor, ...}, older versions rope_theta and rope_scaling {type or
 * rope_type, factor, ...}; both are read, and a theta given twice must agree.
 * Types: "default" (none), "linear", "llama3"; any other is refused naming it. */
static void read_rope(lt__hf_cfg *r, lt_tf_config *c) {
  if (r->s != LT_OK) return;
  lt__hf_get_real(r, "rope_theta", &c->rope_base, "rope_base");
  json_t *rp = json_object_get(r->j, "rope_parameters"), *rs = json_object_get(r->j, "rope_scaling");
  const char *key = rp && !json_is_null(rp) ? "rope_parameters" : "rope_scaling";
  json_t *o = rp && !json_is_null(rp) ? rp : rs;
  if (!o || json_is_null(o) || r->s != LT_OK) return;
  if (!json_is_object(o)) {
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not an object", r->path, key);
    return;
  }
  char sub_path[PATH_LEN + 32];
  snprintf(sub_path, sizeof sub_path, "%s: %s", r->path, key);
  lt__hf_cfg q = {sub_path, o, LT_OK}; /* the object's keys, named "<file>: <key>': key '<sub-key>'" */
  double theta = c->rope_base;
  lt__hf_get_real(&q, "rope_theta", &theta, "rope_base");
  if (q.s == LT_OK && json_object_get(r->j, "rope_theta") && json_object_get(o, "rope_theta") && theta != c->rope_base)
    q.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'rope_theta' %g and %s.rope_theta %g differ", r->path,
                       c->rope_base, key, theta);
  c->rope_base = theta;
  json_t *t = json_object_get(o, "rope_type");
  if (!t) t = json_object_get(o, "type");
  const char *type = json_is_string(t) ? json_string_value(t) : NULL;
  if (q.s == LT_OK && t && !type) q.s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key 'rope_type' is not a string",
                                                     sub_path);
  if (q.s != LT_OK || !type || strcmp(type, "default") == 0) {
    r->s = q.s;
    return;
  }
  if (lt_tf_rope_type_parse(type, &c->rope_type) != LT_OK) {
    r->s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'rope_type' \"%s\": libtensor runs \"default\", "
                        "\"linear\" and \"llama3\" RoPE", sub_path, type);
    return;
  }
  static const char *const need_linear[] = {"factor"},
                           *const need_llama3[] = {"factor", "low_freq_factor", "high_freq_factor",
                                                    "original_max_position_embeddings"};
  const char *const *need = c->rope_type == LT_ROPE_LLAMA3 ? need_llama3 : need_linear;
  for (int k = 0; k < (c->rope_type == LT_ROPE_LLAMA3 ? 4 : 1) && q.s == LT_OK; k++)
    if (!json_object_get(o, need[k]) || json_is_null(json_object_get(o, need[k])))
      q.s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is missing (rope_type \"%s\" needs it)", sub_path,
                         need[k], type);
  lt__hf_get_real(&q, "factor", &c->rope_factor, "rope_factor");
  if (c->rope_type == LT_ROPE_LLAMA3) {
    lt__hf_get_real(&q, "low_freq_factor", &c->rope_low_freq_factor, "rope_low_freq_factor");
    lt__hf_get_real(&q, "high_freq_factor", &c->rope_high_freq_factor, "rope_high_freq_factor");
    lt__hf_get_int(&q, "original_max_position_embeddings", &c->rope_original_max_len, true, "rope_original_max_len");
  }
  json_t *af = json_object_get(o, "attention_factor"); /* transformers' default for these types: 1 */
  if (q.s == LT_OK && af && !json_is_null(af) && !(json_is_number(af) && json_number_value(af) == 1.0))
    q.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'attention_factor': libtensor runs only 1", sub_path);
  r->s = q.s;
}

lt_status lt_hf_read_config(const char *dir, lt_tf_config *out, lt_hf_family *family) {
  if (!dir) return lt_error_null_arg("hf_read_config", "dir");
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf_read_config: directory name too long");
  char path[PATH_LEN];
  join(path, dir, LT_HF_CONFIG_FILE);
  json_t *j;
  lt_status s = lt__hf_read_json(path, CONFIG_MAX_BYTES, "config", false, &j);
  if (s != LT_OK) return s;
  lt__hf_cfg r = {path, j, LT_OK};
  json_t *mt = json_object_get(j, "model_type");
  int fam = -1;
  for (int k = 0; k < N_FAMILIES && json_is_string(mt); k++)
    if (strcmp(json_string_value(mt), family_names[k]) == 0) fam = k;
  if (fam < 0) {
    s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'model_type' %s%.64s%s: libtensor reads \"gpt2\", "
                     "\"llama\", \"qwen2\", \"mistral\", \"bert\" or \"t5\"", path, json_is_string(mt) ? "\"" : "",
                     json_is_string(mt) ? json_string_value(mt) : mt ? "(not a string)" : "(missing)",
                     json_is_string(mt) ? "\"" : "");
    json_decref(j);
    return s;
  }
  if (fam == LT_HF_BERT || fam == LT_HF_T5) { /* hf_bert.c, hf_t5.c */
    lt_tf_config bc;
    lt_status bs = fam == LT_HF_T5 ? lt__hf_t5_read_config(j, path, &bc) : lt__hf_bert_read_config(j, path, &bc);
    json_decref(j);
    if (bs == LT_OK && out) *out = bc;
    if (bs == LT_OK && family) *family = fam;
    return bs;
  }
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.pre_norm = true, c.scale_embeddings = false, c.pad_id = -1;
  get_int(&r, "vocab_size", &c.vocab_size, true);
  get_int(&r, "pad_token_id", &c.pad_id, false);
  if (fam == LT_HF_GPT2) {
    c.norm = LT_TF_LAYER_NORM, c.act = LT_ACT_GELU_TANH, c.pos = LT_TF_POS_LEARNED;
    c.tie_embeddings = true, c.bias = true, c.dropout = 0.1, c.norm_eps = 1e-5;
    lt__hf_get_int(&r, "n_embd", &c.d_model, true, "d_model");
    lt__hf_get_int(&r, "n_layer", &c.n_dec_layers, true, "n_dec_layers");
    lt__hf_get_int(&r, "n_head", &c.n_heads, true, "n_heads");
    lt__hf_get_int(&r, "n_positions", &c.max_len, true, "max_len");
    if (r.s == LT_OK) c.d_ff = 4 * c.d_model; /* n_inner null: 4 * n_embd, as GPT2MLP (n_embd is in range) */
    lt__hf_get_int(&r, "n_inner", &c.d_ff, false, "d_ff");
    c.n_kv_heads = c.n_heads;
    lt__hf_get_real(&r, "layer_norm_epsilon", &c.norm_eps, "norm_eps");
    lt__hf_get_real(&r, "resid_pdrop", &c.dropout, "dropout");
    want_str(&r, "activation_function", "gelu_new", "gelu_pytorch_tanh");
    want_bool(&r, "tie_word_embeddings", true);
    want_bool(&r, "scale_attn_weights", true);
    want_bool(&r, "scale_attn_by_inverse_layer_idx", false);
    want_bool(&r, "add_cross_attention", false);
  } else {
    c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE;
    c.tie_embeddings = false, c.bias = false, c.dropout = 0.0, c.norm_eps = 1e-6, c.rope_base = 10000.0;
    lt__hf_get_int(&r, "hidden_size", &c.d_model, true, "d_model");
    lt__hf_get_int(&r, "intermediate_size", &c.d_ff, true, "d_ff");
    lt__hf_get_int(&r, "num_hidden_layers", &c.n_dec_layers, true, "n_dec_layers");
    lt__hf_get_int(&r, "num_attention_heads", &c.n_heads, true, "n_heads");
    c.n_kv_heads = c.n_heads;
    lt__hf_get_int(&r, "num_key_value_heads", &c.n_kv_heads, false, "n_kv_heads");
    lt__hf_get_int(&r, "max_position_embeddings", &c.max_len, true, "max_len");
    lt__hf_get_real(&r, "rms_norm_eps", &c.norm_eps, "norm_eps");
    read_rope(&r, &c);
    lt__hf_get_real(&r, "attention_dropout", &c.dropout, "dropout");
    lt__hf_get_bool(&r, "tie_word_embeddings", &c.tie_embeddings);
    want_str(&r, "hidden_act", "silu", NULL);
    want_bool(&r, "mlp_bias", false);
    if (fam == LT_HF_QWEN2) { /* q, k, v always biased; a sliding window only with use_sliding_window */
      c.qkv_bias = true;
      want_bool(&r, "use_sliding_window", false);
      json_t *lts = json_object_get(j, "layer_types");
      for (size_t k = 0; r.s == LT_OK && lts && k < json_array_size(lts); k++)
        if (!json_is_string(json_array_get(lts, k)) ||
            strcmp(json_string_value(json_array_get(lts, k)), "full_attention") != 0)
          r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'layer_types' entry %zu is not \"full_attention\": "
                             "libtensor runs Qwen2 without sliding-window layers", path, k);
      if (r.s == LT_OK && lts && !json_is_null(lts) && !json_is_array(lts))
        r.s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key 'layer_types' is not an array", path);
    } else {
      want_bool(&r, "attention_bias", false);
    }
    if (fam == LT_HF_MISTRAL) { /* absent: MistralConfig's 4096; null: no window */
      if (!json_object_get(j, "sliding_window")) c.sliding_window = 4096;
      lt__hf_get_int(&r, "sliding_window", &c.sliding_window, false, "sliding_window");
    }
    int64_t hd = -1;
    get_int(&r, "head_dim", &hd, false);
    int64_t hd_total; /* n_heads is in range, hd is the file's: checked */
    if (r.s == LT_OK && hd != -1 &&
        (c.n_heads < 1 || __builtin_mul_overflow(hd, c.n_heads, &hd_total) || hd_total != c.d_model))
      r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'head_dim' %lld: libtensor needs hidden_size / "
                         "num_attention_heads = %lld / %lld", path, (long long)hd, (long long)c.d_model,
                         (long long)c.n_heads);
  }
  json_decref(j);
  if (r.s != LT_OK) return r.s;
  lt_hf_family layout_fam; /* Mistral without a window is Llama's layout, and says so */
  if (lt_tf_config_validate(&c) != LT_OK || lt_hf_family_of(&c, &layout_fam) != LT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    return lt_error_set(LT_ERR_INVALID, "hf config '%s': %s", path, msg);
  }
  if (out) *out = c;
  if (family) *family = layout_fam;
  return LT_OK;
}

/* ======================================================================== */
/* Import                                                                   */
/* ======================================================================== */

/* GPT-2 names are found with or without "transformer." (GPT2Model saves them bare). */
static lt__hf_ref find_hf(const lt__hf_weights *w, const char *name, lt_hf_family fam) {
  lt__hf_ref r = lt__hf_weights_find(w, name);
  if (r.k < 0 && fam == LT_HF_GPT2 && strncmp(name, "transformer.", 12) == 0) r = lt__hf_weights_find(w, name + 12);
  if (r.k < 0 && fam == LT_HF_BERT && strncmp(name, "classifier.", 11) != 0) { /* with or without "bert." */
    char other[NAME_LEN + 8];
    if (strncmp(name, "bert.", 5) == 0) snprintf(other, sizeof other, "%s", name + 5);
    else snprintf(other, sizeof other, "bert.%s", name);
    r = lt__hf_weights_find(w, other);
  }
  return r;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Names a file may hold besides the layout's, ignored: GPT-2's causal-mask
 * buffers. (A tied head's lm_head.weight is checked separately.) */
static bool tolerated(const char *name, lt_hf_family fam) {
  return (fam == LT_HF_GPT2 && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))) ||
         (fam == LT_HF_BERT && lt__hf_bert_tolerated(name)) || (fam == LT_HF_T5 && lt__hf_t5_tolerated(name));
}

lt_status lt_hf_load_params(const char *dir, lt_transformer *m) {
  if (!dir) return lt_error_null_arg("hf_load_params", "dir");
  if (!m) return lt_error_null_arg("hf_load_params", "m");
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf_load_params: directory name too long");
  const lt_tf_config *c = lt_transformer_config(m);
  lt_hf_family fam;
  lt_status s = lt_hf_family_of(c, &fam);
  if (s != LT_OK) return s;
  lt__hf_weights w;
  if ((s = lt__hf_weights_open(dir, &w)) != LT_OK) return s;
  const char *path = w.where;
  pieces ps = {0};
  lt__hf_ref *idx = NULL;
  if ((s = layout(m, fam, &ps)) != LT_OK || (s = check_cover(m, &ps)) != LT_OK) goto out;
  if (!(idx = calloc((size_t)ps.n, sizeof *idx))) {
    s = lt_error_set(LT_ERR_NOMEM, "hf_load_params: out of memory");
    goto out;
  }
  /* 1. every piece present and nothing else but the tolerated names, all of them named at once (as the
   *    HDF5 loader does): the missing pieces, then the file's tensors that are not the layout's */
  char msg[2048] = "";
  int n_missing = 0, n_extra = 0, listed = 0;
  size_t used = 0;
#define NOTE(...)                                                                         \
  do {                                                                                    \
    if (listed++ < 8 && used < sizeof msg) {                                              \
      int w_ = snprintf(msg + used, sizeof msg - used, "%s", used ? "; " : "");           \
      used += w_ > 0 ? (size_t)w_ : 0;                                                    \
      if (used < sizeof msg) {                                                            \
        w_ = snprintf(msg + used, sizeof msg - used, __VA_ARGS__);                        \
        used += w_ > 0 ? (size_t)w_ : 0;                                                  \
      }                                                                                   \
    }                                                                                     \
  } while (0)
  for (int i = 0; i < ps.n; i++)
    if ((idx[i] = find_hf(&w, ps.p[i].hf, fam)).k < 0) {
      n_missing++;
      NOTE("tensor '%s' (libtensor's %s) is missing", ps.p[i].hf, ps.p[i].lt[0]);
    }
  for (int fi = 0; fi < w.n; fi++)
    for (int k = 0; k < lt_st_count(w.f[fi]); k++) {
      const lt_st_tensor_info *ti = lt_st_info(w.f[fi], k);
      bool mine = false;
      for (int i = 0; i < ps.n && !mine; i++) mine = idx[i].file == fi && idx[i].k == k;
      if (mine || tolerated(ti->name, fam) || (c->tie_embeddings && strcmp(ti->name, "lm_head.weight") == 0)) continue;
      n_extra++;
      NOTE("tensor '%s' is not part of the %s layout for this configuration", ti->name, lt_hf_family_name(fam));
    }
#undef NOTE
  if (n_missing || n_extra) {
    s = lt_error_set(LT_ERR_INVALID, "hf '%s': %d tensor%s missing, %d not in the layout: %s%s", path, n_missing,
                     n_missing == 1 ? "" : "s", n_extra, msg, listed > 8 ? " (and more)" : "");
    goto out;
  }
  /* 2. each with its shape, a dtype that loads and finite values; a tied head saved anyway must be the
   *    embedding, byte for byte */
  for (int i = 0; i < ps.n; i++) {
    const piece *p = &ps.p[i];
    const lt_st_tensor_info *ti = lt_st_info(w.f[idx[i].file], idx[i].k);
    bool same = ti->ndim == p->ndim;
    for (int k = 0; same && k < p->ndim; k++) same = ti->shape[k] == p->shape[k];
    if (!same) {
      s = lt_error_set(LT_ERR_SHAPE, "hf '%s': tensor '%s': shape %s in the file, %s expected by the configuration",
                       path, ti->name, lt_shape_str(ti->ndim, ti->shape, (char[64]){0}, 64),
                       lt_shape_str(p->ndim, p->shape, (char[64]){0}, 64));
      goto out;
    }
    if (!lt_st_dtype_loads_into(ti->dtype, p->src[0]->dtype)) {
      s = lt_error_set(LT_ERR_DTYPE, "hf '%s': tensor '%s': dtype %s does not load into %s", path, ti->name,
                       lt_st_dtype_name(ti->dtype), lt_dtype_name(p->src[0]->dtype));
      goto out;
    }
    /* NaN, inf: refused before a value is written */
    if ((s = lt_st_check_finite(w.f[idx[i].file], idx[i].k)) != LT_OK) goto out;
    lt_st_release(w.f[idx[i].file], idx[i].k); /* not kept resident beside the model (load_weights.c) */
  }
  const lt__hf_ref head = lt__hf_weights_find(&w, "lm_head.weight");
  if (c->tie_embeddings && head.k >= 0) {
    const lt_st_tensor_info *ti = lt_st_info(w.f[head.file], head.k);
    const lt_st_tensor_info *e = lt_st_info(w.f[idx[0].file], idx[0].k);
    if (!(e->dtype == ti->dtype && e->end - e->begin == ti->end - ti->begin &&
          memcmp(lt_st_data(w.f[idx[0].file], idx[0].k), lt_st_data(w.f[head.file], head.k),
                 (size_t)(e->end - e->begin)) == 0)) {
      s = lt_error_set(LT_ERR_INVALID, "hf '%s': tensor 'lm_head.weight' differs from the embedding '%s', but the "
                       "configuration ties them (tie_word_embeddings)", path, e->name);
      goto out;
    }
    lt_st_release(w.f[head.file], head.k);
  }
  /* 3. write: read straight into the parameter, or convert then split */
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < ps.n && s == LT_OK; i++) {
    const piece *p = &ps.p[i];
    if (p->op == P_SAME) {
      s = lt__tf_store_st(p->src[0], w.f[idx[i].file], idx[i].k);
      continue;
    }
    lt_tensor *t = p->src[0]->dtype == LT_DTYPE_F32 ? lt__tf_st_f32(w.f[idx[i].file], idx[i].k)
                                                    : lt_st_tensor(w.f[idx[i].file], idx[i].k, p->src[0]->dtype);
    s = t ? lt__hf_piece_store(p, t) : lt_last_status();
    lt_tensor_free(t);
    lt_st_release(w.f[idx[i].file], idx[i].k);
    if (lt_tensor_qmatrix(p->src[0])) lt_release_cached_memory(); /* the f32 scratch goes, not kept beside */
  }
  lt_set_grad_enabled(prev);
out:
  free(idx);
  free(ps.p);
  lt__hf_weights_close(&w);
  return s;
}

lt_status lt_hf_check_size(const char *dir, const lt_tf_config *c, uint64_t max_bytes) {
  if (!dir) return lt_error_null_arg("hf_check_size", "dir");
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf_check_size: directory name too long");
  int64_t n_params, in_file = 0;
  size_t bytes;
  lt_status s = lt_tf_config_size(c, &n_params, &bytes);
  if (s != LT_OK) return s;
  lt__hf_weights w;
  if ((s = lt__hf_weights_open(dir, &w)) != LT_OK) return s;
  for (int fi = 0; fi < w.n; fi++) /* the tensors tile each file: at most its size */
    for (int i = 0; i < lt_st_count(w.f[fi]); i++)
      if (__builtin_add_overflow(in_file, lt_st_info(w.f[fi], i)->numel, &in_file)) in_file = INT64_MAX;
  lt__hf_weights_close(&w);
  if (n_params > in_file)
    return lt_error_set(LT_ERR_FORMAT, "hf '%s': the configuration describes %lld parameters, the weights file holds "
                        "%lld", dir, (long long)n_params, (long long)in_file);
  if (max_bytes && bytes > max_bytes)
    return lt_error_set(LT_ERR_NOMEM, "hf '%s': the model needs %zu bytes, over the memory cap of %llu", dir, bytes,
                        (unsigned long long)max_bytes);
  return LT_OK;
}

lt_transformer *lt_hf_load(const char *dir, uint64_t max_bytes) {
  lt_tf_config c;
  if (lt_hf_read_config(dir, &c, NULL) != LT_OK || lt_hf_check_size(dir, &c, max_bytes) != LT_OK) return NULL;
  lt_generator *g = lt_generator_new_skip_init(); /* every value is replaced by the file's (check_cover) */
  if (!g) return NULL;
  lt_transformer *m = lt_transformer_new(&c, g);
  lt_generator_free(g);
  if (m && lt_hf_load_params(dir, m) != LT_OK) {
    lt_transformer_free(m);
    return NULL;
  }
  return m;
}
