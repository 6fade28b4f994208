"""libtensor's T5 (models/transformer/hf_t5.c) against Hugging Face transformers'
T5ForConditionalGeneration itself (the reference environment; docs/interop.md,
docs/testing.md).

  transformers -> libtensor: tiny random T5s made from T5Config (v1.0:
      feed_forward_proj "relu", tied head, so the d_model^-0.5 rescale; v1.1:
      "gated-gelu", untied lm_head), every parameter randomised (the
      layer norms around 1), written with save_pretrained (safetensors);
      libtensor loads each (tests/interop/t5_tool logits) with logits within
      1e-4 of transformers' in f32 on sources and targets longer than the
      exact buckets (so the log buckets and max_distance count); its greedy
      decoding (KV cache, the position bias at each step) makes the same 64
      tokens as generate(do_sample=False) from decoder_start_token_id; the
      same model saved in BF16 and in shards loads into f32 with transformers'
      f32 logits for those weights.
  training: the loss and gradients (the bias tables included) of
      t5_tool grads against transformers' loss.backward(), within 1e-4.
  beam search: t5_tool beam (lt_generate, 4 beams, early stopping) against
      generate(num_beams=4, early_stopping=True, length_penalty=alpha): the
      same tokens, scores within 1e-4.
  libtensor -> transformers: t5_tool make exports a tiny random T5 of each
      kind; from_pretrained loads it with the same logits.
  refusals: d_kv * num_heads != d_model, T5Model, model_type umt5, each
      naming the key.

    python test_hf_t5.py T5_TOOL     (ctest: reference_hf_t5)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from hf_common import randomize  # noqa: E402  (first: offline settings)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from transformers import T5Config, T5ForConditionalGeneration  # noqa: E402

T5_TOOL = None
TOL = 1e-4
NEW = 64
SRC = [5, 17, 3, 42, 8, 11, 29, 2, 33, 14, 7, 21, 9, 40, 6, 12, 3, 25]
TGT = [0, 4, 19, 23, 8, 37, 2, 15, 30, 6, 44, 13, 27, 9]


def t5(seed, gated, **kw):
    torch.manual_seed(seed)
    args = dict(vocab_size=50, d_model=16, d_kv=4, d_ff=24, num_layers=3, num_decoder_layers=2, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0,
                layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu" if gated else "relu",
                tie_word_embeddings=not gated, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    args.update(kw)
    model = T5ForConditionalGeneration(T5Config(**args)).eval()
    return randomize(model, seed + 100, lambda n: "layer_norm" in n)


def run(*args):
    return subprocess.run([T5_TOOL, *map(str, args)], check=True, capture_output=True, text=True).stdout


def ids(x):
    return ",".join(map(str, x))


def lt_logits(d, src, tgt, tmp):
    out = os.path.join(tmp, "logits.safetensors")
    run("logits", d, out, ids(src), ids(tgt))
    return load_file(out)["logits"]


def hf_logits(model, src, tgt):
    with torch.no_grad():
        return model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits.numpy()


class FromTransformers(unittest.TestCase):
    def check(self, model, name):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            diff = float(np.abs(lt_logits(d, SRC, TGT, tmp) - hf_logits(model, SRC, TGT)).max())
            print(f"{name}: max |libtensor - transformers| logits = {diff:.2e}")
            self.assertLessEqual(diff, TOL, name)
            with torch.no_grad():
                hf = model.generate(torch.tensor([SRC]), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                    eos_token_id=None)[0, 1:].tolist()
            lt = [int(x) for x in run("greedy", d, NEW, ids(SRC)).strip().split(",")]
            print(f"{name}: greedy {NEW} tokens, {sum(a == b for a, b in zip(lt, hf))} equal")
            self.assertEqual(len(hf), NEW)
            self.assertEqual(lt, hf, name)

    def test_v1_0_relu_tied(self):
        self.check(t5(1, gated=False), "t5-v1.0")

    def test_v1_1_gated_gelu_untied(self):
        self.check(t5(2, gated=True), "t5-v1.1")

    def test_bf16_sharded(self):
        """Weights saved in BF16 and in shards (model.safetensors.index.json) load exactly into f32:
        the logits of transformers' f32 model holding the same (rounded) weights."""
        model = t5(6, gated=True)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "t5-bf16")
            model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True, max_shard_size="20KB")
            model.to(torch.float32)
            self.assertTrue(os.path.exists(os.path.join(d, "model.safetensors.index.json")))
            diff = float(np.abs(lt_logits(d, SRC, TGT, tmp) - hf_logits(model, SRC, TGT)).max())
            print(f"t5-v1.1 from BF16 shards: max |libtensor - transformers (f32)| logits = {diff:.2e}")
            self.assertLessEqual(diff, TOL)


