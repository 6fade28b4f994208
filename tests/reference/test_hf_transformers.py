"""libtensor's GPT-2, Llama, Qwen2 and Mistral directories against Hugging Face
transformers itself (the reference environment; docs/interop.md, docs/testing.md).

  transformers -> libtensor: tiny random GPT2LMHeadModel (tied head; an
      untied one is refused, naming the key), LlamaForCausalLM (GQA, tied
      and untied heads; Llama 3's and linear RoPE scaling with rope_theta
      500000), Qwen2ForCausalLM (q/k/v biases, tied and untied) and
      MistralForCausalLM (sliding window 8, shorter than the 69 positions
      decoded), and a Qwen2 saved in shards (max_shard_size, so
      model.safetensors.index.json) made from their configs, their norms and
      biases randomised too, written with save_pretrained (safetensors);
      libtensor loads each (tests/interop/hf_tool logits) with logits within
      1e-4 of transformers' in f32, and its greedy decoding (KV cache) makes
      the same 64 tokens as generate(do_sample=False); prompts of different
      lengths decoded as one left-padded batch make, row for row, the tokens
      of transformers' left-padded generate and of each prompt alone.
  libtensor -> transformers: hf_tool make exports a tiny random model of each
      layout (gpt2, llama, qwen2, mistral, llama3); transformers'
      from_pretrained loads it with the same logits.
  beam search: hf_tool beam (lt_generate, 4 beams, early stopping) against
      generate(num_beams=4, early_stopping=True, length_penalty=0 to 2) on
      random GPT-2, Llama and Qwen2: the same tokens, scores within 1e-4.
  bf16: tiny GPT-2 and Llama loaded in bf16 by both (libtensor: --weights bf16), logits within
      BF16_TOL of the largest |logit|.
  refusals: Qwen2 with use_sliding_window, RoPE types libtensor does not run
      ("dynamic", "yarn"), each naming the key.

    python test_hf_transformers.py HF_TOOL     (ctest: reference_hf_transformers)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from hf_common import randomize as randomize_with  # noqa: E402  (first: offline settings)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

HF_TOOL = None
TOL = 1e-4
NEW = 64


def randomize(model, seed):
    """GPT-2's and Llama's norms (ln_*, *norm*) around 1, the rest N(0, 0.3^2)."""
    return randomize_with(model, seed, lambda n: "norm" in n or ".ln_" in n or n.startswith("ln_"))


def gpt2(seed, tied=True):
    cfg = GPT2Config(vocab_size=61, n_positions=96, n_embd=32, n_layer=2, n_head=4, n_inner=48,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)
    return randomize(GPT2LMHeadModel(cfg), seed).eval()


def llama(seed, tied=False):
    cfg = LlamaConfig(vocab_size=67, hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=tied,
                      bos_token_id=0, eos_token_id=0, attention_bias=False, mlp_bias=False)
    return randomize(LlamaForCausalLM(cfg), seed).eval()


def llama_scaled(seed, rope_scaling):
    """Llama with head size 16 (wavelengths 6.3 to 3e4 around original_max_position_embeddings 32, so that
    Llama 3's rule keeps, scales and blends frequencies) and rope_theta 500000 (read from rope_parameters)."""
    cfg = LlamaConfig(vocab_size=67, hidden_size=64, intermediate_size=56, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=500000.0, rope_scaling=rope_scaling, tie_word_embeddings=False,
                      bos_token_id=0, eos_token_id=0)
    return randomize(LlamaForCausalLM(cfg), seed).eval()


def qwen2(seed, tied=False, **kw):
    cfg = Qwen2Config(vocab_size=71, hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0,
                      **kw)
    return randomize(Qwen2ForCausalLM(cfg), seed).eval()


def mistral(seed, window=8):
    cfg = MistralConfig(vocab_size=73, hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=window, tie_word_embeddings=False,
                        bos_token_id=0, eos_token_id=0)
    return randomize(MistralForCausalLM(cfg), seed).eval()


def lt_logits(d, ids, tmp):
    out = os.path.join(tmp, "logits.safetensors")
    subprocess.run([HF_TOOL, "logits", d, out, ",".join(map(str, ids))], check=True)
    return load_file(out)["logits"]


def lt_greedy(d, n, ids):
    r = subprocess.run([HF_TOOL, "greedy", d, str(n), ",".join(map(str, ids))], check=True,
                       capture_output=True, text=True)
    return [int(x) for x in r.stdout.strip().split(",")]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits.numpy()


# Whole-model bf16: libtensor loaded with bf16 weights (hf_tool under LT_TOOL_WEIGHTS=bf16: products on
# oneDNN's bf16 matmul from 16 rows on, norms and softmax in f32) against transformers loaded with
# torch_dtype=bfloat16 (everything in bf16): the largest logit difference at most BF16_TOL of the largest
# |logit| (docs/decoding.md, "Whole-model bf16").
BF16_TOL = 0.05


class Bf16(unittest.TestCase):
    def test_bf16_against_transformers(self):
        ids = [3, 17, 5, 42, 8, 1, 29, 11, 7, 2, 19, 33, 4, 9, 21, 6, 13, 27, 10, 15]  # 20 rows: oneDNN's path
        for name, model in (("gpt2", gpt2(11)), ("llama", llama(12))):
            with tempfile.TemporaryDirectory() as tmp:
                d = os.path.join(tmp, name)
                model.save_pretrained(d, safe_serialization=True)
                want32 = hf_logits(model, ids)
                m16 = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.bfloat16).eval()
                with torch.no_grad():
                    want16 = m16(torch.tensor([ids])).logits.float().numpy()
                os.environ["LT_TOOL_WEIGHTS"] = "bf16"
                try:
                    got = lt_logits(d, ids, tmp)
                finally:
                    del os.environ["LT_TOOL_WEIGHTS"]
                amax = float(np.abs(want32).max())
                d16, dlt, dhf = (float(np.abs(got - want16).max()), float(np.abs(got - want32).max()),
                                 float(np.abs(want16 - want32).max()))
                print(f"{name} bf16: max |libtensor - transformers bf16| = {d16:.4f}, libtensor bf16 - f32 {dlt:.4f}, "
                      f"transformers bf16 - f32 {dhf:.4f}, max |logit| {amax:.3f}")
                self.assertLessEqual(d16, BF16_TOL * amax, name)


