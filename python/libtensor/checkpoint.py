"""libtensor checkpoints (docs/checkpoint-format.md) read and written from Python.

A checkpoint is an HDF5 file behind a 512-byte integrity header (the "seal").
`load` verifies the seal exactly as libtensor's lt_ckpt_verify does (magic,
header CRC, version, size, CRC-32 of the HDF5 bytes), then reads every group
with h5py. `save` writes the layout libtensor writes (track_order groups,
checksummed object headers via libver='latest', fixed-length UTF-8 string
attributes, int64/float64 scalars, a 512-byte user block) and seals it.

What this is not: the loader's structural checks (hard links only, no
filters but deflate, ...) are libtensor's; h5py reads what HDF5 can read.
"""
import os
import struct
import zlib

import numpy as np

MAGIC = b"\x89LTCKPT\n"
HEADER_SIZE = 512
HEADER_VERSION = 1
FORMAT = "libtensor-checkpoint"
FORMAT_VERSION = 2
TOP_LEVEL = ("model", "optim", "schedule", "rng", "extra")


class CheckpointError(Exception):
    """A file that is not a sound libtensor checkpoint; the message says why."""


# ---- the seal ---------------------------------------------------------------------------------

def _crc_file(f, start, end):
    crc = 0
    f.seek(start)
    left = end - start
    while left > 0:
        b = f.read(min(left, 1 << 20))
        if not b:
            raise CheckpointError("file shrank while being read")
        crc = zlib.crc32(b, crc)
        left -= len(b)
    return crc & 0xFFFFFFFF


