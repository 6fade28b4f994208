"""libtensor checkpoints (docs/checkpoint-format.md) read and written from Python.

A checkpoint is an HDF5 file behind a 512-byte integrity header (the "seal").
`load` refuses what libtensor's loader refuses, with its messages
(python/libtensor/h5checks.py has the checks, docs/security.md the list):
a file that is not regular, a bad seal, h5py's unchecksummed layout, soft and
external links, hard-link cycles, named types, virtual datasets, external
storage, filters but deflate, types libtensor does not write, sizes past what
the file can hold; every structure is checked before h5py opens it. `save`
writes the layout libtensor writes (track_order groups, checksummed object
headers via libver='latest', fixed-length UTF-8 string attributes,
int64/float64 scalars, a 512-byte user block) and seals it.

What this is not: the checks that need a model (a configuration's tensors and
shapes, optimizer and schedule ranges) are libtensor's.
"""
import os
import struct
import zlib

import numpy as np

from . import h5checks as _h5
from .h5checks import CheckpointError

MAGIC = b"\x89LTCKPT\n"
HEADER_SIZE = 512
HEADER_VERSION = 1
FORMAT = "libtensor-checkpoint"
FORMAT_VERSION = 2
TOP_LEVEL = ("model", "optim", "schedule", "rng", "extra")


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
    """Checks the integrity header as lt_ckpt_verify does (a regular file,
    opened without blocking; its checks, in its order and words); raises
    CheckpointError naming the first fault."""
    fd, size = _h5.open_checked(path)
    try:
        _h5.verify_fd(fd, size, path)
    finally:
        os.close(fd)


# ---- reading ----------------------------------------------------------------------------------

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


def _named(path, e):
    """A check's "checkpoint: ..." message with the file named (name_file)."""
    m = str(e)
    if m.startswith("checkpoint: "):
        return CheckpointError("checkpoint '%s': %s" % (path, m[len("checkpoint: "):]), status=e.status)
    return e


class _Budget:
    def __init__(self, path, max_bytes):
        self.path, self.max, self.used = path, max_bytes, 0

    def charge(self, n, what):
        if self.max and self.used + n > self.max:
            raise CheckpointError("checkpoint '%s': %s needs %d bytes, which with the %d bytes before it is more than "
                                  "the memory cap of %d bytes (max_bytes): refused before allocating"
                                  % (self.path, what, n, self.used, self.max), status="LT_ERR_NOMEM")
        self.used += n


def _read_checked(f, raw, group, size, budget, **expect):
    """{dotted name: ndarray} of every dataset under group, each checked
    before it is read, in the file's (creation) order."""
    import h5py
    checked = []
    for hpath, dotted, d, key in _h5.walk(f, raw, group):
        checked.append((key, dotted, hpath, d) + _h5.check_dataset(d, hpath, size, **expect))
    for _key, _dotted, hpath, _d, _dt, _dims, nbytes in checked:
        budget.charge(nbytes, hpath)
    out = {}
    for _key, dotted, hpath, d, dt, dims, nbytes in sorted(checked, key=lambda c: c[0]):
        a = np.zeros(dims, dtype=_h5._NP[dt])
        if a.size:
            if dt == "bool":
                raw8 = np.zeros(dims, dtype=np.int8)
                d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw8, mtype=d.id.get_type())
                if raw8.min() < 0 or raw8.max() > 1:
                    k = int(np.flatnonzero((raw8 < 0) | (raw8 > 1))[0])
                    raise CheckpointError("checkpoint '%s': bool dataset %s holds %d at flat index %d"
                                          % (raw.path, hpath, int(raw8.reshape(-1)[k]) & 0xFF, k))
                a = raw8.astype(np.bool_)
            else:
                d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, a)
        out[dotted] = a
    return out


