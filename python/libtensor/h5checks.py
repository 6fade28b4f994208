"""The checks the C checkpoint loader makes before libhdf5 parses a structure
(checkpoint/seal.c, checkpoint/h5.c, checkpoint/checkpoint.c), in Python, with
the C loader's messages, so that libtensor.load refuses what lt_ckpt_load
refuses (docs/security.md, "The Python package"):

- the file: a regular file, opened with O_NONBLOCK and fstat()ed, then read
  through that descriptor only (h5py opens /proc/self/fd/N, as the C loader);
- the seal (lt_ckpt_verify's checks and messages);
- the HDF5 layout, read here before libhdf5 reads it: superblock version 2 or
  3 with 8-byte addresses (versions 0 and 1, h5py's default unchecksummed
  layout that makes libhdf5 1.10 abort on crafted files, are refused unless
  allow_unchecksummed), and a version-2 object header ("OHDR", checksummed)
  at the address of every object before h5py opens it; groups that keep their
  links in an old-style symbol table are refused;
- the walk: hard links only (no soft or external links), no cycles or
  aliases (object addresses seen once; iterative, no recursion), bounded depth,
  object count and path length, groups and datasets only (no named types);
- every dataset before a byte of it is read: no virtual datasets, no external
  storage, no filter but deflate, a type libtensor writes, rank <= 8, dims
  with checked arithmetic, at most 1 TiB, at most the file's size (x 1040 + 1
  MiB with deflate), fully written; the sum under max_bytes;
- attributes: single values of int, float, string (<= 1 MiB) or h5py's bool.

Every failure is a CheckpointError with .status and the C loader's message.
"""
import os
import struct
import zlib

import numpy as np

from .errors import LibtensorError, open_regular

UB = 512
MAGIC = b"\x89LTCKPT\n"
HDF5_SIG = b"\x89HDF\r\n\x1a\n"
HEADER_VERSION = 1
HEADER_CRC_AT = 508
MAX_DEPTH = 64
MAX_OBJECTS = 1 << 20
MAX_PATH = 4096
MAX_ATTRS = 65536
MAX_STRING = 1 << 20
MAX_BYTES = 1 << 40
MAX_BLOB = 1 << 28
MAX_RATIO = 1040
MAX_DIMS = 8
REWRITE_HINT = ("rewrite it with checksummed headers (h5repack --latest --block=512 in.h5 out.h5, or h5py "
                "File(..., libver='latest', userblock_size=512)), then lt_ckpt_seal it; or accept it with "
                "allow_unchecksummed (--allow-unchecksummed) if you trust its source")
UNDEF = (1 << 64) - 1


class CheckpointError(LibtensorError):
    """A file that is not a sound libtensor checkpoint; the message says why
    (the C loader's message), .status its status name."""


def _fail(msg, status="LT_ERR_FORMAT"):
    return CheckpointError(msg, status=status)


def pread(fd, off, n):
    out = b""
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return out


def open_checked(path):
    """(fd, size): path opened as lt__open_regular opens it."""
    return open_regular(path, "checkpoint", CheckpointError, "LT_ERR_FORMAT")


def _crc_range(fd, path, start, end):
    crc, off = 0, start
    while off < end:
        want = min(end - off, 1 << 20)
        b = pread(fd, off, want)
        if len(b) < want:
            raise _fail("checkpoint '%s': truncated while reading (the file shrank at byte %d)" % (path, off + len(b)))
        crc = zlib.crc32(b, crc)
        off += want
    return crc & 0xFFFFFFFF


