#!/usr/bin/env python3
"""Deterministic mixed-text corpus for the tokenizer conformance suite.

    make_corpus.py [--size BYTES] [--seed N] OUT

writes OUT, raw bytes, one input per line ("\\n" separates inputs; a line never
holds "\\n" itself but may hold "\\r", "\\v", "\\f", U+0085, U+2028). It opens
with a fixed list of edge cases (EDGE_LINES, always present, in that order),
then alternates Debian's own text (/usr/share/common-licenses, then the files
under /usr/share/doc, walked in sorted order, .gz decompressed, binary files
skipped) with generated lines: CJK, emoji with ZWJ sequences and modifiers,
combining marks, whitespace runs, digits, special tokens inside text, empty
lines, invalid UTF-8 and very long words. The default size (256 KiB) is the
CI corpus; the speed comparison uses --size 10M.

Two runs with the same arguments on the same machine give identical files.
The Debian part depends on what /usr/share/doc holds, so two machines can
differ there; the generated part depends only on the seed. What it is not: a
sample of any natural distribution of text. It is built to reach the corners
of every normalizer, pre-tokenizer and model in tests/tokenizers/fixtures.

Also imported by make_tokenizers.py (training text) and make_expected.py.
"""
import argparse
import gzip
import os
import random
import sys

DEBIAN_ROOTS = ["/usr/share/common-licenses", "/usr/share/doc"]
TEXT_SKIP_EXT = (".png", ".jpg", ".jpeg", ".gif", ".pdf", ".ico", ".svgz", ".bz2", ".xz",
                 ".zip", ".woff", ".woff2", ".ttf", ".otf", ".mo", ".gmo", ".db", ".pyc")

# Every special or added token of the fixtures (tests/tokenizers/fixtures), and
# near misses, to be dropped inside text.
SPECIALS = [
    "<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>", "<mask>", "[CLS]", "[SEP]", "[MASK]",
    "[UNK]", "[PAD]", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_0|>",
    "<|special|>", "<tok_l>", "<tok_r>", "<tok_lr>", "debian", "Debian", "HeLLo", "gnu gpl",
    "<|endof", "endoftext|>", "<s", "s>", "[CLS", "<|im_start|>", "<0x41>", "<0xE2>", "▁",
    "Ġ", "##ing", "</w>",
]

