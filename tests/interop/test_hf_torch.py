#!/usr/bin/python3
"""tests/interop/test_hf_torch.py: libtensor's Hugging Face directories
(models/transformer/hf.h, docs/interop.md) against PyTorch, both ways.

The transformers library is not installable here, so GPT-2 and Llama are
written below from their published descriptions (Radford et al. 2019 and
Hugging Face's modeling_gpt2.py: pre-norm LayerNorm, tanh GELU "gelu_new",
learned positions, merged c_attn in Conv1D [in, out] orientation, tied head;
Touvron et al. 2023 and modeling_llama.py: RMSNorm, SwiGLU MLP, RoPE with
rotate_half, GQA by repeat_kv, no biases). Safetensors files are parsed and
written with a few lines of numpy (the safetensors package is not in Debian).

  libtensor -> PyTorch: hf_tool exports a tiny random model of each layout;
      the PyTorch model built from config.json and model.safetensors gives
      the same logits as libtensor (max difference <= 1e-5).
  PyTorch -> libtensor: a random PyTorch model of each layout is written as
      model.safetensors + config.json; libtensor loads it (hf_tool logits)
      with the same logits, `generate --checkpoint DIR` runs on it, and
      `train --init-from DIR` fine-tunes it (a model flag that differs is refused).

    test_hf_torch.py HF_TOOL GENERATE TRAIN     (ctest runs it: interop_hf_torch)
Exit 0 on success, 1 on a mismatch, 77 (skipped) when torch is absent.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

os.environ.pop("OPENBLAS_CORETYPE", None)  # Debian's numpy/torch and some CPUs (docs/testing.md)
import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:
    print("SKIP: PyTorch is not installed (Debian package python3-torch)")
    sys.exit(77)

TOL = 1e-5
DT = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "F16": "<f2"}


def st_read(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype=DT[v["dtype"]]).reshape(v["shape"]).copy()
    return out


def st_write(path, tensors, meta=None):
    hdr, off, body = {}, 0, []
    if meta:
        hdr["__metadata__"] = meta
    for k, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        body.append(a.tobytes())
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(body))


# ---- the models, from their descriptions (float64 references) ----

def causal_attention(q, k, v):
    """q, k, v [NH, T, HS] -> [T, NH*HS]"""
    T = q.shape[1]
    att = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = torch.softmax(att, dim=-1) @ v
    return y.transpose(0, 1).reshape(T, -1)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(W, cfg, ids):
    g = lambda name: W.get("transformer." + name, W.get(name))  # noqa: E731
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T = len(ids)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), g(p + ".weight"), g(p + ".bias"), eps)  # noqa: E731
    x = g("wte.weight")[ids] + g("wpe.weight")[:T]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        qkv = ln(x, p + "ln_1") @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x @ W + b
        q, k, v = (t.reshape(T, NH, C // NH).transpose(0, 1) for t in qkv.split(C, dim=1))
        x = x + causal_attention(q, k, v) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = gelu_new(ln(x, p + "ln_2") @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    return ln(x, "ln_f") @ g("wte.weight").T  # tied head


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_logits(W, cfg, ids):
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    NKV, eps, theta = cfg.get("num_key_value_heads", NH), cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    HS, T = C // NH, len(ids)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, NH, HS).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, NKV, HS).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, NKV, HS).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // NKV, dim=0), v.repeat_interleave(NH // NKV, dim=0)  # repeat_kv
        x = x + causal_attention(q, k, v) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        gate, up = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return rms(x, W["model.norm.weight"]) @ head.T


def torch_logits(d, ids):
    cfg = json.load(open(os.path.join(d, "config.json")))
    W = {k: torch.from_numpy(v.astype(np.float64)) for k, v in st_read(os.path.join(d, "model.safetensors")).items()}
    f = gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits
    with torch.no_grad():
        return f(W, cfg, torch.tensor(ids)).numpy()


def lt_logits(tool, d, ids, tmp):
    out = os.path.join(tmp, "logits.safetensors")
    subprocess.run([tool, "logits", d, out, ",".join(map(str, ids))], check=True)
    return st_read(out)["logits"][0].astype(np.float64)


# ---- PyTorch -> files: random models of each layout ----

def random_model(family, seed, vocab):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, m=0.0, sd=0.3: (m + sd * torch.randn(*s, generator=g, dtype=torch.float64)).numpy()  # noqa: E731
    W = {}
    if family == "gpt2":
        C, L, NH, F, P = 12, 2, 3, 28, 20
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": vocab, "n_embd": C,
               "n_layer": L, "n_head": NH, "n_positions": P, "n_inner": None, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
        F = 4 * C  # n_inner null: 4 * n_embd
        W["transformer.wte.weight"], W["transformer.wpe.weight"] = r(vocab, C), r(P, C)
        for i in range(L):
            p = "transformer.h.%d." % i
            for n in ("ln_1", "ln_2"):
                W[p + n + ".weight"], W[p + n + ".bias"] = r(C, m=1.0, sd=0.2), r(C)
            W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"] = r(C, 3 * C), r(3 * C)
            W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"] = r(C, C), r(C)
            W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"] = r(C, F), r(F)
            W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"] = r(F, C), r(C)
            W[p + "attn.bias"] = np.tril(np.ones((P, P)))[None, None]  # the causal-mask buffer HF saves
        W["transformer.ln_f.weight"], W["transformer.ln_f.bias"] = r(C, m=1.0, sd=0.2), r(C)
        return cfg, W
    C, L, NH, NKV, F, P = 16, 2, 4, 2, 36, 20
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "max_position_embeddings": P, "rms_norm_eps": 1e-6, "rope_theta": 500.0, "hidden_act": "silu",
           "tie_word_embeddings": False, "attention_bias": False, "rope_scaling": None}
    HS = C // NH
    W["model.embed_tokens.weight"], W["lm_head.weight"], W["model.norm.weight"] = r(vocab, C), r(vocab, C), r(C, m=1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        W[p + "self_attn.q_proj.weight"], W[p + "self_attn.o_proj.weight"] = r(C, C), r(C, C)
        W[p + "self_attn.k_proj.weight"], W[p + "self_attn.v_proj.weight"] = r(NKV * HS, C), r(NKV * HS, C)
        W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"] = \
            r(F, C), r(F, C), r(C, F)
        W[p + "input_layernorm.weight"], W[p + "post_attention_layernorm.weight"] = r(C, m=1.0), r(C, m=1.0)
    return cfg, W


def main():
    tool, generate, train = sys.argv[1], sys.argv[2], sys.argv[3]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for family, seed in (("gpt2", 11), ("llama", 12)):
            # libtensor -> PyTorch
            d = os.path.join(tmp, "lt-" + family)
            subprocess.run([tool, "make", family, d, str(seed)], check=True)
            ids = [3, 17, 0, 42, 8, 8, 29, 1, 49, 5, 11]
            a, b = torch_logits(d, ids), lt_logits(tool, d, ids, tmp)
            diff = float(np.abs(a - b).max())
            print("%-5s libtensor -> PyTorch: logits %s, max |diff| %.3g (largest |logit| %.3g)"
                  % (family, list(a.shape), diff, float(np.abs(a).max())))
            failed |= not diff <= TOL
            # PyTorch -> libtensor, and generate on the directory
            d = os.path.join(tmp, "pt-" + family)
            os.mkdir(d)
            vocab = 260  # libtensor's byte tokenizer, so that generate can read text
            cfg, W = random_model(family, seed + 100, vocab)
            st_write(os.path.join(d, "model.safetensors"), W, {"format": "pt"})
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
            ids = [1, 104, 101, 108, 108, 111, 32, 259, 4, 200, 17, 63]
            a, b = torch_logits(d, ids), lt_logits(tool, d, ids, tmp)
            diff = float(np.abs(a - b).max())
            print("%-5s PyTorch -> libtensor: logits %s, max |diff| %.3g (largest |logit| %.3g)"
                  % (family, list(a.shape), diff, float(np.abs(a).max())))
            failed |= not diff <= TOL
            out = subprocess.run([tool, "tokenizer", d], check=True, capture_output=True, text=True).stdout
            assert int(out) == vocab, out
            g = subprocess.run([generate, "--checkpoint", d, "--max-len", "6", "hello"], capture_output=True)
            print("%-5s generate --checkpoint DIR: exit %d" % (family, g.returncode))
            if g.returncode != 0:
                print(g.stderr.decode(errors="replace"))
                failed = True
            # fine-tune from the directory: weights, configuration and tokenizer from it
            text = os.path.join(tmp, "text.txt")
            open(text, "w").write("the quick brown fox jumps over the lazy dog. " * 40)
            run = [train, "--init-from", d, "--text", text, "--steps", "2", "--batch", "4", "--no-ckpt",
                   "--threads", "1", "--eval-every", "1"]
            t = subprocess.run(run, capture_output=True, encoding="utf-8", errors="replace")
            ok = t.returncode == 0 and "validation at step 1" in t.stdout
            print("%-5s train --init-from DIR: exit %d" % (family, t.returncode))
            t2 = subprocess.run(run + ["--d-model", "64"], capture_output=True, encoding="utf-8", errors="replace")
            ok = ok and t2.returncode == 2 and "differs from --init-from" in t2.stderr
            if not ok:
                print(t.stdout[-2000:], t.stderr[-2000:], t2.stderr[-2000:])
                failed = True
    print("FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
