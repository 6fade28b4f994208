"""python/libtensor on hostile files (issue 26, items 10-15): the package
refuses what the C readers refuse, with their status and message, and raises
nothing but its own exceptions.

- Safetensors: every case of the shared spec (python/libtensor/safetensors_spec.json,
  which tests/test_safetensors.c runs through the C reader), 3,000 mutations
  of a good file through both readers (LT_LIB: lt_st_open by ctypes), every
  cut of a good file, a FIFO, a directory, /dev/zero.
- Checkpoints: files made here with h5py (external storage pointing at
  /etc/passwd, external and soft links, virtual datasets, h5py's unchecksummed
  layout, named types, hard-link cycles, shapes of 1-320 TiB, FIFOs), each
  also through lt_ckpt_describe (LT_LIB) where it has the same check, and,
  when CRAFTED_CKPT names the C suite's program, every case of
  tests/test_crafted_ckpt.c: the C suite writes each case and its outcome
  (LT_CRAFTED_DUMP) and every case the C loader refuses for the file's
  structure must be refused here with the same message.
"""
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

import h5py
import numpy as np

import libtensor as lt
from libtensor import safetensors as st


def spec_file(c, path):
    """The file a spec case describes (tests/test_safetensors.c's spec_file)."""
    h = bytes.fromhex(c["header_hex"]) if "header_hex" in c else c["header"].encode("utf-8")
    n = c.get("header_length", len(h))
    b = n.to_bytes(8, "little") + h + b"\0" * c["data"]
    if "file_length" in c:
        b = b[:c["file_length"]]
    with open(path, "wb") as f:
        f.write(b)