def _read_extra(f, raw, size, budget):
    """/extra: attributes and uint8 blobs (lt__h5_read_meta)."""
    import h5py
    g = f["extra"]
    extra = _h5.read_attrs(g, "/extra")
    blobs = {}
    for bname, li in _h5._links(g):
        name = bname.decode("utf-8", "surrogateescape")
        if li.type != h5py.h5l.TYPE_HARD:
            raise CheckpointError("checkpoint: '%s' in /extra is a soft, external or user-defined link: refused" % name)
        if len(blobs) >= _h5.MAX_ATTRS:
            raise CheckpointError("checkpoint: more than %d objects in /extra" % _h5.MAX_ATTRS)
        raw.ohdr(li.u, "/extra/" + name)
        blobs[name] = li
    for name in blobs:
        if name in extra:
            raise CheckpointError("checkpoint: '%s' in /extra is both an attribute and a blob" % name)
        if not _h5.check_key(name):
            raise CheckpointError("checkpoint: blob name '%.64s' in /extra is not a valid key" % name)
        oi = h5py.h5o.get_info(g.id, name.encode("utf-8", "surrogateescape"))
        if oi.type != h5py.h5o.TYPE_DATASET:
            raise CheckpointError("checkpoint: '%s' in /extra is not a dataset (extra blobs are uint8 datasets)" % name)
        d = g[name]
        path = "/extra/" + name
        dt, dims, nbytes = _h5.check_dataset(d, path, size, raw_type=h5py.h5t.STD_U8LE, rank=1)
        left = budget.max - budget.used if budget.max else _h5.MAX_BLOB
        limit = min(left, _h5.MAX_BLOB)
        if nbytes > limit:
            raise CheckpointError("checkpoint: blob %s holds %d bytes, more than the %d bytes allowed (%s): refused "
                                  "before reading" % (path, nbytes, limit, "what is left under the memory cap, "
                                  "max_bytes" if left < _h5.MAX_BLOB else "one blob's limit"),
                                  status="LT_ERR_NOMEM" if left < _h5.MAX_BLOB else "LT_ERR_OVERFLOW")
        budget.used += nbytes
        a = np.zeros(dims, dtype=np.uint8)
        if a.size:
            d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, a)
        blobs[name] = a.tobytes()
    order = list(g.keys())  # creation order, every link checked above
    for k in order:
        extra[k] = blobs[k]
    return extra


def _top_level(f, raw, path):
    """open_checked's root attributes and top-level layout, in its words."""
    import h5py
    root = {k: _h5.read_attr(f, "/", k) for k in ("format", "format_version", "library_version", "content")
            if k in f.attrs}  # only these, as open_checked reads them

    def need(key, kind):
        if key not in root:
            return None
        v = root[key]
        if not isinstance(v, kind) or isinstance(v, bool):
            raise CheckpointError("checkpoint '%s': attribute '%s' of / is not %s"
                                  % (path, key, "an integer" if kind is int else "a string"))
        return v
    fmt = need("format", str)
    if fmt is None:
        raise CheckpointError("checkpoint '%s': no 'format' attribute: not a libtensor checkpoint" % path)
    if fmt != FORMAT:
        raise CheckpointError("checkpoint '%s': format is '%.64s', not '%s'" % (path, fmt, FORMAT))
    fv = need("format_version", int)
    if fv is None:
        raise CheckpointError("checkpoint '%s': no 'format_version' attribute" % path)
    if fv > FORMAT_VERSION:
        raise CheckpointError("checkpoint '%s': format version %d is newer than this library reads (%d): upgrade "
                              "libtensor" % (path, fv, FORMAT_VERSION))
    if fv < 1:
        raise CheckpointError("checkpoint '%s': format version %d is invalid" % (path, fv))
    libver = need("library_version", str)
    if libver is None:
        raise CheckpointError("checkpoint '%s': no 'library_version' attribute" % path)
    content = need("content", str)
    if content is None:
        raise CheckpointError("checkpoint '%s': no 'content' attribute" % path)
    if content not in ("model", "training"):
        raise CheckpointError("checkpoint '%s': content '%.64s' is neither 'model' nor 'training'" % (path, content))
    for bname, li in _h5._links(f):
        name = bname.decode("utf-8", "surrogateescape")
        if name not in TOP_LEVEL:
            raise CheckpointError("checkpoint '%s': unexpected object /%.64s at the top level" % (path, name))
        if li.type != h5py.h5l.TYPE_HARD:
            raise CheckpointError("checkpoint '%s': /%s is not reached by a hard link" % (path, name))
        raw.ohdr(li.u, "/" + name)
        if h5py.h5o.get_info(f.id, bname).type != h5py.h5o.TYPE_GROUP:
            raise CheckpointError("checkpoint '%s': /%s is not a group" % (path, name))
    if "model" not in f:
        raise CheckpointError("checkpoint '%s': no /model group" % path)
    return fmt, fv, libver, content


