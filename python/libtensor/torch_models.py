"""PyTorch models with libtensor's parameter names, and conversions of
state_dicts and AdamW state in both directions (docs/python.md).

- GPT(config): the decoder-only Transformer of models/transformer, module for
  module, with libtensor's names (embed, pos_embed, decoder.layers.<i>.
  self_attn.{q,k,v,out}_proj, linear1/linear2 or w1/w2/w3, norm1, norm2,
  decoder.norm, lm_head): its state_dict is the checkpoint's tensors as they are.
  Every decoder-only option converts: positions learned, sinusoidal or RoPE
  (rope_base), LayerNorm or RMSNorm, SwiGLU, GQA/MQA (n_kv_heads), biases,
  tied head. llama_config(vocab_size, ...) gives the Llama layout in one call:
  GPT(llama_config(V, d_model=..., n_heads=..., n_kv_heads=...)).
- Seq2Seq(config): torch.nn.Transformer itself (batch_first, norm_first =
  pre_norm) plus the shared embedding, the positions and the tied head, as
  libtensor's encoder-decoder. Its state_dict differs from libtensor's in two
  ways, which to_libtensor / from_libtensor undo: q/k/v are packed into
  in_proj_weight [3C, C] / in_proj_bias [3C] (split row-wise), and the decoder's
  cross-attention is multihead_attn (libtensor: cross_attn).

`config` is the checkpoint's /model attributes (Checkpoint.config), the 33
keys of lt_tf_config (the late ones, BERT's type_vocab_size, embed_norm and
pooler, Qwen2's qkv_bias, Mistral's sliding_window and the rope_* scaling, read
as 0 / "default" when a checkpoint lacks them, as lt_tf_config_from_meta does;
the Python models run none of the decoder families' three and refuse them); default_config gives lt_tf_config_default's values.
Torch is imported here only: the rest of the package does not need it.
"""
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

INT_KEYS = ("vocab_size", "d_model", "n_heads", "n_kv_heads", "n_enc_layers", "n_dec_layers", "d_ff", "max_len",
            "n_classes", "pad_id", "type_vocab_size", "sliding_window", "rope_original_max_len",
            "rel_buckets", "rel_max_distance")
BOOL_KEYS = ("pre_norm", "swiglu", "tie_embeddings", "scale_embeddings", "bias", "embed_norm", "pooler", "qkv_bias",
             "head_rescale")
FLOAT_KEYS = ("dropout", "norm_eps", "rope_base", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
              "attn_scale")
STR_KEYS = ("arch", "norm", "act", "pos", "rope_type")
# config.c's TF_LATE_* fields: their values when a checkpoint predates them
LATE_KEYS = dict(type_vocab_size=0, embed_norm=0, pooler=0, qkv_bias=0, sliding_window=0, rope_original_max_len=0,
                 rope_factor=0.0, rope_low_freq_factor=0.0, rope_high_freq_factor=0.0, rope_type="default",
                 rel_buckets=0, rel_max_distance=0, head_rescale=0, attn_scale=0.0)


def default_config(arch, vocab_size, **over):
    """lt_tf_config_default(arch) with vocab_size, as checkpoint attributes; over replaces fields."""
    c = dict(arch=arch, vocab_size=vocab_size, d_model=128, n_heads=4, n_kv_heads=4, n_enc_layers=2,
             n_dec_layers=2, d_ff=512, max_len=512, n_classes=0, dropout=0.1, norm="layernorm", pre_norm=False,
             act="relu", swiglu=False, pos="sinusoidal", tie_embeddings=True, scale_embeddings=True, bias=True,
             norm_eps=1e-5, rope_base=10000.0, pad_id=0, **LATE_KEYS)
    if arch == "decoder-only":
        c.update(n_enc_layers=0, pre_norm=True, act="gelu", pos="learned", scale_embeddings=False)
    elif arch != "encoder-decoder":
        raise ValueError("arch %r: GPT ('decoder-only') and Seq2Seq ('encoder-decoder') are converted" % arch)
    for k, v in over.items():
        if k not in c:
            raise KeyError("no configuration field %r" % k)
        c[k] = v
    return normalize_config(c)


