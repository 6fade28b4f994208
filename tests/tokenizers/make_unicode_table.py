#!/usr/bin/env python3
"""Writes datasets/hf_unicode_table.h: where the tokenizers library's Unicode
answers differ from libutf8proc's and PCRE2's.

    <reference python> tests/tokenizers/make_unicode_table.py [OUT.h]

The tokenizers library (0.23.3) classifies characters with tables of other
Unicode versions than Debian's libutf8proc (Unicode 15) and PCRE2 (10.42,
Unicode 14):
  - BertNormalizer's control test, BertPreTokenizer's and Punctuation's
    punctuation and BertNormalizer's accent stripping (Mn) come from the
    `unicode_categories` crate (Unicode 8.0);
  - NFC/NFD/NFKC/NFKD and StripAccents (is_combining_mark) come from the
    `unicode-normalization-alignments` crate (its own, older tables);
  - Lowercase, char::is_whitespace and Digits' char::is_numeric come from
    Rust's standard library;
  - the regexes (Split, Replace, ByteLevel's GPT-2 pattern, Whitespace) run on
    Oniguruma (onig_sys) with its Unicode tables; added tokens' single_word
    test uses the `regex` crate's \\w.
Rather than trusting version numbers, this script asks the installed library
about every Unicode scalar value (surrogates cannot be in a text) through
those very components, asks libutf8proc and PCRE2 the same question the C
code asks them (ctypes), and writes the code points where the answers
differ, as ranges. datasets/hf_text.c applies them on top of the libraries;
nothing here is a Unicode database of its own.

The normalization forms are described by one set: the code points the
library's normalizer does not know (no decomposition, combining class 0,
never composed). The script checks that every code point whose NFC, NFD,
NFKC, NFKD or combining class differs fits that description, and fails
otherwise.
"""
import ctypes
import ctypes.util
import os
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer
from tokenizers import models, normalizers as nm, pre_tokenizers as pt

MAXCP = 0x110000
SCALARS = [c for c in range(MAXCP) if not 0xD800 <= c <= 0xDFFF]

u8p = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
u8p.utf8proc_category.restype = ctypes.c_int
u8p.utf8proc_category.argtypes = [ctypes.c_int32]
u8p.utf8proc_tolower.restype = ctypes.c_int32
u8p.utf8proc_tolower.argtypes = [ctypes.c_int32]
u8p.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16)
u8p.utf8proc_get_property.argtypes = [ctypes.c_int32]
u8p.utf8proc_map.restype = ctypes.c_ssize_t
u8p.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]
U_STABLE, U_COMPAT, U_COMPOSE, U_DECOMPOSE = 2, 4, 8, 16

# utf8proc_category_t
CATS = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
        "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
CAT = [CATS[u8p.utf8proc_category(c)] if not 0xD800 <= c <= 0xDFFF else "Cs" for c in range(MAXCP)]


def u8_map(s, opts):
    b = s.encode("utf-8")
    out = ctypes.c_void_p()
    n = u8p.utf8proc_map(b, len(b), ctypes.byref(out), opts | U_STABLE)
    if n < 0:
        raise RuntimeError("utf8proc_map failed on %r" % s)
    r = ctypes.string_at(out, n).decode("utf-8")
    libc.free(out)
    return r


def u8_ccc(c):
    return u8p.utf8proc_get_property(c)[1]