class Training(unittest.TestCase):
    """The training loss (decoder inputs TGT, labels TGT shifted left) and its gradients against transformers'
    loss.backward(): the shared embedding, both relative-position bias tables (libtensor's attention with a
    bias that carries a gradient), and every layer's projections, norms and FFN matrices."""
    def check(self, model, name):
        labels = TGT[1:] + [1]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            out = os.path.join(tmp, "grads.safetensors")
            run("grads", d, out, ids(SRC), ids(TGT), ids(labels))
            lt = load_file(out)
            model.train()  # dropout_rate 0: only the mode differs
            model.zero_grad()
            loss = model(input_ids=torch.tensor([SRC]), decoder_input_ids=torch.tensor([TGT]),
                         labels=torch.tensor([labels])).loss
            loss.backward()
            model.eval()
            hf = {n: p.grad.numpy() for n, p in model.named_parameters()}
            pairs = {"embed.weight": "shared.weight",
                     "encoder.rel_bias.weight": "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                     "decoder.rel_bias.weight": "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                     "encoder.layers.1.self_attn.q_proj.weight": "encoder.block.1.layer.0.SelfAttention.q.weight",
                     "decoder.layers.0.cross_attn.k_proj.weight": "decoder.block.0.layer.1.EncDecAttention.k.weight",
                     "decoder.layers.1.norm3.weight": "decoder.block.1.layer.2.layer_norm.weight",
                     "encoder.norm.weight": "encoder.final_layer_norm.weight"}
            ffn = "encoder.layers.0.w1.weight" if "encoder.layers.0.w1.weight" in lt else "encoder.layers.0.linear1.weight"
            pairs[ffn] = "encoder.block.0.layer.1.DenseReluDense." + ("wi_0" if "w1" in ffn else "wi") + ".weight"
            dl = abs(float(lt["loss"]) - loss.item())
            worst = max(float(np.abs(lt[a] - hf[b]).max() / max(1.0, np.abs(hf[b]).max())) for a, b in pairs.items())
            print(f"{name}: loss libtensor {float(lt['loss']):.6f} transformers {loss.item():.6f} (|diff| {dl:.1e}); "
                  f"gradients of {len(pairs)} tensors, max |diff| / max(1, max |grad|) = {worst:.1e}")
            self.assertLessEqual(dl, TOL)
            self.assertLessEqual(worst, TOL)
            self.assertGreater(float(np.abs(lt["encoder.rel_bias.weight"]).max()), 0.0)

    def test_v1_0(self):
        self.check(t5(7, gated=False), "t5-v1.0")

    def test_v1_1(self):
        self.check(t5(8, gated=True), "t5-v1.1")


class BeamSearch(unittest.TestCase):
    """4 beams, early stopping, against generate(num_beams=4, early_stopping=True, length_penalty=alpha):
    the best hypothesis's tokens identical, its score within 1e-4. The end token is one greedy decoding
    makes often but not among its first six, so that hypotheses end before max_new_tokens."""
    def check(self, model, name, alphas, new=24):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            with torch.no_grad():
                greedy = model.generate(torch.tensor([SRC]), max_new_tokens=new, min_new_tokens=new,
                                        do_sample=False, eos_token_id=None)[0, 1:].tolist()
            late = [t for t in greedy if t not in greedy[:6]] or greedy
            eos = max(sorted(set(late)), key=late.count)
            ended = 0
            for alpha in alphas:
                with torch.no_grad():
                    out = model.generate(torch.tensor([SRC]), num_beams=4, early_stopping=True, length_penalty=alpha,
                                         max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=0,
                                         output_scores=True, return_dict_in_generate=True)
                hf = out.sequences[0, 1:].tolist()
                hf = hf[:hf.index(eos) + 1] if eos in hf else hf
                hf_score = float(out.sequences_scores[0])
                toks, score = run("beam", d, new, 4, repr(alpha), eos, ids(SRC)).strip().split("\n")
                lt, lt_score = [int(x) for x in toks.split(",") if x], float(score)
                ended += 3 <= len(hf) < new
                print(f"{name} beam 4, length_penalty {alpha}, eos {eos}: {len(hf)} tokens, score transformers "
                      f"{hf_score:.6f} libtensor {lt_score:.6f} (|diff| {abs(hf_score - lt_score):.1e})")
                self.assertEqual(lt, hf, f"{name} alpha {alpha}")
                self.assertLessEqual(abs(lt_score - hf_score), TOL, f"{name} alpha {alpha}")
            self.assertGreater(ended, 0, f"{name}: no best hypothesis of 3 or more tokens ended before max_new_tokens")

    def test_v1_0(self):
        self.check(t5(3, gated=False), "t5-v1.0", [0.0, 1.0, 2.0])

    def test_v1_1(self):
        self.check(t5(4, gated=True), "t5-v1.1", [0.0, 1.0, 2.0])


class ToTransformers(unittest.TestCase):
    def check(self, kind, seed):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, kind)
            run("make", kind, d, seed)
            with open(os.path.join(d, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], "t5")
            model = T5ForConditionalGeneration.from_pretrained(d).eval()
            src, tgt = SRC[:12], TGT
            diff = float(np.abs(lt_logits(d, src, tgt, tmp) - hf_logits(model, src, tgt)).max())
            print(f"libtensor t5 {kind} export in transformers: max |difference| = {diff:.2e}")
            self.assertLessEqual(diff, TOL, kind)

    def test_relu_tied(self):
        self.check("relu", 11)

    def test_gated_untied(self):
        self.check("gated", 12)


class Refusals(unittest.TestCase):
    def refused(self, edit, key):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "t5")
            t5(5, gated=False).save_pretrained(d, safe_serialization=True)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            edit(cfg)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            r = subprocess.run([T5_TOOL, "greedy", d, "2", ids(SRC)], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(key, r.stderr)

    def test_d_kv(self):
        self.refused(lambda c: c.update(d_kv=8), "'d_kv'")

    def test_t5model(self):
        self.refused(lambda c: c.update(architectures=["T5Model"]), "'architectures'")

    def test_umt5(self):
        self.refused(lambda c: c.update(model_type="umt5"), "'model_type'")


if __name__ == "__main__":
    T5_TOOL = sys.argv.pop(1)
    torch.manual_seed(0)
    unittest.main(verbosity=2)
