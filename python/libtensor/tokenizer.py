"""libtensor's byte, char and BPE tokenizers in Python (docs/datasets.md).

`Tokenizer.deserialize(blob)` reads the buffer lt_tokenizer_serialize writes
(the "tokenizer" blob of a training checkpoint's /extra), checking it as C
does; `encode` gives the same ids as lt_tokenizer_encode, `decode` the same
bytes as lt_tokenizer_decode. `from_json` reads the tokenizer.json that
`generate --write-tokenizer` writes.
"""
import re
import struct
import zlib

from .errors import LibtensorError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
NUM_SPECIAL = 4
SPECIAL_NAMES = ("<pad>", "<bos>", "<eos>", "<unk>")
KINDS = ("byte", "char", "bpe")
MAX_PIECE = 128
BYTE0 = NUM_SPECIAL
NBASE = NUM_SPECIAL + 256


def _is_ws(c):
    return c == 0x20 or 0x09 <= c <= 0x0D


def _cls(c):
    if 0x61 <= (c | 0x20) <= 0x7A or c >= 0x80:
        return 0
    if 0x30 <= c <= 0x39:
        return 1
    return 2


def pieces(data):
    """Cuts bytes into BPE pieces exactly as datasets/tokenizer.c next_piece."""
    out, i, n = [], 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x20 and i + 1 < n and not _is_ws(data[i + 1]):
            k = _cls(data[i + 1])
            j = i + 2
            while j < n and not _is_ws(data[j]) and _cls(data[j]) == k:
                j += 1
        elif _is_ws(c):
            j = i + 1
            while j < n and _is_ws(data[j]):
                j += 1
            if j < n and j - 1 > i and data[j - 1] == 0x20:
                j -= 1
        else:
            k = _cls(c)
            j = i + 1
            while j < n and not _is_ws(data[j]) and _cls(data[j]) == k:
                j += 1
        j = min(j, i + MAX_PIECE)
        out.append(data[i:j])
        i = j
    return out


def merge_pair(sym, left, right, joined):
    """sym with every occurrence, left to right, of the pair (left, right) replaced by joined."""
    out, i = [], 0
    while i < len(sym):
        if i + 1 < len(sym) and sym[i] == left and sym[i + 1] == right:
            out.append(joined)
            i += 2
        else:
            out.append(sym[i])
            i += 1
    return out


class TokenizerError(LibtensorError, ValueError):
    pass