EDGE_LINES = [
    b"", b" ", b"  ", b"\t", b"\r", b"\x0b\x0c", b" \t \r ", b"a", b" a", b"a ", b" a ",
    b"Hello world", b"Hello  world", b"Hello   world  ", b"   leading and trailing   ",
    b"HELLO World hello WORLD", b"don't I'm we're they've she'll he'd it's",
    b"DON'T I'M WE'RE THEY'VE SHE'LL HE'D IT'S", b"don\xe2\x80\x99t it\xe2\x80\x99s",
    b"'s 't 're 've 'm 'll 'd ''s", b"12 123 1234 12345 123456 1234567",
    b"3.14159 1,000,000 -42 +7 1e10 0x1F 10% $5", b"\xd9\xa3\xd9\xa4 \xef\xbc\x91\xef\xbc\x92 \xc2\xb2\xc2\xb3 \xe2\x85\xa7",
    b"caf\xc3\xa9 cafe\xcc\x81 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xc3\x85ngstr\xc3\xb6m",
    b"e\xcc\x81\xcc\x82\xcc\x83\xcc\x84 a\xcc\x8a o\xcc\x88 \xcc\x81 \xcc\x81\xcc\x81",
    "Straße ΟΔΟΣ ὈΔΥΣΣΕΎΣ İstanbul ǅ ﬁ ﬀ ŉ ẞ".encode(),
    "日本語のテキスト、中文文本。한국어 텍스트".encode(), "日本語".encode(), "中".encode(),
    "𠀀𠀁 𪜀 𫝀 ｈｅｌｌｏ　ｗｏｒｌｄ".encode(),
    "👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪🇫🇷 1️⃣ ❤️ ☺︎".encode(), "👨‍💻👩🏾‍🔬🧑‍🤝‍🧑".encode(),
    "ก่อนหน้า नमस्ते مرحبا بالعالم שָׁלוֹם Tiếng Việt".encode(),
    "\u00a0nbsp\u00a0\u2009thin\u3000ideo\u200bzwsp\u200czwnj\u200dzwj\ufeffbom".encode(),
    "nel\u0085ls\u2028ps\u2029end".encode(), b"\x00nul\x00 \x01\x02\x1f\x7f",
    "\u0080\u0085\u009f c1 controls \ufffd replacement \ufffe\uffff \U0010fffd".encode(),
    "\ue000 private \U000f0000 unassigned \u0378 \U000e0001 tag".encode(),
    b"\x80", b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"abc\x80def", b"\xc0\xaf overlong",
    b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 too big", b"\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe",
    b"caf\xe9 latin-1", b"\xe2\x82\xac\xe2\x82 \xe2 \xe2\x28\xa1",
    b"<|endoftext|>", b"<s>", b"</s>", b"[CLS]", b"[SEP] [MASK] [UNK] [PAD]",
    b"a<|endoftext|>b", b" <|endoftext|> ", b"<|endoftext|><|endoftext|>", b"<s></s><s>",
    b"x <mask> y", b"x<mask>y", b"  <mask>  ", b"Hello [MASK]!", b"[cls] [sep] [mask]",
    b"<|begin_of_text|>Hi<|eot_id|>", b"<|reserved_special_token_0|>",
    b"<|special|> <tok_l> <tok_r> <tok_lr> x<tok_l>y x <tok_r> y x  <tok_lr>  y",
    b"debian Debian DEBIAN undebian debians debian.", b"HeLLo hello HELLO", b"gnu gpl gnu  gpl",
    b"<|endof <|endoftext <|endoftext| <s <0x41> \xe2\x96\x81 \xc4\xa0 ##ing </w>",
    b"a" * 100, b"a" * 101, b"a" * 300, b"a" * 5000, b"ab" * 2000, b" " * 300,
    b"\t" * 50 + b"x", b"x" + b" " * 200 + b"y", "é".encode() * 400, "日本".encode() * 600,
    "😀".encode() * 300, b"1" * 1000, b"!" * 500, b"-_" * 300, b"." * 130,
    b"https://www.debian.org/doc/manuals/debian-reference/ch01.en.html#_the_first_steps",
    b"foo@bar.example.org /usr/share/doc/README.Debian C:\\Windows\\system32",
    b"def f(x):    return x**2  # comment", b"if (a && b || !c) { x += 1; }",
    b"(((nested))) [[brackets]] {{braces}} <<angle>> \"quoted\" 'single'",
    b"...!!!???;;;:::,,,", b"--foo=bar -x -- --", b"\xe2\x80\x94em\xe2\x80\x93en\xe2\x80\xa6",
    b"Hello\rWorld", b"Hello \r \x0b world", b"tab\tseparated\tvalues\t",
    # Several combining marks that normalization reorders and composes (the
    # library aligns them by position), multi-character decompositions, Hangul.
    "a\u0301\u0328 e\u0323\u0302 o\u031b\u0301\u0323 x\u0334\u0301\u0316 A\u030a\u0301".encode(),
    "\u1100\u1161\u11a8 \u0f73\u0f75 \u0344\u0345 \u1e9b\u0323 \u0931\u093c\u0951".encode(),
    # Characters whose class differs between the library's Unicode tables and
    # libutf8proc's / PCRE2's (datasets/hf_unicode_table.h): letters, digits and
    # format characters of Unicode 15-16, characters unknown to Unicode 8's
    # categories, U+180E (PCRE2's \s, not Oniguruma's), newer lowercases, and
    # marks the library's normalizer does not know.
    "\U0001e4d0\U0001e4d1x \U0001e4f1\U0001e4f2 \U00011f04 \U00010d50\U00010d70 \U000116d0 \U00013439".encode(),
    "\u0890a \u2e43 b\u0afa \u166d \U000111c9 \u1734 \u1cf2 A\ua7cb\ua7dc\u1c89".encode(),
    "a\u180eb a\u180e b \u180e x\u07fd\u0898\u1abf\u1ac0 a\u1dfa\u0301 \u0c3c\u0d3b".encode(),
]