class FromTransformers(unittest.TestCase):
    def check(self, model, name, max_shard_size=None):
        ids = [3, 17, 5, 42, 8, 1, 29, 11, 7, 2, 19, 33]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            if max_shard_size:
                model.save_pretrained(d, safe_serialization=True, max_shard_size=max_shard_size)
                with open(os.path.join(d, "model.safetensors.index.json")) as f:
                    shards = set(json.load(f)["weight_map"].values())
                self.assertGreater(len(shards), 2)
                self.assertFalse(os.path.exists(os.path.join(d, "model.safetensors")))
                print(f"{name}: {len(shards)} shards")
            else:
                model.save_pretrained(d, safe_serialization=True)
            got, want = lt_logits(d, ids, tmp), hf_logits(model, ids)
            self.assertEqual(got.shape, want.shape)
            diff = float(np.abs(got - want).max())
            print(f"{name}: logits [1, {len(ids)}, {want.shape[-1]}], max |libtensor - transformers| = {diff:.2e}")
            self.assertLessEqual(diff, TOL, name)
            prompt = ids[:5]
            model.generation_config.eos_token_id = None  # 64 tokens whatever they are: no end token, as hf_tool's
            with torch.no_grad():
                hf = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                    use_cache=True, pad_token_id=0)[0, len(prompt):].tolist()
            lt = lt_greedy(d, NEW, prompt)
            first = next((i for i, (a, b) in enumerate(zip(lt, hf)) if a != b), None)
            print(f"{name}: greedy {NEW} tokens, first difference at {first}")
            self.assertEqual(lt, hf, name)

    def check_ragged(self, model, name):
        """Prompts of different lengths as one left-padded batch: libtensor's batch
        (lt_generate_left_pad, per-row positions and padding mask) against
        transformers' left-padded generate (attention_mask; position_ids from it)."""
        prompts = [[3, 17, 5, 42, 8, 1, 29], [11], [7, 2, 19, 33], [23, 4, 4, 9, 30]]
        P = max(map(len, prompts))
        ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
        n = 24
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            with torch.no_grad():
                hf = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                    use_cache=True, pad_token_id=0)[:, P:].tolist()
            r = subprocess.run([HF_TOOL, "greedy", d, str(n), ";".join(",".join(map(str, p)) for p in prompts)],
                               check=True, capture_output=True, text=True)
            lt = [[int(x) for x in line.split(",")] for line in r.stdout.strip().split("\n")]
            alone = [lt_greedy(d, n, p) for p in prompts]
            print(f"{name}: {len(prompts)} prompts of lengths {list(map(len, prompts))}, left-padded: {n} greedy tokens "
                  f"each, {'identical' if lt == hf else 'DIFFERENT'} to transformers', "
                  f"{'identical' if lt == alone else 'DIFFERENT'} to each row alone")
            self.assertEqual(lt, alone, name)
            self.assertEqual(lt, hf, name)

    def test_gpt2_ragged_batch(self):
        self.check_ragged(gpt2(5), "gpt2")

    def test_llama_ragged_batch(self):
        self.check_ragged(llama(6), "llama")

    def test_gpt2_tied(self):
        self.check(gpt2(1), "gpt2")

    def test_gpt2_untied_refused(self):
        """GPT-2 with its own head is refused at load, naming the key (docs/interop.md)."""
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "gpt2-untied")
            gpt2(2, tied=False).save_pretrained(d, safe_serialization=True)
            r = subprocess.run([HF_TOOL, "logits", d, os.path.join(tmp, "x"), "1,2"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("tie_word_embeddings", r.stderr)

    def test_llama_gqa_untied(self):
        self.check(llama(3), "llama")

    def test_llama_tied(self):
        self.check(llama(4, tied=True), "llama-tied")

    def test_llama3_rope_scaling(self):
        self.check(llama_scaled(5, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
                   "llama3-rope")

    def test_llama_linear_rope_scaling(self):
        self.check(llama_scaled(6, {"rope_type": "linear", "factor": 2.5}), "llama-linear-rope")

    def test_qwen2_untied(self):
        self.check(qwen2(7), "qwen2")

    def test_qwen2_tied(self):
        self.check(qwen2(8, tied=True), "qwen2-tied")

    def test_mistral_sliding_window(self):
        self.check(mistral(9), "mistral")

    def test_qwen2_sharded(self):
        """save_pretrained past max_shard_size: model.safetensors.index.json and its shards."""
        self.check(qwen2(14), "qwen2-sharded", max_shard_size="20KB")

    def test_mistral_no_window(self):
        self.check(mistral(10, window=None), "mistral-no-window")

    def refused(self, model, name, key):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            r = subprocess.run([HF_TOOL, "logits", d, os.path.join(tmp, "x"), "1,2"], capture_output=True, text=True)
            print(f"{name}: {r.stderr.strip()}")
            self.assertEqual(r.returncode, 1)
            self.assertIn(key, r.stderr)

    def test_qwen2_sliding_window_refused(self):
        self.refused(qwen2(11, use_sliding_window=True, sliding_window=8, max_window_layers=1), "qwen2-window",
                     "use_sliding_window")

    def test_rope_types_refused(self):
        self.refused(llama_scaled(12, {"rope_type": "dynamic", "factor": 2.0}), "llama-dynamic", "rope_type")
        self.refused(llama_scaled(13, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}),
                     "llama-yarn", "rope_type")


def lt_beam(d, n, k, alpha, eos, ids):
    r = subprocess.run([HF_TOOL, "beam", d, str(n), str(k), repr(alpha), str(eos), ",".join(map(str, ids))],
                       check=True, capture_output=True, text=True)
    toks, score = r.stdout.strip().split("\n")
    return [int(x) for x in toks.split(",") if x], float(score)


class BeamSearch(unittest.TestCase):
    """lt_generate's beam search (4 beams, early stopping: an input is done with 4 finished hypotheses)
    against generate(num_beams=4, early_stopping=True, length_penalty=alpha): the best hypothesis's
    tokens identical, its score (sum of log p / generated length^alpha) within 1e-4. The end token is
    one greedy decoding makes often but not among its first six (nor in the prompt), so that hypotheses end, after a
    few tokens, before max_new_tokens."""
    def check(self, model, name, alphas, new=24):
        prompt = [3, 17, 5, 42, 8]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            model.generation_config.eos_token_id = None
            with torch.no_grad():
                greedy = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                                        pad_token_id=0)[0, len(prompt):].tolist()
            late = [t for t in greedy if t not in greedy[:6] + prompt] or greedy  # longer hypotheses
            eos = max(sorted(set(late)), key=late.count)
            ended = 0
            for alpha in alphas:
                with torch.no_grad():
                    out = model.generate(torch.tensor([prompt]), num_beams=4, early_stopping=True,
                                         length_penalty=alpha, max_new_tokens=new, do_sample=False, eos_token_id=eos,
                                         pad_token_id=eos, output_scores=True, return_dict_in_generate=True)
                hf = out.sequences[0, len(prompt):].tolist()
                hf = hf[:hf.index(eos) + 1] if eos in hf else hf
                hf_score = float(out.sequences_scores[0])
                lt, lt_score = lt_beam(d, new, 4, alpha, eos, prompt)
                ended += 3 <= len(hf) < new
                print(f"{name} beam 4, length_penalty {alpha}, eos {eos}: {len(hf)} tokens, score transformers "
                      f"{hf_score:.6f} libtensor {lt_score:.6f} (|diff| {abs(hf_score - lt_score):.1e})")
                self.assertEqual(lt, hf, f"{name} alpha {alpha}")
                self.assertLessEqual(abs(lt_score - hf_score), TOL, f"{name} alpha {alpha}")
            self.assertGreater(ended, 0, f"{name}: no best hypothesis of 3 or more tokens ended before max_new_tokens")

    def test_llama(self):
        self.check(llama(21), "llama", [0.0, 1.0, 2.0])

    def test_gpt2(self):
        self.check(gpt2(24), "gpt2", [0.0, 0.6, 1.5])

    def test_qwen2(self):
        self.check(qwen2(23), "qwen2", [1.0])

    def test_mistral(self):
        """window 8 < prompt + 24 new tokens: the windowed cache is reordered with the beams"""
        self.check(mistral(25), "mistral", [0.0, 1.0])


class ToTransformers(unittest.TestCase):
    def check(self, family, seed):
        ids = [1, 4, 9, 16, 25, 36, 49, 13, 8]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, family)
            subprocess.run([HF_TOOL, "make", family, d, str(seed)], check=True)
            with open(os.path.join(d, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], "llama" if family == "llama3" else family)
            model = AutoModelForCausalLM.from_pretrained(d).eval()
            diff = float(np.abs(lt_logits(d, ids, tmp) - hf_logits(model, ids)).max())
            print(f"libtensor {family} export in transformers: max |difference| = {diff:.2e}")
            self.assertLessEqual(diff, TOL, family)

    def test_gpt2(self):
        self.check("gpt2", 11)

    def test_llama(self):
        self.check("llama", 12)

    def test_qwen2(self):
        self.check("qwen2", 13)

    def test_mistral(self):
        self.check("mistral", 14)

    def test_llama3(self):
        self.check("llama3", 15)


if __name__ == "__main__":
    HF_TOOL = sys.argv.pop(1)
    torch.manual_seed(0)
    unittest.main(verbosity=2)
