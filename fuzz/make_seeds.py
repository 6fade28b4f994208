#!/usr/bin/env python3
"""fuzz/make_seeds.py: writes the small hand-made seeds of the tokenizer, corpus
and idx harnesses (fuzz/corpus/<name>/). Each file starts with the harness's
mode byte (see the comment at the top of fuzz/fuzz_<name>.c). The checkpoint
seeds are real checkpoints: fuzz/make_ckpt_seeds.c writes them.

    python3 fuzz/make_seeds.py        # from the repository root; deterministic
"""
import gzip
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(harness, name, data):
    os.makedirs(os.path.join(ROOT, harness), exist_ok=True)
    with open(os.path.join(ROOT, harness, name), "wb") as f:
        f.write(data)


# ---- tokenizer: serialised buffers (docs/datasets.md), training texts ----
def tok_buf(kind, count, body):
    vocab = (4 if kind == 1 else 260) + count
    b = b"LTTK" + struct.pack("<IIIQQ", 1, kind, 4, vocab, count) + body
    return b + struct.pack("<I", zlib.crc32(b))


cps = sorted(set(ord(c) for c in "héllo wörld 数字 🙂"))
char_buf = tok_buf(1, len(cps), b"".join(struct.pack("<I", c) for c in cps))
# merges: "l"+"l" -> 260, "he" -> 261, 261 + 260 -> 262
merges = [(4 + ord("l"), 4 + ord("l")), (4 + ord("h"), 4 + ord("e")), (261, 260)]
bpe_buf = tok_buf(2, len(merges), b"".join(struct.pack("<II", l, r) for l, r in merges))
put("tokenizer", "deser-byte", b"\x00" + tok_buf(0, 0, b""))
put("tokenizer", "deser-char", b"\x00" + char_buf)
put("tokenizer", "deser-bpe", b"\x00" + bpe_buf)
put("tokenizer", "crcfix-bpe", b"\x01" + bpe_buf[:-4] + b"\0\0\0\0")
text = "the quick brown fox jumps over the lazy dog; the dog sleeps. 12345 12345!!\n\tnaïve café 数字\n"
put("tokenizer", "train-bpe", b"\x02\x20\x01" + text.encode())
put("tokenizer", "char-utf8", b"\x03" + "héllo wörld 数字 🙂 <pad>".encode())
put("tokenizer", "char-bad-utf8", b"\x03abc\xc3\x28\xed\xa0\x80\xf4\x90\x80\x80")

# ---- corpus: TSV (mode bit 0), text files ----
tsv = ("hello\tbonjour\n" "cat\tchat\tCC-BY 2.0 (Tatoeba)\r\n" "\n" "dog\tchien\n"
       "no tab here\n" "\tempty source\n" "x\t\n" "naïve\tnaïf\n" "last line\twithout newline")
put("corpus", "tsv-strict", b"\x01\x00\x11\x25" + tsv.encode())
put("corpus", "tsv-skip", b"\x03\x03\x7f\xd1" + tsv.encode())
put("corpus", "tsv-good", b"\x01\x02\x09\x44" + "a b c\tx y\nd e\tz\nf\tg h i\nj\tk\n".encode())
put("corpus", "text", b"\x00" + b"\x1b" + (text * 3).encode())
put("corpus", "text-empty", b"\x00")


