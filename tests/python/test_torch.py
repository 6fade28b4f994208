"""PyTorch <-> libtensor: a PyTorch GPT and an nn.Transformer trained a few
steps in Python, converted with their AdamW state, then decoded by `generate`
with the same greedy output and logits within 1e-5 of libtensor's; libtensor
checkpoints written by `train` loaded into the PyTorch models with logits
within 1e-5 and the same greedy output; AdamW state both ways."""
import os
os.environ.pop("OPENBLAS_CORETYPE", None)  # Debian's torch with OpenBLAS
import shutil
import tempfile
import unittest

import numpy as np
import torch

import libtensor as lt
from libtensor import torch_models as tm
import ltc

torch.set_num_threads(1)
TOL = 1e-5


def fit(model, opt, steps, batch):
    """steps of opt on the cross-entropy of batch() = (logits [B, T, V], labels [B, T])."""
    for _ in range(steps):
        logits, labels = batch()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


def save_converted(path, model, opt, arch, tok, steps):
    ck = lt.Checkpoint(content="training", config=model.config, tensors=tm.to_libtensor(model.state_dict(), arch),
                       optim=tm.optim_to_libtensor(opt, model, arch), schedule={"step": steps},
                       extra={"tokenizer": tok.serialize()}, library_version="torch " + torch.__version__)
    lt.save(path, ck)
    return ck