def verify_fd(fd, size, path):
    """lt__ckpt_open_verified's checks, in its order and words."""
    if size == 0:
        raise _fail("checkpoint '%s': the file is empty (0 bytes): not a checkpoint" % path)
    if size < UB:
        raise _fail("checkpoint '%s': %d bytes, fewer than the %d-byte integrity header: truncated or not a "
                    "checkpoint" % (path, size, UB))
    h = pread(fd, 0, UB)
    if len(h) != UB:
        raise _fail("checkpoint '%s': the file shrank while reading" % path)
    flips = sum(bin(a ^ b).count("1") for a, b in zip(h[:8], MAGIC))
    if flips > 3:
        if h[:8] == HDF5_SIG:
            raise _fail("checkpoint '%s': an HDF5 file without libtensor's integrity header (write it with a "
                        "512-byte user block and call lt_ckpt_seal)" % path)
        if size >= UB + 8 and pread(fd, UB, 8) == HDF5_SIG:
            raise _fail("checkpoint '%s': an HDF5 file whose user block holds no libtensor integrity header "
                        "(lt_ckpt_seal adds one)" % path)
        raise _fail("checkpoint '%s': not a libtensor checkpoint (no magic at byte 0)" % path)
    hcrc = zlib.crc32(h[:HEADER_CRC_AT]) & 0xFFFFFFFF
    (stored,) = struct.unpack("<I", h[HEADER_CRC_AT:UB])
    if hcrc != stored:
        raise _fail("checkpoint '%s': integrity header checksum mismatch (stored %08x, computed %08x): the file is "
                    "damaged" % (path, stored, hcrc))
    version, hsize, recorded, dcrc = struct.unpack("<IIQI", h[8:28])
    if version != HEADER_VERSION or hsize != UB:
        raise _fail("checkpoint '%s': integrity header version %d size %d is not supported (this library reads "
                    "version %d, size %d)" % (path, version, hsize, HEADER_VERSION, UB))
    if size < recorded:
        raise _fail("checkpoint '%s': truncated: the header records %d bytes, the file has %d" % (path, recorded, size))
    if size > recorded:
        raise _fail("checkpoint '%s': %d bytes where the header records %d: trailing bytes were appended"
                    % (path, size, recorded))
    crc = _crc_range(fd, path, UB, size)
    if crc != dcrc:
        raise _fail("checkpoint '%s': checksum mismatch over bytes %d..%d (stored %08x, computed %08x): the file "
                    "is damaged" % (path, UB, size, dcrc, crc))


class Raw:
    """The file's bytes as the C loader reads them (lt__h5_raw)."""

    def __init__(self, fd, size, path, allow_unchecksummed):
        self.fd, self.size, self.path, self.base, self.check = fd, size, path, 0, False
        sb = pread(fd, UB, 48) if size >= UB + 9 else b""
        if len(sb) < 9 or sb[:8] != HDF5_SIG:
            raise _fail("checkpoint '%s': no HDF5 superblock at byte %d" % (path, UB))
        version = sb[8]
        if version < 2:
            if allow_unchecksummed:
                return
            raise _fail("checkpoint '%s': an HDF5 file with a version-%d superblock and unchecksummed object headers "
                        "(h5py's default layout), which libhdf5 1.10 cannot parse safely: refused; %s"
                        % (path, version, REWRITE_HINT))
        if version > 3 or len(sb) < 48:
            raise _fail("checkpoint '%s': HDF5 superblock version %d is not supported" % (path, version))
        if sb[9] != 8 or sb[10] != 8:
            raise _fail("checkpoint '%s': the HDF5 superblock uses %d-byte addresses and %d-byte lengths (only 8 are "
                        "accepted)" % (path, sb[9], sb[10]))
        self.base, ext, _eof, root = struct.unpack("<QQQQ", sb[12:44])
        if allow_unchecksummed:
            return
        self.check = True
        self.ohdr(root, "the root group")
        if ext != UNDEF:
            self.ohdr(ext, "the superblock extension")

    def ohdr(self, addr, obj):
        """lt__h5_check_ohdr: a version-2 object header at addr."""
        if not self.check:
            return
        off = self.base + addr
        sig = pread(self.fd, off, 5) if addr != UNDEF and off <= self.size else b""
        if len(sig) < 5:
            raise _fail("checkpoint '%s': the object header of %s (address %d) is outside the file"
                        % (self.path, obj, addr))
        if sig[:4] != b"OHDR" and sig[0] == 1:
            raise _fail("checkpoint '%s': %s has a version-1 object header without a checksum (h5py's default "
                        "layout), which libhdf5 1.10 cannot parse safely: refused; %s" % (self.path, obj, REWRITE_HINT))
        if sig[:4] != b"OHDR":
            raise _fail("checkpoint '%s': %s (address %d) does not start with an object header (byte 0x%02x): "
                        "damaged" % (self.path, obj, addr, sig[0]))
        if sig[4] != 2:
            raise _fail("checkpoint '%s': %s has an object header of version %d (expected 2)" % (self.path, obj, sig[4]))

    def message_types(self, addr):
        """The message types of the version-2 object header at addr (chunk 0
        and its continuations), read here; libhdf5 verifies the checksums."""
        types, chunks, seen = [], [(self.base + addr, None)], 0
        while chunks and seen < 64:
            off, length = chunks.pop(0)
            seen += 1
            if length is None:  # chunk 0: "OHDR", version, flags, [times], [phase change], chunk size
                h = pread(self.fd, off, 6)
                if len(h) < 6:
                    break
                flags = h[5]
                p = off + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
                w = 1 << (flags & 3)
                raw = pread(self.fd, p, w)
                if len(raw) < w:
                    break
                length = int.from_bytes(raw, "little")
                start = p + w
            else:  # a continuation chunk: "OCHK", messages, checksum
                flags = self._flags
                start = off + 4
                length -= 8
            self._flags = flags
            body = pread(self.fd, start, min(length, 1 << 20))
            i, head = 0, 4 + (2 if flags & 0x04 else 0)
            while i + head <= len(body):
                mtype, msize = body[i], int.from_bytes(body[i + 1:i + 3], "little")
                data = body[i + head:i + head + msize]
                types.append(mtype)
                if mtype == 0x10 and len(data) >= 16:  # continuation: address, length
                    a, n = struct.unpack("<QQ", data[:16])
                    chunks.append((self.base + a, n))
                i += head + msize
        return types


