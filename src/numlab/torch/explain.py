"""Explain why torch eager and ``torch.compile`` disagree on a user's function.

:func:`explain` runs the real function eager and compiled (Inductor C++),
numlab's two predictions and the fp64 reference, then attributes the
eager/compiled difference to the four sources of difference (``docs/design.md``,
"The four sources of difference") by
switching each one on its own (:class:`~numlab.torch.predictor.Switches`; each switch
is a choice of the lowering, :func:`numlab.torch.lowering.lower`, and of the engine's
``KernelSpec`` fields, the same knobs the predictions run with):

* **promotion** -- every ATen kernel rounds to fp16/bf16 vs one fused fp32
  kernel rounding at its stores;
* **scalars** (instruction choice) -- Python scalars rounded to the tensor
  dtype for add/sub and an FMA in ``add(alpha)`` vs fp32 scalars and
  no contraction (``-ffp-contract=off``); a comparison's scalar is in the
  tensor dtype in both (measured), so it is not switched;
* **order** -- ATen's cascade sum (8 lanes) vs Inductor's 16/32 lane vector
  and butterfly (and thread split);
* **algorithm** -- ATen's softmax/layer-norm/gelu kernels vs Inductor's
  decompositions (Welford var_mean, erf formula, ...).

For each source the report gives the share of elements where switching it
alone moves the eager prediction onto the compiled prediction ("explains"),
and where switching everything *but* it still leaves a difference ("needed").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .._repr import Compact, array_summary
from ..formats import get_format, ulp
from ..rounding import round_to
from .bridge import from_torch, import_torch
from .predictor import COMPILED, EAGER, TORCH_SOURCES, compile_fn, predict, run_torch
from .presets import inductor_cpu, torch_cpu_eager

__all__ = ["explain", "Explanation", "ulp_gap", "SOURCE_TEXT"]

SOURCE_TEXT = {
    "promotion": "each ATen op rounds to the tensor dtype | one fused fp32 kernel, rounding at stores",
    "scalars": "add/sub scalars rounded to dtype, add(alpha) FMA | fp32 scalars, no FMA (compare: dtype in both)",
    "order": "ATen cascade sum (8 lanes) | Inductor 16/32 lanes + butterfly (thread split)",
    "algorithm": "ATen softmax/layer_norm/gelu kernels | Inductor's decompositions",
}
"""What each of the four sources switches, as printed by :meth:`Explanation.table`."""


def _join(words) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def ulp_gap(a, b, fmt) -> np.ndarray:
    """|a - b| in units of the last place of ``fmt`` at max(|a|, |b|) (0 where equal,
    including equal infinities and NaN pairs; inf where exactly one is NaN or inf)."""
    f = get_format(fmt)
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan
    with np.errstate(all="ignore"):
        u = np.asarray(ulp(np.maximum(np.abs(a), np.abs(b)), f), np.float64)
        d = np.abs(a - b) / u
    d = np.where(same, 0.0, d)
    return np.where(np.isnan(d), np.inf, d)


@dataclass(repr=False)
class Explanation(Compact):
    """Result of :func:`explain` (``str(e)`` is the report).  ``dtype`` is the
    output tensor's torch dtype by its numlab name (``"fp16"``), as
    :attr:`numlab.torch.bridge.ANode.dtype`: in :mod:`numlab.torch` ``dtype``
    names a torch tensor's dtype, torch's own word."""

    name: str
    dtype: str
    shape: tuple
    torch_eager: np.ndarray
    torch_compiled: np.ndarray
    pred_eager: np.ndarray
    pred_compiled: np.ndarray
    fp64: np.ndarray
    differ: float  # share of elements where torch eager != torch compiled
    faith_eager: float  # share bitwise equal, numlab eager vs torch eager
    faith_compiled: float
    max_ulp_eager: float
    max_ulp_compiled: float
    sources: dict = field(default_factory=dict)  # source -> {"explains": share, "needed": share}
    errors: dict = field(default_factory=dict)  # label -> (max abs err vs fp64, max ulp vs fp64 rounded)
    n_differ: int = 0  # elements where torch eager != torch compiled
    n_differ_pred: int = 0  # elements where numlab's eager and compiled predictions differ (attributed)

    def verdict(self) -> str:
        """One sentence: which source(s) the difference comes from."""
        if self.n_differ_pred == 0:
            if self.n_differ:
                return ("numlab predicts no eager/compiled difference but torch shows one: "
                        "nothing can be attributed (see the faithfulness lines)")
            return "eager and compiled agree bit for bit: nothing to attribute"
        alone = [s for s in TORCH_SOURCES if self.sources[s]["explains"] == 1.0]
        needed = [s for s in TORCH_SOURCES if self.sources[s]["needed"] > 0.0]
        some = [s for s in TORCH_SOURCES if self.sources[s]["explains"] > 0.0 or self.sources[s]["needed"] > 0.0]
        if len(alone) == 1 and not (set(needed) - set(alone)):
            out = f"{alone[0]} alone accounts for the whole difference"
        elif alone:
            out = (f"{' or '.join(alone)} alone moves every differing element; "
                   f"needed on some elements: {', '.join(needed) or 'none'}")
        elif needed:
            out = (f"no single source accounts for it: {_join(needed)} combine "
                   f"(each needed on some elements)")
        else:
            out = f"no single source accounts for it and none is needed alone: {', '.join(some) or 'none'} overlap"
        partial = [f"{s} {self.sources[s]['explains']:.0%}" for s in TORCH_SOURCES
                   if 0.0 < self.sources[s]["explains"] < 1.0]
        if partial:
            out += f"; alone moves part of them: {', '.join(partial)}"
        unused = [s for s in TORCH_SOURCES if s not in some]
        if unused:
            out += f"; no effect: {', '.join(unused)}"
        if self.faith_eager < 1.0 or self.faith_compiled < 1.0:
            out += " (attribution of numlab's predictions, which are not bitwise here)"
        return out

    def table(self) -> str:
        n = int(np.prod(self.shape)) if self.shape else 1
        lines = [
            f"explain {self.name}: output {self.dtype}{list(self.shape)}",
            f"  torch eager vs torch.compile differ on {self.n_differ} of {n} elements ({self.differ:.1%})",
            f"  numlab eager    == torch eager   : {self.faith_eager:.2%} bitwise (max {self.max_ulp_eager:g} ulp)",
            f"  numlab compiled == torch.compile : {self.faith_compiled:.2%} bitwise "
            f"(max {self.max_ulp_compiled:g} ulp)",
            f"  attribution over the {self.n_differ_pred} elements where numlab's eager and compiled "
            "predictions differ:",
            "    explains = share that switching only this source (eager -> compiled) turns into the compiled bits",
            "    needed   = share still different when every other source is switched (this one is required)",
            f"  {'source':<10} {'explains':>8} {'needed':>7}  eager vs compiled",
        ]
        for s in TORCH_SOURCES:
            d = self.sources.get(s, {})
            lines.append(f"  {s:<10} {d.get('explains', 0):>8.1%} {d.get('needed', 0):>7.1%}  {SOURCE_TEXT[s]}")
        lines.append(f"  verdict: {self.verdict()}")
        lines.append(f"  error vs fp64      {'max abs':>12}  {'max ulp(' + str(self.dtype) + ')':>14}")
        for k, (ea, eu) in self.errors.items():
            lines.append(f"  {k:<16} {ea:>12.4g}  {eu:>14.4g}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def _repr_facts(self):
        n = int(np.prod(self.shape)) if self.shape else 1
        rows = [("differ", f"torch eager vs torch.compile on {self.n_differ} of {n} elements ({self.differ:.1%})"),
                ("faithful eager", f"{self.faith_eager:.2%} bitwise (max {self.max_ulp_eager:g} ulp)"),
                ("faithful compiled", f"{self.faith_compiled:.2%} bitwise (max {self.max_ulp_compiled:g} ulp)"),
                ("verdict", self.verdict())]
        rows += [(s, f"explains {d.get('explains', 0):.1%}, needed {d.get('needed', 0):.1%}")
                 for s, d in self.sources.items()]
        rows += [("torch eager", array_summary(self.torch_eager)), ("fp64", array_summary(self.fp64))]
        return f"Explanation: {self.name}, output {self.dtype}{list(self.shape)}", rows


def explain(fn, inputs, *, emulated_casts: bool = False, output: int = 0,
            compiled=None, eager_preset=None, inductor_preset=None) -> Explanation:
    """Run ``fn`` eager and compiled, numlab's predictions and fp64, and attribute
    the eager/compiled difference to the four sources (module docstring).

    Parameters
    ----------
    fn : callable
        A torch function of tensors (see :func:`numlab.torch.from_torch`).
    inputs : tuple of torch.Tensor
    emulated_casts : bool
        Inductor's ``emulate_precision_casts`` for the compiled run and prediction.
    output : int
        Which output to report when ``fn`` returns several.
    compiled : callable, optional
        An already compiled ``fn`` (reused; must match ``emulated_casts``).
    """
    torch = import_torch()
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    tr = from_torch(fn, inputs)
    if not isinstance(output, int) or not 0 <= output < len(tr.outputs):
        raise ValueError(f"output={output!r} is not valid; the function returns {len(tr.outputs)} "
                         f"tensor(s): choose one of {list(range(len(tr.outputs)))}")
    pe = eager_preset or torch_cpu_eager()
    pi = inductor_preset or inductor_cpu(emulated_casts)
    cf = compiled if compiled is not None else compile_fn(fn, emulated_casts)
    te = run_torch(tr, inputs, mode="eager")[output]
    tc = run_torch(tr, inputs, mode="compiled", compiled=cf)[output]

    def pred(sw):
        return predict(tr, inputs, switches=sw, preset=pi, eager_preset=pe).outputs[output]

    pe_out = pred(EAGER)
    pc_out = pred(COMPILED)
    ref = predict(tr, inputs, mode="reference").outputs[output]
    dt = tr.node(tr.outputs[output]).dtype
    def same(a, b):  # bitwise agreement (signed zeros too): NaN pairs agree; bool outputs as truth values
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype == bool or b.dtype == bool:
            return a.astype(bool) == b.astype(bool)
        a, b = a.astype(np.float32), b.astype(np.float32)
        return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))

    diff = ~same(pe_out, pc_out)
    ndiff = int(diff.sum())
    sources = {}
    for s in TORCH_SOURCES:
        alone = pred(replace(EAGER, **{s: getattr(COMPILED, s)}))
        allbut = pred(replace(COMPILED, **{s: getattr(EAGER, s)}))
        if ndiff:
            explains = float(np.mean(same(alone[diff], pc_out[diff])))
            needed = float(np.mean(~same(allbut[diff], pc_out[diff])))
        else:
            explains = needed = 0.0
        sources[s] = {"explains": explains, "needed": needed}

    def eq(a, b):
        return float(np.mean(same(a, b)))

    def dist(a, b, fmt):  # ulp distance; a truth value is 0 or infinitely many ulps off
        if fmt == "bool":
            return np.where(same(a, b), 0.0, np.inf)
        return ulp_gap(a, b, fmt)

    def err(x):
        with np.errstate(all="ignore"):
            ea = float(np.nanmax(np.abs(x.astype(np.float64) - ref))) if x.size else 0.0
            r = np.asarray(round_to(ref, dt), np.float64) if dt in ("fp16", "bf16", "fp32") else ref
            eu = float(np.max(dist(x, r, dt))) if x.size else 0.0
        return ea, eu

    errors = {
        "torch eager": err(te), "torch.compile": err(tc),
        "numlab eager": err(pe_out), "numlab compiled": err(pc_out),
    }
    return Explanation(
        name=getattr(fn, "__name__", type(fn).__name__), dtype=dt, shape=tuple(te.shape),
        torch_eager=te, torch_compiled=tc, pred_eager=pe_out, pred_compiled=pc_out, fp64=ref,
        differ=float(np.mean(~same(te, tc))) if te.size else 0.0,
        faith_eager=eq(pe_out, te), faith_compiled=eq(pc_out, tc),
        max_ulp_eager=float(np.max(dist(pe_out, te, dt))) if te.size else 0.0,
        max_ulp_compiled=float(np.max(dist(pc_out, tc, dt))) if tc.size else 0.0,
        sources=sources, errors=errors, n_differ=int(np.sum(~same(te, tc))), n_differ_pred=ndiff)
