"""libtensor's GGUF files against llama.cpp itself (llama-cpp-python in the
reference environment; docs/interop.md, docs/testing.md).

  libtensor -> llama.cpp: hf_tool make-gguf writes a tiny random GPT-2 and
      Llama (GQA, untied head) with the byte tokenizer; `export --format gguf
      --weights W` writes each in F32, BF16 (and Q8_0, Q4_0 when libtensor
      writes them); llama.cpp loads every file (its vocabulary too: the
      prompt text tokenizes to libtensor's ids), its logits for fixed token
      ids agree with libtensor's on the same file within TOL[W], and greedy
      decoding gives the same tokens for F32; for BF16 the same tokens, or a
      first difference at a near-tie (teacher-forced on llama.cpp's tokens,
      llama.cpp's margin between its token and libtensor's is within the
      logits' disagreement on that row); for Q8_0 and Q4_0 the agreement is
      printed.
  gguf package -> libtensor: a Llama GGUF written by the gguf Python package
      (F32, F16 and BF16 tensors) reads back in libtensor with the same
      tensors (hf_tool gguf-tensors), and libtensor's logits on it agree with
      llama.cpp's.

    python test_gguf_llama.py HF_TOOL EXPORT     (ctest: reference_gguf_llama)

The C side runs with one thread (LT_NUM_THREADS=1), llama.cpp with 2.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from safetensors.numpy import load_file

import gguf

try:
    from llama_cpp import Llama
except ImportError:  # a reference environment from before the lock had it: ./do.sh reference installs it
    print("reference_gguf_llama: llama-cpp-python is not installed (./do.sh reference); skipped")
    sys.exit(77)

HF_TOOL = EXPORT = None
# max |logit difference| / max |logit|, per weights type (measured values
# are printed; docs/interop.md records them). F32: the f32 rounding of two
# implementations, and for GPT-2 llama.cpp's GELU table of f16 values. BF16,
# Q8_0, Q4_0: llama.cpp also rounds the activations (to bf16, to Q8_0
# blocks), libtensor keeps them f32.
TOL = {"f32": 1e-4, "bf16": 3e-2, "q8_0": 1e-1, "q4_0": 1.5e-1}


def tol(family, w):
    return 1e-3 if (family, w) == ("gpt2", "f32") else TOL[w]
NEW = 32
PROMPT = [1, 76, 108, 105, 112, 36, 4 + ord(" "), 120, 4 + ord("a"), 4 + ord("b")]


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{args[0]} {args[1]}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def llama(path):
    kw = dict(model_path=path, n_ctx=128, n_batch=128, n_threads=2, logits_all=True, verbose=False, seed=0)
    try:  # the KV cache in f32, so that only the weights and llama.cpp's kernels differ from libtensor
        return Llama(type_k=0, type_v=0, **kw)
    except TypeError:
        return Llama(**kw)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


def llama_greedy(llm, ids, n):
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out


def lt_logits(path, ids, tmp):
    out = os.path.join(tmp, "logits.safetensors")
    run(HF_TOOL, "logits", path, out, ",".join(map(str, ids)))
    return load_file(out)["logits"][0].astype(np.float64)


def lt_greedy(path, ids, n):
    return [int(t) for t in run(HF_TOOL, "greedy", path, n, ",".join(map(str, ids))).strip().split(",")]


def weights_written():
    return ["f32", "bf16", "q8_0", "q4_0"]


class LibtensorToLlamaCpp(unittest.TestCase):
    def check(self, family):
        failures = []
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, family)
            run(HF_TOOL, "make-gguf", family, d, 5)
            for w in weights_written():
                path = os.path.join(tmp, f"{family}-{w}.gguf")
                run(EXPORT, "--checkpoint", d, "--format", "gguf", "--weights", w, "--out", path)
                llm = llama(path)
                # llama.cpp's vocabulary: the byte tokenizer's 260 ids, text to the same ids
                self.assertEqual(llm.n_vocab(), 260)
                self.assertEqual(llm.tokenize(b"hi ab", add_bos=False, special=False), [4 + c for c in b"hi ab"])
                ref = llama_logits(llm, PROMPT)
                got = lt_logits(path, PROMPT, tmp)
                self.assertEqual(ref.shape, got.shape)
                rel = float(np.abs(ref - got).max() / np.abs(ref).max())
                a = llama_greedy(llm, PROMPT, NEW)
                b = lt_greedy(path, PROMPT, NEW)
                first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), NEW)
                # teacher-forced on llama.cpp's tokens: where libtensor's choice differs, llama.cpp's own margin
                # between the two tokens must lie within the logits' disagreement on that row (a near-tie)
                seq = PROMPT + a
                ref_s, got_s = llama_logits(llm, seq), lt_logits(path, seq, tmp)
                forced, ties_ok = 0, True
                for t in range(NEW):
                    row = len(PROMPT) - 1 + t
                    mine = int(np.argmax(got_s[row]))
                    if mine == a[t]:
                        forced += 1
                        continue
                    margin = ref_s[row, a[t]] - ref_s[row, mine]
                    ties_ok = ties_ok and margin <= 2 * np.abs(ref_s[row] - got_s[row]).max()
                print(f"gguf {family} {w}: logits max |diff| / max |logit| = {rel:.2e} (tolerance {tol(family, w):g}); "
                      f"greedy {NEW} tokens identical up to {first}; teacher-forced {forced}/{NEW} equal"
                      f"{'' if forced == NEW else ', the others near-ties' if ties_ok else ', NOT near-ties'}")
                if rel >= tol(family, w):
                    failures.append(f"{w}: logits {rel:.2e}")
                if w == "f32" and a != b:
                    failures.append(f"{w}: greedy tokens differ at {first}")
                if w == "bf16" and a != b and not ties_ok:
                    failures.append(f"{w}: greedy tokens differ at {first}, and not at a near-tie")
                del llm
        self.assertEqual(failures, [], family)

    def test_gpt2(self):
        self.check("gpt2")

    def test_llama(self):
        self.check("llama")


class GgufPackageToLibtensor(unittest.TestCase):
    def test_llama_written_by_gguf(self):
        rng = np.random.default_rng(3)
        V, C, L, H, KV, FF, HS = 260, 64, 2, 4, 2, 128, 16
        tensors = {"token_embd.weight": (V, C), "output_norm.weight": (C,), "output.weight": (V, C)}
        for i in range(L):
            tensors.update({f"blk.{i}.attn_norm.weight": (C,), f"blk.{i}.attn_q.weight": (C, C),
                            f"blk.{i}.attn_k.weight": (KV * HS, C), f"blk.{i}.attn_v.weight": (KV * HS, C),
                            f"blk.{i}.attn_output.weight": (C, C), f"blk.{i}.ffn_norm.weight": (C,),
                            f"blk.{i}.ffn_gate.weight": (FF, C), f"blk.{i}.ffn_up.weight": (FF, C),
                            f"blk.{i}.ffn_down.weight": (C, FF)})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "py.gguf")
            w = gguf.GGUFWriter(path, "llama")
            w.add_context_length(128)
            w.add_embedding_length(C)
            w.add_block_count(L)
            w.add_feed_forward_length(FF)
            w.add_head_count(H)
            w.add_head_count_kv(KV)
            w.add_layer_norm_rms_eps(1e-5)
            w.add_rope_freq_base(10000.0)
            w.add_rope_dimension_count(HS)
            w.add_tokenizer_model("none")
            w.add_vocab_size(V)
            want = {}
            for k, (name, shape) in enumerate(tensors.items()):
                x = (1.0 + 0.2 * rng.standard_normal(shape) if "norm" in name else 0.3 * rng.standard_normal(shape))
                x = x.astype(np.float32)
                kind = ["f32", "f16", "bf16"][k % 3] if len(shape) == 2 else "f32"
                if kind == "f16":
                    x = x.astype(np.float16)
                    w.add_tensor(name, x)
                    want[name] = x.astype(np.float32)
                elif kind == "bf16":
                    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16)
                    w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
                    want[name] = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.BF16).astype(np.float32)
                else:
                    w.add_tensor(name, x)
                    want[name] = x
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            out = os.path.join(tmp, "back.safetensors")
            run(HF_TOOL, "gguf-tensors", path, out)
            got = load_file(out)
            self.assertEqual(sorted(got), sorted(want))
            for name in want:
                self.assertEqual(got[name].shape, want[name].shape, name)
                self.assertTrue(np.array_equal(got[name], want[name]), f"{name} differs")
            llm = llama(path)
            ids = [3, 17, 250, 9, 100, 42, 7, 0, 199]
            ref = llama_logits(llm, ids)
            lt = lt_logits(path, ids, tmp)
            rel = float(np.abs(ref - lt).max() / np.abs(ref).max())
            print(f"gguf package Llama (F32, F16, BF16 tensors): {len(want)} tensors equal in libtensor; logits "
                  f"against llama.cpp max |diff| / max |logit| = {rel:.2e}")
            self.assertLess(rel, 1e-2)


if __name__ == "__main__":
    HF_TOOL, EXPORT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
