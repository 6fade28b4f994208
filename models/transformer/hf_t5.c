/*
 * models/transformer/hf_t5.c: T5's Hugging Face layout
 * (T5ForConditionalGeneration, v1.0 and v1.1) for hf.c: which configurations
 * fit, the piece table (names, one to one, nn.Linear's [out, in] on both
 * sides), and config.json both ways.
 *
 * T5 is the encoder-decoder Transformer with:
 *   embeddings = shared[ids]             (no positions, no scale; one table for both stacks)
 *   layer      = pre-norm with T5LayerNorm (RMSNorm without bias) before each sublayer,
 *                attention without biases and without the 1/sqrt(d) scale,
 *                FFN wo(relu(wi x)) (v1.0, "relu") or wo(gelu_new(wi_0 x) * wi_1 x)
 *                (v1.1, "gated-gelu")
 *   positions  = a learned bias of relative-position buckets added to the
 *                self-attention scores, one table per stack (held by its
 *                block 0 in transformers, used by every block): bidirectional
 *                in the encoder, causal in the decoder; none on the cross-attention
 *   head       = lm_head, or with tied embeddings shared^T of the decoder's
 *                output, times d_model^-0.5 in v1.0 (transformers 4 rescales
 *                exactly when tied; transformers 5 always ties, and
 *                scale_decoder_outputs says whether it rescales)
 * which lt_tf_config says with arch encoder-decoder, pre_norm, rmsnorm, pos
 * relative (rel_buckets, rel_max_distance), attn_scale 1, bias false, swiglu
 * for the gated FFN, and head_rescale (only with tie_embeddings) (docs/interop.md).
 *
 * What this is not: the checked load or the writer (hf.c), a tokenizer
 * (SentencePiece is not read), or the other T5 classes and relatives
 * (T5Model, T5EncoderModel, UMT5's per-layer biases, LongT5, MT5's names):
 * refused by name, as is d_kv * num_heads != d_model (libtensor's heads
 * split d_model).
 */
#include <stdio.h>
#include <string.h>

#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/hf_internal.h"

#define NAME_LEN LT__HF_NAME_LEN
#define NOFIT(...) lt_error_set(LT_ERR_INVALID, __VA_ARGS__)

lt_status lt__hf_t5_fits(const lt_tf_config *c) {
  const char *who = "hf: an encoder-decoder model is exported as T5, which needs";
  if (!c->pre_norm) return NOFIT("%s pre_norm (T5 normalises before each sublayer)", who);
  if (c->norm != LT_TF_RMS_NORM)
    return NOFIT("%s norm rmsnorm (T5LayerNorm); this model has %s", who, lt_tf_norm_name(c->norm));
  if (c->pos != LT_TF_POS_RELATIVE)
    return NOFIT("%s pos relative (T5's relative-position buckets); this model has pos %s", who,
                 lt_tf_pos_name(c->pos));
  if (c->attn_scale != 1.0)
    return NOFIT("%s attn_scale 1 (T5 does not scale q k^T); this model has %g", who, c->attn_scale);
  if (c->bias || c->qkv_bias) return NOFIT("%s bias false (T5 has no biases)", who);
  if (c->scale_embeddings) return NOFIT("%s scale_embeddings false", who);
  if (c->embed_norm) return NOFIT("%s embed_norm false (T5 has no norm over the embeddings)", who);
  if (c->n_kv_heads != c->n_heads)
    return NOFIT("%s n_kv_heads == n_heads (no GQA); this model has %lld key/value heads for %lld", who,
                 (long long)c->n_kv_heads, (long long)c->n_heads);
  return LT_OK;
}

/* ---- names ------------------------------------------------------------------ */

/* Appends the piece hf, libtensor's parameter lt under another name. */
static lt_status add(pieces *ps, lt_params *P, const char *hf, const char *lt) {
  return lt__hf_add_piece(ps, P, hf, P_SAME, 1, lt, 0, 0);
}