# ---- what libtensor's hf_text.c computes from libutf8proc (keep in step) ----
WS = set(list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) +
         [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def c_other(c):
    return CAT[c] in ("Cc", "Cf", "Co", "Cs")


def c_punct(c):
    ascii_p = 33 <= c <= 47 or 58 <= c <= 64 or 91 <= c <= 96 or 123 <= c <= 126
    return ascii_p or CAT[c][0] == "P"


def c_word(c):
    if c < 0x80:
        return chr(c).isascii() and (chr(c).isalnum() or c == 0x5F)
    k = CAT[c]
    return (k[0] == "L" or k in ("Mn", "Mc", "Me", "Nd", "Nl", "Pc") or c in (0x200C, 0x200D) or
            0x24B6 <= c <= 0x24E9 or 0x1F130 <= c <= 0x1F149 or 0x1F150 <= c <= 0x1F169 or 0x1F170 <= c <= 0x1F189)


def c_lower(c):
    if c == 0x130:
        return "i\u0307"
    return chr(u8p.utf8proc_tolower(c))


CPROPS = {
    "other": c_other,
    "whitespace": lambda c: c in WS,
    "bert_punct": c_punct,
    "mn": lambda c: CAT[c] == "Mn",
    "mark": lambda c: CAT[c][0] == "M",
    "numeric": lambda c: CAT[c] in ("Nd", "Nl", "No"),
    "word": c_word,
    "single_word": c_word,
}


# ---- what the tokenizers library answers ------------------------------------
def lib_props():
    """name -> bytearray over code points (1: true)."""
    out = {k: bytearray(MAXCP) for k in CPROPS}
    clean = nm.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    bert = pt.BertPreTokenizer()
    strip_mn = nm.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    strip_m = nm.StripAccents()
    digits = pt.Digits(individual_digits=True)
    white = pt.Whitespace()
    # single_word: an added token "x" followed by c is cut out when c is not a word character.
    sw = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    sw.add_tokens([AddedToken("x", single_word=True)])
    xid = sw.token_to_id("x")
    for c in SCALARS:
        ch = chr(c)
        if c not in (0, 0xFFFD, 9, 10, 13):
            r = clean.normalize_str(ch)
            out["other"][c] = r == ""
        pieces = bert.pre_tokenize_str("a" + ch + "a")
        out["whitespace"][c] = len(pieces) == 2  # split off and removed
        out["bert_punct"][c] = len(pieces) == 3  # isolated
        # BertNormalizer's strip_accents is NFD, then removing Mn: a lone
        # character that NFD leaves alone is removed exactly when it is Mn.
        nfd = nm.NFD().normalize_str(ch)
        if nfd == ch:
            out["mn"][c] = strip_mn.normalize_str(ch) == ""
        else:
            out["mn"][c] = CPROPS["mn"](c)  # decided by its decomposition, not asked here
        out["mark"][c] = strip_m.normalize_str(ch) == ""
        out["numeric"][c] = len(digits.pre_tokenize_str("a" + ch + "a")) == 3
        out["word"][c] = len(white.pre_tokenize_str("a" + ch + "a")) == 1
        ids = sw.encode("x" + ch, add_special_tokens=False).ids
        out["single_word"][c] = not (ids and ids[0] == xid)
    return out


def ranges(cps):
    """Sorted code points -> [(lo, hi)]."""
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def bool_diffs(name, lib):
    f = CPROPS[name]
    add, rem = [], []
    for c in SCALARS:
        mine = bool(f(c))
        if bool(lib[c]) != mine:
            (add if lib[c] else rem).append(c)
    return ranges(add), ranges(rem)


def lower_diffs():
    low = nm.Lowercase()
    out = []
    for c in SCALARS:
        r = low.normalize_str(chr(c))
        if r != c_lower(c):
            out.append((c, r))
    return out


def norm_inert():
    """Code points the library's normalizer does not know (checked)."""
    forms = [(nm.NFD(), U_DECOMPOSE), (nm.NFKD(), U_DECOMPOSE | U_COMPAT), (nm.NFC(), U_COMPOSE),
             (nm.NFKC(), U_COMPOSE | U_COMPAT)]
    nfd = nm.NFD()
    flagged = set()
    for c in SCALARS:
        ch = chr(c)
        if any(f.normalize_str(ch) != u8_map(ch, o) for f, o in forms):
            flagged.add(c)
            continue
        k = u8_ccc(c)
        if k:
            probe = "\u0301" + ch if k < 230 else ch + "\u0334"
            if nfd.normalize_str(probe) != u8_map(probe, U_DECOMPOSE):
                flagged.add(c)
    # Each must behave as an unknown character: unchanged alone, a starter.
    for c in sorted(flagged):
        ch = chr(c)
        bad = [f for f, o in forms if f.normalize_str(ch) != ch]
        if bad or nfd.normalize_str("a\u0301" + ch + "\u0334") != "a\u0301" + ch + "\u0334":
            sys.exit("make_unicode_table: U+%04X differs in normalization but is not unknown to the library" % c)
    return ranges(sorted(flagged))


# Regex classes whose members the C side extends (hf_text.c rewrites \p{X},
# \p{Xy}, \s and \d in a pattern).
REGEX_CLASSES = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd",
                 "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf",
                 "Co", "Cn"]


