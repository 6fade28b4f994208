#!/usr/bin/env python3
"""Train the conformance suite's tokenizers with Hugging Face tokenizers.

    <reference python> tests/tokenizers/make_tokenizers.py [OUTDIR]

writes OUTDIR/<name>.json (default tests/tokenizers/fixtures/), one
tokenizer.json per entry of FIXTURES, each trained by the `tokenizers`
library (the reference environment's 0.23.3, docs/testing.md) with fixed
settings on Debian's own text: /usr/share/common-licenses and the copyright
files under /usr/share/doc, read in sorted order (make_corpus.debian_text_lines),
plus 5% generated lines from make_corpus.gen_line (CJK, emoji, marks, ...) so
that the vocabularies hold some of those too. Vocabularies are small (600 to
2,000 entries) so the files stay small (about 0.3 MB together).

Each fixture mirrors the layout of a well-known model's tokenizer.json (GPT-2,
RoBERTa, Llama-2, Llama-3, T5, BERT) or covers components those do not use.
Where a real file's layout cannot come out of a trainer (Llama-2's byte
tokens at ids 3..258, Llama-3 vocabulary entries without a merge, legacy
"a b" merge strings), the trained JSON is edited and then loaded back with
Tokenizer.from_str, so every file is one the library reads.

Deterministic: one Rayon thread, sorted inputs, no limit_alphabet
(common_chars_only instead), affixed BPE and WordPiece trained through
train_affixed, Unigram results through canonical_unigram; two runs give
identical files (--check trains twice in memory and compares; --only=NAME
makes one).
What it is not: a test. test_conformance.py is the test.
"""
import json
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tokenizers import (Regex, Tokenizer, AddedToken, decoders, models,  # noqa: E402
                        normalizers, pre_tokenizers, processors, trainers)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_corpus  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_BYTES = 3 << 20

# Llama-3's split pattern (meta-llama/Meta-Llama-3-8B tokenizer.json).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# CLIP's pattern (openai/clip-vit-base-patch32), applied after lowercasing.
CLIP_PATTERN = (r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]"
                r"|[^\s\p{L}\p{N}]+")


