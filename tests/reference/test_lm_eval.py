#!/usr/bin/env python3
"""The evaluate program against transformers itself: perplexity of a text and
multiple-choice scores of tiny random GPT-2, Llama, Qwen2 and Mistral models.

    <reference python> tests/reference/test_lm_eval.py EVALUATE EXPORT [--verbose]

For each family: a model made with from_config (parameters randomised as in
test_hf_transformers.py), saved with save_pretrained beside a byte-level BPE
tokenizer.json trained here by the tokenizers library; then
  - perplexity of a text (Debian's GPL-3, its first 6 KB) with windows side by
    side (W = max_len) and overlapping (W 48, stride 20): transformers' loss
    by Hugging Face's recipe (huggingface.co/docs/transformers/perplexity:
    labels -100 before the last end - prev_end tokens of each window), each
    window's mean loss weighted by the tokens it actually scored, against
    `evaluate --text --json` on the same directory, and for GPT-2 and Llama on
    its GGUF export too (`export --format gguf`): the same token count, the
    loss within 2e-5 relative;
  - a HellaSwag-format file of 4 items: every ending's mean token loss
    (context tokens, then " " + ending, no special tokens; a context too long
    for max_len cut from the left) from transformers'
    logits against `evaluate --multiple-choice --json`: within 1e-4 absolute,
    the same choices and accuracy.
Prints the max differences per family. About half a minute.
"""
import json
import os
import subprocess
import sys
import tempfile

from hf_common import randomize as randomize_with  # noqa: E402  (first: offline settings)
import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,  # noqa: E402
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

PPL_REL_TOL = 2e-5
MC_ABS_TOL = 1e-4
MAX_LEN = 96
TEXT_BYTES = 6000


def randomize(model, seed):
    return randomize_with(model, seed, lambda n: "norm" in n or ".ln_" in n or n.startswith("ln_")).eval()


def families(V):
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=MAX_LEN, bos_token_id=0, eos_token_id=0)
    yield "gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=MAX_LEN, n_embd=32, n_layer=2, n_head=4,
                                             n_inner=48, activation_function="gelu_new", resid_pdrop=0.0,
                                             embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)), True
    yield "llama", LlamaForCausalLM(LlamaConfig(rms_norm_eps=1e-6, tie_word_embeddings=False, **common)), True
    yield "qwen2", Qwen2ForCausalLM(Qwen2Config(rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True,
                                                **common)), False
    yield "mistral", MistralForCausalLM(MistralConfig(rms_norm_eps=1e-5, sliding_window=16,
                                                      tie_word_embeddings=False, **common)), False


def hf_perplexity(model, ids, W, S):
    """Hugging Face's strided recipe, each window's loss times the tokens it scored."""
    n = len(ids)
    x = torch.tensor([ids])
    nll, count, prev_end = 0.0, 0, 0
    for b in range(0, n, S):
        e = min(b + W, n)
        trg = e - prev_end
        inp = x[:, b:e]
        labels = inp.clone()
        labels[:, :-trg] = -100
        scored = int((labels[:, 1:] != -100).sum())  # the model shifts the labels by one
        if scored > 0:
            with torch.no_grad():
                loss = model(inp, labels=labels).loss
            nll += float(loss) * scored
            count += scored
        prev_end = e
        if e == n:
            break
    return nll / count, count


def mc_scores(model, tok, items):
    out = []
    for it in items:
        c = tok.encode(it["ctx"], add_special_tokens=False).ids
        row = []
        for e in it["endings"]:
            ei = tok.encode(" " + e, add_special_tokens=False).ids
            cc = c[max(0, len(c) + len(ei) - (MAX_LEN + 1)):]  # the context's last tokens that fit
            seq = torch.tensor([cc + ei])
            with torch.no_grad():
                logits = model(seq[:, :-1]).logits[0].double()
            lp = torch.log_softmax(logits, -1)
            nll = [-float(lp[len(cc) + j - 1, ei[j]]) for j in range(len(ei))]
            row.append(sum(nll) / len(ei))
        out.append(row)
    return out


