/*
 * examples/vit_fashion_mnist.c: a Vision Transformer on Fashion-MNIST, the
 * ViT of issue 18, built from the library's Transformer layers
 * (nn/transformer_layer.h) and run by the library's training loop for
 * classifiers (train/classify.h):
 *
 *   x [B, 784] -> 16 patches of 7x7 [B, 16, 49] -> patch_embed Linear(49, 64)
 *   [cls_token; patches] + pos_embed                          [B, 17, 64]
 *   4 x pre-norm TransformerEncoderLayer(64, 4 heads, FFN 128, GELU)
 *   LayerNorm -> the cls token -> head Linear(64, 10)         [B, 10]
 *
 * In PyTorch this is nn.TransformerEncoderLayer(64, 4, 128, dropout=0,
 * activation="gelu", batch_first=True, norm_first=True);
 * bench/vit_fashion_mnist_torch.py is the same model and run (same
 * configuration, seed handling and data order: a permutation per epoch,
 * batches of 128, AdamW 1e-3 with warmup + cosine, weight decay on the
 * matrices only).
 *
 * Data: Debian's dataset-fashion-mnist package, or --data DIR.
 *
 *   vit_fashion_mnist --epochs 6            # the measured run (docs/vision.md)
 *   vit_fashion_mnist --max-steps 100       # a quick check that it learns
 *   vit_fashion_mnist --dir run [--resume]  # checkpoints, metrics.csv, resume
 */
#include <libtensor/libtensor.h>

#include <stdio.h>

/* ---- the model ------------------------------------------------------------ */

enum { P = 7, G = 28 / P, N_PATCH = G * G, D = 64, HEADS = 4, FFN = 128, LAYERS = 4, CLASSES = 10 };

typedef struct vit {
  lt_linear_m patch_embed;              /* [D, P*P] */
  lt_tensor *cls_token, *pos_embed;     /* [1, 1, D], [1, N_PATCH + 1, D] (owned by the store) */
  lt_transformer_layer layers[LAYERS];  /* "layers.<i>" */
  lt_layer_norm_m norm;                 /* [D] */
  lt_linear_m head;                     /* [CLASSES, D] */
  const lt_params *params;              /* whose train/eval mode the forward follows */
} vit;

/* A learned embedding under name, N(0, 0.02^2) as ViT's, no weight decay. */
static lt_status add_embedding(lt_params *p, const char *name, int64_t n, lt_generator *g, lt_tensor **out) {
  lt_tensor *t = lt_tensor_keep(lt_zeros(LT_DTYPE_F32, 3, (const int64_t[]){1, n, D}));
  lt_status s = t ? lt_params_add(p, name, t, LT_PARAM_NO_DECAY) : lt_last_status();
  if (s == LT_OK) s = lt_init_normal_(g, t, 0.0, 0.02);
  *out = t;
  return s;
}

/* Registers patch_embed, cls_token, pos_embed, layers.0-3, norm, head (in
 * PyTorch's order, its default initialisation elsewhere) from g. */
static lt_status vit_init(vit *m, lt_params *p, lt_generator *g) {
  lt_status s;
  m->params = p;
  if ((s = lt_linear_init(&m->patch_embed, p, "patch_embed", P * P, D, true, g)) != LT_OK ||
      (s = add_embedding(p, "cls_token", 1, g, &m->cls_token)) != LT_OK ||
      (s = add_embedding(p, "pos_embed", N_PATCH + 1, g, &m->pos_embed)) != LT_OK)
    return s;
  lt_transformer_layer_opts o = LT_TRANSFORMER_LAYER_DEFAULTS(D, HEADS);
  o.d_ff = FFN, o.dropout = 0.0, o.act = LT_ACT_GELU, o.norm_first = true;
  for (int i = 0; i < LAYERS; i++) {
    char name[32];
    snprintf(name, sizeof name, "layers.%d", i);
    if ((s = lt_transformer_encoder_layer_init(&m->layers[i], p, name, &o, g)) != LT_OK) return s;
  }
  if ((s = lt_layer_norm_init(&m->norm, p, "norm", D, 1e-5, true)) != LT_OK) return s;
  return lt_linear_init(&m->head, p, "head", D, CLASSES, true, g);
}

/* x [B, 784] -> logits [B, 10]. Intermediates belong to the open scope; a
 * failure anywhere gives NULL with the first message. */
static lt_tensor *vit_forward(void *self, const lt_tensor *x) {
  const vit *m = self;
  const int64_t B = x ? x->shape[0] : 0;
  /* [B, 28, 28] as [B, G, P, G, P] -> [B, G, G, P, P] -> [B, 16, 49]: patch (i, j) row-major */
  lt_tensor *patches = lt_reshape(lt_permute(lt_view(x, 5, (const int64_t[]){B, G, P, G, P}), 5,
                                             (const int[]){0, 1, 3, 2, 4}),
                                  3, (const int64_t[]){B, N_PATCH, P * P});
  lt_tensor *cls = lt_expand(m->cls_token, 3, (const int64_t[]){B, 1, D});
  lt_tensor *h = lt_cat(2, (lt_tensor *[]){cls, lt_linear_forward(&m->patch_embed, patches)}, 1);
  h = lt_add(h, m->pos_embed);                                  /* [B, 17, D] */
  const lt_nn_ctx ctx = lt_params_ctx(m->params, NULL);         /* train/eval; no dropout */
  for (int i = 0; i < LAYERS; i++) h = lt_transformer_encoder_layer_forward(&m->layers[i], h, NULL, 0, &ctx);
  h = lt_layer_norm_forward(&m->norm, lt_select(h, 1, 0));      /* the cls token [B, D] */
  return lt_linear_forward(&m->head, h);
}

/* ---- the run: the library's (train/classify.h) ---------------------------- */

static lt_status init(void *m, lt_params *p, lt_generator *g) { return vit_init(m, p, g); }

int main(int argc, char **argv) {
  vit model;
  lt_classify_opts opt = LT_CLASSIFY_DEFAULTS("vit_fashion_mnist", 6);
  const lt_classify_model spec = {.model = &model, .init = init, .forward = vit_forward,
                                  .name = "ViT 7x7 patches, cls token, 4 pre-norm layers D 64, 4 heads, FFN 128"};
  return lt_classify_main(argc, argv, &opt, &spec);
}