class Directions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = tempfile.mkdtemp(prefix="lt-torch-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.d)

    def assert_logits(self, path, config, mine, tgt, src=None):
        ref = ltc.logits(path, config, tgt, src)
        diff = float(np.abs(ref - mine).max())
        print("%s: max |logit difference| %.3g (largest logit %.3g)" % (config["arch"], diff, np.abs(ref).max()))
        self.assertLess(diff, TOL)

    def test_gpt_to_libtensor(self):
        torch.manual_seed(0)
        tok = lt.Tokenizer("byte")
        cfg = tm.default_config("decoder-only", tok.vocab_size, d_model=32, n_heads=4, n_kv_heads=2,
                                n_dec_layers=2, d_ff=64, max_len=48, dropout=0.0)
        m = tm.GPT(cfg)
        opt = torch.optim.AdamW(tm.param_groups(m, 0.01), lr=1e-2)
        data = torch.tensor([tok.encode("hello world, hello libtensor. " * 4)])
        fit(m, opt, 60, lambda: (m(data[:, :40]), data[:, 1:41]))
        p = os.path.join(self.d, "gpt.h5")
        ck = save_converted(p, m, opt, "decoder-only", tok, 60)
        m.eval()
        prompt = tok.encode("hello w")
        with torch.no_grad():
            self.assert_logits(p, ck.config, m(torch.tensor([prompt])).numpy(), [prompt])
        mine = tok.decode(m.generate(prompt, 12)).decode("utf-8", "replace")
        out = ltc.run([ltc.GENERATE, "--checkpoint", p, "--max-len", "12", "hello w"])
        print("GPT greedy: torch %r, generate %r" % (mine, out))
        self.assertEqual(out, ltc.escape(mine) + "\n")
        # train --init-from fine-tunes it: its weights, configuration and tokenizer, a new optimizer
        text = os.path.join(self.d, "more.txt")
        with open(text, "w") as f:
            f.write("hello world, hello libtensor. " * 20)
        log = ltc.run([ltc.TRAIN, "--init-from", p, "--text", text, "--seq-len", "40", "--steps", "2",
                       "--batch", "2", "--eval-every", "0", "--eval-examples", "2", "--gen-tokens", "0",
                       "--threads", "1", "--ckpt-dir", os.path.join(self.d, "tuned")], cwd=self.d)
        self.assertIn("done: 2 steps", log)
        tuned = lt.load(os.path.join(self.d, "tuned", "ckpt-%012d.h5" % 2))
        self.assertEqual(tuned.config, ck.config)
        self.assertEqual(tuned.extra["tokenizer"], tok.serialize())
        # AdamW state back: the same moments and steps as torch's own
        back = tm.optim_from_libtensor(lt.load(p).optim, m, "decoder-only")
        names = dict(m.named_parameters())
        for n, q in names.items():
            a, b = opt.state[q], back.state[q]
            self.assertEqual(float(a["step"]), float(b["step"]))
            torch.testing.assert_close(a["exp_avg_sq"], b["exp_avg_sq"], rtol=0, atol=0)

    def test_transformer_to_libtensor(self):
        torch.manual_seed(1)
        tok = lt.Tokenizer("char", codepoints=[ord(c) for c in "abcdefgh"])
        cfg = tm.default_config("encoder-decoder", tok.vocab_size, d_model=32, n_heads=4, n_kv_heads=4,
                                n_enc_layers=1, n_dec_layers=1, d_ff=64, max_len=16, dropout=0.0)
        m = tm.Seq2Seq(cfg)
        opt = torch.optim.AdamW(tm.param_groups(m, 0.0), lr=1e-2, betas=(0.9, 0.98), eps=1e-9)
        g = torch.Generator().manual_seed(2)

        def copy_batch():  # the copy task: <bos> x -> x <eos>
            src = torch.randint(4, tok.vocab_size, (32, 6), generator=g)
            tgt_in = torch.cat([torch.ones(32, 1, dtype=torch.long), src], 1)
            return m(src, tgt_in), torch.cat([src, torch.full((32, 1), 2)], 1)
        fit(m, opt, 80, copy_batch)
        p = os.path.join(self.d, "s2s.h5")
        ck = save_converted(p, m, opt, "encoder-decoder", tok, 80)
        m.eval()
        src = tok.encode("bcadhg")
        tgt = [1] + tok.encode("bca")
        with torch.no_grad():
            self.assert_logits(p, ck.config, m(torch.tensor([src]), torch.tensor([tgt])).numpy(), [tgt], [src])
        mine = tok.decode(m.generate(src, 10)).decode()
        out = ltc.run([ltc.GENERATE, "--checkpoint", p, "--max-len", "10", "bcadhg"])
        print("nn.Transformer greedy: torch %r, generate %r" % (mine, out))
        self.assertEqual(out, mine + "\n")
        # the in_proj split and merge are inverses, for weights and AdamW state
        sd = tm.from_libtensor(lt.load(p).tensors, "encoder-decoder")
        self.assertEqual(set(sd), set(m.state_dict()))
        for k, v in m.state_dict().items():
            torch.testing.assert_close(sd[k], v, rtol=0, atol=0)
        back = tm.optim_from_libtensor(lt.load(p).optim, m, "encoder-decoder")
        for q in m.parameters():
            torch.testing.assert_close(opt.state[q]["exp_avg"], back.state[q]["exp_avg"], rtol=0, atol=0)

    def test_options(self):
        """Every option the PyTorch models take, on random weights: the logits of libtensor's model agree."""
        tok = lt.Tokenizer("byte")
        ids = [tok.encode("options, all of them")]
        variants = [
            ("decoder-only", dict(norm="rmsnorm", swiglu=True, act="silu", bias=False, tie_embeddings=False)),
            ("decoder-only", dict(pre_norm=False, pos="sinusoidal", act="gelu_tanh", scale_embeddings=True)),
            ("decoder-only", dict(act="relu", n_kv_heads=1, norm_eps=1e-6)),
            ("decoder-only", dict(pos="rope", rope_base=1000.0, norm="rmsnorm", n_kv_heads=2)),
            ("decoder-only", dict(pos="rope", pre_norm=False, act="gelu")),
            ("encoder-decoder", dict(pre_norm=True, act="gelu", pos="learned", tie_embeddings=False)),
        ]
        for i, (arch, over) in enumerate(variants):
            torch.manual_seed(10 + i)
            cfg = tm.default_config(arch, tok.vocab_size, d_model=16, n_heads=4, n_kv_heads=over.pop("n_kv_heads", 4),
                                    n_enc_layers=1, n_dec_layers=2, d_ff=24, max_len=32, dropout=0.0, **over)
            m = (tm.GPT if arch == "decoder-only" else tm.Seq2Seq)(cfg)
            for q in m.parameters():  # not the initial values: norms and biases too
                torch.nn.init.normal_(q, 0.0, 0.3)
            p = os.path.join(self.d, "opt%d.h5" % i)
            lt.save(p, lt.Checkpoint(content="model", config=m.config, tensors=tm.to_libtensor(m.state_dict(), arch)))
            m.eval()
            with torch.no_grad():
                if arch == "decoder-only":
                    self.assert_logits(p, m.config, m(torch.tensor(ids)).numpy(), ids)
                else:
                    self.assert_logits(p, m.config, m(torch.tensor(ids), torch.tensor(ids)).numpy(), ids, ids)

    def test_llama_twin(self):
        """The Llama layout in one call (RoPE, RMSNorm, SwiGLU, GQA, untied head, no biases): trained a few
        steps in PyTorch, its logits at positions after a prefix (pos0 > 0) and greedy output match libtensor's."""
        torch.manual_seed(5)
        tok = lt.Tokenizer("byte")
        cfg = tm.llama_config(tok.vocab_size, d_model=32, n_heads=4, n_kv_heads=2, n_dec_layers=2, d_ff=48,
                              max_len=64, rope_base=500.0)
        self.assertEqual((cfg["pos"], cfg["norm"], cfg["swiglu"], cfg["bias"], cfg["tie_embeddings"]),
                         ("rope", "rmsnorm", 1, 0, 0))
        m = tm.GPT(cfg)
        self.assertNotIn("pos_embed.weight", m.state_dict())
        opt = torch.optim.AdamW(tm.param_groups(m, 0.01), lr=1e-2)
        data = torch.tensor([tok.encode("rotary positions, grouped heads. " * 3)])
        fit(m, opt, 30, lambda: (m(data[:, :40]), data[:, 1:41]))
        p = os.path.join(self.d, "llama.h5")
        ck = save_converted(p, m, opt, "decoder-only", tok, 30)
        m.eval()
        ids = tok.encode("rotary pos")
        with torch.no_grad():
            full = m(torch.tensor([ids]))
            self.assert_logits(p, ck.config, full.numpy(), [ids])
            # pos0: rotating a window that starts at position 3 is rotating each row by its own angle
            q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
            a = tm.rope(q, 3, 500.0)
            b = tm.rope(torch.cat([torch.zeros(1, 2, 3, 8, dtype=torch.float64), q], 2), 0, 500.0)[:, :, 3:]
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        mine = tok.decode(m.generate(ids, 10)).decode("utf-8", "replace")
        out = ltc.run([ltc.GENERATE, "--checkpoint", p, "--max-len", "10", "rotary pos"])
        print("Llama twin greedy: torch %r, generate %r" % (mine, out))
        self.assertEqual(out, ltc.escape(mine) + "\n")

    def test_libtensor_to_torch(self):
        """Checkpoints written by train, loaded into the PyTorch models."""
        corpus = os.path.join(self.d, "c.txt")
        with open(corpus, "w") as f:
            f.write("the cat sat on the mat. the dog ran to the cat. " * 40)
        common = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--batch", "8", "--steps", "8",
                  "--eval-every", "0", "--eval-examples", "2", "--examples", "0", "--gen-tokens", "0", "--threads",
                  "1", "--dropout", "0"]
        runs = {
            "decoder-only": ["--arch", "decoder-only", "--text", corpus, "--tokenizer", "bpe", "--bpe-vocab", "280",
                             "--seq-len", "16", "--max-len", "32", "--layers", "1"],
            "encoder-decoder": ["--arch", "encoder-decoder", "--task", "reverse", "--task-train", "200",
                                "--task-valid", "20", "--task-max-len", "6", "--max-len", "12", "--layers", "2"],
        }
        for arch, args in runs.items():
            run_dir = os.path.join(self.d, arch)
            ltc.run([ltc.TRAIN] + args + common + ["--ckpt-dir", run_dir], cwd=self.d)
            p = os.path.join(run_dir, "ckpt-%012d.h5" % 8)
            ck = lt.load(p)
            tok = ck.tokenizer
            m = (tm.GPT if arch == "decoder-only" else tm.Seq2Seq)(ck.config)
            m.load_state_dict(tm.from_libtensor(ck.tensors, arch))
            m.eval()
            opt = tm.optim_from_libtensor(ck.optim, m, arch)
            self.assertEqual(len(opt.state), len(list(m.parameters())))
            text = "the cat" if arch == "decoder-only" else "abcde"
            ids = tok.encode(text)
            with torch.no_grad():
                if arch == "decoder-only":
                    self.assert_logits(p, ck.config, m(torch.tensor([ids])).numpy(), [ids])
                    mine = m.generate(ids, 8)
                else:
                    tgt = [1] + ids[:3]
                    self.assert_logits(p, ck.config, m(torch.tensor([ids]), torch.tensor([tgt])).numpy(), [tgt],
                                       [ids])
                    mine = m.generate(ids, 8)
            out = ltc.run([ltc.GENERATE, "--checkpoint", p, "--max-len", "8", text])
            self.assertEqual(out, ltc.escape(tok.decode(mine).decode("utf-8", "replace")) + "\n", arch)
            # and back: the PyTorch state converted again equals the file, bit for bit
            again = tm.to_libtensor(m.state_dict(), arch)
            self.assertEqual(set(again), set(ck.tensors))
            for k in again:
                np.testing.assert_array_equal(again[k], ck.tensors[k], k)


if __name__ == "__main__":
    unittest.main()
