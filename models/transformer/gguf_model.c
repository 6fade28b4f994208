/*
 * models/transformer/gguf_model.c: the decoder-only Transformer as a GGUF
 * file (gguf_model.h): the layouts as tables of pieces (hf_internal.h's, so
 * the concatenation, transposes and RoPE permutation have one home both
 * ways), llama.cpp's keys, and the tokenizer's tokenizer.ggml.* keys from a
 * tokenizer.json (jansson).
 *
 * What this is not: the GGUF container (checkpoint/gguf.c), nor a
 * tokenizer (datasets/ reads the tokenizer.json this writes and rebuilds).
 */
#include "models/transformer/gguf_model.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libtensor.h"
#include "models/transformer/hf_internal.h"

#define NAME_LEN LT__HF_NAME_LEN

/* llama.cpp's general.file_type (enum llama_ftype) of each weights type. */
static uint32_t file_type_of(int weights) {
  switch (weights) {
    case LT_GGML_F32: return 0;
    case LT_GGML_F16: return 1;
    case LT_GGML_Q4_0: return 2;
    case LT_GGML_Q8_0: return 7;
    default: return 32; /* BF16 */
  }
}

/* ---- the layouts ----------------------------------------------------------- */

static lt_status layout(lt_transformer *m, lt_hf_family fam, pieces *ps) {
  const lt_tf_config *c = lt_transformer_config(m);
  lt_params *P = lt_transformer_params(m);
  char h[NAME_LEN], l[3][NAME_LEN];
  lt_status s;
#define LT(k, fmt) (snprintf(l[k], NAME_LEN, "decoder.layers.%lld." fmt, (long long)i), l[k])
#define G(fmt) (snprintf(h, NAME_LEN, "blk.%lld." fmt, (long long)i), h)
#define ADD(name, op, n, a, b, cc) \
  if ((s = lt__hf_add_piece(ps, P, name, op, n, a, b, cc)) != LT_OK) return s
  ADD("token_embd.weight", P_SAME, 1, "embed.weight", 0, 0);
  if (fam == LT_HF_GPT2) ADD("position_embd.weight", P_SAME, 1, "pos_embed.weight", 0, 0);
  for (int64_t i = 0; i < c->n_dec_layers; i++) {
    ADD(G("attn_norm.weight"), P_SAME, 1, LT(0, "norm1.weight"), 0, 0);
    if (fam == LT_HF_GPT2) {
      ADD(G("attn_norm.bias"), P_SAME, 1, LT(0, "norm1.bias"), 0, 0);
      ADD(G("attn_qkv.weight"), P_CAT, 3, LT(0, "self_attn.q_proj.weight"), LT(1, "self_attn.k_proj.weight"),
          LT(2, "self_attn.v_proj.weight"));
      ADD(G("attn_qkv.bias"), P_CAT, 3, LT(0, "self_attn.q_proj.bias"), LT(1, "self_attn.k_proj.bias"),
          LT(2, "self_attn.v_proj.bias"));
      ADD(G("attn_output.weight"), P_SAME, 1, LT(0, "self_attn.out_proj.weight"), 0, 0);
      ADD(G("attn_output.bias"), P_SAME, 1, LT(0, "self_attn.out_proj.bias"), 0, 0);
      ADD(G("ffn_norm.weight"), P_SAME, 1, LT(0, "norm2.weight"), 0, 0);
      ADD(G("ffn_norm.bias"), P_SAME, 1, LT(0, "norm2.bias"), 0, 0);
      ADD(G("ffn_up.weight"), P_SAME, 1, LT(0, "linear1.weight"), 0, 0);
      ADD(G("ffn_up.bias"), P_SAME, 1, LT(0, "linear1.bias"), 0, 0);
      ADD(G("ffn_down.weight"), P_SAME, 1, LT(0, "linear2.weight"), 0, 0);
      ADD(G("ffn_down.bias"), P_SAME, 1, LT(0, "linear2.bias"), 0, 0);
      continue;
    }
    ADD(G("attn_q.weight"), P_ROPE, 1, LT(0, "self_attn.q_proj.weight"), 0, 0);
    ps->p[ps->n - 1].heads = c->n_heads;
    ADD(G("attn_k.weight"), P_ROPE, 1, LT(0, "self_attn.k_proj.weight"), 0, 0);
    ps->p[ps->n - 1].heads = c->n_kv_heads;
    ADD(G("attn_v.weight"), P_SAME, 1, LT(0, "self_attn.v_proj.weight"), 0, 0);
    ADD(G("attn_output.weight"), P_SAME, 1, LT(0, "self_attn.out_proj.weight"), 0, 0);
    ADD(G("ffn_norm.weight"), P_SAME, 1, LT(0, "norm2.weight"), 0, 0);
    /* SwiGLU: w2(silu(w1 x) * w3 x) = ffn_down(silu(ffn_gate x) * ffn_up x) */
    ADD(G("ffn_gate.weight"), P_SAME, 1, LT(0, "w1.weight"), 0, 0);
    ADD(G("ffn_up.weight"), P_SAME, 1, LT(0, "w3.weight"), 0, 0);
    ADD(G("ffn_down.weight"), P_SAME, 1, LT(0, "w2.weight"), 0, 0);
  }
  ADD("output_norm.weight", P_SAME, 1, "decoder.norm.weight", 0, 0);
  if (fam == LT_HF_GPT2) ADD("output_norm.bias", P_SAME, 1, "decoder.norm.bias", 0, 0);
  if (!c->tie_embeddings) ADD("output.weight", P_SAME, 1, "lm_head.weight", 0, 0);
  int used = 0;
  for (int k = 0; k < ps->n; k++) used += ps->p[k].n;
  if (used != lt_params_count(P)) /* a new parameter cannot be left out */
    return lt_error_set(LT_ERR_INVALID, "gguf: the layout maps %d tensors, the model has %d", used, lt_params_count(P));
  return LT_OK;
#undef ADD
#undef G
#undef LT
}

