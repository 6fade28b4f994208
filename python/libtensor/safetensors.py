"""safetensors (https://huggingface.co/docs/safetensors) read and written in pure numpy.

Layout: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}),
then the tensors' bytes, little-endian, row-major.

The rules `load` applies are not written here: they live in
safetensors_spec.json beside this file (limits, dtypes, the checks in order,
every message), which the C reader (checkpoint/safetensors.c) follows too; both
test suites run the spec's crafted cases and compare status and message. In
short: only a regular file is opened (without blocking, so a FIFO or a device
is refused at once), the header length is capped and inside the file, the JSON
is parsed strictly (no duplicate keys, NUL or lone surrogates in strings,
integers beyond int64, NaN or infinite reals), every entry has exactly dtype,
shape and data_offsets with checked sizes, and the tensors tile the data
section. Every failure is a SafetensorsError (a LibtensorError) whose status
and message are the C reader's; no other exception escapes for a bad file.

bf16 has no numpy dtype: `load` widens it to float32 (exactly), `save`
writes float32 arrays as BF16 when asked with dtypes={name: "BF16"}
(rounding to nearest even).
"""
import json
import mmap
import os
import struct
import sys

import numpy as np

from .errors import LibtensorError, open_regular

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors_spec.json"), encoding="utf-8") as _f:
    SPEC = json.load(_f)

MAX_HEADER = SPEC["max_header"]
MAX_DIMS = SPEC["max_dims"]
MAX_JSON_DEPTH = SPEC["max_json_depth"]
_SIZE = {d["name"]: d["size"] for d in SPEC["dtypes"]}
_NP = {d["name"]: d["numpy"] for d in SPEC["dtypes"]}
_KNOWN = [d["name"] for d in SPEC["dtypes"]]
_KNOWN_TEXT = ", ".join(_KNOWN[:-1]) + " and " + _KNOWN[-1]
_MSG = SPEC["messages"]
_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64",
       np.dtype("<i4"): "I32", np.dtype("<i2"): "I16", np.dtype("i1"): "I8", np.dtype("u1"): "U8",
       np.dtype("?"): "BOOL"}
_I64_MAX = (1 << 63) - 1
_U64_MAX = (1 << 64) - 1


class SafetensorsError(LibtensorError, ValueError):
    """A file the reader refuses; .status is the C reader's status name
    ("LT_ERR_FORMAT", "LT_ERR_OVERFLOW", "LT_ERR_DTYPE", "LT_ERR_IO"), the
    message is its message."""


def _err(which, status="LT_ERR_FORMAT", **kw):
    return SafetensorsError(_MSG[which].format(**kw), status=status)


class _NoParse(Exception):
    pass


def _parse_int(s):
    v = int(s)
    if v > _I64_MAX:
        raise _NoParse("too big integer near '%s'" % s[:40])
    if v < -_I64_MAX - 1:
        raise _NoParse("too big negative integer near '%s'" % s[:40])
    return v


def _parse_float(s):
    v = float(s)
    if v in (float("inf"), float("-inf")):
        raise _NoParse("real number overflow near '%s'" % s[:40])
    return v


def _parse_constant(s):
    raise _NoParse("invalid token near '%s'" % s)


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise _NoParse("duplicate object key near '\"%s\"'" % k[:40])
        d[k] = v
    return d