# ---- idx: headers and payloads (datasets.h) ----
def idx(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


images = idx(0x08, [2, 3, 3], bytes(range(0, 180, 10)))
put("idx", "images-raw", b"\x00" + images)
put("idx", "images-gz", b"\x11" + images)
put("idx", "labels", b"\x02" + idx(0x08, [4], b"\x00\x09\x03\x07"))
put("idx", "f32", b"\x04" + idx(0x0D, [2, 2], struct.pack(">4f", 0.5, -1, float("nan"), 1e30)))
put("idx", "f64", b"\x06" + idx(0x0E, [3], struct.pack(">3d", 1, 2, 3)))
put("idx", "i16", b"\x02" + idx(0x0B, [1, 2], struct.pack(">2h", -5, 300)))
put("idx", "i32-bool", b"\x08" + idx(0x0C, [2], struct.pack(">2i", 7, -7)))
put("idx", "truncated", b"\x00" + idx(0x08, [100, 28, 28], b"\x01\x02"))
put("idx", "gzip-stream", b"\x00" + gzip.compress(images, mtime=0))

# ---- safetensors: the whole input is the file (docs/interop.md) ----
def st_file(entries, meta=None, pad=True):
    """entries: (name, dtype, shape, bytes) in data order."""
    import json
    hdr, off, body = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, data in entries:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        body += data
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


f32 = struct.pack("<6f", 1.0, -2.5, 3.25, 0.0, -0.0, 1e-3)
put("safetensors", "f32-meta", st_file([("w", "F32", [2, 3], f32)], {"format": "pt"}))
put("safetensors", "all-dtypes", st_file([
    ("a.f64", "F64", [2], struct.pack("<2d", 1.5, -1e300)),
    ("b.f16", "F16", [3], struct.pack("<3H", 0x3c00, 0x7c00, 0x0001)),
    ("c.bf16", "BF16", [1, 2], struct.pack("<2H", 0x3f80, 0xc040)),
    ("d.i32", "I32", [2], struct.pack("<2i", -7, 2**31 - 1)),
    ("e.i64", "I64", [], struct.pack("<q", -2**63)),
    ("f.empty", "F32", [0, 4], b""),
], {"k": "v", "note": "h\u00e9llo"}))
put("safetensors", "nonfinite", st_file([  # refused by lt_st_read_into (issue 26, item 2)
    ("nan", "F32", [2], struct.pack("<2f", 1.0, float("nan"))),
    ("inf", "BF16", [1], struct.pack("<H", 0xff80)),
    ("ok", "F64", [1], struct.pack("<d", 2.0)),
]))
put("safetensors", "unpadded", st_file([("x", "F32", [1], struct.pack("<f", 2.0))], pad=False))
put("safetensors", "overlap", struct.pack("<Q", 96) + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    b'"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'.ljust(96) + bytes(8))


# ---- gguf: the whole input is the file (checkpoint/gguf.h; docs/interop.md) ----
def g_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


G_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def g_val(t, v):
    if t == 8:
        return g_str(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(g_val(et, x) for x in items)
    return struct.pack("<" + G_FMT[t], v)


def gguf_file(kvs, tensors, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type, ne list, bytes)], packed in order."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(g_str(k) + struct.pack("<I", t) + g_val(t, v) for k, t, v in kvs)
    data, infos = b"", b""
    for name, typ, ne, raw in tensors:
        infos += g_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", typ, len(data))
        data += raw + bytes(-len(raw) % align)
    body = head + infos
    return body + bytes(-len(body) % align) + data


def f32s(n, seed):
    x, out = seed, []
    for _ in range(n):  # a small linear congruential stream: deterministic, in [-0.5, 0.5)
        x = (1103515245 * x + 12345) % 2**31
        out.append(x / 2**31 - 0.5)
    return struct.pack("<%df" % n, *out)


put("gguf", "all-types", gguf_file([
    ("general.alignment", 4, 64), ("u8", 0, 7), ("i8", 1, -7), ("u16", 2, 65535), ("i16", 3, -2),
    ("f32", 6, 0.5), ("yes", 7, True), ("s", 8, "h\u00e9llo"), ("u64", 10, 2**63 + 1), ("i64", 11, -1),
    ("f64", 12, 1e300), ("strs", 9, (8, ["a", "", "ccc"])), ("ints", 9, (5, [1, -2, 3])),
    ("reals", 9, (6, [1.5, -2.0])), ("bools", 9, (7, [True, False]))],
    [("f32", 0, [4, 2], f32s(8, 1)), ("f16", 1, [3], struct.pack("<3H", 0x3c00, 0x7c00, 0x0001)),
     ("bf16", 30, [2], struct.pack("<2H", 0x3f80, 0xffc0)),
     ("q8", 8, [32], struct.pack("<H", 0x3c00) + bytes(range(32))),
     ("q4", 2, [32], struct.pack("<H", 0x3800) + bytes(range(16)))], align=64))
put("gguf", "one-tensor", gguf_file([], [("a", 0, [4], f32s(4, 2))]))


def tiny_model(arch):
    """A one-layer model of arch with C 8, 2 heads (1 key/value head for Llama), d_ff 16, vocab 16."""
    C, FF, V = 8, 16, 16
    kv = [("general.architecture", 8, arch), (arch + ".context_length", 4, 8), (arch + ".embedding_length", 4, C),
          (arch + ".feed_forward_length", 4, FF), (arch + ".block_count", 4, 1),
          (arch + ".attention.head_count", 4, 2), ("tokenizer.ggml.model", 8, "gpt2"),
          ("tokenizer.ggml.tokens", 9, (8, [chr(ord("a") + i) for i in range(V - 2)] + ["ab", "cd"])),
          ("tokenizer.ggml.token_type", 9, (5, [1] * V)), ("tokenizer.ggml.merges", 9, (8, ["a b", "c d"]))]
    t = [("token_embd.weight", [C, V])]
    if arch == "gpt2":
        kv.append(("gpt2.attention.layer_norm_epsilon", 6, 1e-5))
        t += [("position_embd.weight", [C, 8]), ("blk.0.attn_norm.weight", [C]), ("blk.0.attn_norm.bias", [C]),
              ("blk.0.attn_qkv.weight", [C, 3 * C]), ("blk.0.attn_qkv.bias", [3 * C]),
              ("blk.0.attn_output.weight", [C, C]), ("blk.0.attn_output.bias", [C]), ("blk.0.ffn_norm.weight", [C]),
              ("blk.0.ffn_norm.bias", [C]), ("blk.0.ffn_up.weight", [C, FF]), ("blk.0.ffn_up.bias", [FF]),
              ("blk.0.ffn_down.weight", [FF, C]), ("blk.0.ffn_down.bias", [C]), ("output_norm.weight", [C]),
              ("output_norm.bias", [C])]
    else:
        kv += [("llama.attention.head_count_kv", 4, 1), ("llama.attention.layer_norm_rms_epsilon", 6, 1e-6),
               ("llama.rope.dimension_count", 4, 4), ("llama.rope.freq_base", 6, 10000.0)]
        t += [("blk.0.attn_norm.weight", [C]), ("blk.0.attn_q.weight", [C, C]), ("blk.0.attn_k.weight", [C, 4]),
              ("blk.0.attn_v.weight", [C, 4]), ("blk.0.attn_output.weight", [C, C]), ("blk.0.ffn_norm.weight", [C]),
              ("blk.0.ffn_gate.weight", [C, FF]), ("blk.0.ffn_up.weight", [C, FF]),
              ("blk.0.ffn_down.weight", [FF, C]), ("output_norm.weight", [C]), ("output.weight", [C, V])]
    tensors = []
    for k, (name, ne) in enumerate(t):
        n = 1
        for d in ne:
            n *= d
        tensors.append((name, 0, ne, f32s(n, 7 + k)))
    return gguf_file(kv, tensors)


put("gguf", "gpt2-tiny", tiny_model("gpt2"))
put("gguf", "llama-tiny", tiny_model("llama"))


# ---- shards: llm.c's token shards (datasets.h "Token shards") ----
def shard(version, tokens, count=None, magic=None):
    if magic is None:
        magic = 20240801 if version == 7 else 20240520
    fmt = "<%d%s" % (len(tokens), "I" if magic == 20240801 else "H")
    hdr = struct.pack("<3i", magic, version, len(tokens) if count is None else count) + b"\0" * (1024 - 12)
    return hdr + struct.pack(fmt, *tokens)


put("shards", "u16-vocab64-T2", b"\x14" + shard(1, [i * 7 % 64 for i in range(40)]))
put("shards", "u32-novocab-T4", b"\x30" + shard(7, [i * 70001 % 100000 for i in range(30)]))
put("shards", "u16-past-vocab", b"\x01" + shard(1, [1, 2, 3, 9, 2]))
put("shards", "truncated", b"\x00" + shard(1, list(range(20)), count=25))
put("shards", "bad-magic", b"\x00" + shard(1, list(range(8)), magic=20240521))
put("shards", "bad-version", b"\x00" + shard(3, list(range(8))))
put("shards", "u16-magic-version-7", b"\x00" + shard(7, list(range(8)), magic=20240520))
put("shards", "header-only", b"\x00" + shard(1, []))

# ---- hellaswag: multiple-choice JSON Lines (models/transformer/lm_eval.h), the input is the file ----
hs_item = ('{"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", '
           '"ctx_b": "he", "ctx": "A man is sitting on a roof. he", "endings": ["is using wrap to wrap a pair of '
           'skis.", "is ripping level tiles off.", "is holding a rubik\'s cube.", "starts pulling up roofing on a '
           'roof."], "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val", "split_type": "indomain", '
           '"label": 3}\n')
put("hellaswag", "hellaswag-val", (hs_item + '\n' + '{"context": "The cat sat", "endings": ["on the mat.", '
                                   '"in orbit \\u00e9t\\u00e9 \\ud83d\\ude42."], "label": 0}\r\n').encode())
put("hellaswag", "long-context", ('{"ctx": "' + "word " * 40 + '", "endings": ["a", "bb", "ccc"], "label": 2}\n').encode())
put("hellaswag", "label-out-of-range", b'{"ctx": "a", "endings": ["b", "c"], "label": 2}\n')
put("hellaswag", "one-ending", b'{"ctx": "a", "endings": ["b"], "label": 0}\n')
put("hellaswag", "second-line-bad", (hs_item + '{"ctx": "a", "endings": ["b", ""], "label": 0}\n').encode())
put("hellaswag", "nul-escape", b'{"ctx": "a\\u0000", "endings": ["b", "c"], "label": 0}\n')
put("hellaswag", "blank", b"\n \r\n")