def training_text():
    """The training lines (str), the same on every call."""
    lines = [b.decode("utf-8", errors="replace")
             for b in make_corpus.debian_text_lines(TRAIN_BYTES, copyright_only=True)]
    rng = random.Random(1)
    extra = []
    for _ in range(len(lines) // 20):
        x = make_corpus.gen_line(rng)
        if isinstance(x, bytes):
            x = x.decode("utf-8", errors="replace")
        extra.append(x.replace("\n", " "))
    # Interleave deterministically so the generated lines are not all at the end.
    out = []
    step = max(1, len(lines) // max(1, len(extra)))
    j = 0
    for i, line in enumerate(lines):
        out.append(line)
        if i % step == 0 and j < len(extra):
            out.append(extra[j])
            j += 1
    return out + extra[j:]


def common_chars_only(text, keep=300):
    """text without the characters outside the keep most frequent ones (the
    Unigram trainer needs every character in its vocabulary)."""
    counts = {}
    for line in text:
        for c in line:
            counts[c] = counts.get(c, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    common = {c for c, _ in ranked[:keep]}
    return ["".join(c for c in line if c in common) for line in text]


def train_affixed(tok, text, vocab_size, specials, prefix="", suffix="", initial_alphabet=()):
    """Train tok's BPE or WordPiece model with a continuing_subword_prefix or
    an end_of_word_suffix, deterministically; returns tok's JSON.

    The library's trainers number the "##c" and "c</w>" tokens in hash order
    and break ties between merges of equal count by id, so their results vary
    from run to run. The same training without an affix numbers the alphabet
    in character order and is deterministic. So each word from tok's
    normalizer and pre-tokenizer is rewritten with its non-initial (prefix) or
    final (suffix) characters mapped to private-use characters of plane 15,
    a plain BPE is trained on those words, and its tokens and merges are
    mapped back: "\U000F0000 + i" stands for "##" + c or c + "</w>". That is
    the affixed trainer's algorithm with a fixed numbering."""
    words = []
    for line in text:
        s = tok.normalizer.normalize_str(line) if tok.normalizer else line
        words.append([w for w, _ in tok.pre_tokenizer.pre_tokenize_str(s)])
    chars = sorted({c for ws in words for w in ws for c in w} | set(initial_alphabet))
    mark = {c: chr(0xF0000 + i) for i, c in enumerate(chars)}
    unmark = {m: c for c, m in mark.items()}

    def marked(w):
        if prefix:
            return w[0] + "".join(mark[c] for c in w[1:])
        return w[:-1] + mark[w[-1]]
    lines = [" ".join(marked(w) for w in ws if w) for ws in words]
    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                             special_tokens=specials, initial_alphabet=list(initial_alphabet))
    t = train(plain, tr, lines)

    def back(token):
        if token in specials:
            return token
        if prefix and token[0] in unmark:
            return prefix + "".join(unmark[c] for c in token)
        if prefix:
            return token[0] + "".join(unmark[c] for c in token[1:])
        if token[-1] in unmark:
            return token[:-1] + unmark[token[-1]] + suffix
        return token
    d = json.loads(tok.to_str())
    d["model"]["vocab"] = {back(k): v for k, v in t["model"]["vocab"].items()}
    if d["model"]["type"] == "BPE":
        d["model"]["merges"] = [[back(x), back(y)] for x, y in t["model"]["merges"]]
    d["added_tokens"] = t["added_tokens"]
    return d


def canonical_unigram(d, nfixed, text):
    """The Unigram trainer's result made the same on every run. Its sums
    differ in the last bits, and characters of equal count get their scores
    (and the characters it appends at the end, every character needing a
    piece) in hash order. So: scores rounded to 1e-6; the scores of the
    one-character pieces dealt out again, highest first, to those characters
    ordered by their count in text, then by character; the pieces after the
    first nfixed sorted by score, then by piece."""
    counts = {}
    for line in text:
        for c in line:
            counts[c] = counts.get(c, 0) + 1
    v = [[p, round(s, 6)] for p, s in d["model"]["vocab"]]
    head, rest = v[:nfixed], v[nfixed:]
    singles = [i for i, (p, _) in enumerate(rest) if len(p) == 1]
    scores = sorted((rest[i][1] for i in singles), reverse=True)
    chars = sorted((rest[i][0] for i in singles), key=lambda c: (-counts.get(c, 0), c))
    for i, c, sc in zip(singles, chars, scores):
        rest[i] = [c, sc]
    rest.sort(key=lambda x: (-x[1], x[0]))
    d["model"]["vocab"] = head + rest
    return d


def train(tok, trainer, text):
    tok.train_from_iterator(text, trainer=trainer, length=len(text))
    return json.loads(tok.to_str())


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def reload(d):
    """The JSON as the library writes it after reading d (a check that it reads it)."""
    return json.loads(Tokenizer.from_str(json.dumps(d)).to_str())


def tid(d, token):
    for a in d["added_tokens"]:
        if a["content"] == token:
            return a["id"]
    return d["model"]["vocab"][token]


# ---------------------------------------------------------------- fixtures

def gpt2(text):
    """GPT-2: byte-level BPE, ByteLevel pre-tokenizer/decoder/post-processor,
    merges written as legacy "a b" strings as in the original file."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                             special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    d = train(tok, tr, text)
    d = reload(d)
    d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
    return d


def roberta(text):
    """RoBERTa: byte-level BPE with add_prefix_space, RobertaProcessing with
    trim_offsets, <mask> with lstrip."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                             special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, tr, text)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
        trim_offsets=True, add_prefix_space=True)
    return reload(json.loads(tok.to_str()))


def llama2(text):
    """Llama-2: SentencePiece BPE as converted by transformers: Prepend and
    Replace normalizers, no pre-tokenizer, byte_fallback with <0xXX> at ids
    3..258, decoders Replace, ByteFallback, Fuse, Strip; <s> prepended."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                 split=True)
    tr = trainers.BpeTrainer(vocab_size=1000 - 259, min_frequency=2, show_progress=False)
    t = train(tok, tr, common_chars_only(text, 150))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in byte_tokens():
        vocab[b] = len(vocab)
    for token, _ in sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    d = t
    d["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    d["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    d["pre_tokenizer"] = None
    d["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    d["model"].update({"vocab": vocab, "unk_token": "<unk>", "fuse_unk": True,
                       "byte_fallback": True, "ignore_merges": False})
    return reload(d)


def llama3(text):
    """Llama-3: Split with Llama-3's pattern then ByteLevel (use_regex false),
    ignore_merges, post-processor Sequence[ByteLevel, TemplateProcessing];
    a few whole words added to the vocabulary without merges so that
    ignore_merges changes results."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tr = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, tr, text)
    tok.add_special_tokens(specials)
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    base = max(vocab.values()) + 1
    extra = ["Ġsoftware", "Ġcopyright", "Ġdistribute", "Ġlicense", "ĠLicense", "Ġprogram",
             "Ġwarranty", "Ġmodification", "Ġpermission", "ĠDebian", "Ġthe", "Ġ12", "123",
             "Ġpackages", "Ġredistributions", "Ġconditions"]
    added = [e for e in extra if e not in vocab]
    for e in added:
        vocab[e] = base
        base += 1
    for a in d["added_tokens"]:                       # specials after the new entries
        a["id"] += len(added)
    d["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                                                 "ids": [tid(d, "<|begin_of_text|>")],
                                                 "tokens": ["<|begin_of_text|>"]}}}]}
    return reload(d)