/* ---- the tokenizer, from tokenizer.json ---------------------------------------- */

/* Whether a component tree (pre_tokenizer, decoder) holds a ByteLevel step. */
static bool has_byte_level(const json_t *j) {
  if (json_is_object(j)) {
    const json_t *t = json_object_get(j, "type");
    if (json_is_string(t) && strcmp(json_string_value(t), "ByteLevel") == 0) return true;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v) if (has_byte_level(v)) return true;
  } else if (json_is_array(j)) {
    for (size_t i = 0; i < json_array_size(j); i++)
      if (has_byte_level(json_array_get(j, i))) return true;
  }
  return false;
}

static bool is_byte_token(const char *s) {
  return strlen(s) == 6 && strncmp(s, "<0x", 3) == 0 && s[5] == '>';
}

/* The id of the first of names in tokens[0..n), or -1. */
static int64_t find_token(const char *const *tokens, int64_t n, const char *const *names) {
  for (int k = 0; names[k]; k++)
    for (int64_t i = 0; i < n; i++)
      if (tokens[i] && strcmp(tokens[i], names[k]) == 0) return i;
  return -1;
}

static lt_status put_tokenizer(lt_gguf_writer *w, const char *json, size_t len) {
  if (!json) return lt_gguf_set_str(w, "tokenizer.ggml.model", "none");
  json_error_t err;
  json_t *root = json_loadb(json, len, 0, &err);
  if (!root) return lt_error_set(LT_ERR_FORMAT, "gguf export: the tokenizer.json does not parse: %s", err.text);
  lt_status s = LT_OK;
  const char **tokens = NULL, **merges = NULL;
  char **owned = NULL;
  int32_t *types = NULL;
  float *scores = NULL;
  json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
  json_t *mtype = json_object_get(model, "type"), *added = json_object_get(root, "added_tokens");
  const bool bpe = json_is_string(mtype) && strcmp(json_string_value(mtype), "BPE") == 0 && json_is_object(vocab);
  const bool byte_level = has_byte_level(json_object_get(root, "pre_tokenizer")) ||
                          has_byte_level(json_object_get(root, "decoder"));
  const bool fallback = json_is_true(json_object_get(model, "byte_fallback"));
  if (!bpe || (!byte_level && !fallback)) { /* no GGUF vocabulary type for it: the weights only */
    s = lt_gguf_set_str(w, "tokenizer.ggml.model", "none");
    if (s == LT_OK) s = lt_gguf_set_str_n(w, "tokenizer.huggingface.json", json, len);
    goto out;
  }
  /* ids: the vocabulary and the added tokens, dense from 0 */
  int64_t n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24)) {
      s = lt_error_set(LT_ERR_FORMAT, "gguf export: tokenizer.json: the id of '%.40s' is not in [0, 2^24)", k);
      goto out;
    }
    if (json_integer_value(v) + 1 > n) n = json_integer_value(v) + 1;
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *id = json_object_get(json_array_get(added, i), "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24)) {
      s = lt_error_set(LT_ERR_FORMAT, "gguf export: tokenizer.json: added token %zu has no id in [0, 2^24)", i);
      goto out;
    }
    if (json_integer_value(id) + 1 > n) n = json_integer_value(id) + 1;
  }
  tokens = calloc((size_t)n + 1, sizeof *tokens);
  types = calloc((size_t)n + 1, sizeof *types);
  scores = calloc((size_t)n + 1, sizeof *scores);
  if (!tokens || !types || !scores) {
    s = lt_error_set(LT_ERR_NOMEM, "gguf export: %lld tokens", (long long)n);
    goto out;
  }
  json_object_foreach(vocab, k, v) {
    const int64_t id = json_integer_value(v);
    tokens[id] = k;
    types[id] = fallback && !byte_level && is_byte_token(k) ? 6 : 1; /* BYTE, NORMAL */
    scores[id] = -1000.0f; /* convert_hf_to_gguf.py's LlamaHfVocab */
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *a = json_array_get(added, i), *content = json_object_get(a, "content");
    const int64_t id = json_integer_value(json_object_get(a, "id"));
    if (!json_is_string(content)) {
      s = lt_error_set(LT_ERR_FORMAT, "gguf export: tokenizer.json: added token %lld has no content", (long long)id);
      goto out;
    }
    tokens[id] = json_string_value(content);
    types[id] = json_is_true(json_object_get(a, "special")) ? 3 : 4; /* CONTROL, USER_DEFINED */
    scores[id] = -1000.0f;
  }
  for (int64_t i = 0; i < n; i++)
    if (!tokens[i]) {
      s = lt_error_set(LT_ERR_FORMAT, "gguf export: tokenizer.json: no token has id %lld (GGUF's vocabulary is dense)",
                       (long long)i);
      goto out;
    }
  if ((s = lt_gguf_set_str(w, "tokenizer.ggml.model", byte_level ? "gpt2" : "llama")) != LT_OK) goto out;
  if (byte_level && (s = lt_gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2")) != LT_OK) goto out;
  if ((s = lt_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n, tokens, NULL)) != LT_OK) goto out;
  if (!byte_level && (s = lt_gguf_set_arr_f32(w, "tokenizer.ggml.scores", (uint64_t)n, scores)) != LT_OK) goto out;
  if ((s = lt_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", (uint64_t)n, types)) != LT_OK) goto out;
  if (byte_level) {
    json_t *mj = json_object_get(model, "merges");
    const size_t nm = json_array_size(mj);
    merges = calloc(nm + 1, sizeof *merges);
    owned = calloc(nm + 1, sizeof *owned);
    if (!merges || !owned) {
      s = lt_error_set(LT_ERR_NOMEM, "gguf export: %zu merges", nm);
      goto out;
    }
    for (size_t i = 0; i < nm; i++) {
      json_t *e = json_array_get(mj, i);
      if (json_is_string(e)) {
        merges[i] = json_string_value(e);
      } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                 json_is_string(json_array_get(e, 1))) {
        const char *a = json_string_value(json_array_get(e, 0)), *b = json_string_value(json_array_get(e, 1));
        if (!(owned[i] = malloc(strlen(a) + strlen(b) + 2))) {
          s = lt_error_set(LT_ERR_NOMEM, "gguf export: merges");
          goto out;
        }
        sprintf(owned[i], "%s %s", a, b);
        merges[i] = owned[i];
      } else {
        s = lt_error_set(LT_ERR_FORMAT, "gguf export: tokenizer.json: merge %zu is neither \"a b\" nor [a, b]", i);
        goto out;
      }
    }
    if ((s = lt_gguf_set_arr_str(w, "tokenizer.ggml.merges", nm, merges, NULL)) != LT_OK) goto out;
  }
  static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<bos>", "<|endoftext|>", NULL};
  static const char *const eos[] = {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>", NULL};
  static const char *const unk[] = {"<unk>", NULL}, *const pad[] = {"<pad>", NULL};
  const int64_t ib = find_token(tokens, n, bos), ie = find_token(tokens, n, eos);
  const int64_t iu = find_token(tokens, n, unk), ip = find_token(tokens, n, pad);
  if (ib >= 0 && (s = lt_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)ib)) != LT_OK) goto out;
  if (ie >= 0 && (s = lt_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)ie)) != LT_OK) goto out;
  if (iu >= 0 && (s = lt_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)iu)) != LT_OK) goto out;
  if (ip >= 0 && (s = lt_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)ip)) != LT_OK) goto out;
  /* libtensor's generate adds no <bos> to a prompt; say so, so that llama.cpp does the same */
  if ((s = lt_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false)) != LT_OK) goto out;
  s = lt_gguf_set_str_n(w, "tokenizer.huggingface.json", json, len);