def _tdesc(t):
    """lt__h5_type_desc: "f32 (float, 4 bytes, little-endian)" for libtensor's
    dtypes, "float, 4 bytes, big-endian" for other types."""
    import h5py
    cls = t.get_class()
    names = {h5py.h5t.FLOAT: "float", h5py.h5t.STRING: "string", h5py.h5t.ENUM: "enum",
             h5py.h5t.COMPOUND: "compound", h5py.h5t.ARRAY: "array", h5py.h5t.VLEN: "variable-length",
             h5py.h5t.OPAQUE: "opaque", h5py.h5t.REFERENCE: "reference", h5py.h5t.BITFIELD: "bitfield",
             h5py.h5t.TIME: "time"}
    if cls == h5py.h5t.INTEGER:
        what = "unsigned integer" if t.get_sign() == h5py.h5t.SGN_NONE else "signed integer"
    else:
        what = names.get(cls, "unknown type")
    try:
        order = t.get_order()
    except Exception:
        order = -1
    ord_ = ", little-endian" if order == h5py.h5t.ORDER_LE else ", big-endian" if order == h5py.h5t.ORDER_BE else ""
    name = lt_dtype_of(t)
    if name:
        return "%s (%s, %d bytes%s)" % (name, what, t.get_size(), ord_)
    return "%s, %d bytes%s" % (what, t.get_size(), ord_)


def lt_dtype_of(t):
    """lt__h5_dtype_of: the libtensor dtype whose file type t equals, or None."""
    import h5py
    for name, ft in (("f32", h5py.h5t.IEEE_F32LE), ("f64", h5py.h5t.IEEE_F64LE), ("i32", h5py.h5t.STD_I32LE),
                     ("i64", h5py.h5t.STD_I64LE)):
        if t.equal(ft):
            return name
    return "bool" if _is_bool_enum(t) else None


def _is_bool_enum(t):
    import h5py
    if t.get_class() != h5py.h5t.ENUM or t.get_nmembers() != 2 or t.get_size() != 1:
        return False
    if t.get_super().get_class() != h5py.h5t.INTEGER:
        return False
    return all(t.get_member_name(i) == (b"TRUE" if i else b"FALSE") and t.get_member_value(i) == i for i in range(2))


def file_type_of(t):
    """The libtensor dtype name of an HDF5 dataset type libtensor writes, or None."""
    import h5py
    cls, size = t.get_class(), t.get_size()
    if _is_bool_enum(t):
        return "bool"
    if cls in (h5py.h5t.INTEGER, h5py.h5t.FLOAT) and t.get_order() != h5py.h5t.ORDER_LE:
        return None
    if cls == h5py.h5t.FLOAT:
        if size == 4 and t.equal(h5py.h5t.IEEE_F32LE):
            return "f32"
        if size == 8 and t.equal(h5py.h5t.IEEE_F64LE):
            return "f64"
        return None
    if cls == h5py.h5t.INTEGER:
        signed = t.get_sign() != h5py.h5t.SGN_NONE
        return {(4, True): "i32", (8, True): "i64", (1, False): "u8", (8, False): "u64"}.get((size, signed))
    return None


_NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u64": np.uint64,
       "bool": np.bool_}
_SIZE = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "u8": 1, "u64": 8, "bool": 1}


def _dims(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def check_dataset(d, path, file_size, raw_type=None, rank=None, shape=None):
    """lt__h5_check_dataset without a model: (dtype name, shape, bytes).
    raw_type (an h5py type: /extra blobs, /rng) must be the type exactly,
    rank or shape the dims, as the C loader asks for those groups."""
    import h5py
    dcpl = d.id.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5py.h5d.VIRTUAL:
        raise _fail("checkpoint: dataset %s is a virtual dataset: refused" % path)
    if layout not in (h5py.h5d.COMPACT, h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED):
        raise _fail("checkpoint: dataset %s has an unknown storage layout %d" % (path, layout))
    if dcpl.get_external_count() != 0:
        raise _fail("checkpoint: dataset %s keeps its data in external files: refused" % path)
    nf = dcpl.get_nfilters()
    if nf < 0 or nf > 8:
        raise _fail("checkpoint: dataset %s: bad filter pipeline" % path)
    for i in range(nf):
        f = dcpl.get_filter(i)[0]
        if f != h5py.h5z.FILTER_DEFLATE:
            raise _fail("checkpoint: dataset %s uses filter %d: only deflate (%d) is accepted"
                        % (path, f, h5py.h5z.FILTER_DEFLATE))
    t = d.id.get_type()
    dt = file_type_of(t)
    if raw_type is not None and not t.equal(raw_type):
        raise _fail("checkpoint: dataset %s is %s, not %s" % (path, _tdesc(t), _tdesc(raw_type)), "LT_ERR_DTYPE")
    if dt is None:
        raise _fail("checkpoint: dataset %s is %s, not a type libtensor writes (f32, f64, i32, i64 or bool)"
                    % (path, _tdesc(t)), "LT_ERR_DTYPE")
    sp = d.id.get_space()
    sc = sp.get_simple_extent_type()
    if sc == h5py.h5s.SCALAR:
        dims = ()
    elif sc == h5py.h5s.SIMPLE:
        nd = sp.get_simple_extent_ndims()
        if nd > MAX_DIMS:
            raise _fail("checkpoint: dataset %s has rank %d, more than LT_MAX_DIMS (%d)" % (path, nd, MAX_DIMS),
                        "LT_ERR_SHAPE")
        dims = tuple(int(x) for x in sp.get_simple_extent_dims())
    else:
        raise _fail("checkpoint: dataset %s has a null or unknown dataspace" % path)
    numel = 1
    for x in dims:
        numel *= x
        if x > (1 << 63) - 1 or numel >= 1 << 64:
            raise _fail("checkpoint: dataset %s has dims %s: the element count overflows 64 bits" % (path, _dims(dims)),
                        "LT_ERR_OVERFLOW")
    nbytes = numel * _SIZE[dt]
    if nbytes >= 1 << 64 or numel > (1 << 63) - 1:
        raise _fail("checkpoint: dataset %s has dims %s: the byte count overflows 64 bits" % (path, _dims(dims)),
                    "LT_ERR_OVERFLOW")
    if nbytes > MAX_BYTES:
        raise _fail("checkpoint: dataset %s has dims %s: %d bytes, over the cap of %d" % (path, _dims(dims), nbytes,
                    MAX_BYTES), "LT_ERR_OVERFLOW")
    limit = file_size * MAX_RATIO + (1 << 20) if nf else file_size
    if nbytes > limit:
        raise _fail("checkpoint: dataset %s has dims %s: %d bytes cannot be stored in a %d-byte file"
                    % (path, _dims(dims), nbytes, file_size), "LT_ERR_OVERFLOW")
    if rank is not None and (len(dims) != rank or (shape is not None and dims != tuple(shape))):
        raise _fail("checkpoint: dataset %s has shape %s, expected %s" % (path, _dims(dims), _dims(shape) if shape
                    is not None else "rank 1" if rank == 1 else "another rank"), "LT_ERR_SHAPE")
    if numel > 0:
        if layout == h5py.h5d.CHUNKED:
            cd = dcpl.get_chunk() if dims else ()
            written = bool(dims) and len(cd) == len(dims) and all(c > 0 for c in cd)
            if written:
                want = 1
                for x, c in zip(dims, cd):
                    want *= (x + c - 1) // c
                try:
                    written = d.id.get_num_chunks() == want
                except Exception:
                    written = False
        else:
            written = d.id.get_space_status() == h5py.h5d.SPACE_STATUS_ALLOCATED
        if not written:
            raise _fail("checkpoint: dataset %s was never (fully) written" % path)
    return dt, dims, nbytes


def read_attr(obj, what, name):
    """read_attr: one attribute as int, float or str (h5py's bools as 0/1)."""
    import h5py
    a = h5py.h5a.open(obj.id, name.encode("utf-8"))
    try:
        t, sp = a.get_type(), a.get_space()
        sc = sp.get_simple_extent_type()
        if not (sc == h5py.h5s.SCALAR or (sc == h5py.h5s.SIMPLE and sp.get_simple_extent_npoints() == 1)):
            raise _fail("checkpoint: attribute '%s' of %s is not a single value" % (name, what))
        cls, size = t.get_class(), t.get_size()
        if cls == h5py.h5t.INTEGER and size <= 8 and (t.get_sign() != h5py.h5t.SGN_NONE or size < 8):
            buf = np.zeros(a.shape, dtype=np.int64)
            a.read(buf, mtype=h5py.h5t.NATIVE_INT64)
            return int(buf.reshape(-1)[0])
        if cls == h5py.h5t.ENUM and _is_bool_enum(t):
            buf = np.zeros(a.shape, dtype=np.int8)
            a.read(buf, mtype=t)
            v = int(buf.reshape(-1)[0])
            if v not in (0, 1):
                raise _fail("checkpoint: bool attribute '%s' of %s holds %d, not 0 or 1" % (name, what, v))
            return v
        if cls == h5py.h5t.FLOAT and size in (4, 8):
            buf = np.zeros(a.shape, dtype=np.float64)
            a.read(buf, mtype=h5py.h5t.NATIVE_DOUBLE)
            return float(buf.reshape(-1)[0])
        if cls == h5py.h5t.STRING:
            var = t.is_variable_str()
            if not var and not (1 <= size <= MAX_STRING):
                raise _fail("checkpoint: string '%s' of %s has an unsupported size %d" % (name, what, size))
            v = obj.attrs[name]
            if isinstance(v, np.ndarray):
                v = v.reshape(-1)[0]
            if isinstance(v, str):
                v = v.encode("utf-8", "surrogateescape")
            if v is None:
                raise _fail("checkpoint: string '%s' of %s is NULL" % (name, what))
            v = bytes(v).split(b"\0", 1)[0]
            if len(v) > MAX_STRING:
                raise _fail("checkpoint: string '%s' of %s is longer than %d bytes" % (name, what, MAX_STRING))
            return v.decode("utf-8", "replace")
        raise _fail("checkpoint: attribute '%s' of %s has an unsupported type (%s): expected int64, double, string "
                    "or bool" % (name, what, _tdesc(t)))
    finally:
        a.close()


def check_key(key):
    n = len(key.encode("utf-8"))
    return 1 <= n <= 255 and "/" not in key and key not in (".", "..")


def read_attrs(obj, what):
    """Every attribute of obj, checked (lt__h5_read_meta's first half), in name order."""
    names = []
    for k in obj.attrs.keys():
        names.append(k)
        if len(names) > MAX_ATTRS:
            raise _fail("checkpoint: more than %d attributes on one object" % MAX_ATTRS)
    out = {}
    for k in sorted(names, key=lambda s: s.encode("utf-8")):
        if not check_key(k):
            raise _fail("checkpoint: attribute name '%.64s' of %s is not a valid key" % (k, what))
        out[k] = read_attr(obj, what, k)
    return out


def _names(g):
    """g's link names in libhdf5's name order (strcmp of the bytes)."""
    return [n for n, _ in _links(g)]


class _Link:
    __slots__ = ("type", "u")

    def __init__(self, type_, u):
        self.type, self.u = type_, u


def _links(g):
    """[(name, LinkInfo)] of g in name order, at most MAX_OBJECTS + 1."""
    out = []  # h5py passes one LinkInfo object, changed in place: copy its fields
    g.id.links.iterate(lambda n, i: out.append((n, _Link(i.type, i.u))) if len(out) <= MAX_OBJECTS else 1,
                       info=True)
    out.sort(key=lambda t: t[0])
    return out


def _creation_rank(g, names):
    """{name: rank} in creation order where the group tracks it, else name order."""
    import h5py
    order = []
    try:
        g.id.links.iterate(lambda n: order.append(n) if len(order) <= MAX_OBJECTS else 1,
                           idx_type=h5py.h5.INDEX_CRT_ORDER)
    except Exception:  # creation order not tracked
        order = names
    if sorted(order) != list(names):
        order = names
    return {n: i for i, n in enumerate(order)}


def walk(f, raw, path):
    """lt__h5_walk: [(hdf5 path, dotted name, h5py Dataset, creation key)] of
    every dataset under path, in the C walk's order (depth first, by name),
    every link checked before h5py opens its object; sorting by the key gives
    the file's creation order. Iterative (no recursion)."""
    import h5py
    g = f[path]
    root_info = h5py.h5o.get_info(g.id)
    if raw.check and 0x11 in raw.message_types(root_info.addr):
        raise _fail("checkpoint '%s': group %s keeps its links in an old-style symbol table (no checksums): refused; "
                    "%s" % (raw.path, path, REWRITE_HINT))
    seen = {root_info.addr}
    out, count = [], 0

    def frame(gpath, gname, depth, grp, key):
        links = _links(grp)
        return [gpath, gname, depth, grp, links, 0, key, _creation_rank(grp, [n for n, _ in links])]
    stack = [frame(path, "", 0, g, ())]  # depth first, in name order, as the C walk's callbacks
    while stack:
        top = stack[-1]
        gpath, gname, depth, grp, links, i, key, rank = top
        if i == len(links):
            stack.pop()
            continue
        top[5] += 1
        bname, li = links[i]
        name = bname.decode("utf-8", "surrogateescape")
        count += 1
        if count > MAX_OBJECTS:
            raise _fail("checkpoint: more than %d objects: refused" % MAX_OBJECTS)
        if li.type != h5py.h5l.TYPE_HARD:
            kind = {h5py.h5l.TYPE_SOFT: "soft", h5py.h5l.TYPE_EXTERNAL: "external"}.get(li.type, "user-defined")
            raise _fail("checkpoint: %s/%s is a %s link: only hard links are accepted" % (gpath, name, kind))
        if "." in name:
            raise _fail("checkpoint: %s/%s: a name component contains '.', which separates components" % (gpath, name))
        if len(gpath.encode()) + 1 + len(bname) > MAX_PATH:
            raise _fail("checkpoint: a path under %.64s is longer than %d bytes" % (gpath, MAX_PATH))
        if li.u in seen:
            raise _fail("checkpoint: %s/%s is linked more than once (a cycle or an alias): refused" % (gpath, name))
        seen.add(li.u)
        full = gpath + "/" + name
        raw.ohdr(li.u, full)
        oi = h5py.h5o.get_info(grp.id, bname)
        dotted = gname + "." + name if gname else name
        k = key + (rank[bname],)
        if oi.type == h5py.h5o.TYPE_GROUP:
            if depth + 1 > MAX_DEPTH:
                raise _fail("checkpoint: groups nested deeper than %d at %s" % (MAX_DEPTH, full))
            if raw.check and 0x11 in raw.message_types(li.u):
                raise _fail("checkpoint '%s': group %s keeps its links in an old-style symbol table (no checksums): "
                            "refused; %s" % (raw.path, full, REWRITE_HINT))
            stack.append(frame(full, dotted, depth + 1, h5py.Group(h5py.h5g.open(grp.id, bname)), k))
        elif oi.type == h5py.h5o.TYPE_DATASET:
            out.append((full, dotted, h5py.Dataset(h5py.h5d.open(grp.id, bname)), k))
        else:
            raise _fail("checkpoint: %s is a %s, not a group or dataset: refused"
                        % (full, "named datatype" if oi.type == h5py.h5o.TYPE_NAMED_DATATYPE else "unknown object"))
    return out


__all__ = ["CheckpointError", "open_checked", "verify_fd", "Raw", "walk", "check_dataset", "read_attrs",
           "read_attr", "check_key"]