def _check_strings(root):
    """Iteratively (no recursion): strings without NUL or lone surrogates, the
    nesting at most MAX_JSON_DEPTH (what jansson refuses while parsing)."""
    stack = [(root, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            vals = (v,)
        elif isinstance(v, dict):
            vals = v.keys()
        else:
            vals = ()
        for s in vals:
            if "\0" in s:
                raise _NoParse("NUL byte in a string not supported")
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                raise _NoParse("invalid Unicode in a string")
        if isinstance(v, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise _NoParse("maximum parsing depth reached")
            for x in (v.values() if isinstance(v, dict) else v):
                if isinstance(x, (dict, list, str)):
                    stack.append((x, depth + 1))


def _parse_json(path, raw):
    """The header as JSON, parsed as strictly as jansson parses it."""
    old = sys.getrecursionlimit()
    try:
        text = raw.decode("utf-8")
        # json's scanner recurses once per level: room for MAX_JSON_DEPTH levels, what jansson allows
        if old < MAX_JSON_DEPTH + 500:
            sys.setrecursionlimit(MAX_JSON_DEPTH + 500)
        root = json.loads(text, object_pairs_hook=_pairs, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
        if not isinstance(root, (dict, list)):  # jansson parses only an array or an object at the top
            raise _NoParse("'[' or '{' expected")
        _check_strings(root)
        return root
    except UnicodeDecodeError as e:
        reason = "unable to decode byte 0x%02x at byte %d" % (raw[e.start], e.start)
    except _NoParse as e:
        reason = str(e)
    except RecursionError:
        reason = "maximum parsing depth reached"
    except ValueError as e:  # json.JSONDecodeError
        reason = str(e)
    finally:
        sys.setrecursionlimit(old)
    raise _err("no_parse", path=path, n=len(raw), reason=reason)


def _is_u64(v):
    return type(v) is int and v >= 0  # bool is not an integer (jansson: true is not an integer)


def _shape_str(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _entry(path, name, e, data_len, known):
    """One tensor's entry, checked in the order of checkpoint/safetensors.c's parse_entry."""
    if not isinstance(e, dict):
        raise _err("entry_not_object", path=path, name=name)
    for key in e:
        if key not in ("dtype", "shape", "data_offsets"):
            raise _err("unknown_field", path=path, name=name, key=key)
    for key in ("dtype", "shape", "data_offsets"):
        if key not in e:
            raise _err("missing_field", path=path, name=name, key=key)
    dt, sh, off = e["dtype"], e["shape"], e["data_offsets"]
    if not isinstance(dt, str):
        raise _err("dtype_not_string", path=path, name=name)
    if dt not in known:
        shown = dt.encode("utf-8")[:32].decode("utf-8", "replace")
        raise _err("dtype_unknown", "LT_ERR_DTYPE", path=path, name=name, dtype=shown, known=_KNOWN_TEXT)
    if not isinstance(sh, list):
        raise _err("shape_not_array", path=path, name=name)
    if len(sh) > MAX_DIMS:
        raise _err("shape_rank", path=path, name=name, ndim=len(sh), max=MAX_DIMS)
    shape = [0] * len(sh)
    numel = 1
    for k, d in enumerate(sh):
        if not _is_u64(d):
            raise _err("shape_entry", path=path, name=name, k=k)
        shape[k] = d
        numel *= d
        if numel > _I64_MAX:
            raise _err("count_overflow", "LT_ERR_OVERFLOW", path=path, name=name, shape=_shape_str(shape))
    nbytes = numel * _SIZE[dt]
    if nbytes > _U64_MAX:
        raise _err("bytes_overflow", "LT_ERR_OVERFLOW", path=path, name=name, shape=_shape_str(shape), size=_SIZE[dt])
    if not (isinstance(off, list) and len(off) == 2 and _is_u64(off[0]) and _is_u64(off[1])):
        raise _err("offsets_form", path=path, name=name)
    b, end = off
    if end < b:
        raise _err("offsets_reversed", path=path, name=name, begin=b, end=end)
    if end - b != nbytes:
        raise _err("offsets_size", path=path, name=name, begin=b, end=end, have=end - b, dtype=dt,
                   shape=_shape_str(shape), want=nbytes)
    if end > data_len:
        raise _err("offsets_outside", path=path, name=name, begin=b, end=end, len=data_len)
    return dt, tuple(shape), b, end


def read_header(path, data, known=None):
    """Checks a whole file's bytes (data: bytes, mmap or memoryview) as the
    spec says; returns (entries, metadata, data_start): entries
    [(name, dtype, shape, begin, end)] in header order."""
    known = _SIZE if known is None else known
    size = len(data)
    if size < 8:
        raise _err("too_short", path=path, size=size)
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise _err("header_cap", path=path, n=n, cap=MAX_HEADER)
    if n > size - 8:
        raise _err("header_past_end", path=path, n=n, size=size)
    data_len = size - 8 - n
    head = _parse_json(path, bytes(data[8:8 + n]))
    if not isinstance(head, dict):
        raise _err("not_object", path=path)
    meta, entries = {}, []
    for name, e in head.items():
        if name == "__metadata__":
            if not isinstance(e, dict):
                raise _err("meta_not_object", path=path)
            for k, v in e.items():
                if not isinstance(v, str):
                    raise _err("meta_not_string", path=path, key=k)
                meta[k] = v
            continue
        if not name:
            raise _err("empty_name", path=path)
        entries.append((name,) + _entry(path, name, e, data_len, known))
    at, prev = 0, None
    for name, _dt, _shape, b, end in sorted(entries, key=lambda t: (t[3], t[4])):
        if b < at:
            raise _err("overlap", path=path, name=name, begin=b, end=end, prev=prev, at=at)
        if b > at:
            raise _err("gap", path=path, name=name, begin=b, gap=b - at,
                       after="tensor '%s'" % prev if prev is not None else "the start of the data section")
        at, prev = end, name
    if at != data_len:
        raise _err("trailing", path=path, at=at, len=data_len, left=data_len - at)
    return entries, meta, 8 + n


def load(path, keep_bf16_bits=False):
    """(tensors, metadata): {name: ndarray} in file order and the "__metadata__" map.
    Raises SafetensorsError (status and message as the C reader's) for any
    file the spec refuses, before a tensor is allocated."""
    fd, size = open_regular(path, "safetensors_open", SafetensorsError, "LT_ERR_FORMAT")
    try:
        if size < 8:
            raise _err("too_short", path=path, size=size)
        try:
            data = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except (OSError, ValueError) as e:
            raise SafetensorsError("safetensors '%s': cannot map %d bytes: %s" % (path, size, e), status="LT_ERR_IO")
    finally:
        os.close(fd)
    try:
        entries, meta, start = read_header(path, data)
        out = {}
        for name, dt, shape, b, end in entries:
            a = np.frombuffer(data, dtype=_NP[dt], count=(end - b) // _SIZE[dt], offset=start + b).reshape(shape)
            if dt == "BF16" and not keep_bf16_bits:
                a = (a.astype(np.uint32) << 16).view(np.float32)
            out[name] = a.copy()
            del a
        return out, meta
    finally:
        try:
            data.close()
        except BufferError:  # a view still alive (an exception's traceback): the mapping goes with it
            pass


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
        if not name or name == "__metadata__" or "\0" in name:
            raise SafetensorsError("tensor name %r is not allowed" % name, status="LT_ERR_INVALID")
        dt = dtypes.get(name) or _ST.get(a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
        if dt is None:
            raise SafetensorsError("tensor %r: dtype %s has no safetensors name" % (name, a.dtype), status="LT_ERR_DTYPE")
        if a.ndim > MAX_DIMS:
            raise SafetensorsError("tensor %r: rank %d, at most %d" % (name, a.ndim, MAX_DIMS), status="LT_ERR_SHAPE")
        b = _to_bf16(a).tobytes() if dt == "BF16" else np.ascontiguousarray(a, dtype=_NP[dt]).tobytes()
        head[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    if len(h) > MAX_HEADER:
        raise SafetensorsError("the header would be %d bytes, over the cap %d" % (len(h), MAX_HEADER),
                               status="LT_ERR_INVALID")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
