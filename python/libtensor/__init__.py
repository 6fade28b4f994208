"""libtensor from Python: checkpoints, tokenizers, safetensors, and (with
torch) conversion to and from PyTorch. docs/python.md is the manual.

Pure Python on numpy and h5py; `libtensor.torch_models` needs torch and is
imported only when used.
"""
from .errors import LibtensorError
from .checkpoint import Checkpoint, CheckpointError, load, save, seal, verify, read_metrics
from .tokenizer import Tokenizer, TokenizerError
from . import safetensors

__all__ = ["LibtensorError", "Checkpoint", "CheckpointError", "load", "save", "seal", "verify", "read_metrics", "Tokenizer",
           "TokenizerError", "safetensors"]
__version__ = "0.1.0"