def debian_files():
    """Every regular file under DEBIAN_ROOTS, sorted within each root."""
    for root in DEBIAN_ROOTS:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                paths.append(os.path.join(dirpath, name))
        for p in sorted(paths):
            if p.lower().endswith(TEXT_SKIP_EXT) or os.path.islink(p) or not os.path.isfile(p):
                continue
            yield p


def debian_text_lines(limit_bytes=None, copyright_only=False):
    """Lines (bytes, without "\\n") of Debian's text, in a fixed order."""
    total = 0
    for p in debian_files():
        if copyright_only and not (p.startswith("/usr/share/common-licenses")
                                   or os.path.basename(p) == "copyright"):
            continue
        try:
            if p.endswith(".gz"):
                with gzip.open(p, "rb") as f:
                    data = f.read(4 << 20)
            else:
                with open(p, "rb") as f:
                    data = f.read(4 << 20)
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if b"\x00" in data[:4096]:
            continue                                  # binary
        for line in data.split(b"\n"):
            yield line
            total += len(line) + 1
            if limit_bytes is not None and total >= limit_bytes:
                return


def rand_range_chars(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


CJK_RANGES = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3),
              (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0xF900, 0xFAFF), (0xFF01, 0xFF5E)]
EMOJI = ["😀", "😂", "🥲", "👍", "🎉", "🔥", "❤️", "✨", "🚀", "🐧", "🍕", "⚽", "🇯🇵", "🇺🇸",
         "🏳️‍🌈", "👨‍👩‍👧", "👩‍❤️‍👨", "🧑🏻‍💻", "👋🏿", "1️⃣", "#️⃣", "☕", "♥", "⌚", "🫠"]