def seal(path):
    """Writes the integrity header into the first 512 bytes of path, an HDF5
    file made with userblock_size=512 (lt_ckpt_seal)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if size < HEADER_SIZE + 8:
            raise CheckpointError("%s: %d bytes, too short for a user block and HDF5 data" % (path, size))
        f.seek(HEADER_SIZE)
        if f.read(8) != b"\x89HDF\r\n\x1a\n":
            raise CheckpointError("%s: no HDF5 superblock at offset 512 (write it with userblock_size=512)" % path)
        data_crc = _crc_file(f, HEADER_SIZE, size)
        head = MAGIC + struct.pack("<IIQII", HEADER_VERSION, HEADER_SIZE, size, data_crc, 0)
        head += b"\0" * (508 - len(head))
        head += struct.pack("<I", zlib.crc32(head) & 0xFFFFFFFF)
        f.seek(0)
        f.write(head)
        f.flush()
        os.fsync(f.fileno())


def verify(path):
    """Checks the integrity header as lt_ckpt_verify does; raises
    CheckpointError naming the first fault."""
    size = os.path.getsize(path)
    if size == 0:
        raise CheckpointError("%s: empty file" % path)
    if size < HEADER_SIZE:
        raise CheckpointError("%s: %d bytes, shorter than the 512-byte integrity header" % (path, size))
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
        if head[:8] != MAGIC:
            if head[:8] == b"\x89HDF\r\n\x1a\n":
                raise CheckpointError("%s: an HDF5 file without the libtensor integrity header (seal it)" % path)
            raise CheckpointError("%s: not a libtensor checkpoint (bad magic)" % path)
        if struct.unpack("<I", head[508:512])[0] != zlib.crc32(head[:508]) & 0xFFFFFFFF:
            raise CheckpointError("%s: the integrity header is damaged (header CRC mismatch)" % path)
        version, hsize, fsize, crc, _flags = struct.unpack("<IIQII", head[8:32])
        if version != HEADER_VERSION or hsize != HEADER_SIZE:
            raise CheckpointError("%s: integrity header version %d size %d unknown" % (path, version, hsize))
        if fsize > size:
            raise CheckpointError("%s: truncated: %d bytes, the header says %d" % (path, size, fsize))
        if fsize < size:
            raise CheckpointError("%s: trailing bytes: %d bytes, the header says %d" % (path, size, fsize))
        if _crc_file(f, HEADER_SIZE, size) != crc:
            raise CheckpointError("%s: checksum mismatch (the HDF5 data is damaged)" % path)


# ---- reading ----------------------------------------------------------------------------------

def _attr(v):
    """An HDF5 attribute as Python: int, float, str (bool enums as int 0/1)."""
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.reshape(())[()]
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return v


def _attrs(obj):
    return {k: _attr(obj.attrs[k]) for k in obj.attrs.keys()}


def _walk(group, prefix=""):
    """(dotted name, h5py dataset) of every dataset under group, in creation order."""
    import h5py
    out = []
    for k in group.keys():
        obj = group[k]
        name = prefix + k
        if isinstance(obj, h5py.Dataset):
            out.append((name, obj))
        else:
            out.extend(_walk(obj, name + "."))
    return out


class Checkpoint:
    """Everything a checkpoint holds, as plain Python and numpy.

    content   "model" or "training"
    config    dict: /model's attributes (the model configuration)
    tensors   dict name -> ndarray, state_dict names, in file order
    optim     None or dict: the /optim attributes ("kind", "step", "lr", beta1, ...)
              plus "state": {param name: {"exp_avg": ..., "exp_avg_sq": ..., "step": int}}
    schedule  None or dict: /schedule's attributes (step, kind, base_lr, ...)
    rng       dict generator name -> (seed, offset) as Python ints
    extra     dict key -> int / float / str / bytes (the tokenizer is the bytes "tokenizer")
    library_version, format_version: the writer's
    """

    def __init__(self, content="model", config=None, tensors=None, optim=None, schedule=None, rng=None,
                 extra=None, library_version=None, format_version=FORMAT_VERSION):
        self.content = content
        self.config = dict(config or {})
        self.tensors = dict(tensors or {})
        self.optim = optim
        self.schedule = schedule
        self.rng = dict(rng or {})
        self.extra = dict(extra or {})
        self.library_version = library_version
        self.format_version = format_version

    @property
    def step(self):
        """The training step (/schedule's step), or None for a model checkpoint."""
        return None if self.schedule is None else int(self.schedule.get("step", 0))

    @property
    def tokenizer(self):
        """The run's tokenizer (libtensor.tokenizer.Tokenizer) from extra["tokenizer"], or None."""
        from .tokenizer import Tokenizer
        blob = self.extra.get("tokenizer")
        return None if blob is None else Tokenizer.deserialize(blob)

    @property
    def metrics(self):
        """The trainer's counters in extra: run.* and loader.* values (tokens, seconds, ...)."""
        return {k: v for k, v in self.extra.items() if k.startswith(("run.", "loader."))}

    def settings(self):
        """train's saved command-line settings (extra "opt.<flag>") as {flag: value}."""
        return {k[4:]: v for k, v in self.extra.items() if k.startswith("opt.")}


def load(path, verify_seal=True):
    """Reads a checkpoint; verifies the seal first unless verify_seal is False."""
    import h5py
    if verify_seal:
        verify(path)
    with h5py.File(path, "r") as f:
        root = _attrs(f)
        if root.get("format") != FORMAT:
            raise CheckpointError("%s: format is %r, not %r" % (path, root.get("format"), FORMAT))
        fv = root.get("format_version")
        if fv not in (1, 2):
            raise CheckpointError("%s: format version %r is not 1 or 2" % (path, fv))
        extra_keys = [k for k in f.keys() if k not in TOP_LEVEL]
        if extra_keys:
            raise CheckpointError("%s: unknown top-level objects %s" % (path, extra_keys))
        ck = Checkpoint(content=root.get("content"), library_version=root.get("library_version"),
                        format_version=fv)
        if "model" in f:
            ck.config = _attrs(f["model"])
            ck.tensors = {n: np.asarray(d[()]) for n, d in _walk(f["model"])}
        if "optim" in f:
            g = f["optim"]
            ck.optim = _attrs(g)
            state = {}
            for n, d in _walk(g):
                param, _, leaf = n.rpartition(".")
                v = np.asarray(d[()])
                state.setdefault(param, {})[leaf] = int(v) if leaf == "step" else v
            ck.optim["state"] = state
        if "schedule" in f:
            ck.schedule = _attrs(f["schedule"])
        if "rng" in f:
            ck.rng = {n: (int(d[0]), int(d[1])) for n, d in _walk(f["rng"])}
        if "extra" in f:
            g = f["extra"]
            ck.extra = _attrs(g)
            for n, d in _walk(g):
                ck.extra[n] = bytes(d[()].tobytes())
        return ck


# ---- writing ----------------------------------------------------------------------------------

def _set_attr(obj, key, v):
    """As libtensor writes: int64, float64, fixed-length NUL-padded UTF-8 strings
    (bools as int64 0/1, the configuration's convention)."""
    import h5py
    if isinstance(v, (bool, np.bool_)):
        obj.attrs.create(key, np.int64(int(v)), dtype="<i8")
    elif isinstance(v, (int, np.integer)):
        obj.attrs.create(key, np.int64(v), dtype="<i8")
    elif isinstance(v, (float, np.floating)):
        obj.attrs.create(key, np.float64(v), dtype="<f8")
    elif isinstance(v, str):
        b = v.encode("utf-8")
        obj.attrs.create(key, np.array(b if b else b"\0", dtype="S%d" % max(1, len(b))),
                         dtype=h5py.string_dtype("utf-8", max(1, len(b))))
    else:
        raise TypeError("attribute %r: %r is not int, float, bool or str" % (key, type(v)))


_DTYPES = {np.dtype(np.float32): "<f4", np.dtype(np.float64): "<f8", np.dtype(np.int32): "<i4",
           np.dtype(np.int64): "<i8", np.dtype(np.bool_): np.bool_}


def _dataset(root, name, arr, dtype=None):
    arr = np.asarray(arr)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if dtype is None:
        if arr.dtype not in _DTYPES:
            raise TypeError("tensor %r: dtype %s (libtensor stores f32, f64, i32, i64, bool)" % (name, arr.dtype))
        dtype = _DTYPES[arr.dtype]
    parts = name.split(".")
    if any(not p for p in parts) or "/" in name:
        raise ValueError("tensor name %r: no empty components and no '/'" % name)
    g = root
    for p in parts[:-1]:
        g = g[p] if p in g else g.create_group(p, track_order=True)
    g.create_dataset(parts[-1], data=arr, dtype=dtype)


def save(path, ck):
    """Writes ck (a Checkpoint) to path in libtensor's layout and seals it.

    A "training" checkpoint gets /schedule (at least {"step": 0, "kind": "none"})
    and /rng (empty if ck.rng is) as libtensor requires; /optim only when
    ck.optim is set. The file is written to a temporary name in the same
    directory and renamed, so path is never left half-written."""
    import h5py
    if ck.content not in ("model", "training"):
        raise ValueError("content %r: 'model' or 'training'" % ck.content)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), ".%s.pytmp.%d" % (os.path.basename(path), os.getpid()))
    try:
        with h5py.File(tmp, "w", userblock_size=HEADER_SIZE, libver="latest", track_order=True) as f:
            _set_attr(f, "format", FORMAT)
            _set_attr(f, "format_version", FORMAT_VERSION)
            _set_attr(f, "library_version", ck.library_version or "python-libtensor")
            _set_attr(f, "content", ck.content)
            g = f.create_group("model", track_order=True)
            for k, v in ck.config.items():
                _set_attr(g, k, v)
            for n, a in ck.tensors.items():
                _dataset(g, n, a)
            if ck.content == "training":
                if ck.optim is not None:
                    g = f.create_group("optim", track_order=True)
                    for k, v in ck.optim.items():
                        if k != "state":
                            _set_attr(g, k, v)
                    for param, st in ck.optim.get("state", {}).items():
                        for leaf, v in st.items():
                            if leaf == "step":
                                _dataset(g, param + ".step", np.array(int(v), dtype=np.int64))
                            else:
                                _dataset(g, param + "." + leaf, v)
                sched = dict(ck.schedule or {})
                sched.setdefault("step", 0)
                sched.setdefault("kind", "none")
                g = f.create_group("schedule", track_order=True)
                for k, v in sched.items():
                    _set_attr(g, k, v)
                g = f.create_group("rng", track_order=True)
                for n, (seed, off) in ck.rng.items():
                    g.create_dataset(n, data=np.array([seed, off], dtype=np.uint64), dtype="<u8")
                g = f.create_group("extra", track_order=True)
                for k, v in ck.extra.items():
                    if isinstance(v, (bytes, bytearray)):
                        g.create_dataset(k, data=np.frombuffer(bytes(v), dtype=np.uint8), dtype="u1")
                    else:
                        _set_attr(g, k, v)
        seal(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_metrics(csv_path):
    """A run's metrics.csv (docs/train.md) as {column: list of values} (floats
    where the cell parses as a number, else the text; empty cells None)."""
    import csv
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    head, cols = rows[0], {h: [] for h in rows[0]}
    for r in rows[1:]:
        for h, cell in zip(head, r):
            try:
                cols[h].append(float(cell) if cell != "" else None)
            except ValueError:
                cols[h].append(cell)
    return cols
