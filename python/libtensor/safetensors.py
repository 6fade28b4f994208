"""safetensors (https://huggingface.co/docs/safetensors) read and written in pure numpy.

Layout: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}),
then the tensors' bytes, little-endian, row-major. `load` checks what the C
reader checks: the header length is capped, every tensor lies inside the data
with no overlaps and no gaps, and dtype x shape equals its byte length.

bf16 has no numpy dtype: `load` widens it to float32 (exactly), `save`
writes float32 arrays as BF16 when asked with dtypes={name: "BF16"}
(rounding to nearest even).
"""
import json
import struct

import numpy as np

MAX_HEADER = 100 << 20

_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
       "U8": "u1", "BOOL": "?", "BF16": "<u2"}
_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64",
       np.dtype("<i4"): "I32", np.dtype("<i2"): "I16", np.dtype("i1"): "I8", np.dtype("u1"): "U8",
       np.dtype("?"): "BOOL"}


class SafetensorsError(ValueError):
    pass


def load(path, keep_bf16_bits=False):
    """(tensors, metadata): {name: ndarray} in file order and the "__metadata__" map."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError("%s: %d bytes, too short for the header length" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise SafetensorsError("%s: header length %d is over the cap or the file" % (path, n))
    head = json.loads(data[8:8 + n].decode("utf-8"))
    meta = head.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    spans = []
    out = {}
    for name, d in head.items():
        dt = d["dtype"]
        if dt not in _NP:
            raise SafetensorsError("%s: tensor %r has dtype %r" % (path, name, dt))
        b, e = d["data_offsets"]
        shape = tuple(int(s) for s in d["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b <= e <= len(body)) or e - b != count * np.dtype(_NP[dt]).itemsize:
            raise SafetensorsError("%s: tensor %r: offsets [%d, %d) do not hold %s %s" % (path, name, b, e, dt, shape))
        spans.append((b, e, name))
        a = np.frombuffer(body[b:e], dtype=_NP[dt]).reshape(shape)
        if dt == "BF16" and not keep_bf16_bits:
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.copy()
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise SafetensorsError("%s: tensor %r starts at %d: %s before it" % (path, name, b,
                                   "a gap" if b > pos else "an overlap"))
        pos = e
    if pos != len(body):
        raise SafetensorsError("%s: %d bytes after the last tensor" % (path, len(body) - pos))
    order = {name: i for i, (name, _) in enumerate(head.items())}
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]])), dict(meta)


def _to_bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype(np.uint16)


def save(path, tensors, metadata=None, dtypes=None):
    """Writes {name: ndarray} (any of F64 F32 F16 I64 I32 I16 I8 U8 BOOL; BF16
    through dtypes) and a {str: str} metadata map."""
    dtypes = dtypes or {}
    head, blobs, off = {}, [], 0
    if metadata:
        head["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.asarray(a)
        dt = dtypes.get(name) or _ST.get(a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
        if dt is None:
            raise SafetensorsError("tensor %r: dtype %s has no safetensors name" % (name, a.dtype))
        b = _to_bf16(a).tobytes() if dt == "BF16" else np.ascontiguousarray(a, dtype=_NP[dt]).tobytes()
        head[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
