"""``numlab bench faithfulness``: numlab's predictions against real PyTorch on this CPU.

For every function of the suite (pointwise chains with scalars and where,
tanh/exp/sigmoid/gelu, row sum/mean/amax with lengths that are and are not
multiples of the vector widths, softmax, layer norm, rms norm) in fp32, bf16
and fp16: numlab's eager prediction against torch eager, and numlab's fused
prediction against ``torch.compile`` (Inductor C++) with
``emulate_precision_casts`` off and on, as the share of bitwise-equal
elements and the largest distance in ulps of the dtype.  The ``cause``
column names the residual's source where a row is not 100%.

The header names the machine and what torch dispatches on it
(:func:`numlab.torch.presets.describe_machine`: CPU model and flags, torch
version, threads, ATen capability, Inductor's vector ISA and lanes, oneDNN's
ISA) and the kernels the presets chose for it; a case numlab does not model on
this machine prints ``not modelled`` with the reason instead of a share.

Needs torch (``pip install torch==2.13.0``, CPU build).
"""

from __future__ import annotations

import numpy as np

# numlab.torch imports torch only inside the functions that need it
from ..torch.bridge import from_torch
from ..torch.data import cancelling_rows, normal
from ..torch.explain import ulp_distance
from ..torch.predictor import NotModelled, compile_fn, predict, run_torch
from ..torch.presets import (
    describe_machine,
    inductor_cpu,
    measure_aten_sum_lanes,
    torch_cpu_eager,
)

__all__ = ["main", "SUITE", "run_suite", "measure_case"]


def _suite():
    import torch
    import torch.nn.functional as F

    def chain(x, y):
        return (x * 0.1 + y) / 3.0 - x * y

    def scalars_where(x, y):
        return torch.where(x > 0.3, x * 2.5, y - 0.3) + (1.5 - x) + 2.0 / x + torch.add(x, y, alpha=0.7)

    def tanh(x):
        return torch.tanh(x)

    def exp(x):
        return torch.exp(x)

    def sigmoid(x):
        return torch.sigmoid(x)

    def gelu(x):
        return F.gelu(x)

    def gelu_tanh(x):
        return F.gelu(x, approximate="tanh")

    def row_sum(x):
        return x.sum(-1)

    def row_mean(x):
        return x.mean(-1)

    def row_amax(x):
        return x.amax(-1)

    def softmax(x):
        return F.softmax(x, -1)

    def layernorm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w)

    # name -> (fn, number of inputs, data kind, transcendental?)
    return {
        "chain +-*/ scalars": (chain, 2, "normal", False),
        "where, rsub, s/x, alpha": (scalars_where, 2, "normal", False),
        "tanh": (tanh, 1, "normal", True),
        "exp": (exp, 1, "normal", True),
        "sigmoid": (sigmoid, 1, "normal", True),
        "gelu (erf)": (gelu, 1, "normal", True),
        "gelu (tanh)": (gelu_tanh, 1, "normal", True),
        "row sum": (row_sum, 1, "cancel", False),
        "row mean": (row_mean, 1, "cancel", False),
        "row amax": (row_amax, 1, "normal", False),
        "softmax": (softmax, 1, "normal", True),
        "layernorm": (layernorm, 3, "normal", False),
        "rmsnorm": (rmsnorm, 2, "normal", False),
    }


SUITE = (
    "chain +-*/ scalars", "where, rsub, s/x, alpha", "tanh", "exp", "sigmoid", "gelu (erf)",
    "gelu (tanh)", "row sum", "row mean", "row amax", "softmax", "layernorm", "rmsnorm",
)

# why a row may be below 100% (the residual's source), by case and dtype
_CAUSES = {
    "tanh": "eager: MKL VML tanhf modelled as correctly rounded",
    "exp": "eager: MKL VML vsExp modelled as correctly rounded",
    "sigmoid": "",
    "gelu (erf)": "",
    "gelu (tanh)": "",
    "softmax": "Inductor tiling of the exp-sum loop",
    "layernorm": "ATen RowwiseMoments FMA contraction (rstd)",
    "rmsnorm": "",
}