out:
  if (owned)
    for (size_t i = 0; i < json_array_size(json_object_get(model, "merges")); i++) free(owned[i]);
  free(owned);
  free(merges);
  free(tokens);
  free(types);
  free(scores);
  json_decref(root);
  return s;
}

/* ---- export ------------------------------------------------------------------ */

lt_status lt_tf_gguf_export(lt_transformer *m, const char *path, int weights, const char *tokenizer_json,
                            size_t len) {
  if (!m) return lt_error_null_arg("gguf_export", "m");
  if (!path) return lt_error_null_arg("gguf_export", "path");
  if (weights != LT_GGML_F32 && weights != LT_GGML_BF16 && weights != LT_GGML_Q8_0 && weights != LT_GGML_Q4_0)
    return lt_error_set(LT_ERR_DTYPE, "gguf_export: weights type %d: F32, BF16, Q8_0 or Q4_0", weights);
  const lt_tf_config *c = lt_transformer_config(m);
  lt_hf_family fam;
  lt_status s = lt_hf_family_of(c, &fam);
  if (s != LT_OK) return s;
  if (fam == LT_HF_BERT)
    return lt_error_set(LT_ERR_INVALID, "gguf_export: an encoder-only (BERT) model: GGUF export is for GPT-2 and "
                        "Llama layouts");
  /* what llama.cpp's "llama" architecture would run without: refused, never dropped */
  if (c->qkv_bias)
    return lt_error_set(LT_ERR_INVALID, "gguf_export: q/k/v biases (Qwen2's layout): GGUF export is for GPT-2 and "
                        "Llama layouts");
  if (c->sliding_window > 0)
    return lt_error_set(LT_ERR_INVALID, "gguf_export: sliding_window %lld (Mistral's layout): GGUF export is for "
                        "GPT-2 and Llama layouts without a window", (long long)c->sliding_window);
  if (c->rope_type != LT_ROPE_DEFAULT)
    return lt_error_set(LT_ERR_INVALID, "gguf_export: RoPE scaling (%s): GGUF export writes unscaled RoPE only",
                        c->rope_type == LT_ROPE_LINEAR ? "linear" : "llama3");
  const char *arch = fam == LT_HF_GPT2 ? "gpt2" : "llama";
  pieces ps = {0};
  lt_gguf_writer *w = lt_gguf_writer_new();
  if (!w) return lt_last_status();
  char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
  if ((s = layout(m, fam, &ps)) != LT_OK) goto out;
  const int64_t HS = c->d_model / c->n_heads;
  if ((s = lt_gguf_set_str(w, "general.architecture", arch)) || (s = lt_gguf_set_str(w, "general.name", "libtensor")) ||
      (s = lt_gguf_set_u32(w, "general.file_type", file_type_of(weights))) ||
      (weights != LT_GGML_F32 && weights != LT_GGML_BF16 &&
       (s = lt_gguf_set_u32(w, "general.quantization_version", 2))) ||
      (s = lt_gguf_set_u32(w, KEY("context_length"), (uint32_t)c->max_len)) ||
      (s = lt_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)c->d_model)) ||
      (s = lt_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->d_ff)) ||
      (s = lt_gguf_set_u32(w, KEY("block_count"), (uint32_t)c->n_dec_layers)) ||
      (s = lt_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_heads)))
    goto out;
  if (fam == LT_HF_GPT2) {
    if ((s = lt_gguf_set_f32(w, KEY("attention.layer_norm_epsilon"), (float)c->norm_eps))) goto out;
  } else if ((s = lt_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads)) ||
             (s = lt_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->norm_eps)) ||
             (s = lt_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)HS)) ||
             (s = lt_gguf_set_f32(w, KEY("rope.freq_base"), (float)c->rope_base))) {
    goto out;
  }
  /* llama.cpp sizes a model without a vocabulary (tokenizer.ggml.model "none") from this key */
  if ((s = lt_gguf_set_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size))) goto out;
  if ((s = put_tokenizer(w, tokenizer_json, len)) != LT_OK) goto out;
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < ps.n && s == LT_OK; i++) {
    const piece *p = &ps.p[i];
    lt_tensor *t = lt__hf_piece_tensor(p);
    /* matrices in the chosen type when their rows fill whole blocks; vectors in F32 */
    int64_t block = 1;
    lt_ggml_type_block(weights, &block, NULL);
    const int type = p->ndim == 2 && p->shape[1] % block == 0 ? weights : LT_GGML_F32;
    s = t ? lt_gguf_add_tensor(w, p->hf, type, p->ndim, p->shape, t) : lt_last_status();
    lt_tensor_free(t);
  }
  lt_set_grad_enabled(prev);
  if (s == LT_OK) s = lt_gguf_write(w, path);