def unigram(text):
    """T5-like Unigram: NFKC and Replace(" {2,}", " ") normalizers, Metaspace
    (prepend always, split), unk, "$A </s>"."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tr = trainers.UnigramTrainer(vocab_size=1000, special_tokens=["<pad>", "</s>", "<unk>"],
                                 unk_token="<unk>", show_progress=False, max_piece_length=12,
                                 n_sub_iterations=2, shrinking_factor=0.75)
    text = common_chars_only(text[:len(text) // 3], 400)
    train(tok, tr, text)
    tok = Tokenizer.from_str(json.dumps(canonical_unigram(json.loads(tok.to_str()), 3, text)))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return reload(json.loads(tok.to_str()))


def unigram_bytes(text):
    """Unigram with byte_fallback (<0xXX> pieces, score 0 as SentencePiece
    writes them), Metaspace prepend "first" and split false, decoders
    ByteFallback then Metaspace, <s> ... </s>."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tr = trainers.UnigramTrainer(vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"],
                                 unk_token="<unk>", show_progress=False, max_piece_length=8,
                                 n_sub_iterations=2, shrinking_factor=0.75)
    text = common_chars_only(text[:len(text) // 3], 200)
    d = canonical_unigram(train(tok, tr, text), 3, text)
    pieces = d["model"]["vocab"]
    d["model"]["vocab"] = pieces[:3] + [[b, 0.0] for b in byte_tokens()] + pieces[3:]
    d["model"]["byte_fallback"] = True
    d["model"]["unk_id"] = 0
    d["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}]}
    d["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}
    return reload(d)


def bert(text, lowercase):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100 if lowercase else 50))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None if lowercase else False,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=lowercase)
    # As trainers.WordPieceTrainer(vocab_size=1500, min_frequency=2, special_tokens=specials).
    tok = Tokenizer.from_str(json.dumps(train_affixed(tok, common_chars_only(text, 400), 1500,
                                                      specials, prefix="##")))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if lowercase:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    else:
        tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
        tok.enable_truncation(max_length=64, strategy="longest_first", direction="right")
    return reload(json.loads(tok.to_str()))


def bert_uncased(text):
    """BERT uncased (as bert-base-uncased): BertNormalizer with lowercase and
    accent stripping, BertPreTokenizer, WordPiece, [CLS] $A [SEP]."""
    return bert(text, True)


def bert_cased(text):
    """BERT cased: no lowercase, no accent stripping, BertProcessing, WordPiece
    decoder without cleanup, max_input_chars_per_word 50, truncation to 64."""
    return bert(text, False)


def added_bpe(text):
    """added_tokens on a byte-level BPE (add_prefix_space): special, lstrip,
    rstrip, both, single_word, a normalized token with a space; "$A <|endoftext|>"."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False,
                             special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, tr, text)
    tok.add_special_tokens([AddedToken("<|special|>", special=True, normalized=False),
                            AddedToken("<tok_l>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<tok_r>", rstrip=True, special=False, normalized=False),
                    AddedToken("<tok_lr>", lstrip=True, rstrip=True, special=False, normalized=False),
                    AddedToken("debian", single_word=True, special=False, normalized=True),
                    AddedToken("gnu gpl", special=False, normalized=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>",
        special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))])
    return reload(json.loads(tok.to_str()))


def added_wordpiece(text):
    """added_tokens on BERT uncased: "HeLLo" not normalized (matches the raw
    text only), "Debian" normalized (matches "debian" after lowercasing),
    [MASK] with lstrip and rstrip, a single_word special."""
    d = bert(text, True)
    tok = Tokenizer.from_str(json.dumps(d))
    tok.add_tokens([AddedToken("HeLLo", normalized=False, special=False),
                    AddedToken("Debian", normalized=True, special=False)])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, special=True,
                                       normalized=False),
                            AddedToken("<s>", single_word=True, special=True, normalized=False)])
    return reload(json.loads(tok.to_str()))


def bpe_suffix(text):
    """CLIP-like BPE with end_of_word_suffix "</w>": NFC, Replace(\\s+, " "),
    Lowercase, Strip; Split (CLIP's pattern, Removed, inverted) then
    ByteLevel without its regex; decoders Replace ("</w>" by "Ġ", the byte-level
    space), ByteLevel, Fuse."""
    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase(), normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    # As trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=[...],
    # end_of_word_suffix="</w>", initial_alphabet=ByteLevel.alphabet()).
    tok = Tokenizer.from_str(json.dumps(train_affixed(
        tok, text, 1200, ["<|startoftext|>", "<|endoftext|>"], suffix="</w>",
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())))
    # No Strip(" ", 0, 1) after Fuse as CLIP has none: tokenizers 0.23.3 panics in
    # Strip's stop on an empty token (decoders.Strip(" ", 0, 1).decode([""])).
    tok.decoder = decoders.Sequence([decoders.Replace("</w>", "Ġ"), decoders.ByteLevel(),
                                     decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", pair="<|startoftext|> $A <|endoftext|> $B <|endoftext|>",
        special_tokens=[("<|startoftext|>", tok.token_to_id("<|startoftext|>")),
                        ("<|endoftext|>", tok.token_to_id("<|endoftext|>"))])
    return reload(json.loads(tok.to_str()))


def bpe_prefix(text):
    """BPE with continuing_subword_prefix "##" and an unk: NFD, StripAccents,
    Lowercase; WhitespaceSplit, Punctuation (isolated), Digits (individual);
    WordPiece decoder."""
    tok = Tokenizer(models.BPE(continuing_subword_prefix="##", unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True)])
    # As trainers.BpeTrainer(vocab_size=800, min_frequency=2, special_tokens=[...],
    # continuing_subword_prefix="##").
    tok = Tokenizer.from_str(json.dumps(train_affixed(tok, common_chars_only(text, 200), 800,
                                                      ["[UNK]", "[CLS]", "[SEP]"], prefix="##")))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return reload(json.loads(tok.to_str()))


def split_behaviours(text):
    """Split in each behaviour and inverted, Whitespace, Digits (runs),
    Punctuation (contiguous), NFKD; a byte_fallback BPE with Llama-2's byte
    tokens; decoders ByteFallback, Replace, Strip (one trailing "s" of each
    token: Strip's stop, on tokens that are never empty), Fuse."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKD()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\d+"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="isolated", invert=True),
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Whitespace()])
    tr = trainers.BpeTrainer(vocab_size=700 - 256, min_frequency=2, show_progress=False,
                             special_tokens=["<unk>"])
    t = train(tok, tr, common_chars_only(text, 120))
    vocab = {"<unk>": 0}
    for b in byte_tokens():
        vocab[b] = len(vocab)
    for token, _ in sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    t["model"].update({"vocab": vocab, "byte_fallback": True, "fuse_unk": False})
    t["added_tokens"][0]["id"] = 0
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Replace", "pattern": {"String": "e"}, "content": "E"},
        {"type": "Strip", "content": "s", "start": 0, "stop": 1}, {"type": "Fuse"}]}
    t["post_processor"] = None
    return reload(t)