def evaluate(exe, *args):
    r = subprocess.run([exe, *args, "--json", "--threads", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"test_lm_eval: evaluate {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, export = sys.argv[1], sys.argv[2]
    verbose = "--verbose" in sys.argv
    from tokenizers import Tokenizer
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_curve import make_tokenizer
    torch.manual_seed(0)
    torch.set_num_threads(1)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            text = f.read()[:TEXT_BYTES].decode("utf-8", "ignore")
        text_path = os.path.join(tmp, "text.txt")
        with open(text_path, "w") as f:
            f.write(text)
        tokjson = os.path.join(tmp, "tokenizer.json")
        V = make_tokenizer(text_path, 320, tokjson)
        tok = Tokenizer.from_file(tokjson)
        ids = tok.encode(text).ids
        items = [
            {"ctx": "This License refers to version 3 of the GNU General", "endings":
             ["Public License.", "banana republic of cats.", "Lesser Tomato.", "Public Lice."], "label": 0},
            {"ctx": "Everyone is permitted to copy and distribute verbatim", "endings":
             ["copies of this license document", "potatoes", "nothing at all, ever"], "label": 0},
            {"ctx": "The GNU General Public License is a free,", "endings": ["copyleft license", "x"], "label": 1},
            {"ctx": "Preamble " * 60, "endings": ["The licenses for most software", "are", "The"], "label": 2},
        ]
        mc_path = os.path.join(tmp, "mc.jsonl")
        with open(mc_path, "w") as f:
            for i, it in enumerate(items):
                f.write(json.dumps(it if i % 2 == 0 else {"context": it["ctx"], "endings": it["endings"],
                                                           "label": it["label"]}) + "\n")
        for k, (name, model, gguf) in enumerate(families(V)):
            model = randomize(model, 10 + k)
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                f.write(open(tokjson).read())
            sources = [d]
            if gguf:
                g = os.path.join(tmp, name + ".gguf")
                subprocess.run([export, "--checkpoint", d, "--format", "gguf", "--out", g], check=True,
                               stdout=subprocess.DEVNULL)
                sources.append(g)
            worst_ppl = 0.0
            for W, S in ((MAX_LEN, MAX_LEN), (48, 20)):
                want, count = hf_perplexity(model, ids, W, S)
                for src in sources:
                    got = evaluate(exe, "--model", src, "--text", text_path, "--window", str(W), "--stride", str(S))
                    rel = abs(got["loss"] - want) / want
                    worst_ppl = max(worst_ppl, rel)
                    if verbose:
                        print(f"{name} {os.path.basename(src)} W {W} S {S}: loss {got['loss']:.8f}, "
                              f"transformers {want:.8f} ({got['scored']} tokens)")
                    if got["tokens"] != len(ids) or got["scored"] != count or rel > PPL_REL_TOL:
                        failures.append(f"{name} {src} W {W} S {S}: {got['tokens']}/{got['scored']} tokens, loss "
                                        f"{got['loss']:.8f}; transformers {len(ids)}/{count}, {want:.8f}")
            want = mc_scores(model, tok, items)
            got = evaluate(exe, "--model", d, "--multiple-choice", mc_path)
            worst_mc = 0.0
            correct = 0
            for it, w, g in zip(items, want, got["scores"]):
                worst_mc = max([worst_mc] + [abs(a - b) for a, b in zip(w, g["scores"])])
                choice = min(range(len(w)), key=lambda i: w[i])
                correct += choice == it["label"]
                if g["choice"] != choice:
                    failures.append(f"{name} multiple choice line {g['line']}: choice {g['choice']}, "
                                    f"transformers {choice} ({w} / {g['scores']})")
            if got["correct"] != correct or worst_mc > MC_ABS_TOL:
                failures.append(f"{name} multiple choice: {got['correct']} correct (transformers {correct}), "
                                f"max difference {worst_mc:.2e}")
            print(f"{name:8s} perplexity: max relative loss difference {worst_ppl:.2e} "
                  f"({'directory and GGUF' if gguf else 'directory'}); multiple choice: max abs difference "
                  f"{worst_mc:.2e}, accuracy {got['accuracy']:.2f}")
    if failures:
        print("test_lm_eval: FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"test_lm_eval: ok (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