out:
#undef KEY
  free(ps.p);
  lt_gguf_writer_free(w);
  return s;
}

/* ---- import ------------------------------------------------------------------ */

bool lt_tf_gguf_is_file(const char *path) {
  struct stat st;
  if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4];
  const bool yes = read(fd, magic, 4) == 4 && memcmp(magic, "GGUF", 4) == 0;
  close(fd);
  return yes;
}

/* One integer key into *out, in the range of configuration field `field`
 * (NULL: none); absent: *out unchanged unless required. */
static lt_status get_int(const lt_gguf_file *f, const char *key, int64_t *out, bool required, const char *field) {
  if (lt_gguf_find_key(f, key) < 0) {
    if (required) return lt_error_set(LT_ERR_FORMAT, "gguf: key '%s' is missing", key);
    return LT_OK;
  }
  int64_t v;
  lt_status s = lt_gguf_get_int(f, key, &v);
  if (s != LT_OK) return s;
  char what[160];
  snprintf(what, sizeof what, "gguf: key '%s'", key);
  if (field && (s = lt_tf_config_check_range_int(field, v, what)) != LT_OK) return s;
  *out = v;
  return LT_OK;
}
static lt_status get_real(const lt_gguf_file *f, const char *key, double *out, const char *field) {
  if (lt_gguf_find_key(f, key) < 0) return LT_OK;
  double v;
  lt_status s = lt_gguf_get_real(f, key, &v);
  if (s != LT_OK) return s;
  char what[160];
  snprintf(what, sizeof what, "gguf: key '%s'", key);
  if (field && (s = lt_tf_config_check_range(field, v, what)) != LT_OK) return s;
  *out = v;
  return LT_OK;
}