def llama_config(vocab_size, **over):
    """The Llama layout of the decoder-only model, as models/transformer/hf.c
    reads a Llama config.json: pre-norm RMSNorm (eps 1e-6), SwiGLU with SiLU,
    RoPE (rope_base 10000), no biases, an untied head, no dropout, no
    embedding scale, no pad id; over replaces fields (n_kv_heads for GQA)."""
    c = dict(norm="rmsnorm", pre_norm=True, act="silu", swiglu=True, pos="rope", rope_base=10000.0, bias=False,
             tie_embeddings=False, dropout=0.0, norm_eps=1e-6, scale_embeddings=False, pad_id=-1)
    c.update(over)
    return default_config("decoder-only", vocab_size, **c)


def rope(x, pos0, base):
    """nn/rope.c: x [..., T, HS] rotated pairwise, pair i = (x_i, x_{i+HS/2})
    (the rotate-half layout of GPT-NeoX and Llama), row t at position pos0 + t
    with theta_i = pos * base^(-2i/HS); the cos/sin table in double, rounded
    once to x's dtype, as libtensor does."""
    T, HS = x.shape[-2], x.shape[-1]
    H = HS // 2
    inv = np.power(float(base), -2.0 * np.arange(H) / HS)
    a = (pos0 + np.arange(T))[:, None] * inv[None, :]
    cos = torch.from_numpy(np.cos(a)).to(x.dtype)
    sin = torch.from_numpy(np.sin(a)).to(x.dtype)
    x1, x2 = x[..., :H], x[..., H:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def normalize_config(c):
    """The configuration with libtensor's types: ints, bools as ints 0/1, floats, strings."""
    out = {}
    c = dict(c)
    for k, v in LATE_KEYS.items():
        c.setdefault(k, v)
    for k in STR_KEYS:
        out[k] = str(c[k])
    for k in INT_KEYS:
        out[k] = int(c[k])
    for k in BOOL_KEYS:
        out[k] = int(bool(c[k]))
    for k in FLOAT_KEYS:
        out[k] = float(c[k])
    return out


def sinusoidal_table(T, C):
    """nn/positional.c: PE[t, j] = sin or cos(t * 10000^(-(j - j%2)/C)), computed in double."""
    j = np.arange(C)
    inv = np.power(10000.0, -(j - j % 2) / C)
    a = np.arange(T)[:, None] * inv[None, :]
    return torch.from_numpy(np.where(j % 2 == 0, np.sin(a), np.cos(a)).astype(np.float32))


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _norm(c):
    return RMSNorm(c["d_model"], c["norm_eps"]) if c["norm"] == "rmsnorm" else nn.LayerNorm(c["d_model"],
                                                                                             eps=c["norm_eps"])


def _act(name):
    return {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
            "silu": F.silu}[name]


@torch.no_grad()
def greedy(model, next_logits, start, max_new, eos):
    """Greedy decoding as `generate --strategy greedy`: next_logits(ids) gives
    the logits of the position after ids; the new ids, the first eos included."""
    was = model.training
    model.eval()
    ids, out = list(start), []
    for _ in range(max_new):
        nxt = int(next_logits(ids).argmax())
        out.append(nxt)
        ids.append(nxt)
        if nxt == eos:
            break
    model.train(was)
    return out


class Attention(nn.Module):
    """lt_mha: q/k/v/out projections, n_kv_heads key/value heads (query head h uses kv head h // (NH / NKV))."""

    def __init__(self, c):
        super().__init__()
        C, self.NH, self.NKV = c["d_model"], c["n_heads"], c["n_kv_heads"]
        self.HS = C // self.NH
        b = bool(c["bias"])
        self.q_proj = nn.Linear(C, C, bias=b)
        self.k_proj = nn.Linear(C, self.NKV * self.HS, bias=b)
        self.v_proj = nn.Linear(C, self.NKV * self.HS, bias=b)
        self.out_proj = nn.Linear(C, C, bias=b)
        self.p = c["dropout"]
        self.rope_base = c["rope_base"] if c["pos"] == "rope" else None
        if self.rope_base is not None and self.HS % 2:
            raise ValueError("Attention: RoPE needs an even head size, d_model %d / n_heads %d is %d"
                             % (C, self.NH, self.HS))

    def forward(self, x, causal=True, pos0=0):
        """x [B, T, C] -> [B, T, C]; RoPE (if on) puts query and key t at position pos0 + t."""
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.NH, self.HS).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.NKV, self.HS).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.NKV, self.HS).transpose(1, 2)
        if self.rope_base is not None:
            q, k = rope(q, pos0, self.rope_base), rope(k, pos0, self.rope_base)
        if self.NKV != self.NH:
            k = k.repeat_interleave(self.NH // self.NKV, dim=1)
            v = v.repeat_interleave(self.NH // self.NKV, dim=1)
        w = q @ k.transpose(-1, -2) / math.sqrt(self.HS)
        if causal:
            w = w.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        w = F.dropout(w.softmax(-1), self.p, self.training)
        return self.out_proj((w @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, b = c["d_model"], bool(c["bias"])
        self.self_attn = Attention(c)
        self.swiglu = bool(c["swiglu"])
        if self.swiglu:
            self.w1 = nn.Linear(C, c["d_ff"], bias=b)
            self.w2 = nn.Linear(c["d_ff"], C, bias=b)
            self.w3 = nn.Linear(C, c["d_ff"], bias=b)
        else:
            self.linear1 = nn.Linear(C, c["d_ff"], bias=b)
            self.linear2 = nn.Linear(c["d_ff"], C, bias=b)
        self.norm1, self.norm2 = _norm(c), _norm(c)
        self.act, self.pre, self.p = _act(c["act"]), bool(c["pre_norm"]), c["dropout"]

    def ffn(self, x):
        d = lambda t: F.dropout(t, self.p, self.training)
        if self.swiglu:
            return self.w2(d(F.silu(self.w1(x)) * self.w3(x)))
        return self.linear2(d(self.act(self.linear1(x))))

    def forward(self, x, pos0=0):
        d = lambda t: F.dropout(t, self.p, self.training)
        if self.pre:
            x = x + d(self.self_attn(self.norm1(x), pos0=pos0))
            return x + d(self.ffn(self.norm2(x)))
        x = self.norm1(x + d(self.self_attn(x, pos0=pos0)))
        return self.norm2(x + d(self.ffn(x)))


class GPT(nn.Module):
    """libtensor's decoder-only Transformer, every option (the Llama layout: GPT(llama_config(V, ...)))."""

    def __init__(self, config):
        super().__init__()
        c = self.config = normalize_config(config)
        if c["arch"] != "decoder-only":
            raise ValueError("GPT: arch %r, expected 'decoder-only'" % c["arch"])
        if c["embed_norm"]:
            raise NotImplementedError("GPT: embed_norm is not implemented in the Python model")
        for k, off in (("qkv_bias", 0), ("sliding_window", 0), ("rope_type", "default"), ("rel_buckets", 0),
                       ("attn_scale", 0.0), ("head_rescale", 0)):
            if c[k] != off:
                raise NotImplementedError("GPT: %s = %r is not implemented in the Python model" % (k, c[k]))
        C = c["d_model"]
        self.embed = nn.Embedding(c["vocab_size"], C, padding_idx=c["pad_id"] if c["pad_id"] >= 0 else None)
        nn.init.normal_(self.embed.weight, 0.0, 1 / math.sqrt(C) if c["scale_embeddings"] else 0.02)
        if c["pos"] == "learned":
            self.pos_embed = nn.Embedding(c["max_len"], C)
            nn.init.normal_(self.pos_embed.weight, 0.0, 1.0 if c["scale_embeddings"] else 0.02)
        elif c["pos"] == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(c["max_len"], C), persistent=False)
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(Block(c) for _ in range(c["n_dec_layers"]))
        if c["pre_norm"]:
            self.decoder.norm = _norm(c)
        if not c["tie_embeddings"]:
            self.lm_head = nn.Linear(C, c["vocab_size"], bias=False)

    def forward(self, ids, pos0=0):
        """ids [B, T] -> logits [B, T, V]."""
        c, T = self.config, ids.shape[1]
        x = self.embed(ids)
        if c["scale_embeddings"]:
            x = x * math.sqrt(c["d_model"])
        if c["pos"] != "rope":  # RoPE rotates q and k in each layer instead
            x = x + (self.pos_embed.weight if c["pos"] == "learned" else self.pos_table)[pos0:pos0 + T]
        x = F.dropout(x, c["dropout"], self.training)
        for blk in self.decoder.layers:
            x = blk(x, pos0=pos0)
        if c["pre_norm"]:
            x = self.decoder.norm(x)
        return self.lm_head(x) if not c["tie_embeddings"] else x @ self.embed.weight.t()

    def generate(self, prompt, max_new, eos=2):
        """Greedy continuation of one prompt (a list of ids) within max_len positions."""
        return greedy(self, lambda ids: self(torch.tensor([ids]))[0, -1], prompt, max_new, eos)


class Seq2Seq(nn.Transformer):
    """torch.nn.Transformer with libtensor's embedding, positions and head.
    Only what nn.Transformer has: LayerNorm, relu or gelu, biases, n_kv_heads =
    n_heads, no SwiGLU; the rest is refused naming the field."""

    def __init__(self, config):
        c = normalize_config(config)
        bad = [k for k, ok in (("arch", c["arch"] == "encoder-decoder"), ("norm", c["norm"] == "layernorm"),
                               ("act", c["act"] in ("relu", "gelu")), ("swiglu", not c["swiglu"]),
                               ("bias", c["bias"]), ("n_kv_heads", c["n_kv_heads"] == c["n_heads"]),
                               ("pos", c["pos"] in ("sinusoidal", "learned")), ("embed_norm", not c["embed_norm"]),
                               ("qkv_bias", not c["qkv_bias"]), ("sliding_window", c["sliding_window"] == 0),
                               ("attn_scale", c["attn_scale"] == 0.0), ("head_rescale", not c["head_rescale"])) if not ok]
        if bad:
            raise ValueError("Seq2Seq (nn.Transformer) cannot express %s = %s" % (bad[0], c[bad[0]]))
        super().__init__(d_model=c["d_model"], nhead=c["n_heads"], num_encoder_layers=c["n_enc_layers"],
                         num_decoder_layers=c["n_dec_layers"], dim_feedforward=c["d_ff"], dropout=c["dropout"],
                         activation=c["act"], layer_norm_eps=c["norm_eps"], batch_first=True,
                         norm_first=bool(c["pre_norm"]))
        self.config = c
        C = c["d_model"]
        self.embed = nn.Embedding(c["vocab_size"], C, padding_idx=c["pad_id"] if c["pad_id"] >= 0 else None)
        nn.init.normal_(self.embed.weight, 0.0, 1 / math.sqrt(C) if c["scale_embeddings"] else 0.02)
        if c["pad_id"] >= 0:
            with torch.no_grad():
                self.embed.weight[c["pad_id"]].zero_()
        if c["pos"] == "learned":
            self.pos_embed = nn.Embedding(c["max_len"], C)
        else:
            self.register_buffer("pos_table", sinusoidal_table(c["max_len"], C), persistent=False)
        if not c["tie_embeddings"]:
            self.lm_head = nn.Linear(C, c["vocab_size"], bias=False)

    def _in(self, ids):
        c, T = self.config, ids.shape[1]
        x = self.embed(ids)
        if c["scale_embeddings"]:
            x = x * math.sqrt(c["d_model"])
        x = x + (self.pos_embed.weight if c["pos"] == "learned" else self.pos_table)[:T]
        return F.dropout(x, c["dropout"], self.training)

    def encode(self, src, src_pad=None):
        return self.encoder(self._in(src), src_key_padding_mask=src_pad)

    def decode(self, tgt, memory, src_pad=None, tgt_pad=None):
        T = tgt.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)
        x = self.decoder(self._in(tgt), memory, tgt_mask=mask, tgt_key_padding_mask=tgt_pad,
                         memory_key_padding_mask=src_pad)
        return self.lm_head(x) if not self.config["tie_embeddings"] else x @ self.embed.weight.t()

    def forward(self, src, tgt, src_pad=None, tgt_pad=None):
        """src [B, S], tgt [B, T] (<bos> first) -> logits [B, T, V]."""
        return self.decode(tgt, self.encode(src, src_pad), src_pad, tgt_pad)

    def generate(self, src, max_new, bos=1, eos=2):
        """Greedy output for one source (a list of ids), from <bos>."""
        was = self.training
        self.eval()
        with torch.no_grad():
            mem = self.encode(torch.tensor([src]))
        out = greedy(self, lambda ys: self.decode(torch.tensor([ys]), mem)[0, -1], [bos], max_new, eos)
        self.train(was)
        return out


# ---- state_dict conversion ------------------------------------------------------------------

def _np(t):
    return t.detach().cpu().numpy().copy() if isinstance(t, torch.Tensor) else np.asarray(t)


def torch_name(name, arch):
    """The PyTorch parameter a libtensor name comes from: q/k/v_proj.{weight,bias}
    of nn.Transformer are in in_proj_{weight,bias}, cross_attn is multihead_attn."""
    if arch != "encoder-decoder":
        return name
    name = name.replace(".cross_attn.", ".multihead_attn.")
    for p in "qkv":
        name = name.replace(".%s_proj.weight" % p, ".in_proj_weight").replace(".%s_proj.bias" % p, ".in_proj_bias")
    return name


def to_libtensor(state, arch):
    """A PyTorch state_dict (GPT or Seq2Seq) -> {libtensor name: ndarray}: for
    the encoder-decoder, in_proj_weight/in_proj_bias split row-wise into
    q_proj, k_proj, v_proj and multihead_attn renamed cross_attn."""
    out = {}
    for k, v in state.items():
        a = _np(v)
        if arch == "encoder-decoder":
            k = k.replace(".multihead_attn.", ".cross_attn.")
            head, _, leaf = k.rpartition(".")
            if leaf in ("in_proj_weight", "in_proj_bias"):
                kind = "weight" if leaf == "in_proj_weight" else "bias"
                for part, chunk in zip("qkv", np.split(a, 3, axis=0)):
                    out["%s.%s_proj.%s" % (head, part, kind)] = np.ascontiguousarray(chunk)
                continue
        out[k] = a
    return out


def from_libtensor(tensors, arch):
    """{libtensor name: ndarray} -> a PyTorch state_dict (of torch tensors) for
    GPT or Seq2Seq: q/k/v merged into in_proj, cross_attn renamed multihead_attn."""
    out = {}
    for k, a in tensors.items():
        if arch == "encoder-decoder":
            head, _, leaf = k.rpartition(".")
            mod, _, proj = head.rpartition(".")
            if proj in ("k_proj", "v_proj"):
                continue
            if proj == "q_proj":
                parts = [tensors["%s.%s_proj.%s" % (mod, p, leaf)] for p in "qkv"]
                k, a = "%s.in_proj_%s" % (mod, leaf), np.concatenate(parts, axis=0)
            k = k.replace(".cross_attn.", ".multihead_attn.")
        out[k] = torch.from_numpy(np.ascontiguousarray(a))
    return out


# ---- AdamW state ----------------------------------------------------------------------------

def no_decay(name):
    """libtensor's rule (nn/layers.c): biases, norm weights and embeddings get no weight decay."""
    parts = name.split(".")
    return parts[-1] in ("bias", "in_proj_bias") or (len(parts) > 1 and parts[-2].startswith("norm")) or \
        parts[0] in ("embed", "pos_embed")


def param_groups(model, weight_decay):
    """AdamW parameter groups as libtensor's optimizer makes them: weight_decay
    on the matrices of Linear layers, 0 on biases, norms and embeddings."""
    dec, nodec = [], []
    for n, p in model.named_parameters():
        (nodec if no_decay(n) else dec).append(p)
    return [{"params": dec, "weight_decay": weight_decay}, {"params": nodec, "weight_decay": 0.0}]


def optim_to_libtensor(opt, model, arch):
    """A torch.optim.AdamW over model's parameters -> the optim dict of a
    Checkpoint (kind, step, lr, hyperparameters and per-parameter exp_avg,
    exp_avg_sq, step, under libtensor's names)."""
    names = {id(p): n for n, p in model.named_parameters()}
    g0 = opt.param_groups[0]
    wd = max(g["weight_decay"] for g in opt.param_groups)
    per = {}
    for p, st in opt.state.items():
        if not st:
            continue
        n = names[id(p)]
        per[n] = {"exp_avg": _np(st["exp_avg"]), "exp_avg_sq": _np(st["exp_avg_sq"]), "step": int(float(st["step"]))}
    steps = [s["step"] for s in per.values()]
    state = {}
    for leaf in ("exp_avg", "exp_avg_sq"):
        conv = to_libtensor({n: s[leaf] for n, s in per.items()}, arch)
        for n, a in conv.items():
            state.setdefault(n, {})[leaf] = a
    for n in state:  # the step of each converted name: its source's
        state[n]["step"] = per[torch_name(n, arch)]["step"]
    return {"kind": "adamw", "step": max(steps) if steps else 0, "lr": float(g0["lr"]), "momentum": 0.0,
            "dampening": 0.0, "nesterov": 0, "beta1": float(g0["betas"][0]), "beta2": float(g0["betas"][1]),
            "eps": float(g0["eps"]), "weight_decay": float(wd), "decay_all": 0, "state": state}


def optim_from_libtensor(optim, model, arch):
    """A Checkpoint's optim dict (kind adamw or adam) -> a torch.optim.AdamW (or
    Adam) over model's parameters, with libtensor's parameter groups and the
    moments and per-parameter steps of the file."""
    if optim["kind"] not in ("adamw", "adam"):
        raise ValueError("optimizer kind %r: only adam and adamw convert" % optim["kind"])
    cls = torch.optim.AdamW if optim["kind"] == "adamw" else torch.optim.Adam
    groups = param_groups(model, optim["weight_decay"]) if not optim.get("decay_all") else \
        [{"params": list(model.parameters()), "weight_decay": optim["weight_decay"]}]
    opt = cls(groups, lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), eps=optim["eps"])
    st = optim.get("state", {})
    params = dict(model.named_parameters())
    for leaf in ("exp_avg", "exp_avg_sq"):
        conv = from_libtensor({n: s[leaf] for n, s in st.items()}, arch)
        for n, t in conv.items():
            opt.state[params[n]][leaf] = t.clone()
    steps = {}
    for n, s in st.items():
        tn = torch_name(n, arch)
        if tn in steps and steps[tn] != s["step"]:
            raise ValueError("%s: q, k and v have different steps (%d, %d): cannot pack them" % (tn, steps[tn],
                                                                                               s["step"]))
        steps[tn] = s["step"]
    for tn, s in steps.items():
        opt.state[params[tn]]["step"] = torch.tensor(float(s))
    return opt
