"""bench/torch_setup.py: the PyTorch set-ups every twin offers, in one place
(bench/train_step_torch.py, char_lstm_torch.py, fashion_mnist_torch.py and so
the CNN and ViT twins), so that the shell scripts can ask each twin for
PyTorch 2.x at its best the same way (bench/lib.sh, torch2_setups):

  --compile none|default|max-autotune
        torch.compile (inductor) of the model, in that mode (torch 2.x only).
        The first step compiles: compile_seconds() gives the time to report
        apart, and the twins leave it out of their per-step figures.
  --optim-impl default|foreach|fused
        the optimizer's implementation (foreach=True, or fused=True: one
        kernel over all parameters, on the CPU since torch 2.4); default is
        torch's own choice.

What this is not: a script (the twins import it).
"""
import torch

COMPILE_MODES = ("none", "default", "max-autotune")
OPTIM_IMPLS = ("default", "foreach", "fused")


def add_args(ap):
    ap.add_argument("--compile", choices=COMPILE_MODES, default="none")
    ap.add_argument("--optim-impl", choices=OPTIM_IMPLS, default="default")


def check(a):
    """Exits with a message when the set-up cannot run on this torch."""
    if a.compile != "none" and not hasattr(torch, "compile"):
        raise SystemExit(f"--compile needs torch 2.x (this is {torch.__version__})")
    if a.optim_impl == "fused" and int(torch.__version__.split(".")[0]) < 2:
        raise SystemExit(f"--optim-impl fused needs torch 2.4 or later on the CPU (this is {torch.__version__})")


def wrap(model, a):
    """The model as the set-up runs it (the same parameters)."""
    if a.compile == "none":
        return model
    return torch.compile(model, mode=None if a.compile == "default" else a.compile)


def optim_kwargs(a):
    return {"foreach": dict(foreach=True), "fused": dict(fused=True)}.get(a.optim_impl, {})


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def compile_seconds(first_steps_s, step_s, a):
    """The compilation's share of the first steps: their time minus as many
    ordinary steps (step_s, the median), 0 without --compile."""
    if a.compile == "none":
        return 0.0
    return max(0.0, sum(first_steps_s) - len(first_steps_s) * step_s)


def describe(a):
    return f"torch {torch.__version__}, compile {a.compile}, optimizer {a.optim_impl}"