lt_status lt_tf_gguf_read_config(const lt_gguf_file *f, lt_tf_config *out, lt_hf_family *family) {
  if (!f) return lt_error_null_arg("gguf_read_config", "f");
  const char *a;
  size_t alen;
  lt_status s = lt_gguf_get_str(f, "general.architecture", &a, &alen);
  if (s != LT_OK) return s;
  lt_hf_family fam;
  if (alen == 4 && memcmp(a, "gpt2", 4) == 0) fam = LT_HF_GPT2;
  else if (alen == 5 && memcmp(a, "llama", 5) == 0) fam = LT_HF_LLAMA;
  else
    return lt_error_set(LT_ERR_INVALID, "gguf: general.architecture \"%.*s\": libtensor runs \"gpt2\" and \"llama\"",
                        (int)(alen > 64 ? 64 : alen), a);
  const char *arch = fam == LT_HF_GPT2 ? "gpt2" : "llama";
  char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.pre_norm = true, c.scale_embeddings = false, c.pad_id = -1, c.dropout = 0.0;
  const int te = lt_gguf_find_tensor(f, "token_embd.weight");
  if (te < 0 || lt_gguf_tensor(f, te)->ndim != 2)
    return lt_error_set(LT_ERR_FORMAT, "gguf: no 2-d tensor 'token_embd.weight' (the vocabulary comes from its rows)");
  c.vocab_size = lt_gguf_tensor(f, te)->shape[0]; /* checked by lt_tf_config_validate below */
  if ((s = get_int(f, KEY("embedding_length"), &c.d_model, true, "d_model")) ||
      (s = get_int(f, KEY("block_count"), &c.n_dec_layers, true, "n_dec_layers")) ||
      (s = get_int(f, KEY("attention.head_count"), &c.n_heads, true, "n_heads")) ||
      (s = get_int(f, KEY("context_length"), &c.max_len, true, "max_len")) ||
      (s = get_int(f, KEY("feed_forward_length"), &c.d_ff, true, "d_ff")))
    return s;
  c.n_kv_heads = c.n_heads;
  const bool has_output = lt_gguf_find_tensor(f, "output.weight") >= 0;
  if (fam == LT_HF_GPT2) {
    c.norm = LT_TF_LAYER_NORM, c.act = LT_ACT_GELU_TANH, c.pos = LT_TF_POS_LEARNED;
    c.tie_embeddings = true, c.bias = true, c.norm_eps = 1e-5;
    if ((s = get_real(f, KEY("attention.layer_norm_epsilon"), &c.norm_eps, "norm_eps"))) return s;
  } else {
    c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE;
    c.tie_embeddings = !has_output, c.bias = false, c.norm_eps = 1e-6, c.rope_base = 10000.0;
    if ((s = get_int(f, KEY("attention.head_count_kv"), &c.n_kv_heads, false, "n_kv_heads")) ||
        (s = get_real(f, KEY("attention.layer_norm_rms_epsilon"), &c.norm_eps, "norm_eps")) ||
        (s = get_real(f, KEY("rope.freq_base"), &c.rope_base, "rope_base")))
      return s;
    int64_t rd = -1;
    if ((s = get_int(f, KEY("rope.dimension_count"), &rd, false, NULL))) return s;
    int64_t rot;
    if (rd != -1 && (c.n_heads < 1 || __builtin_mul_overflow(rd, c.n_heads, &rot) || rot != c.d_model))
      return lt_error_set(LT_ERR_INVALID, "gguf: key '%s' %lld: libtensor rotates whole heads (embedding_length / "
                          "head_count = %lld / %lld)", KEY("rope.dimension_count"), (long long)rd, (long long)c.d_model,
                          (long long)c.n_heads);
    static const char *const refused[] = {"llama.rope.scaling.type", "llama.rope.scaling.factor",
                                          "llama.expert_count", NULL};
    for (int k = 0; refused[k]; k++)
      if (lt_gguf_find_key(f, refused[k]) >= 0)
        return lt_error_set(LT_ERR_INVALID, "gguf: key '%s': libtensor's Llama has no RoPE scaling and no experts",
                            refused[k]);
  }
#undef KEY
  if (lt_tf_config_validate(&c) != LT_OK || lt_hf_family_of(&c, NULL) != LT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    return lt_error_set(LT_ERR_INVALID, "gguf: %s", msg);
  }
  if (out) *out = c;
  if (family) *family = fam;
  return LT_OK;
}

