"""libtensor's own C functions through ctypes, for the Python tests: the ids
lt_tokenizer_encode gives, the JSON lt_tokenizer_to_json writes, and the
logits lt_transformer_decode computes from a checkpoint. LT_LIB names the
built libtensor_transformer.so (it brings libtensor.so); TRAIN and GENERATE
the programs. Set by tests/python/CMakeLists (add_test)."""
import ctypes as C
import os
import subprocess

import numpy as np

LIB = C.CDLL(os.environ["LT_LIB"])
LIBC = C.CDLL(None)
TRAIN = os.environ["TRAIN"]
GENERATE = os.environ["GENERATE"]
F32, I64 = 0, 3

P = C.c_void_p
for name, res, args in [
    ("lt_last_error", C.c_char_p, []),
    ("lt_tokenizer_new_byte", P, []),
    ("lt_tokenizer_new_char", P, [C.c_char_p, C.c_size_t]),
    ("lt_tokenizer_train_bpe", P, [C.c_char_p, C.c_size_t, P]),
    ("lt_tokenizer_deserialize", P, [C.c_char_p, C.c_size_t]),
    ("lt_tokenizer_encode", C.c_int, [P, C.c_char_p, C.c_size_t, C.POINTER(C.POINTER(C.c_int64)),
                                      C.POINTER(C.c_int64)]),
    ("lt_tokenizer_serialize", C.c_int, [P, C.POINTER(P), C.POINTER(C.c_size_t)]),
    ("lt_tokenizer_to_json", C.c_int, [P, C.POINTER(C.c_char_p), C.POINTER(C.c_size_t)]),
    ("lt_tokenizer_free", None, [P]),
    ("lt_ckpt_meta_new", P, []),
    ("lt_ckpt_meta_free", None, [P]),
    ("lt_ckpt_meta_set_int", C.c_int, [P, C.c_char_p, C.c_int64]),
    ("lt_ckpt_meta_set_double", C.c_int, [P, C.c_char_p, C.c_double]),
    ("lt_ckpt_meta_set_string", C.c_int, [P, C.c_char_p, C.c_char_p]),
    ("lt_tf_config_from_meta", C.c_int, [P, P]),
    ("lt_generator_new", P, [C.c_uint64]),
    ("lt_generator_free", None, [P]),
    ("lt_transformer_new", P, [P, P]),
    ("lt_transformer_free", None, [P]),
    ("lt_transformer_params", P, [P]),
    ("lt_ckpt_load_params", C.c_int, [C.c_char_p, P, P, P]),
    ("lt_tensor_from_copy", P, [C.c_int, C.c_int, C.POINTER(C.c_int64), P]),
    ("lt_tensor_free", None, [P]),
    ("lt_tensor_read", C.c_int, [P, C.c_int, P, C.c_int64]),
    ("lt_transformer_encode", P, [P, P, P, P]),
    ("lt_transformer_decode", P, [P, P, P, P, P, C.c_int64, P]),
]:
    f = getattr(LIB, name)
    f.restype, f.argtypes = res, args
LIBC.free.argtypes = [P]


def check(ok, what):
    if not ok:
        raise RuntimeError("%s: %s" % (what, LIB.lt_last_error().decode()))


class CTokenizer:
    """A tokenizer made by the C library: kind "byte", "char" (from text) or "bpe" (trained on text)."""

    def __init__(self, kind, text=b"", blob=None):
        if blob is not None:
            self.p = LIB.lt_tokenizer_deserialize(blob, len(blob))
        elif kind == "byte":
            self.p = LIB.lt_tokenizer_new_byte()
        elif kind == "char":
            self.p = LIB.lt_tokenizer_new_char(text, len(text))
        else:
            self.p = LIB.lt_tokenizer_train_bpe(text, len(text), None)
        check(self.p, "tokenizer " + kind)

    def encode(self, data):
        ids, n = C.POINTER(C.c_int64)(), C.c_int64()
        check(LIB.lt_tokenizer_encode(self.p, data, len(data), C.byref(ids), C.byref(n)) == 0, "encode")
        out = ids[:n.value]
        LIBC.free(C.cast(ids, P))
        return out

    def serialize(self):
        buf, n = P(), C.c_size_t()
        check(LIB.lt_tokenizer_serialize(self.p, C.byref(buf), C.byref(n)) == 0, "serialize")
        out = C.string_at(buf, n.value)
        LIBC.free(buf)
        return out

    def to_json(self):
        s, n = C.c_char_p(), C.c_size_t()
        check(LIB.lt_tokenizer_to_json(self.p, C.byref(s), C.byref(n)) == 0, "to_json")
        out = C.string_at(s, n.value).decode()
        LIBC.free(C.cast(s, P))
        return out

    def __del__(self):
        LIB.lt_tokenizer_free(self.p)


def _ids(rows):
    a = np.ascontiguousarray(np.array(rows, dtype=np.int64))
    shape = (C.c_int64 * 2)(*a.shape)
    t = LIB.lt_tensor_from_copy(I64, 2, shape, a.ctypes.data_as(P))
    check(t, "ids tensor")
    return t


def logits(path, config, tgt, src=None):
    """The logits [B, T, V] of libtensor's Transformer loaded from path
    (config: the checkpoint's /model attributes), for tgt [B, T] (and, for
    the encoder-decoder, src [B, S])."""
    meta = LIB.lt_ckpt_meta_new()
    for k, v in config.items():
        kb = k.encode()
        if isinstance(v, str):
            LIB.lt_ckpt_meta_set_string(meta, kb, v.encode())
        elif isinstance(v, float):
            LIB.lt_ckpt_meta_set_double(meta, kb, v)
        else:
            LIB.lt_ckpt_meta_set_int(meta, kb, int(v))
    cfg = C.create_string_buffer(1024)  # an lt_tf_config, filled by the library
    check(LIB.lt_tf_config_from_meta(meta, cfg) == 0, "config")
    LIB.lt_ckpt_meta_free(meta)
    g = LIB.lt_generator_new(0)
    m = LIB.lt_transformer_new(cfg, g)
    check(m, "model")
    check(LIB.lt_ckpt_load_params(path.encode(), LIB.lt_transformer_params(m), None, None) == 0, "load")
    t = _ids(tgt)
    mem = s = None
    if src is not None:
        s = _ids(src)
        mem = LIB.lt_transformer_encode(m, s, None, None)
        check(mem, "encode")
    y = LIB.lt_transformer_decode(m, t, None, mem, None, 0, None)
    check(y, "decode")
    B, T = np.array(tgt).shape
    out = np.empty((B, T, int(config["vocab_size"])), dtype=np.float32)
    check(LIB.lt_tensor_read(y, F32, out.ctypes.data_as(P), out.size) == 0, "read")
    for x in (y, t, mem, s):
        if x:
            LIB.lt_tensor_free(x)
    LIB.lt_transformer_free(m)
    LIB.lt_generator_free(g)
    return out


def run(args, **kw):
    """Runs a program; its stdout (fails with its stderr)."""
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr.decode("utf-8", "replace")))
    return r.stdout.decode("utf-8", "replace")


def escape(text):
    """generate's output line for a text: newline and CR written as \\n and \\r."""
    return text.replace("\n", "\\n").replace("\r", "\\r")