lt_status lt__hf_t5_layout(lt_transformer *m, pieces *ps) {
  const lt_tf_config *c = lt_transformer_config(m);
  lt_params *P = lt_transformer_params(m);
  char h[NAME_LEN + 64], l[NAME_LEN + 64];
  lt_status s;
  /* shared first: hf.c compares a tied file's lm_head.weight with the first piece */
  if ((s = add(ps, P, "shared.weight", "embed.weight"))) return s;
  static const char *const attn[4][2] = {{"q", "q_proj"}, {"k", "k_proj"}, {"v", "v_proj"}, {"o", "out_proj"}};
  for (int dec = 0; dec < 2; dec++) {
    const char *stack = dec ? "decoder" : "encoder";
    const int64_t n = dec ? c->n_dec_layers : c->n_enc_layers;
    snprintf(h, sizeof h, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stack);
    snprintf(l, sizeof l, "%s.rel_bias.weight", stack);
    if ((s = add(ps, P, h, l))) return s;
    for (int64_t i = 0; i < n; i++) {
      /* sublayers: 0 self-attention, (decoder) 1 cross-attention, then the FFN; each with its layer_norm */
      const int ffn = dec ? 2 : 1;
      for (int sub = 0; sub <= ffn; sub++) {
        snprintf(h, sizeof h, "%s.block.%lld.layer.%d.layer_norm.weight", stack, (long long)i, sub);
        snprintf(l, sizeof l, "%s.layers.%lld.norm%d.weight", stack, (long long)i, sub + 1);
        if ((s = add(ps, P, h, l))) return s;
        if (sub < ffn)
          for (int k = 0; k < 4; k++) {
            snprintf(h, sizeof h, "%s.block.%lld.layer.%d.%s.%s.weight", stack, (long long)i, sub,
                     sub ? "EncDecAttention" : "SelfAttention", attn[k][0]);
            snprintf(l, sizeof l, "%s.layers.%lld.%s.%s.weight", stack, (long long)i, sub ? "cross_attn" : "self_attn",
                     attn[k][1]);
            if ((s = add(ps, P, h, l))) return s;
          }
      }
      /* the FFN: wi, wo; gated: wi_0 (the activation's), wi_1 (the linear one), wo */
      static const char *const plain[][2] = {{"wi", "linear1"}, {"wo", "linear2"}};
      static const char *const gated[][2] = {{"wi_0", "w1"}, {"wi_1", "w3"}, {"wo", "w2"}};
      const int nf = c->swiglu ? 3 : 2;
      for (int k = 0; k < nf; k++) {
        snprintf(h, sizeof h, "%s.block.%lld.layer.%d.DenseReluDense.%s.weight", stack, (long long)i, ffn,
                 c->swiglu ? gated[k][0] : plain[k][0]);
        snprintf(l, sizeof l, "%s.layers.%lld.%s.weight", stack, (long long)i, c->swiglu ? gated[k][1] : plain[k][1]);
        if ((s = add(ps, P, h, l))) return s;
      }
    }
    snprintf(h, sizeof h, "%s.final_layer_norm.weight", stack);
    snprintf(l, sizeof l, "%s.norm.weight", stack);
    if ((s = add(ps, P, h, l))) return s;
  }
  if (!c->tie_embeddings && (s = add(ps, P, "lm_head.weight", "lm_head.weight"))) return s;
  return LT_OK;
}

bool lt__hf_t5_tolerated(const char *name) {
  return strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "decoder.embed_tokens.weight") == 0;
}

/* ---- config.json -------------------------------------------------------------- */

/* feed_forward_proj of an activation (gated: "gated-" before it), as T5Config parses it. */
static const char *act_hf(lt_activation a) {
  return a == LT_ACT_GELU_TANH ? "gelu_new" : a == LT_ACT_GELU ? "gelu" : a == LT_ACT_RELU ? "relu" : "silu";
}