class Tokenizer:
    """kind "byte", "char" or "bpe"; codepoints (char) or merges (bpe: (left, right) id pairs)."""

    def __init__(self, kind, codepoints=(), merges=()):
        if kind not in KINDS:
            raise TokenizerError("kind %r: one of %s" % (kind, KINDS))
        self.kind = kind
        self.codepoints = list(codepoints) if kind == "char" else []
        self.merges = [tuple(m) for m in merges] if kind == "bpe" else []
        if self.kind == "char":
            if any(b <= a for a, b in zip(self.codepoints, self.codepoints[1:])):
                raise TokenizerError("char tokenizer: code points must increase")
            self._char_id = {cp: NUM_SPECIAL + i for i, cp in enumerate(self.codepoints)}
        self._ranks = {}
        self._bytes = [bytes([b]) for b in range(256)]
        for i, (l, r) in enumerate(self.merges):
            tid = NBASE + i
            if not (BYTE0 <= l < tid and BYTE0 <= r < tid):
                raise TokenizerError("merge %d joins ids %d and %d: both must be in [%d, %d)" % (i, l, r, BYTE0, tid))
            if (l, r) in self._ranks:
                raise TokenizerError("merge %d repeats merge %d (%d, %d)" % (i, self._ranks[(l, r)], l, r))
            tok = self._bytes[l - BYTE0] + self._bytes[r - BYTE0]
            if len(tok) > MAX_PIECE:
                raise TokenizerError("merge %d makes a token of %d bytes (at most %d)" % (i, len(tok), MAX_PIECE))
            self._ranks[(l, r)] = i
            self._bytes.append(tok)

    @property
    def vocab_size(self):
        if self.kind == "char":
            return NUM_SPECIAL + len(self.codepoints)
        return NBASE + len(self.merges)

    def token_bytes(self, tid):
        """The bytes of an ordinary token id (byte and BPE), or the character's UTF-8 (char)."""
        if tid < NUM_SPECIAL or tid >= self.vocab_size:
            raise TokenizerError("id %d is not an ordinary token of this vocabulary" % tid)
        if self.kind == "char":
            return chr(self.codepoints[tid - NUM_SPECIAL]).encode("utf-8")
        return self._bytes[tid - BYTE0]

    # ---- the serialised form (docs/datasets.md "Serialised form") ----
    @classmethod
    def deserialize(cls, blob):
        blob = bytes(blob)
        if len(blob) < 36:
            raise TokenizerError("tokenizer buffer of %d bytes is too short" % len(blob))
        if struct.unpack("<I", blob[-4:])[0] != zlib.crc32(blob[:-4]) & 0xFFFFFFFF:
            raise TokenizerError("tokenizer buffer: checksum mismatch")
        magic, version, kind, nspec, vocab, count = struct.unpack("<4sIIIQQ", blob[:32])
        if magic == b"LTTK" and version == 1 and kind == 3:
            raise TokenizerError("tokenizer buffer: a Hugging Face tokenizer (kind hf): read its tokenizer.json, "
                                 "hf_json(blob), with the tokenizers library (Tokenizer.from_str)")
        if magic != b"LTTK" or version != 1 or kind > 2 or nspec != NUM_SPECIAL:
            raise TokenizerError("tokenizer buffer: bad magic, version, kind or special count")
        per = (0, 4, 8)[kind]
        if len(blob) != 32 + per * count + 4:
            raise TokenizerError("tokenizer buffer: size %d does not match the header" % len(blob))
        body = blob[32:-4]
        if kind == 0:
            t = cls("byte")
        elif kind == 1:
            t = cls("char", codepoints=struct.unpack("<%dI" % count, body))
        else:
            flat = struct.unpack("<%dI" % (2 * count), body)
            t = cls("bpe", merges=zip(flat[0::2], flat[1::2]))
        if t.vocab_size != vocab:
            raise TokenizerError("tokenizer buffer: vocabulary size %d does not match its contents (%d)"
                                 % (vocab, t.vocab_size))
        return t

    def serialize(self):
        kind = KINDS.index(self.kind)
        if self.kind == "char":
            body, count = struct.pack("<%dI" % len(self.codepoints), *self.codepoints), len(self.codepoints)
        elif self.kind == "bpe":
            body = b"".join(struct.pack("<II", l, r) for l, r in self.merges)
            count = len(self.merges)
        else:
            body, count = b"", 0
        head = struct.pack("<4sIIIQQ", b"LTTK", 1, kind, NUM_SPECIAL, self.vocab_size, count)
        out = head + body
        return out + struct.pack("<I", zlib.crc32(out) & 0xFFFFFFFF)

    # ---- encode / decode ----
    def _bpe_piece(self, piece):
        sym = [BYTE0 + b for b in piece]
        ranks = self._ranks
        while len(sym) > 1:
            best = min((ranks.get(p, 1 << 62) for p in zip(sym, sym[1:])), default=1 << 62)
            if best == 1 << 62:
                break
            l, r = self.merges[best]
            sym = merge_pair(sym, l, r, NBASE + best)
        return sym

    def encode(self, text):
        """ids of text (str, encoded as UTF-8, or bytes), without <bos>/<eos>."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if self.kind == "byte":
            return [BYTE0 + b for b in data]
        if self.kind == "char":
            try:
                s = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TokenizerError("invalid UTF-8 at byte offset %d: a char tokenizer needs UTF-8 text" % e.start)
            if any(0xD800 <= ord(ch) <= 0xDFFF for ch in s):
                raise TokenizerError("invalid UTF-8 (a surrogate): a char tokenizer needs UTF-8 text")
            return [self._char_id.get(ord(ch), UNK) for ch in s]
        ids = []
        for p in pieces(data):
            ids.extend(self._bpe_piece(p))
        return ids

    def decode(self, ids, show_special=False):
        """bytes of ids: <pad>, <bos>, <eos> give nothing and <unk> U+FFFD, or
        each special its name with show_special."""
        out = []
        for pos, i in enumerate(ids):
            if i < 0 or i >= self.vocab_size:
                raise TokenizerError("id %d at position %d is outside [0, %d)" % (i, pos, self.vocab_size))
            if i < NUM_SPECIAL:
                if show_special:
                    out.append(SPECIAL_NAMES[i].encode())
                elif i == UNK:
                    out.append("\ufffd".encode("utf-8"))
            else:
                out.append(self.token_bytes(i))
        return b"".join(out)

    # ---- tokenizer.json (docs/python.md) ----
    @classmethod
    def from_json(cls, obj):
        """The tokenizer of a tokenizer.json written by libtensor (a dict or its text)."""
        import json
        if isinstance(obj, (str, bytes)):
            obj = json.loads(obj)
        lt = obj.get("model", {})
        if obj.get("libtensor", {}).get("kind") == "char" or lt.get("type") == "WordLevel":
            vocab = lt["vocab"]
            cps = sorted(ord(k) for k, v in vocab.items() if v >= NUM_SPECIAL)
            t = cls("char", codepoints=cps)
            for k, v in vocab.items():
                if v >= NUM_SPECIAL and t._char_id[ord(k)] != v:
                    raise TokenizerError("tokenizer.json: %r has id %d, not %d" % (k, v, t._char_id[ord(k)]))
            return t
        if lt.get("type") != "BPE":
            raise TokenizerError("tokenizer.json: model type %r (expected BPE or WordLevel)" % lt.get("type"))
        dec = bytes_to_unicode_inverse()
        vocab = lt["vocab"]
        merges = []
        for m in lt["merges"]:
            a, b = m.split(" ") if isinstance(m, str) else m
            merges.append((vocab[a], vocab[b]))
        t = cls("bpe" if merges else "byte", merges=merges)
        for k, v in vocab.items():
            if v >= NUM_SPECIAL and bytes(dec[ch] for ch in k) != t.token_bytes(v):
                raise TokenizerError("tokenizer.json: token %r has id %d, which libtensor spells otherwise" % (k, v))
        return t


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet of Hugging Face tokenizers)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def bytes_to_unicode_inverse():
    return {v: k for k, v in bytes_to_unicode().items()}


def hf_encode(obj, text):
    """Encodes text with a tokenizer.json's own rules, read the way Hugging Face
    tokenizers applies them (the Split pre-tokenizer's regex, ByteLevel, BPE
    merges by rank; or WordLevel per character). A check that the JSON
    says what libtensor does: tests compare its ids with lt_tokenizer_encode's."""
    import json
    if isinstance(obj, (str, bytes)):
        obj = json.loads(obj)
    model = obj["model"]
    vocab = model["vocab"]
    if model["type"] == "WordLevel":
        return [vocab.get(ch, vocab[model["unk_token"]]) for ch in text]
    pre = obj["pre_tokenizer"]
    steps = pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]
    parts = [text]
    for st in steps:
        if st["type"] == "Split":
            rx = re.compile(st["pattern"]["Regex"])
            new = []
            for p in parts:
                pos = 0
                for m in rx.finditer(p):
                    if m.start() > pos:
                        new.append(p[pos:m.start()])
                    new.append(m.group(0))
                    pos = m.end()
                if pos < len(p):
                    new.append(p[pos:])
            parts = new
    enc = bytes_to_unicode()
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(model["merges"])}
    ids = []
    for p in parts:
        sym = [enc[b] for b in p.encode("utf-8")]
        while len(sym) > 1:
            cand = [(ranks[pr], k) for k, pr in enumerate(zip(sym, sym[1:])) if pr in ranks]
            if not cand:
                break
            r = min(cand)[0]
            a, b = model["merges"][r].split(" ")
            sym = merge_pair(sym, a, b, a + b)
        ids.extend(vocab[s] for s in sym)
    return ids


def hf_json(blob):
    """The tokenizer.json text (str) held by a serialised tokenizer of kind hf
    (kind 3: the JSON text as the payload; docs/datasets.md "Serialised form")."""
    blob = bytes(blob)
    if len(blob) < 36 or struct.unpack("<I", blob[-4:])[0] != zlib.crc32(blob[:-4]) & 0xFFFFFFFF:
        raise TokenizerError("tokenizer buffer: too short or checksum mismatch")
    magic, version, kind, nspec, vocab, count = struct.unpack("<4sIIIQQ", blob[:32])
    if magic != b"LTTK" or version != 1 or kind != 3 or len(blob) != 32 + count + 4:
        raise TokenizerError("tokenizer buffer: not a Hugging Face tokenizer (kind hf)")
    return blob[32:-4].decode("utf-8")