SKIN = ["", "\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
COMBINING = [chr(c) for c in range(0x0300, 0x0370)] + ["\u20dd", "\u0e48", "\u093f", "\u05b8"]
SPACES = [" ", "  ", "   ", "\t", "\r", "\x0b", "\x0c", "\u00a0", "\u3000", "\u2009", "\u200b",
          "\u2028", "\u0085", " \t", "\t ", "\r "]
SCRIPTS = ["ก่อนหน้านี้", "नमस्ते दुनिया", "مرحبا بالعالم", "שלום עולם", "Привет, мир",
           "Γειά σου Κόσμε", "Բարեւ", "ሰላም", "ᎣᏏᏲ", "Tiếng Việt có dấu", "Zażółć gęślą jaźń",
           "Ærøskøbing", "İıIi", "ǈǉǊ", "ﬁﬂﬃ", "Ⅻ ⅻ ① ㍿ ㎏", "x² H₂O ½ ¼"]
WORDS = ["the", "Debian", "license", "GNU", "software", "free", "copyright", "program",
         "you", "may", "distribute", "under", "terms", "of", "version", "General", "Public",
         "is", "a", "to", "and", "in", "that", "for", "with", "this", "file", "package"]


def word(rng):
    return rng.choice(WORDS)


def gen_line(rng):
    """One generated line (str or bytes)."""
    kind = rng.randrange(14)
    if kind == 0:                                     # CJK, with some ASCII between
        parts = []
        for _ in range(rng.randint(1, 8)):
            lo, hi = rng.choice(CJK_RANGES)
            parts.append(rand_range_chars(rng, lo, hi, rng.randint(1, 12)))
            if rng.random() < 0.4:
                parts.append(rng.choice([" ", "、", "。", " " + word(rng) + " ", "123", ""]))
        return "".join(parts)
    if kind == 1:                                     # emoji
        out = []
        for _ in range(rng.randint(1, 10)):
            e = rng.choice(EMOJI)
            if rng.random() < 0.3:
                e += rng.choice(SKIN)
            if rng.random() < 0.2:
                e += "\u200d" + rng.choice(EMOJI)
            out.append(e)
            out.append(rng.choice(["", "", " ", " " + word(rng) + " "]))
        return "".join(out)
    if kind == 2:                                     # combining marks
        out = []
        for _ in range(rng.randint(1, 10)):
            out.append(rng.choice("aeiouAEIOUnyszc"))
            for _ in range(rng.randint(0, 3)):
                out.append(rng.choice(COMBINING))
            if rng.random() < 0.3:
                out.append(" ")
        return "".join(out)
    if kind == 3:                                     # whitespace runs
        out = []
        for _ in range(rng.randint(1, 8)):
            out.append(rng.choice(SPACES) * rng.randint(1, 6))
            if rng.random() < 0.7:
                out.append(word(rng))
        return "".join(out)
    if kind == 4:                                     # digits
        out = []
        for _ in range(rng.randint(1, 8)):
            n = rng.randint(1, 14)
            out.append("".join(rng.choice("0123456789") for _ in range(n)))
            out.append(rng.choice([" ", ",", ".", "-", "", " x ", "%", "٣", "１"]))
        return "".join(out)
    if kind == 5:                                     # special tokens inside text
        out = []
        for _ in range(rng.randint(1, 6)):
            out.append(rng.choice(["", " ", "  ", word(rng), " " + word(rng) + " ", "x"]))
            out.append(rng.choice(SPECIALS))
        return "".join(out)
    if kind == 6:                                     # empty
        return ""
    if kind == 7:                                     # invalid UTF-8
        good = " ".join(word(rng) for _ in range(rng.randint(0, 4))).encode()
        bad = bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 4)))
        cut = "€😀日é".encode()
        bad2 = cut[: rng.randint(1, len(cut) - 1)]
        parts = [good, bad, good, bad2, b" ", rng.choice([b"", b"\xc3", b"\xe2\x82", b"ok"])]
        rng.shuffle(parts)
        return b"".join(parts)
    if kind == 8:                                     # very long words
        n = rng.choice([99, 100, 101, 127, 128, 129, 255, 256, 257, 600, 2000])
        alphabet = rng.choice(["abcdefghij", "éèêë", "日本語中文", "0123456789", "😀🎉",
                               "aB", "-", "\u0301a"])
        return "".join(rng.choice(alphabet) for _ in range(n))
    if kind == 9:                                     # other scripts
        return " ".join(rng.choice(SCRIPTS) for _ in range(rng.randint(1, 4)))
    if kind == 10:                                    # random code points, any plane
        out = []
        for _ in range(rng.randint(1, 20)):
            c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                            rng.randint(0x10000, 0x1FFFF), rng.randint(0x0, 0x1F)])
            if c == 0x0A or 0xD800 <= c <= 0xDFFF:
                c = 0x20
            out.append(chr(c))
        return "".join(out)
    if kind == 11:                                    # punctuation and code
        return "".join(rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ abc_12\t")
                       for _ in range(rng.randint(1, 60)))
    if kind == 12:                                    # contractions and case
        out = []
        for _ in range(rng.randint(1, 8)):
            w = word(rng)
            w = rng.choice([w, w.upper(), w.capitalize()])
            out.append(w + rng.choice(["", "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'t",
                                       "'M", "\u2019s", "'"]))
        return " ".join(out)
    # kind 13: a sentence of words with mixed spacing
    return "".join(word(rng) + rng.choice([" ", " ", ", ", ". ", "  ", "\t", "-", "/"])
                   for _ in range(rng.randint(1, 25))).rstrip(rng.choice(["", " "]))


def corpus_lines(size, seed=0):
    """The corpus as a list of byte strings (no "\\n" inside), about size bytes."""
    rng = random.Random(seed)
    lines = list(EDGE_LINES)
    total = sum(len(x) + 1 for x in lines)
    debian = debian_text_lines()
    while total < size:
        # Debian text in runs of a few lines, then generated lines.
        for _ in range(rng.randint(1, 6)):
            line = next(debian, None)
            if line is None:
                debian = debian_text_lines()
                line = next(debian, b"")
            lines.append(line)
            total += len(line) + 1
        for _ in range(rng.randint(1, 4)):
            line = gen_line(rng)
            if isinstance(line, str):
                line = line.encode("utf-8")
            line = line.replace(b"\n", b" ")
            lines.append(line)
            total += len(line) + 1
    return lines


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size", default="256k", help="about this many bytes (256k; 10M for speed)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    lines = corpus_lines(parse_size(a.size), a.seed)
    with open(a.out, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    print(f"{a.out}: {len(lines)} lines, {os.path.getsize(a.out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