json_t *lt__hf_t5_config_json(const lt_tf_config *c) {
  json_t *j = json_object();
  if (!j) return NULL;
  char ffp[32];
  /* T5Config maps "gated-gelu" to gelu_new, so the tanh GELU is written so; other gated ones as their name */
  snprintf(ffp, sizeof ffp, "%s%s", c->swiglu ? "gated-" : "",
           c->swiglu && c->act == LT_ACT_GELU_TANH ? "gelu" : act_hf(c->act));
#define SET(k, v) json_object_set_new(j, k, v)
  SET("architectures", json_pack("[s]", "T5ForConditionalGeneration"));
  SET("model_type", json_string("t5"));
  SET("vocab_size", json_integer(c->vocab_size));
  SET("d_model", json_integer(c->d_model));
  SET("d_kv", json_integer(c->d_model / c->n_heads));
  SET("d_ff", json_integer(c->d_ff));
  SET("num_layers", json_integer(c->n_enc_layers));
  SET("num_decoder_layers", json_integer(c->n_dec_layers));
  SET("num_heads", json_integer(c->n_heads));
  SET("relative_attention_num_buckets", json_integer(c->rel_buckets));
  SET("relative_attention_max_distance", json_integer(c->rel_max_distance));
  SET("n_positions", json_integer(c->max_len));
  SET("dropout_rate", json_real(c->dropout));
  SET("layer_norm_epsilon", json_real(c->norm_eps));
  SET("initializer_factor", json_real(1.0));
  SET("feed_forward_proj", json_string(ffp));
  SET("is_encoder_decoder", json_true());
  SET("tie_word_embeddings", json_boolean(c->tie_embeddings));
  SET("scale_decoder_outputs", json_boolean(c->head_rescale)); /* transformers 5's key; 4 derives it from the tie */
  /* T5Config's ids (libtensor's model has none of its own: pad_id -1, the decoder starts from pad) */
  SET("pad_token_id", json_integer(c->pad_id >= 0 ? c->pad_id : 0));
  SET("eos_token_id", json_integer(1));
  SET("decoder_start_token_id", json_integer(c->pad_id >= 0 ? c->pad_id : 0));
  SET("use_cache", json_true());
  SET("torch_dtype", json_string("float32"));
#undef SET
  return j;
}

