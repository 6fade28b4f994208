#!/usr/bin/env python3
"""tests/data/hf_tokenizers/make_fixtures.py: small tokenizer.json files and the
ids the `tokenizers` library gives for a few inputs, for tests/test_hf_tokenizer.c.

Run with the reference environment (./do.sh reference):
    ~/.cache/libtensor/reference/bin/python tests/data/hf_tokenizers/make_fixtures.py
It writes <name>.json (trained here on a fixed text, so small) and cases.tsv:
    name <TAB> input (hex) <TAB> add_special (0/1) <TAB> ids <TAB> offsets <TAB> decode (hex)
with offsets start:end in bytes of the input (the library's character offsets
converted: an ill-formed sequence, one U+FFFD, spans its bytes).
The formal conformance suite (corpora of megabytes, every component) is
tests/tokenizers/; these fixtures keep the C test self-contained.
"""
import os
from tokenizers import (Tokenizer, AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!",
    "Licensed under the License, you may not use this file except in compliance with the License.",
    "naïve café résumé Ünïcödé 東京 北京 中文 emoji 😀 numbers 12345 3.14 1,000,000",
    "    indented\tand\ttabs   runs of spaces\n\nnew lines",
] * 20
INPUTS = [b"The quick brown fox.", b"", b"  spaces   and\ttabs\n", "naïve café 東京 😀👍🏽".encode(),
          b"bad \xff\xfe utf8 \xe2\x82 end", b"digits 1234567 and 3.14", "e\u0301 \u00c5 \uff21 \ufb01".encode(),
          b"<mask> the [X] license<mask>"]

def train_all():
    out = {}
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=True)
    tk.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    out["gpt2"] = tk
    tk = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    tk.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"] +
                                                     [f"<0x{b:02X}>" for b in range(256)]))
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    out["llama2"] = tk
    tk = Tokenizer(models.Unigram())
    tk.normalizer = normalizers.NFKC()
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tk.train_from_iterator(TEXT, trainers.UnigramTrainer(vocab_size=150, special_tokens=["<pad>", "</s>", "<unk>"],
                                                         unk_token="<unk>"))
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    out["unigram"] = tk
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    tk.train_from_iterator(TEXT, trainers.WordPieceTrainer(vocab_size=200, special_tokens=[
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tk.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tk.add_tokens([AddedToken("license", single_word=True)])
    tk.add_special_tokens([AddedToken("[X]", rstrip=True)])
    out["wordpiece"] = tk
    return out

def byte_offsets(raw, text, offsets):
    pos, cmap = 0, [0]
    for c in text:
        if c == "\ufffd" and raw[pos:pos + 3] != b"\xef\xbf\xbd":
            k = max(k for k in range(1, min(4, len(raw) - pos) + 1) if raw[pos:pos + k].decode("utf-8", "replace") == "\ufffd")
        else:
            k = len(c.encode())
        pos += k
        cmap.append(pos)
    return [(cmap[a], cmap[b]) for a, b in offsets]

def main():
    toks = train_all()
    rows = []
    for name, tk in toks.items():
        tk.save(os.path.join(HERE, name + ".json"))
        for raw in INPUTS:
            text = raw.decode("utf-8", errors="replace")
            for special in (1, 0):
                e = tk.encode(text, add_special_tokens=bool(special))
                dec = tk.decode(e.ids, skip_special_tokens=True)
                rows.append("\t".join([name, raw.hex(), str(special), " ".join(map(str, e.ids)),
                                       " ".join(f"{a}:{b}" for a, b in byte_offsets(raw, text, e.offsets)), dec.encode().hex()]))
    with open(os.path.join(HERE, "cases.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

if __name__ == "__main__":
    main()