/* The tokenizer of an open file, or NULL (none; no error) or NULL with
 * *s set. Returns new. */
static lt_tokenizer *read_tokenizer(const lt_gguf_file *f, lt_status *s) {
  *s = LT_OK;
  const char *j;
  size_t len;
  if (lt_gguf_find_key(f, "tokenizer.huggingface.json") >= 0) {
    if ((*s = lt_gguf_get_str(f, "tokenizer.huggingface.json", &j, &len)) != LT_OK) return NULL;
    lt_tokenizer *t = lt_tokenizer_from_hf_json(j, len);
    if (!t) *s = lt_last_status();
    return t;
  }
  const char *model;
  size_t mlen;
  if (lt_gguf_find_key(f, "tokenizer.ggml.model") < 0) return NULL;
  if ((*s = lt_gguf_get_str(f, "tokenizer.ggml.model", &model, &mlen)) != LT_OK) return NULL;
  if (!(mlen == 4 && memcmp(model, "gpt2", 4) == 0)) return NULL; /* SPM and others: only with their tokenizer.json */
  /* byte-level BPE: tokenizer.json rebuilt from the tokens and merges, GPT-2's pieces */
  const int kt = lt_gguf_find_key(f, "tokenizer.ggml.tokens"), km = lt_gguf_find_key(f, "tokenizer.ggml.merges");
  const int ky = lt_gguf_find_key(f, "tokenizer.ggml.token_type");
  uint64_t nt = 0, nm = 0;
  lt_gguf_kv_type(f, kt, NULL, &nt);
  lt_gguf_kv_type(f, km, NULL, &nm);
  json_t *root = json_object(), *vocab = json_object(), *merges = json_array(), *added = json_array();
  lt_tokenizer *tok = NULL;
  char *text = NULL;
  if (!root || !vocab || !merges || !added) {
    *s = lt_error_set(LT_ERR_NOMEM, "gguf: tokenizer");
    goto out;
  }
  for (uint64_t i = 0; i < nt && *s == LT_OK; i++) {
    const char *t;
    size_t tl;
    int64_t ty = 1;
    if ((*s = lt_gguf_arr_str(f, kt, i, &t, &tl)) != LT_OK) break;
    if (ky >= 0 && (*s = lt_gguf_arr_int(f, ky, i, &ty)) != LT_OK) break;
    json_t *sv = json_stringn(t, tl);
    if (!sv) {
      *s = lt_error_set(LT_ERR_FORMAT, "gguf: tokenizer.ggml.tokens[%llu] is not UTF-8", (unsigned long long)i);
      break;
    }
    char *name = strndup(t, tl);
    if (!name) {
      json_decref(sv);
      *s = lt_error_set(LT_ERR_NOMEM, "gguf: tokenizer");
      break;
    }
    json_object_set_new(vocab, name, json_integer((json_int_t)i));
    if (ty == 3 || ty == 4)
      json_array_append_new(added, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)i, "content", sv,
                                             "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                             ty == 3));
    else json_decref(sv);
    free(name);
  }
  for (uint64_t i = 0; i < nm && *s == LT_OK; i++) {
    const char *t;
    size_t tl;
    if ((*s = lt_gguf_arr_str(f, km, i, &t, &tl)) != LT_OK) break;
    json_t *sv = json_stringn(t, tl);
    if (!sv) *s = lt_error_set(LT_ERR_FORMAT, "gguf: tokenizer.ggml.merges[%llu] is not UTF-8", (unsigned long long)i);
    else json_array_append_new(merges, sv);
  }
  if (*s != LT_OK) goto out;
  json_t *bl = json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                         "use_regex", 1);
  json_object_set_new(root, "version", json_string("1.0"));
  json_object_set_new(root, "added_tokens", added);
  added = NULL;
  json_object_set_new(root, "pre_tokenizer", bl);
  json_object_set(root, "decoder", bl);
  json_object_set_new(root, "model", json_pack("{s:s,s:o,s:o}", "type", "BPE", "vocab", vocab, "merges", merges));
  vocab = merges = NULL;
  if (!(text = json_dumps(root, JSON_COMPACT))) {
    *s = lt_error_set(LT_ERR_NOMEM, "gguf: tokenizer");
    goto out;
  }
  if (!(tok = lt_tokenizer_from_hf_json(text, strlen(text)))) *s = lt_last_status();