def _inputs(name, nin, kind, shape, dt, rng):
    import torch

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    xs = []
    for i in range(nin):
        if i == 0:
            x = cancelling_rows(rng, shape, dt) if kind == "cancel" else normal(rng, shape, dt, 2.0)
        else:
            x = normal(rng, (shape[-1],) if name in ("layernorm", "rmsnorm") else shape, dt)
        xs.append(torch.from_numpy(x).to(tdt))
    return tuple(xs)


def measure_case(name, dt, shape, seed=0, emulate=(False, True)):
    """One row: {'eager': (share, max_ulp), 'compiled': ..., 'compiled+emulate': ...};
    a side numlab does not model on this machine is the ``NotModelled`` message."""
    fn, nin, kind, _ = _suite()[name]
    rng = np.random.default_rng(seed)
    xs = _inputs(name, nin, kind, shape, dt, rng)
    tr = from_torch(fn, xs)
    row = {}

    def score(p, t):
        same = (p == t) | (np.isnan(p) & np.isnan(t))
        return float(np.mean(same)), float(np.max(ulp_distance(p, t, dt))) if p.size else 0.0

    te = run_torch(tr, xs, mode="eager")[0]
    try:
        row["eager"] = score(predict(tr, xs, mode="eager").outputs[0], te)
    except NotModelled as e:
        row["eager"] = str(e)
    for emu in emulate:
        key = "compiled+emulate" if emu else "compiled"
        try:
            pc = predict(tr, xs, mode="compiled", preset=inductor_cpu(emu)).outputs[0]
        except NotModelled as e:
            row[key] = str(e)
            continue
        tc = run_torch(tr, xs, mode="compiled", compiled=compile_fn(fn, emu))[0]
        row[key] = score(pc, tc)
    return row


def run_suite(quick: bool = False, dtypes=("fp32", "bf16", "fp16")):
    """Rows (name, dtype, shape, row dict) of the whole suite."""
    rows = []
    red_ns = (64, 100) if quick else (64, 100, 1000)
    other = (8, 100) if quick else (16, 100)
    for dt in dtypes:
        for name in SUITE:
            if name.startswith("row") or name in ("softmax", "layernorm", "rmsnorm"):
                shapes = [(8, n) for n in red_ns]
            else:
                shapes = [other]
            for shape in shapes:
                rows.append((name, dt, shape, measure_case(name, dt, shape)))
    return rows


def _fmt(v):
    if isinstance(v, str):
        return f"{'not modelled':>13}"
    share, mu = v
    return f"{share:7.2%} {mu:5.3g}"


def header() -> str:
    """The machine and the kernels the presets chose for it (needs torch)."""
    pe, pi = torch_cpu_eager(), inductor_cpu()
    m = describe_machine()
    return (f"{m.header()}\n"
            f"presets: eager softmax lanes {pe.softmax_lanes}, ATen sum lanes {measure_aten_sum_lanes()} "
            f"(measured), F.gelu {pe.gelu_algo or 'not modelled'}; compiled {pi.vec_isa} "
            f"{pi.lanes} lanes{' (not modelled)' if pi.not_modelled() else ''}")


def main(quick: bool = False) -> str:
    """Print and return the faithfulness table (share bitwise equal, max ulp)."""
    try:
        import torch  # noqa: F401  (optional dependency: only checked here)
    except ImportError:  # pragma: no cover - depends on the machine
        msg = "faithfulness: torch is not installed (pip install torch==2.13.0); nothing measured"
        print(msg)
        return msg
    lines = [header(),
             "case                       dtype shape        eager vs torch  | compiled vs torch.compile "
             "| +emulate_precision_casts | residual cause",
             "                                              bitwise maxulp  |   bitwise maxulp          "
             "|   bitwise maxulp         |"]
    notes = []
    for name, dt, shape, row in run_suite(quick):
        full = all(not isinstance(v, str) and v[0] == 1.0 for v in row.values())
        cause = "" if full else _CAUSES.get(name, "?")
        for k, v in row.items():
            if isinstance(v, str):
                cause = "not modelled here (below)"
                notes.append(f"  {name} {dt} {k}: {v}")
        lines.append(f"{name:<26} {dt:<5} {str(list(shape)):<12} {_fmt(row['eager'])}    | "
                     f"{_fmt(row['compiled'])}            | {_fmt(row['compiled+emulate'])}           | {cause}")
    if notes:
        lines += ["not modelled on this machine:"] + sorted(set(notes))
    out = "\n".join(lines)
    print(out)
    return out
