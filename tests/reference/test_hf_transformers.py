"""libtensor's GPT-2 and Llama directories against Hugging Face transformers
itself (the reference environment; docs/interop.md, docs/testing.md).

  transformers -> libtensor: tiny random GPT2LMHeadModel (tied head; an
      untied one is refused, naming the key) and LlamaForCausalLM (GQA, tied
      and untied heads) made from their configs, their norms and
      biases randomised too, written with save_pretrained (safetensors);
      libtensor loads each (tests/interop/hf_tool logits) with logits within
      1e-4 of transformers' in f32, and its greedy decoding (KV cache) makes
      the same 64 tokens as generate(do_sample=False); prompts of different
      lengths decoded as one left-padded batch make, row for row, the tokens
      of transformers' left-padded generate and of each prompt alone.
  libtensor -> transformers: hf_tool make exports a tiny random model of each
      layout; transformers' from_pretrained loads it with the same logits.

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
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

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


class FromTransformers(unittest.TestCase):
    def check(self, model, name):
        ids = [3, 17, 5, 42, 8, 1, 29, 11, 7, 2, 19, 33]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            got, want = lt_logits(d, ids, tmp), hf_logits(model, ids)
            self.assertEqual(got.shape, want.shape)
            diff = float(np.abs(got - want).max())
            print(f"{name}: logits [1, {len(ids)}, {want.shape[-1]}], max |libtensor - transformers| = {diff:.2e}")
            self.assertLessEqual(diff, TOL, name)
            prompt = ids[:5]
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


class ToTransformers(unittest.TestCase):
    def check(self, family, seed):
        ids = [1, 4, 9, 16, 25, 36, 49, 13, 8]
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, family)
            subprocess.run([HF_TOOL, "make", family, d, str(seed)], check=True)
            with open(os.path.join(d, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], family)
            model = AutoModelForCausalLM.from_pretrained(d).eval()
            diff = float(np.abs(lt_logits(d, ids, tmp) - hf_logits(model, ids)).max())
            print(f"libtensor {family} export in transformers: max |difference| = {diff:.2e}")
            self.assertLessEqual(diff, TOL, family)

    def test_gpt2(self):
        self.check("gpt2", 11)

    def test_llama(self):
        self.check("llama", 12)


if __name__ == "__main__":
    HF_TOOL = sys.argv.pop(1)
    torch.manual_seed(0)
    unittest.main(verbosity=2)