FIXTURES = {
    "gpt2": gpt2, "roberta": roberta, "llama2": llama2, "llama3": llama3,
    "unigram": unigram, "unigram_bytes": unigram_bytes,
    "bert_uncased": bert_uncased, "bert_cased": bert_cased,
    "added_bpe": added_bpe, "added_wordpiece": added_wordpiece,
    "bpe_suffix": bpe_suffix, "bpe_prefix": bpe_prefix, "split_behaviours": split_behaviours,
}


def make_all(names):
    text = training_text()
    return {name: json.dumps(FIXTURES[name](text), ensure_ascii=False, separators=(",", ":")) + "\n"
            for name in names}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    check = "--check" in sys.argv
    outdir = args[0] if args else os.path.join(HERE, "fixtures")
    names = [a[len("--only="):] for a in sys.argv[1:] if a.startswith("--only=")] or list(FIXTURES)
    files = make_all(names)
    if check:
        again = make_all(names)
        diff = [n for n in names if files[n] != again[n]]
        if diff:
            os.makedirs(outdir, exist_ok=True)
            for n in diff:
                for suffix, text in (("", files[n]), (".again", again[n])):
                    with open(os.path.join(outdir, n + suffix + ".json"), "w", encoding="utf-8") as f:
                        f.write(text)
            sys.exit(f"not deterministic: {diff} (both versions in {outdir})")
    os.makedirs(outdir, exist_ok=True)
    total = 0
    for name, s in files.items():
        path = os.path.join(outdir, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(s)
        Tokenizer.from_file(path)                     # the library reads what was written
        total += os.path.getsize(path)
        print(f"{path}: {os.path.getsize(path)} bytes")
    print(f"{len(files)} files, {total} bytes" + (", deterministic" if check else ""))


if __name__ == "__main__":
    main()