lt_status lt__hf_t5_read_config(json_t *j, const char *path, lt_tf_config *out) {
  lt__hf_cfg r = {path, j, LT_OK};
  /* T5Config's defaults where a key may be absent */
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.pre_norm = true, c.norm = LT_TF_RMS_NORM, c.pos = LT_TF_POS_RELATIVE, c.bias = false, c.scale_embeddings = false;
  c.act = LT_ACT_RELU, c.swiglu = false, c.tie_embeddings = true, c.norm_eps = 1e-6, c.dropout = 0.1;
  c.rel_buckets = 32, c.rel_max_distance = 128, c.attn_scale = 1.0, c.max_len = 512, c.pad_id = -1;
  c.d_model = 512, c.d_ff = 2048, c.n_heads = 8, c.n_enc_layers = 6;
  int64_t d_kv = 64;
  lt__hf_get_int(&r, "vocab_size", &c.vocab_size, true, NULL);
  lt__hf_get_int(&r, "d_model", &c.d_model, false, "d_model");
  lt__hf_get_int(&r, "d_kv", &d_kv, false, NULL);
  lt__hf_get_int(&r, "d_ff", &c.d_ff, false, "d_ff");
  lt__hf_get_int(&r, "num_layers", &c.n_enc_layers, false, "n_enc_layers");
  c.n_dec_layers = c.n_enc_layers; /* num_decoder_layers null: num_layers, as T5Config */
  lt__hf_get_int(&r, "num_decoder_layers", &c.n_dec_layers, false, "n_dec_layers");
  lt__hf_get_int(&r, "num_heads", &c.n_heads, false, "n_heads");
  lt__hf_get_int(&r, "relative_attention_num_buckets", &c.rel_buckets, false, "rel_buckets");
  lt__hf_get_int(&r, "relative_attention_max_distance", &c.rel_max_distance, false, "rel_max_distance");
  lt__hf_get_int(&r, "n_positions", &c.max_len, false, "max_len"); /* T5 has none: the decoder's cache cap */
  lt__hf_get_real(&r, "dropout_rate", &c.dropout, "dropout");
  lt__hf_get_real(&r, "layer_norm_epsilon", &c.norm_eps, "norm_eps");
  lt__hf_get_bool(&r, "tie_word_embeddings", &c.tie_embeddings);
  /* transformers 4: v1.0 ties and rescales, v1.1 neither; transformers 5 always ties, and this key says the rescale */
  c.n_kv_heads = c.n_heads, c.head_rescale = c.tie_embeddings;
  lt__hf_get_bool(&r, "scale_decoder_outputs", &c.head_rescale);
  if (r.s == LT_OK && c.head_rescale && !c.tie_embeddings)
    r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'scale_decoder_outputs' true with tie_word_embeddings "
                       "false: T5 rescales only before its tied head", path);
  int64_t inner; /* d_kv is the file's, n_heads in range: checked */
  if (r.s == LT_OK && (d_kv < 1 || __builtin_mul_overflow(d_kv, c.n_heads, &inner) || inner != c.d_model))
    r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'd_kv' %lld x num_heads %lld != d_model %lld: libtensor's "
                       "heads split d_model (d_kv = d_model / num_heads)", path, (long long)d_kv,
                       (long long)c.n_heads, (long long)c.d_model);
  const char *ffp = lt__hf_get_str(&r, "feed_forward_proj", "relu");
  if (r.s == LT_OK) {
    const bool gated = strncmp(ffp, "gated-", 6) == 0;
    const char *a = gated ? ffp + 6 : ffp;
    c.swiglu = gated;
    if (strcmp(a, "relu") == 0) c.act = LT_ACT_RELU;
    else if (strcmp(a, "gelu_new") == 0 || (gated && strcmp(a, "gelu") == 0)) c.act = LT_ACT_GELU_TANH;
    else if (strcmp(a, "gelu") == 0) c.act = LT_ACT_GELU; /* plain "gelu" is erf GELU; "gated-gelu" is gelu_new */
    else if (strcmp(a, "silu") == 0 || strcmp(a, "swish") == 0) c.act = LT_ACT_SILU;
    else
      r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'feed_forward_proj' \"%s\": libtensor's T5 runs "
                         "\"relu\", \"gelu\", \"gelu_new\", \"silu\", each optionally \"gated-\"", path, ffp);
  }
  if (r.s == LT_OK) {
    json_t *e = json_object_get(j, "is_encoder_decoder");
    if (e && json_is_false(e))
      r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'is_encoder_decoder' is false: libtensor's T5 is "
                         "T5ForConditionalGeneration", path);
  }
  if (r.s == LT_OK) {
    json_t *arch = json_object_get(j, "architectures");
    if (arch && !json_is_null(arch)) {
      const char *a =
          json_is_array(arch) && json_array_size(arch) == 1 ? json_string_value(json_array_get(arch, 0)) : NULL;
      if (!a)
        r.s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key 'architectures' must be a list of one name", path);
      else if (strcmp(a, "T5ForConditionalGeneration") != 0)
        r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'architectures' \"%s\": libtensor's T5 runs "
                           "\"T5ForConditionalGeneration\" only", path, a);
    }
  }
  if (r.s != LT_OK) return r.s;
  if (lt_tf_config_validate(&c) != LT_OK || lt__hf_t5_fits(&c) != LT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    return lt_error_set(LT_ERR_INVALID, "hf config '%s': %s", path, msg);
  }
  *out = c;
  return LT_OK;
}
