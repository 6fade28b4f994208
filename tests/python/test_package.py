"""python/libtensor without torch: tokenizers against the C library's ids,
tokenizer.json against the same ids, checkpoints Python -> C -> Python (a
Python-written copy of a training checkpoint resumes bit-exactly under
`train --resume`), the seal, h5py's bool attributes, and safetensors."""
import os
os.environ.pop("OPENBLAS_CORETYPE", None)  # before numpy loads OpenBLAS (Debian's torch needs this)
import json
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import libtensor as lt
from libtensor import safetensors as st
from libtensor.tokenizer import hf_encode
import ltc

# Text whose pieces exercise every rule of docs/datasets.md: classes, a space
# before each class, runs of whitespace (with and without a last space), long
# ASCII runs (the 128-byte cut), non-ASCII letters, controls.
CORPUS = ("The quick brown fox jumps over the lazy dog. 1234567890 !!?? a  b   c\n\n the\tend \r\n"
          "caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600 emoji, x=y+z*(w-1); \"quoted\" 'single' #tag @user\n"
          "\x01\x02 ctrl \x7f del " + "a" * 300 + " " + "7" * 200 + " " + "-" * 150 + " end   \n  \t "
          "numbers 3.14159 and 2,718 and 1e-9; the the the the dog dog dog ran ran ran\n") * 3
# Only for the encoders (tokenizer.json's regex counts characters where the
# tokenizer counts bytes; docs/datasets.md says so): runs over 128 bytes of
# whitespace or of letters with multi-byte characters, and invalid UTF-8.
BYTES_ONLY = ["\u00e9" * 100, " " * 300 + "x", "\t" * 200, "\u4e2d" * 60 + "abc"]


class Tokenizers(unittest.TestCase):
    def check(self, kind, build_text):
        c = ltc.CTokenizer(kind, build_text.encode())
        blob = c.serialize()
        py = lt.Tokenizer.deserialize(blob)
        self.assertEqual(py.serialize(), blob)
        lines = CORPUS.splitlines(True) + [CORPUS] + BYTES_ONLY
        for text in lines:
            self.assertEqual(py.encode(text), c.encode(text.encode()), "%s: %r" % (kind, text[:40]))
        if kind != "char":
            raw = b"\xff\xfe invalid \xc3 utf-8 \x00 nul"
            self.assertEqual(py.encode(raw), c.encode(raw))
            self.assertEqual(py.decode(py.encode(raw)), raw)
        j = json.loads(c.to_json())
        for text in CORPUS.splitlines(True) + [CORPUS]:
            self.assertEqual(hf_encode(j, text), c.encode(text.encode()), "%s json: %r" % (kind, text[:40]))
        back = lt.Tokenizer.from_json(j)
        self.assertEqual((back.kind, back.merges, back.codepoints), (py.kind, py.merges, py.codepoints))
        return py

    def test_byte(self):
        self.check("byte", "")

    def test_char(self):
        t = self.check("char", CORPUS[:60])
        self.assertTrue(lt.tokenizer.UNK in t.encode(CORPUS), "no <unk>")  # characters the vocabulary lacks

    def test_bpe(self):
        t = self.check("bpe", CORPUS)
        self.assertGreater(len(t.merges), 50)
        self.assertEqual(t.decode(t.encode(CORPUS)), CORPUS.encode())

    def test_bad_buffer(self):
        blob = bytearray(ltc.CTokenizer("bpe", CORPUS.encode()).serialize())
        blob[40] ^= 1
        with self.assertRaises(lt.TokenizerError):
            lt.Tokenizer.deserialize(bytes(blob))


def train_lm(d, steps, extra=()):
    text = os.path.join(d, "c.txt")
    with open(text, "w") as f:
        f.write(CORPUS * 4)
    ltc.run([ltc.TRAIN, "--arch", "decoder-only", "--text", text, "--tokenizer", "bpe", "--bpe-vocab", "300",
             "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--seq-len", "16", "--max-len", "32",
             "--batch", "4", "--steps", str(steps), "--ckpt-every", "3", "--keep", "0", "--eval-every", "0",
             "--eval-examples", "2", "--gen-tokens", "4", "--threads", "1", "--ckpt-dir", os.path.join(d, "run")]
            + list(extra), cwd=d)
    return os.path.join(d, "run")


class Checkpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = tempfile.mkdtemp(prefix="lt-py-")
        cls.run_dir = train_lm(cls.d, 6)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.d)

    def path(self, step):
        return os.path.join(self.run_dir, "ckpt-%012d.h5" % step)

    def test_read(self):
        ck = lt.load(self.path(3))
        self.assertEqual(ck.content, "training")
        self.assertEqual(ck.step, 3)
        self.assertEqual(ck.config["arch"], "decoder-only")
        self.assertIsInstance(ck.config["pre_norm"], int)
        self.assertEqual(ck.tensors["embed.weight"].shape, (ck.config["vocab_size"], 16))
        self.assertEqual(ck.optim["kind"], "adamw")
        s = ck.optim["state"]["decoder.layers.0.linear1.weight"]
        self.assertEqual((s["exp_avg"].shape, s["step"]), ((32, 16), 3))
        self.assertEqual(ck.tokenizer.kind, "bpe")
        self.assertEqual(ck.tokenizer.vocab_size, ck.config["vocab_size"])
        self.assertEqual(ck.settings()["seq-len"], 16)
        self.assertEqual(ck.metrics["loader.index"], 3)
        m = lt.read_metrics(os.path.join(self.run_dir, "metrics.csv"))
        self.assertEqual(m["step"][-1], 6)

    def test_python_c_python(self):
        """Python rewrites a C checkpoint; train --resume continues it to the
        same bits as the uninterrupted run; Python reads the result."""
        ck = lt.load(self.path(3))
        ck.library_version = "python-test"
        other = os.path.join(self.d, "py")
        os.makedirs(other)
        lt.save(os.path.join(other, "ckpt-%012d.h5" % 3), ck)
        ltc.run([ltc.TRAIN, "--resume", other, "--threads", "1"], cwd=self.d)
        mine, ref = lt.load(os.path.join(other, "ckpt-%012d.h5" % 6)), lt.load(self.path(6))
        self.assertEqual(list(mine.tensors), list(ref.tensors))
        for k in ref.tensors:
            np.testing.assert_array_equal(mine.tensors[k], ref.tensors[k], k)
        for k, s in ref.optim["state"].items():
            for leaf in s:
                np.testing.assert_array_equal(mine.optim["state"][k][leaf], s[leaf], k + "." + leaf)
        self.assertEqual(mine.schedule, ref.schedule)
        self.assertEqual(mine.rng, ref.rng)

    def test_generate_and_bools(self):
        """generate reads a Python-written file, and one whose bools h5py wrote as bools (an HDF5 enum)."""
        ref = ltc.run([ltc.GENERATE, "--checkpoint", self.path(6), "--max-len", "8", "the dog"])
        p = os.path.join(self.d, "bools.h5")
        lt.save(p, lt.load(self.path(6)))
        with h5py.File(p, "r+") as f:
            for k in ("pre_norm", "bias", "tie_embeddings", "swiglu", "scale_embeddings"):
                f["model"].attrs[k] = bool(f["model"].attrs[k])
            self.assertEqual(f["model"].attrs.get_id("pre_norm").get_type().get_class(), h5py.h5t.ENUM)
        with self.assertRaises(lt.CheckpointError):
            lt.verify(p)  # changed after sealing
        lt.seal(p)
        self.assertEqual(ltc.run([ltc.GENERATE, "--checkpoint", p, "--max-len", "8", "the dog"]), ref)
        self.assertEqual(lt.load(p).config["pre_norm"], 1)

    def test_seal_faults(self):
        p = os.path.join(self.d, "flip.h5")
        shutil.copy(self.path(3), p)
        lt.verify(p)
        with open(p, "r+b") as f:
            f.seek(2000)
            b = f.read(1)
            f.seek(2000)
            f.write(bytes([b[0] ^ 4]))
        with self.assertRaisesRegex(lt.CheckpointError, "checksum mismatch"):
            lt.verify(p)
        with open(p, "r+b") as f:
            f.truncate(3000)
        with self.assertRaisesRegex(lt.CheckpointError, "truncated"):
            lt.load(p)


class Safetensors(unittest.TestCase):
    def test_roundtrip_and_checks(self):
        d = tempfile.mkdtemp(prefix="lt-st-")
        try:
            rng = np.random.default_rng(0)
            t = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32), "b": np.arange(6, dtype=np.int64),
                 "c": rng.standard_normal(4), "h": rng.standard_normal((2, 2)).astype(np.float16),
                 "z": np.zeros((0, 3), np.float32), "s": np.array(2.5, np.float32),
                 "bf": np.array([1.0, -2.5, 3.140625, 1e-3], np.float32)}
            p = os.path.join(d, "m.safetensors")
            st.save(p, t, metadata={"format": "pt"}, dtypes={"bf": "BF16"})
            back, meta = st.load(p)
            self.assertEqual(meta, {"format": "pt"})
            self.assertEqual(list(back), list(t))
            for k in t:
                if k == "bf":
                    np.testing.assert_allclose(back[k], t[k], rtol=2 ** -8)
                else:
                    np.testing.assert_array_equal(back[k], t[k])
                    self.assertEqual(back[k].dtype, t[k].dtype)
            raw = open(p, "rb").read()
            n = int.from_bytes(raw[:8], "little")
            head = json.loads(raw[8:8 + n])
            head["b"]["data_offsets"][1] -= 8  # a gap before the next tensor, or a short tensor
            h = json.dumps(head).encode()
            h += b" " * (-len(h) % 8)
            bad = os.path.join(d, "bad.safetensors")
            open(bad, "wb").write(len(h).to_bytes(8, "little") + h + raw[8 + n:])
            with self.assertRaises(st.SafetensorsError):
                st.load(bad)
            open(bad, "wb").write((1 << 40).to_bytes(8, "little") + raw[8:])
            with self.assertRaisesRegex(st.SafetensorsError, "header length"):
                st.load(bad)
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