out:
  free(text);
  json_decref(root);
  json_decref(vocab);
  json_decref(merges);
  json_decref(added);
  return tok;
}

lt_transformer *lt_tf_gguf_load(const char *path, uint64_t max_bytes, lt_tokenizer **tok) {
  if (tok) *tok = NULL;
  lt_gguf_file *f = lt_gguf_open(path);
  if (!f) return NULL;
  lt_tf_config c;
  lt_hf_family fam;
  lt_transformer *m = NULL;
  pieces ps = {0};
  int *idx = NULL;
  float *buf = NULL;
  lt_status s = lt_tf_gguf_read_config(f, &c, &fam);
  int64_t n_params, in_file = 0;
  size_t bytes;
  if (s == LT_OK) s = lt_tf_config_size(&c, &n_params, &bytes);
  if (s != LT_OK) goto out;
  for (int i = 0; i < lt_gguf_tensor_count(f); i++) in_file += lt_gguf_tensor(f, i)->numel;
  if (n_params > in_file) { /* the tensors lie inside the file: this bounds the model by the file's size */
    s = lt_error_set(LT_ERR_FORMAT, "gguf '%s': the configuration describes %lld parameters, the tensors hold %lld",
                     path, (long long)n_params, (long long)in_file);
    goto out;
  }
  if (max_bytes && bytes > max_bytes) {
    s = lt_error_set(LT_ERR_NOMEM, "gguf '%s': the model needs %zu bytes, over the memory cap of %llu", path, bytes,
                     (unsigned long long)max_bytes);
    goto out;
  }
  lt_generator *g = lt_generator_new_skip_init(); /* every value is replaced by the file's (layout) */
  m = g ? lt_transformer_new(&c, g) : NULL;
  lt_generator_free(g);
  if (!m || (s = layout(m, fam, &ps)) != LT_OK) {
    s = lt_last_status();
    goto out;
  }
  /* every piece by name and shape, nothing else (a GPT-2 output.weight equal to token_embd is tolerated) */
  idx = calloc((size_t)ps.n + 1, sizeof *idx);
  if (!idx) {
    s = lt_error_set(LT_ERR_NOMEM, "gguf: out of memory");
    goto out;
  }
  int64_t most = 0;
  for (int i = 0; i < ps.n; i++) {
    const piece *p = &ps.p[i];
    if ((idx[i] = lt_gguf_find_tensor(f, p->hf)) < 0) {
      s = lt_error_set(LT_ERR_INVALID, "gguf '%s': tensor '%s' (libtensor's %s) is missing", path, p->hf, p->lt[0]);
      goto out;
    }
    const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, idx[i]);
    bool same = ti->ndim == p->ndim;
    for (int k = 0; same && k < p->ndim; k++) same = ti->shape[k] == p->shape[k];
    if (!same) {
      s = lt_error_set(LT_ERR_SHAPE, "gguf '%s': tensor '%s': shape %s in the file, %s expected by the configuration",
                       path, p->hf, lt_shape_str(ti->ndim, ti->shape, (char[64]){0}, 64),
                       lt_shape_str(p->ndim, p->shape, (char[64]){0}, 64));
      goto out;
    }
    if (ti->numel > most) most = ti->numel;
  }
  for (int k = 0; k < lt_gguf_tensor_count(f); k++) {
    const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, k);
    bool mine = false;
    for (int i = 0; i < ps.n && !mine; i++) mine = idx[i] == k;
    if (mine) continue;
    if (fam == LT_HF_GPT2 && strcmp(ti->name, "output.weight") == 0) {
      const lt_gguf_tensor_info *e = lt_gguf_tensor(f, idx[0]);
      if (e->type == ti->type && e->nbytes == ti->nbytes &&
          memcmp(lt_gguf_tensor_data(f, idx[0]), lt_gguf_tensor_data(f, k), (size_t)e->nbytes) == 0)
        continue;
      s = lt_error_set(LT_ERR_INVALID, "gguf '%s': tensor 'output.weight' differs from 'token_embd.weight': "
                       "libtensor's GPT-2 ties its head to the embedding", path);
      goto out;
    }
    s = lt_error_set(LT_ERR_INVALID, "gguf '%s': tensor '%s' is not part of the %s layout for this configuration", path,
                     ti->name, lt_hf_family_name(fam));
    goto out;
  }
  /* values: each tensor expanded to f32 and checked finite, then stored; the model is new, so a failure
   * leaves nothing behind */
  if (!(buf = malloc((size_t)(most ? most : 1) * sizeof *buf))) {
    s = lt_error_set(LT_ERR_NOMEM, "gguf: %lld floats", (long long)most);
    goto out;
  }
  for (int i = 0; i < ps.n && s == LT_OK; i++) {
    const piece *p = &ps.p[i];
    if (lt__tf_gguf_blocks_fit(p, f, idx[i])) { /* the file's blocks, bit for bit (load.h's .weights) */
      s = lt__tf_store_gguf_blocks(p, f, idx[i]);
      continue;
    }
    if ((s = lt_gguf_read_f32(f, idx[i], buf)) != LT_OK) break;
    lt_tensor *t = lt_tensor_from_borrowed(LT_DTYPE_F32, p->ndim, p->shape, buf);
    s = t ? lt__hf_piece_store(p, t) : lt_last_status();
    lt_tensor_free(t);
  }
  if (s == LT_OK && tok) {
    *tok = read_tokenizer(f, &s);
    if (s == LT_OK && *tok && lt_tokenizer_vocab_size(*tok) > c.vocab_size) {
      s = lt_error_set(LT_ERR_INVALID, "gguf '%s': the tokenizer has %lld ids, the model %lld", path,
                       (long long)lt_tokenizer_vocab_size(*tok), (long long)c.vocab_size);
    }
    if (s != LT_OK) {
      lt_tokenizer_free(*tok);
      *tok = NULL;
    }
  }
out:
  free(buf);
  free(idx);
  free(ps.p);
  lt_gguf_close(f);
  if (s != LT_OK) {
    lt_transformer_free(m);
    return NULL;
  }
  return m;
}