def pcre2_sets(text, offsets):
    """name -> bytearray: what PCRE2 (UTF, UCP) matches, one class at a time."""
    p2 = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
    p2.pcre2_compile_8.restype = ctypes.c_void_p
    p2.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int),
                                   ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
    p2.pcre2_match_data_create_from_pattern_8.restype = ctypes.c_void_p
    p2.pcre2_match_data_create_from_pattern_8.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    p2.pcre2_match_8.restype = ctypes.c_int
    p2.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint32,
                                 ctypes.c_void_p, ctypes.c_void_p]
    p2.pcre2_get_ovector_pointer_8.restype = ctypes.POINTER(ctypes.c_size_t)
    p2.pcre2_get_ovector_pointer_8.argtypes = [ctypes.c_void_p]
    UTF, UCP, NO_UTF_CHECK = 0x00080000, 0x00020000, 0x40000000
    import bisect
    out = {}
    for name in REGEX_CLASSES + ["s", "d"]:
        pat = ("\\" + name if len(name) == 1 and name.islower() else "\\p{%s}" % name).encode() + b"+"
        err, off = ctypes.c_int(), ctypes.c_size_t()
        code = p2.pcre2_compile_8(pat, len(pat), UTF | UCP, ctypes.byref(err), ctypes.byref(off), None)
        assert code, pat
        md = p2.pcre2_match_data_create_from_pattern_8(code, None)
        s = bytearray(MAXCP)
        at = 0
        while at < len(text):
            rc = p2.pcre2_match_8(code, text, len(text), at, NO_UTF_CHECK, md, None)
            if rc < 0:
                break
            ov = p2.pcre2_get_ovector_pointer_8(md)
            a, b = ov[0], ov[1]
            for i in range(bisect.bisect_left(offsets, a), bisect.bisect_left(offsets, b)):
                s[SCALARS[i]] = 1
            at = b if b > a else b + 1
        out[name] = s
    return out


def lib_regex_sets(text):
    out = {}
    for name in REGEX_CLASSES + ["s", "d"]:
        pat = "\\" + name if len(name) == 1 and name.islower() else "\\p{%s}" % name
        pieces = pt.Split(Regex(pat), behavior="removed").pre_tokenize_str(text)
        s = bytearray([1]) * MAXCP
        for _, (a, b) in pieces:
            for i in range(a, b):
                s[SCALARS[i]] = 0
        for c in range(0xD800, 0xE000):
            s[c] = 0
        out[name] = s
    return out