def load(path, verify_seal=True, allow_unchecksummed=False, max_bytes=0):
    """Reads a checkpoint with the C loader's structural checks (h5checks);
    verifies the seal first unless verify_seal is False. allow_unchecksummed
    accepts h5py's default layout (lt_ckpt_load_opts.allow_unchecksummed: only
    for files from a source you trust); max_bytes caps what the load
    allocates for tensors and blobs (0: no cap). Raises CheckpointError (a
    LibtensorError) for any file it refuses, before reading the data."""
    import h5py
    fd, size = _h5.open_checked(path)
    try:
        if verify_seal:
            _h5.verify_fd(fd, size, path)
        raw = _h5.Raw(fd, size, path, allow_unchecksummed)
        fdpath = "/proc/self/fd/%d" % fd
        try:
            f = h5py.File(fdpath if os.access(fdpath, os.R_OK) else path, "r")
        except (OSError, ValueError) as e:
            raise CheckpointError("checkpoint '%s': HDF5 cannot open it: %s" % (path, e))
        with f:
            try:
                return _load_open(f, raw, path, size, max_bytes)
            except CheckpointError as e:
                raise _named(path, e) from None
            except Exception as e:  # h5py's own errors: the package raises only its own
                raise CheckpointError("checkpoint '%s': HDF5 cannot read it: %s: %s"
                                      % (path, type(e).__name__, e)) from None
    finally:
        os.close(fd)


_SCHEDULE_TYPES = (("step", int), ("kind", str), ("base_lr", float), ("min_lr", float), ("gamma", float),
                   ("scale", float), ("warmup", int), ("total", int), ("step_size", int), ("d_model", int))
_OPTIM_TYPES = (("kind", str), ("step", int), ("lr", float), ("beta1", float), ("beta2", float), ("eps", float),
                ("weight_decay", float), ("momentum", float), ("dampening", float), ("nesterov", int),
                ("decay_all", int))
_KIND_WORD = {int: "an integer", float: "a double", str: "a string"}


def _load_open(f, raw, path, size, max_bytes):
    ub = f.id.get_create_plist().get_userblock()
    if ub != HEADER_SIZE:
        raise CheckpointError("checkpoint '%s': the HDF5 user block is %d bytes, not %d" % (path, ub, HEADER_SIZE))
    _fmt, fv, libver, content = _top_level(f, raw, path)
    budget = _Budget(path, max_bytes)
    ck = Checkpoint(content=content, library_version=libver, format_version=fv)
    ck.config = _h5.read_attrs(f["model"], "/model")
    ck.tensors = _read_checked(f, raw, "/model", size, budget)
    if "optim" in f:
        ck.optim = _h5.read_attrs(f["optim"], "/optim")
        for key, kind in _OPTIM_TYPES:  # the optimizer's attribute types (its ranges need libtensor)
            if key in ck.optim and not isinstance(ck.optim[key], kind):
                raise CheckpointError("checkpoint: attribute '%s' of /optim is not %s" % (key, _KIND_WORD[kind]))
        state = {}
        for n, v in _read_checked(f, raw, "/optim", size, budget).items():
            param, _, leaf = n.rpartition(".")
            state.setdefault(param, {})[leaf] = int(v) if leaf == "step" and v.size == 1 else v
        ck.optim["state"] = state
    if "schedule" in f:
        ck.schedule = _h5.read_attrs(f["schedule"], "/schedule")
        for key, kind in _SCHEDULE_TYPES:  # load_schedule's order and types (its ranges need libtensor)
            if key in ck.schedule and not isinstance(ck.schedule[key], kind):
                raise CheckpointError("checkpoint: attribute '%s' of /schedule is not %s" % (key, _KIND_WORD[kind]))
        listed = _h5.walk(f, raw, "/schedule")
        if listed:
            raise CheckpointError("checkpoint '%s': unexpected dataset %s" % (path, listed[0][0]))
    if "rng" in f:
        import h5py
        rng = _read_checked(f, raw, "/rng", size, budget, raw_type=h5py.h5t.STD_U64LE, rank=1, shape=(2,))
        ck.rng = {n: (int(v[0]), int(v[1])) for n, v in rng.items()}
    if "extra" in f:
        ck.extra = _read_extra(f, raw, size, budget)
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