def no_hang(test, fn, seconds=10):
    """Runs fn in a thread; fails the test if it has not returned within seconds."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 (reported below)
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    test.assertFalse(t.is_alive(), "still running after %d s" % seconds)
    if "error" in out:
        raise out["error"]
    return out.get("value")


class SafetensorsSpec(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="lt-st-spec-")

    def tearDown(self):
        shutil.rmtree(self.d)

    def test_limits(self):
        self.assertEqual(st.MAX_HEADER, 100000000)  # the C reader's LT_ST_MAX_HEADER, from the spec
        self.assertEqual(st.MAX_DIMS, 8)

    def test_spec_cases(self):
        n_ok = n_refused = 0
        for c in st.SPEC["cases"]:
            p = os.path.join(self.d, "case.safetensors")
            spec_file(c, p)
            exp = c.get("python", c["expect"])
            with self.subTest(case=c["name"]):
                if "ok" in exp:
                    t, _ = st.load(p)
                    self.assertEqual({k: list(v.shape) for k, v in t.items()}, exp["ok"])
                    n_ok += 1
                    continue
                with self.assertRaises(st.SafetensorsError) as cm:
                    st.load(p)
                want = exp["message"].replace("{path}", p)
                got = str(cm.exception)
                self.assertEqual(cm.exception.status, exp["status"], got)
                if exp.get("prefix"):
                    self.assertTrue(got.startswith(want), "%r\ndoes not start with\n%r" % (got, want))
                else:
                    self.assertEqual(got, want)
                self.assertIsInstance(cm.exception, lt.LibtensorError)
                n_refused += 1
        print("safetensors spec: %d cases through the Python reader, %d open, %d refused with the spec's status "
              "and message" % (n_ok + n_refused, n_ok, n_refused))

    def test_cuts_and_special_files(self):
        p = os.path.join(self.d, "t.safetensors")
        st.save(p, {"a": np.ones((3, 5), np.float32)})
        with open(p, "rb") as f:
            whole = f.read()
        cut = os.path.join(self.d, "cut.safetensors")
        for n in range(len(whole)):
            with open(cut, "wb") as f:
                f.write(whole[:n])
            with self.assertRaises(st.SafetensorsError, msg="cut at %d" % n):
                st.load(cut)
        fifo = os.path.join(self.d, "fifo")
        os.mkfifo(fifo)
        for path, kind in ((fifo, "a FIFO (named pipe)"), (self.d, "a directory"), ("/dev/zero", "a character device")):
            with self.assertRaises(st.SafetensorsError) as cm:
                no_hang(self, lambda: st.load(path))
            self.assertEqual(str(cm.exception), "safetensors_open: %s: is %s, not a regular file: refused (only "
                             "regular files are read)" % (path, kind))
        with self.assertRaises(st.SafetensorsError) as cm:
            st.load(os.path.join(self.d, "absent"))
        self.assertEqual(cm.exception.status, "LT_ERR_IO")

    def test_save_refuses_what_load_refuses(self):
        p = os.path.join(self.d, "w.safetensors")
        for bad in ("", "__metadata__", "a\0b"):
            with self.assertRaises(st.SafetensorsError):
                st.save(p, {bad: np.zeros(2, np.float32)})
        with self.assertRaises(st.SafetensorsError):
            st.save(p, {"r9": np.zeros((1,) * 9, np.float32)})


class SafetensorsBothReaders(unittest.TestCase):
    """Mutated files through the C reader (lt_st_open by ctypes) and the Python reader: the same verdict,
    and the same status and message unless both refuse the JSON itself (each parser words its own)."""

    def test_mutations(self):
        if "LT_LIB" not in os.environ:
            self.skipTest("LT_LIB does not name the library")
        import ctypes as C
        import random
        lib = C.CDLL(os.environ["LT_LIB"])
        lib.lt_st_open.argtypes, lib.lt_st_open.restype = [C.c_char_p], C.c_void_p
        lib.lt_st_close.argtypes = [C.c_void_p]
        lib.lt_last_error.restype = C.c_char_p
        lib.lt_last_status.restype = C.c_int
        lib.lt_status_name.argtypes, lib.lt_status_name.restype = [C.c_int], C.c_char_p
        d = tempfile.mkdtemp(prefix="lt-st-both-")
        try:
            good = os.path.join(d, "good.safetensors")
            st.save(good, {"a": np.ones((2, 3), np.float32), "b.x": np.arange(4, dtype=np.int64),
                           "c": np.zeros((), np.float64)}, metadata={"format": "pt"})
            with open(good, "rb") as f:
                whole = f.read()
            n = int.from_bytes(whole[:8], "little")
            rng = random.Random(26)
            alphabet = b'{}[]",:0123456789-.eE +tfnul\\ax_"'
            p = os.path.join(d, "m.safetensors")
            same = parse = 0
            for k in range(3000):
                b = bytearray(whole)
                for _ in range(1 + k % 3):
                    at = 8 + rng.randrange(n) if k % 10 else rng.randrange(8)
                    b[at] = rng.choice(alphabet) if k % 10 else rng.randrange(256)
                if k % 7 == 0:
                    b = b[:rng.randrange(len(b) + 1)]
                with open(p, "wb") as f:
                    f.write(b)
                h = lib.lt_st_open(p.encode())
                if h:
                    lib.lt_st_close(h)
                    c = ("LT_OK", "")
                else:
                    c = (lib.lt_status_name(lib.lt_last_status()).decode(), lib.lt_last_error().decode("utf-8", "replace"))
                try:
                    st.load(p)
                    py = ("LT_OK", "")
                except st.SafetensorsError as e:
                    py = (e.status, str(e))
                tag = "does not parse: "
                c_only = [x["name"] for x in st.SPEC["dtypes"] if not x["c"]]
                if py[0] == "LT_OK" and c[0] == "LT_ERR_DTYPE" and any('is "%s"' % x in c[1] for x in c_only):
                    continue  # a dtype only the Python reader reads (the spec's dtypes table)
                if tag in c[1] and tag in py[1]:
                    self.assertEqual(c[1].split(tag)[0], py[1].split(tag)[0], bytes(b[8:8 + n]))
                    parse += 1
                else:  # (the dtypes each reader reads are listed in its own words)
                    self.assertEqual((c[0], c[1].split(": libtensor reads ")[0]),
                                     (py[0], py[1].split(": libtensor reads ")[0]), bytes(b[8:8 + n]))
                    same += 1
            print("safetensors mutations through both readers: 3000 files, %d with the same status and message, "
                  "%d refused by both parsers as JSON" % (same, parse))
        finally:
            shutil.rmtree(d)


# ---- checkpoints ---------------------------------------------------------------------------------

# What the C loader refuses because of the model it builds, not the file's structure: the
# Python reader has no model, so it may accept these (its checks stop at the format).
MODEL_LEVEL = ("the model's", "does not match (strict load)", "not given", "in optim_config", "tf_config",
               "transformer_new", "/optim attribute", "/schedule attribute", "outside [", "unknown schedule kind",
               "tokenizer", "optimizer", "saved setting")


def c_describe():
    """lt_ckpt_describe through ctypes (the C loader's checks without a model), or None without LT_LIB."""
    if "LT_LIB" not in os.environ:
        return None
    import ctypes as C
    lib = C.CDLL(os.environ["LT_LIB"])
    lib.lt_ckpt_describe.argtypes = [C.c_char_p, C.c_void_p, C.POINTER(C.c_void_p)]
    lib.lt_ckpt_describe.restype = C.c_int
    lib.lt_ckpt_desc_free.argtypes = [C.c_void_p]
    lib.lt_last_error.restype = C.c_char_p
    lib.lt_status_name.restype = C.c_char_p
    lib.lt_status_name.argtypes = [C.c_int]

    def describe(path):
        d = C.c_void_p()
        s = lib.lt_ckpt_describe(path.encode(), None, C.byref(d))
        if s == 0:
            lib.lt_ckpt_desc_free(d)
            return "LT_OK", ""
        return lib.lt_status_name(s).decode(), lib.lt_last_error().decode("utf-8", "replace")
    return describe


def good_checkpoint(path, **tensors):
    """A small training checkpoint, as libtensor.save writes it."""
    t = {"embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "head.bias": np.zeros(3, np.float32)}
    t.update(tensors)
    lt.save(path, lt.Checkpoint(content="training", config={"arch": "decoder-only", "d_model": 4}, tensors=t,
                                schedule={"step": 2}, rng={"dropout": (1, 2)},
                                extra={"tokenizer": b"\x01\x02", "run.tokens": 5}))


def resealed(path, change, libver="latest"):
    """path with change(h5py.File) applied, resealed (a crafted file carries a valid seal)."""
    with h5py.File(path, "r+", libver=libver) as f:
        change(f)
    lt.seal(path)


class CraftedCheckpoints(unittest.TestCase):
    """Files made here with h5py, each through libtensor.load and (with LT_LIB) lt_ckpt_describe."""

    @classmethod
    def setUpClass(cls):
        cls.d = tempfile.mkdtemp(prefix="lt-ck-hostile-")
        cls.describe = staticmethod(c_describe()) if "LT_LIB" in os.environ else None
        cls.counts = {"cases": 0, "c_same": 0}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.d)
        print("crafted checkpoints made with h5py: %d cases refused by the Python reader, %d of them through the C "
              "reader too with the same message" % (cls.counts["cases"], cls.counts["c_same"]))

    def case(self, name, change=None, want=None, status="LT_ERR_FORMAT", build=None, c_same=True, **load):
        p = os.path.join(self.d, name.replace(" ", "_") + ".h5")
        if build:
            build(p)
        else:
            good_checkpoint(p)
            resealed(p, change)
        with self.assertRaises(lt.CheckpointError, msg=name) as cm:
            lt.load(p, **load)
        got = str(cm.exception)
        self.assertIn(want, got, name)
        self.assertEqual(cm.exception.status, status, got)
        self.counts["cases"] += 1
        if self.describe and c_same:
            cs, cm_ = self.describe(p)
            self.assertNotEqual(cs, "LT_OK", "%s: the C reader accepts it" % name)
            norm = cm_.replace("checkpoint: ", "checkpoint '%s': " % p, 1)
            self.assertEqual(norm, got, name)
            self.counts["c_same"] += 1
        return p

    def test_good(self):
        p = os.path.join(self.d, "good.h5")
        good_checkpoint(p)
        ck = lt.load(p)
        np.testing.assert_array_equal(ck.tensors["embed.weight"], np.arange(12, dtype=np.float32).reshape(3, 4))
        self.assertEqual(list(ck.tensors), ["embed.weight", "head.bias"])
        self.assertEqual(ck.rng, {"dropout": (1, 2)})
        self.assertEqual(ck.extra["tokenizer"], b"\x01\x02")
        if self.describe:
            self.assertEqual(self.describe(p), ("LT_OK", ""))
        with self.assertRaisesRegex(lt.CheckpointError, "memory cap"):
            lt.load(p, max_bytes=40)
        # the object headers as the package reads them: groups hold links (0x02 link info, 0x06 links),
        # never an old-style symbol table (0x11, refused); a dataset has its dataspace (0x01)
        from libtensor import h5checks
        fd, size = h5checks.open_checked(p)
        try:
            raw = h5checks.Raw(fd, size, p, False)
            with h5py.File(p, "r") as f:
                for name in ("/", "/model", "/model/embed"):
                    types = raw.message_types(h5py.h5o.get_info(f[name].id).addr)
                    self.assertIn(0x02, types, name)
                    self.assertNotIn(0x11, types, name)
                self.assertIn(0x01, raw.message_types(h5py.h5o.get_info(f["/model/embed/weight"].id).addr))
        finally:
            os.close(fd)

    def test_external_storage(self):
        """Item 10: a dataset stored in /etc/passwd is refused before a byte of it is read."""
        n = os.path.getsize("/etc/passwd") // 4

        def change(f):
            del f["model/embed/weight"]
            f["model/embed"].create_dataset("weight", shape=(n,), dtype="<f4", external=[("/etc/passwd", 0, n * 4)])
        self.case("external storage", change, "dataset /model/embed/weight keeps its data in external files: refused")

    def test_links(self):
        other = os.path.join(self.d, "other.h5")
        with h5py.File(other, "w") as f:
            f["x"] = np.ones(3, np.float32)
        self.case("external link", lambda f: f["model"].__setitem__("ext", h5py.ExternalLink(other, "/x")),
                  "/model/ext is a external link: only hard links are accepted")
        self.case("soft link", lambda f: f["model"].__setitem__("soft", h5py.SoftLink("/model/head/bias")),
                  "/model/soft is a soft link: only hard links are accepted")
        self.case("hard-link cycle", lambda f: f["model/embed"].__setitem__("loop", f["model"]),
                  "/model/embed/loop is linked more than once (a cycle or an alias): refused")
        self.case("alias", lambda f: f["model/head"].__setitem__("alias", f["model/head/bias"]),
                  "is linked more than once (a cycle or an alias): refused")
        self.case("extra external link", lambda f: f["extra"].__setitem__("ext", h5py.ExternalLink(other, "/x")),
                  "'ext' in /extra is a soft, external or user-defined link: refused", c_same=False)

    def test_virtual_dataset(self):
        other = os.path.join(self.d, "vsrc.h5")
        with h5py.File(other, "w") as f:
            f["x"] = np.ones(3, np.float32)

        def change(f):
            layout = h5py.VirtualLayout(shape=(3,), dtype="<f4")
            layout[:] = h5py.VirtualSource(other, "x", shape=(3,))
            del f["model/head/bias"]
            f["model/head"].create_virtual_dataset("bias", layout)
        self.case("virtual dataset", change, "dataset /model/head/bias is a virtual dataset: refused")

    def test_unchecksummed_layout(self):
        """Item 11: h5py's default layout (libhdf5 aborts on crafted files in it) is refused before h5py opens it."""
        def build(p):
            with h5py.File(p, "w", userblock_size=512) as f:  # libver "earliest": superblock 0
                for k, v in (("format", "libtensor-checkpoint"), ("format_version", 2), ("library_version", "x"),
                             ("content", "model")):
                    f.attrs[k] = v
                f.create_group("model")["w"] = np.ones(2, np.float32)
            lt.seal(p)
        p = self.case("unchecksummed", want="an HDF5 file with a version-0 superblock and unchecksummed object "
                      "headers (h5py's default layout), which libhdf5 1.10 cannot parse safely: refused", build=build)
        ck = lt.load(p, allow_unchecksummed=True)  # from a source one trusts
        np.testing.assert_array_equal(ck.tensors["w"], np.ones(2, np.float32))

    def test_named_type_filters_names(self):
        self.case("named type", lambda f: f["model"].__setitem__("t", np.dtype("<f4")),
                  "/model/t is a named datatype, not a group or dataset: refused")

        def shuffle(f):
            del f["model/head/bias"]
            f["model/head"].create_dataset("bias", data=np.zeros(3, np.float32), shuffle=True, chunks=(3,))
        self.case("shuffle filter", shuffle, "dataset /model/head/bias uses filter 2: only deflate (1) is accepted")
        self.case("dotted name", lambda f: f["model/head"].__setitem__("a.b", np.zeros(1, np.float32)),
                  "/model/head/a.b: a name component contains '.', which separates components")

        def deep(f):
            g = f["model"]
            for i in range(66):
                g = g.create_group("g")
            g["w"] = np.zeros(1, np.float32)
        self.case("deep groups", deep, "groups nested deeper than 64 at")
        self.case("big-endian", lambda f: f["model/head"].create_dataset("be", data=np.zeros(2, ">f4")),
                  "dataset /model/head/be is float, 4 bytes, big-endian, not a type libtensor writes",
                  status="LT_ERR_DTYPE", c_same=False)

    def test_sizes_from_metadata(self):
        """Item 12: shapes of 1-320 TiB are refused from the metadata, before anything is allocated."""
        def huge(shape, chunks):
            def change(f):
                f["model/head"].create_dataset("huge", shape=shape, dtype="<f4", chunks=chunks)
            return change
        self.case("320 TiB", huge((1 << 40, 80), (1, 80)), "over the cap of 1099511627776",
                  status="LT_ERR_OVERFLOW")
        self.case("1 TiB", huge((1 << 38,), (1 << 20,)), "bytes cannot be stored in a", status="LT_ERR_OVERFLOW")
        self.case("past the file", huge((1 << 22,), None), "bytes cannot be stored in a", status="LT_ERR_OVERFLOW")
        self.case("rank 9", huge((1,) * 9, None), "has rank 9, more than LT_MAX_DIMS (8)", status="LT_ERR_SHAPE")
        self.case("never written", huge((4,), None), "dataset /model/head/huge was never (fully) written")

    def test_special_files(self):
        """Item 13's twin for checkpoints: a FIFO, a directory, a device are refused at once."""
        fifo = os.path.join(self.d, "ck.fifo")
        os.mkfifo(fifo)
        for path, kind in ((fifo, "a FIFO (named pipe)"), (self.d, "a directory"), ("/dev/zero", "a character device")):
            with self.assertRaises(lt.CheckpointError) as cm:
                no_hang(self, lambda: lt.load(path))
            self.assertEqual(str(cm.exception), "checkpoint: %s: is %s, not a regular file: refused (only regular "
                             "files are read)" % (path, kind))
            with self.assertRaises(lt.CheckpointError):
                no_hang(self, lambda: lt.verify(path))

    def test_seal(self):
        p = os.path.join(self.d, "seal.h5")
        good_checkpoint(p)
        with open(p, "ab") as f:
            f.write(b"x")
        self.case("trailing byte", want="trailing bytes were appended", build=lambda q: shutil.copy(p, q))
        with open(p, "r+b") as f:
            f.truncate(600)
        self.case("truncated", want="truncated: the header records", build=lambda q: shutil.copy(p, q))


class CraftedByC(unittest.TestCase):
    """Every case of tests/test_crafted_ckpt.c (CRAFTED_CKPT) through the Python reader."""

    def test_every_case(self):
        exe = os.environ.get("CRAFTED_CKPT")
        if not exe or not os.path.exists(exe):
            self.skipTest("CRAFTED_CKPT does not name tests/test_crafted_ckpt")
        total = {"cases": 0, "both accept": 0, "both refuse, same message": 0, "both refuse, model-level": 0,
                 "C refuses, model-level, Python accepts": 0}
        for arch in ("encdec", "deconly", "enconly"):
            d = tempfile.mkdtemp(prefix="lt-crafted-py-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
            try:
                env = dict(os.environ, LT_CRAFTED_DUMP=d, CK_RUN_CASE=arch, CK_FORK="no")
                r = subprocess.run([exe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
                self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace")[-2000:])
                with open(os.path.join(d, "manifest.tsv"), encoding="utf-8", errors="replace") as f:
                    rows = [line.rstrip("\n").split("\t") for line in f]
                for fn, name, stage, status, msg in rows:
                    self.replay(os.path.join(d, fn), name, stage, status, msg, total)
                    os.unlink(os.path.join(d, fn))
            finally:
                shutil.rmtree(d)
        print("crafted checkpoints of tests/test_crafted_ckpt.c through the Python reader: %s" % total)
        self.assertGreater(total["cases"], 1000)

    def replay(self, p, name, stage, status, msg, total):
        total["cases"] += 1
        cmsg = msg.replace("checkpoint '%s': " % p.replace(os.path.basename(p), "case.h5"), "checkpoint: ")
        cmsg = cmsg if cmsg.startswith("checkpoint: ") else cmsg.split(": ", 1)[-1] if "'" not in cmsg[:12] else cmsg
        try:
            ck = lt.load(p)
            py = None
        except lt.CheckpointError as e:
            py = str(e).replace("checkpoint '%s': " % p, "checkpoint: ")
        # nothing but the package's own exceptions escapes (anything else fails the test here)
        # the file's format is checked at the stages "configuration" (the checkpoint's description) and
        # "training state" (the load); later stages (tokenizer, model, train's settings, the trainer's
        # state) check what the program makes of it
        model_level = stage not in ("configuration", "training state", "done") or any(m in msg for m in MODEL_LEVEL)
        if status == "LT_OK":
            self.assertIsNone(py, "%s: the C loader accepts it, the Python reader says %s" % (name, py))
            with h5py.File(p, "r") as f:
                for k, v in ck.tensors.items():
                    np.testing.assert_array_equal(v, f["model/" + k.replace(".", "/")][()], "%s: %s" % (name, k))
            total["both accept"] += 1
        elif py is None:
            self.assertTrue(model_level, "%s: the C loader refuses it (%s), the Python reader accepts it" % (name, msg))
            total["C refuses, model-level, Python accepts"] += 1
        elif model_level:
            total["both refuse, model-level"] += 1
        else:
            want = msg.split("': ", 1)[1] if msg.startswith("checkpoint '") else msg.split(": ", 1)[1]
            self.assertEqual(py.split(": ", 1)[1], want, name)
            total["both refuse, same message"] += 1


if __name__ == "__main__":
    unittest.main()