def c_ranges(rs):
    if not rs:
        return "{{0, 0}}"  # a placeholder, never read (its count is 0)
    items = ["{0x%04X, 0x%04X}" % (a, b) for a, b in rs]
    lines, line = [], "  "
    for it in items:
        if len(line) + len(it) + 2 > 118:
            lines.append(line.rstrip())
            line = "  "
        line += it + ", "
    lines.append(line.rstrip())
    return "{\n" + "\n".join(lines) + "\n}"


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets", "hf_unicode_table.h")
    text_chars = "".join(chr(c) for c in SCALARS)
    text = text_chars.encode("utf-8")
    offsets, o = [], 0
    for c in SCALARS:
        offsets.append(o)
        o += len(chr(c).encode("utf-8"))
    lib = lib_props()
    lines = [
        "/*",
        " * datasets/hf_unicode_table.h: where the tokenizers library (%s) classifies" % tokenizers.__version__,
        " * characters otherwise than libutf8proc and PCRE2 do, as ranges of code points.",
        " * GENERATED by tests/tokenizers/make_unicode_table.py (it probes the installed",
        " * library over every Unicode scalar value); do not edit. Included by",
        " * datasets/hf_text.c only.",
        " */",
        "#ifndef LT_DATASETS_HF_UNICODE_TABLE_H",
        "#define LT_DATASETS_HF_UNICODE_TABLE_H",
        "",
        "#include <stdint.h>",
        "",
        "typedef struct {",
        "  uint32_t lo, hi;",
        "} lt__uc_range;",
        "",
        "/* Per property: the code points the library answers true (_add) and false",
        " * (_rem) for where libutf8proc's answer is the opposite. */",
    ]
    summary = []
    for name in CPROPS:
        add, rem = bool_diffs(name, lib[name])
        summary.append("%s +%d -%d" % (name, sum(b - a + 1 for a, b in add), sum(b - a + 1 for a, b in rem)))
        for suf, rs in (("add", add), ("rem", rem)):
            lines.append("static const lt__uc_range uc_%s_%s[] = %s;" % (name, suf, c_ranges(rs)))
            lines.append("#define UC_%s_%s_N %d" % (name.upper(), suf.upper(), len(rs)))
    low = lower_diffs()
    summary.append("lower %d" % len(low))
    lines.append("")
    lines.append("/* Rust's char::to_lowercase where it is not utf8proc_tolower: {code point, lowercase (up to 3)}. */")
    lines.append("typedef struct {\n  uint32_t c, low[3];\n} lt__uc_lower_entry;")
    ent = ", ".join("{0x%04X, {%s}}" % (c, ", ".join("0x%04X" % ord(x) for x in (r + "\0\0\0")[:3])) for c, r in low)
    lines.append("static const lt__uc_lower_entry uc_lower[] = {%s};" % (ent or "{0, {0, 0, 0}}"))
    lines.append("#define UC_LOWER_N %d" % len(low))
    inert = norm_inert()
    summary.append("normalization-unknown %d" % sum(b - a + 1 for a, b in inert))
    lines.append("")
    lines.append("/* Code points the library's normalizer (unicode-normalization-alignments) does not")
    lines.append(" * know: no decomposition, combining class 0, never composed. */")
    lines.append("static const lt__uc_range uc_norm_unknown[] = %s;" % c_ranges(inert))
    lines.append("#define UC_NORM_UNKNOWN_N %d" % len(inert))
    p2 = pcre2_sets(text, offsets)
    onig = lib_regex_sets(text_chars)
    lines.append("")
    lines.append("/* Regex classes: what Oniguruma's \\p{X} (\\s, \\d) matches and PCRE2's does not")
    lines.append(" * (_add), and the reverse (_rem). */")
    table = []
    for name in REGEX_CLASSES + ["s", "d"]:
        add = ranges([c for c in SCALARS if onig[name][c] and not p2[name][c]])
        rem = ranges([c for c in SCALARS if p2[name][c] and not onig[name][c]])
        summary.append("re:%s +%d -%d" % (name, sum(b - a + 1 for a, b in add), sum(b - a + 1 for a, b in rem)))
        cname = "re_" + name
        lines.append("static const lt__uc_range uc_%s_add[] = %s;" % (cname, c_ranges(add)))
        lines.append("static const lt__uc_range uc_%s_rem[] = %s;" % (cname, c_ranges(rem)))
        # A small class whose PCRE2 members Oniguruma lacks (\\s: U+180E) is
        # also written out whole, for use inside a bracket class.
        whole = ranges([c for c in SCALARS if onig[name][c]]) if rem and len(name) == 1 and name.islower() else []
        lines.append("static const lt__uc_range uc_%s_all[] = %s;" % (cname, c_ranges(whole)))
        table.append('  {"%s", uc_%s_add, %d, uc_%s_rem, %d, uc_%s_all, %d},' %
                     (name, cname, len(add), cname, len(rem), cname, len(whole)))
    lines.append("typedef struct {\n  const char *name;\n  const lt__uc_range *add;\n  int nadd;\n"
                 "  const lt__uc_range *rem;\n  int nrem;\n  const lt__uc_range *all; /* every member, for small classes */\n"
                 "  int nall;\n} lt__uc_class;")
    lines.append("static const lt__uc_class uc_regex_classes[] = {")
    lines.extend(table)
    lines.append("};")
    lines.append("")
    lines.append("#endif /* LT_DATASETS_HF_UNICODE_TABLE_H */")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %s" % (out_path, "; ".join(summary)))


if __name__ == "__main__":
    main()
