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

The suite itself is :mod:`numlab.torch.calibrate`'s (``numlab calibrate`` runs
it under every ATen capability the machine can run and writes a report); this
module prints it for the process as it is.  Needs torch
(``pip install torch==2.13.0``, CPU build).
"""

from __future__ import annotations

from ..torch.calibrate import CAUSES, SUITE, header, measure_case, run_suite

__all__ = ["main", "SUITE", "run_suite", "measure_case", "header"]


def _fmt(v):
    if isinstance(v, str):
        return f"{'not modelled':>13}"
    share, mu = v
    return f"{share:7.2%} {mu:5.3g}"


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
        cause = "" if full else CAUSES.get(name, "?")
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
