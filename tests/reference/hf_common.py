"""What the reference tests against transformers share (test_hf_transformers.py,
test_hf_bert.py, test_onnx_export.py): offline settings made before transformers
is imported, quiet progress bars, randomising a model's parameters, and running
a C tool on tensors.

What this is not: a test (the two beside it import it first).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing from a model hub: these machines reach none
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import subprocess  # noqa: E402

import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()


def randomize(model, seed, is_norm):
    """Every parameter random (those is_norm(name) names around 1), so that a
    swapped or missing tensor cannot hide behind an initialisation of zeros
    or ones. Returns model."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_norm(name):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def run_tool(tool, verb, src, feeds, tmp, *extra):
    """tool VERB SRC IN OUT [EXTRA...] on the arrays feeds (a dict, written
    to IN as safetensors); returns OUT's tensors (a dict of numpy arrays)."""
    from safetensors.numpy import load_file, save_file
    i, o = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_file(feeds, i)
    subprocess.run([tool, verb, src, i, o, *extra], check=True)
    return load_file(o)
