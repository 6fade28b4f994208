#!/usr/bin/env python3
"""bench/char_lstm_torch.py: the PyTorch twin of examples/char_lstm.c, for
bench/run_lstm_bench.sh. Same model (Embedding -> nn.LSTM -> Linear,
time-major), configuration, data order (the first 90% of the text as B
contiguous streams read T characters at a time, the state carried detached
and zeroed when the streams start over; validation over the last 10% as 4
streams), loss (mean cross-entropy), optimizer (Adam, constant lr), clipping
(global norm 1.0) and result line:
    result: steps N ms_per_step X val_loss Y
ms_per_step is the time in training steps (evaluation excluded; with
--compile also the compilation, printed apart as compile_s). Only the
initial weights differ (torch's generator seeded with --seed). --compile and
--optim-impl are bench/torch_setup.py's set-ups (torch 2.x).

    /usr/bin/python3 bench/char_lstm_torch.py --steps 300 --threads 2
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_setup


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    for k, v in (("steps", 300), ("batch", 32), ("seq", 64), ("embed", 64), ("hidden", 256), ("layers", 1),
                 ("seed", 1), ("threads", 0)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--lr", type=float, default=2e-3)
    torch_setup.add_args(ap)
    o = ap.parse_args()
    torch_setup.check(o)
    if o.threads > 0:
        torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)

    raw = open(o.data, "rb").read()
    alphabet = sorted(set(raw))
    index = {c: i for i, c in enumerate(alphabet)}
    ids = torch.tensor([index[c] for c in raw], dtype=torch.int64)
    n, V = len(raw), len(alphabet)
    n_train = n * 9 // 10
    T, B = o.seq, o.batch

    class Streams:
        def __init__(self, lo, S, length):
            self.lo, self.S, self.len, self.pos = lo, S, length, 0
            # rows: stream s starts at lo + s * len
            self.starts = lo + torch.arange(S) * length

        def next(self):
            reset = False
            if self.pos + T > self.len:
                self.pos, reset = 0, True
            idx = self.starts[None, :] + self.pos + torch.arange(T)[:, None]  # [T, S]
            self.pos += T
            return ids[idx], ids[idx + 1], reset

    train = Streams(0, B, (n_train - 1) // B)
    VS = 4
    val = Streams(n_train, VS, (n - n_train - 1) // VS)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, o.embed)
            self.lstm = nn.LSTM(o.embed, o.hidden, o.layers)
            self.head = nn.Linear(o.hidden, V)

        def forward(self, x, state):
            out, state = self.lstm(self.embed(x), state)
            return self.head(out), state

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, **torch_setup.optim_kwargs(o))
    fwd = torch_setup.wrap(model, o)
    print("char_lstm_torch: %s, %d characters, alphabet %d; B %d, T %d, E %d, H %d, layers %d; %d parameters; "
          "%d threads" % (o.data, n, V, B, T, o.embed, o.hidden, o.layers,
                          sum(p.numel() for p in model.parameters()), torch.get_num_threads()), flush=True)

    def evaluate():
        model.eval()
        val.pos = 0
        state, total, count = None, 0.0, 0
        with torch.no_grad():
            while val.pos + T <= val.len:
                x, y, _ = val.next()
                logits, state = model(x, state)
                total += F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item() * y.numel()
                count += y.numel()
        model.train()
        return total / count

    state = None
    times = []
    for step in range(1, o.steps + 1):
        t0 = time.perf_counter()
        x, y, reset = train.next()
        if reset:
            state = None
        logits, state = fwd(x, state)
        state = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        if step % 50 == 0 or step == o.steps:
            print("step %d/%d | loss %.4f" % (step, o.steps, loss.item()), flush=True)
    v = evaluate()
    comp = torch_setup.compile_seconds(times[:1], torch_setup.median(times), o)
    seconds = sum(times) - comp
    print("result: steps %d ms_per_step %.3f val_loss %.4f compile_s %.1f setup %s"
          % (o.steps, 1e3 * seconds / o.steps, v, comp, o.compile))


if __name__ == "__main__":
    main()
