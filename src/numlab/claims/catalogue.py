"""The claims and the models they are checked on.

A claim maps the runs of one case (:class:`numlab.claims.cases.Runs`) to a
:class:`CaseResult`: ``verdict`` "holds", "fails" or "undecided" and a
``margin`` in comparable units (> 0 violated).  A case whose decision rests
on an infinite, NaN, unknown or empty result is **undecided**, never
"holds": comparing an infinite error with an infinite error, an infinite
(unknown) bound with anything, or nothing at all decides nothing.
``CaseResult.undecided`` then says why and names the operators responsible
(from the per-node flags of the contract bound, :meth:`numlab.bounds.ContractBound.inf_sources`,
or of numlab's trace enclosure, :func:`numlab.running_bounds.inf_sources`).

The bound claims rest on :func:`numlab.bounds.contract_bound`: a bound that
holds for every implementation of the stated contract and plan, so
``error_within_bound`` never accuses a correct kernel and a violation proves
the kernel breaks the contract.  numlab's a-posteriori enclosure of its own
trace (:mod:`numlab.running_bounds`) is checked by ``trace_enclosure``, a
self-check of numlab's run that no other kernel is held to.
A violation found on the decided elements of a case still makes it "fails".
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import metrics, zoo
from .. import running_bounds as RB
from .._repr import Compact, brief, mapping_summary
from ..contract_bounds import contract_bound
from ..execute import quiet, run
from ..formats import Format
from ..graph import Graph, trace
from ..ops import CATALOGUE, concat, gelu, layer_norm
from ..rounding import round_to

__all__ = ["CaseResult", "Claim", "CLAIMS", "EXTRA_MODELS", "all_models", "VERDICTS", "get_claim", "get_model",
           "model_path", "model_sizes", "KernelModelNeeded", "NEEDS_KERNEL_MODEL"]

VERDICTS = ("holds", "fails", "undecided")


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
def _mul_add_gelu_mul(batch: int = 4, hidden: int = 64):
    def mul_add_gelu_mul(x, b, w):
        return {"y": gelu(x * 0.7 + b) * w}

    return trace(mul_add_gelu_mul, x=(batch, hidden), b=(hidden,), w=(hidden,))


def _matmul_add_layernorm(batch: int = 4, d_in: int = 32, hidden: int = 64):
    def matmul_add_layernorm(x, w, b, gamma, beta):
        return {"y": layer_norm(x @ w + b, gamma, beta)}

    g = trace(matmul_add_layernorm, x=(batch, d_in), w=(d_in, hidden), b=(hidden,),
              gamma=(hidden,), beta=(hidden,))
    return g.with_roles(b="beta")


def _movement(batch: int = 4, hidden: int = 16):
    def movement(x):
        t = x.transpose(1, 0)
        c = concat([t, t], axis=0)
        return {"y": c.reshape(2 * hidden * batch)}

    return trace(movement, x=(batch, hidden))


def _mul_scalar(batch: int = 8, hidden: int = 64):
    def mul_scalar(x):
        return {"y": x * 0.7}

    return trace(mul_scalar, x=(batch, hidden))


EXTRA_MODELS: dict[str, Callable] = {
    "mul_add_gelu_mul": _mul_add_gelu_mul,
    "matmul_add_layernorm": _matmul_add_layernorm,
    "movement": _movement,
    "mul_scalar": _mul_scalar,
}
"""Models used by the claims and the test plan in addition to ``numlab.zoo.MODELS``."""


def all_models() -> dict:
    """Every named model: the zoo's and :data:`EXTRA_MODELS`."""
    return {**zoo.MODELS, **EXTRA_MODELS}


def model_path(name: str) -> tuple[str, ...]:
    """The ``sys.path`` entries a worker process needs to import model
    ``name``: for ``"module:function"``, the absolute directory its
    top-level module was imported from (a process that did not start with
    the caller's ``sys.path`` -- a ``dask`` worker, a spawned process -- gets
    it from the task payload); ``()`` for a zoo or claims model."""
    if not isinstance(name, str) or name in EXTRA_MODELS or name in zoo.MODELS or ":" not in name:
        return ()
    zoo.model_factory(name)  # imports the module (or raises naming it)
    top = sys.modules[name.partition(":")[0].split(".")[0]]
    if getattr(top, "__file__", None):
        p = Path(top.__file__).resolve()
        root = p.parent.parent if p.name == "__init__.py" else p.parent
    else:  # a namespace package: no __file__, one or more directories
        root = Path(next(iter(top.__path__))).resolve().parent
    return (str(root),)


def _factory(name: str, path=()):
    """The factory of model ``name``: a claims model (:data:`EXTRA_MODELS`),
    else :func:`numlab.zoo.model_factory` (a zoo model or
    ``"module:function"``).  ``path``: directories appended to ``sys.path``
    (those not already on it) before importing, see :func:`model_path`."""
    if not isinstance(name, str):
        raise TypeError(f"model must be a model name or 'module:function', got {type(name).__name__}")
    if name in EXTRA_MODELS:
        return EXTRA_MODELS[name]
    if name not in zoo.MODELS and ":" not in name:
        raise ValueError(f"model={name!r} is not known; valid models: {sorted(all_models())}, or "
                         "'module:function' (a function of the sizes returning a Graph)")
    for entry in path:
        if entry not in sys.path:
            sys.path.append(entry)
    return zoo.model_factory(name)


def get_model(name: str, sizes: dict | None = None, path=()):
    """Graph of model ``name`` with ``sizes``: a zoo model, an
    :data:`EXTRA_MODELS` model or ``"module:function"`` (see
    :func:`numlab.zoo.model_factory`; ``path`` as in :func:`_factory`, for
    executor workers).  ValueError for an unknown model or size, TypeError
    when the factory does not return a Graph."""
    factory = _factory(name, path)
    sizes = model_sizes(name, sizes)
    g = factory(**sizes)
    if not isinstance(g, Graph):
        raise TypeError(f"model {name!r} returned {type(g).__name__}, not a numlab Graph "
                        "(build it with numlab.graph.trace)")
    return g


def model_sizes(name: str, sizes: dict | None = None, path=()) -> dict:
    """The full size dict of model ``name`` (its int defaults filled in,
    then ``sizes``).  ValueError names a size the model does not take."""
    params = inspect.signature(_factory(name, path)).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    out = {k: p.default for k, p in params.items()
           if isinstance(p.default, int) and not isinstance(p.default, bool)}
    for k, v in (sizes or {}).items():
        if k not in params and not takes_any:
            raise ValueError(f"size {k!r} is not a parameter of model {name!r}; valid: {list(params)}")
        out[k] = v
    return out


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------
NEEDS_KERNEL_MODEL = "needs a model of the fused kernel"
"""The start of the reason a claim is undecided on observed outputs when it
needs more of the kernel than its outputs (another run, its internals, its
compiler, emulated casts, its own error bound)."""


class KernelModelNeeded(ValueError):
    """A claim asked for a run of the fused kernel (another run, its
    internals, emulated casts) on a case whose fused side is a real kernel's
    observed outputs: numlab has no model of that kernel, so the claim is
    undecided there (:meth:`Claim.evaluate`)."""


@dataclass(repr=False)
class CaseResult(Compact):
    """Outcome of a claim on one case.

    ``holds`` (True only for the verdict "holds"); ``margin`` (> 0 violated,
    over the decided elements; the adversarial search maximises it; NaN
    when nothing was decided); ``detail`` (the worst output, element and
    numbers); ``outputs`` (mode -> {output -> array}, for saving);
    ``fingerprints`` (mode -> compile fingerprint); ``stats`` (population
    claims); ``undecided`` (empty, or ``{"reason": str, "responsible":
    [{"node", "op", "causes"}], ...}`` when the decision rests on an
    infinite, NaN, unknown or empty result)."""

    holds: bool
    margin: float
    detail: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    fingerprints: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    undecided: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """ "holds", "fails" or "undecided" (:data:`VERDICTS`)."""
        if self.holds:
            return "holds"
        return "undecided" if self.undecided else "fails"

    @property
    def fails(self) -> bool:
        """Whether the claim is violated (a decided counterexample)."""
        return self.verdict == "fails"

    def _repr_facts(self):
        rows = [("detail", brief(self.detail)),
                ("undecided", brief(self.undecided) if self.undecided else None)]
        rows += [(f"{mode} outputs", mapping_summary(outs)) for mode, outs in self.outputs.items()]
        rows += [("fingerprints", mapping_summary(self.fingerprints) if self.fingerprints else None),
                 ("stats", brief(self.stats) if self.stats else None)]
        return f"CaseResult: {self.verdict}, margin {brief(self.margin)}", rows


def _result(margin: float, detail: dict, undecided: dict | None = None, **kw) -> CaseResult:
    """A violation on the decided part fails; else undecided parts make the
    case undecided; else it holds."""
    if margin > 0:
        return CaseResult(False, margin, detail, **kw)
    if undecided:
        return CaseResult(False, margin, detail, undecided=undecided, **kw)
    return CaseResult(True, margin, detail, **kw)


def _bounded(runs, mode: str):
    """The :class:`numlab.running_bounds.BoundedRun` of ``mode`` with the
    case's kernel specs (``runs.kernel_args``), cached on ``runs``."""
    key = ("bounds", mode)
    if key not in runs._res:
        fusion = runs.fusion if mode in ("fused", "emulated_casts") else None
        with quiet():
            runs._res[key] = RB.run_with_bounds(runs.graph, runs.case.inputs, mode=mode, fmt=runs.S,
                                                reference=False, fusion=fusion, **runs.kernel_args(mode))
    return runs._res[key]


def _run_bounds(runs, mode: str) -> dict:
    """Running bounds of the outputs of ``mode`` (numlab.running_bounds), cached."""
    return _bounded(runs, mode).output_bounds()


def _contract(runs, mode: str):
    """The :class:`numlab.bounds.ContractBound` of ``mode`` under the case's plan
    (``runs.fusion``), kernel specs (the derived contract) or ``runs.contract``, cached."""
    key = ("contract", mode)
    if key not in runs._res:
        fusion = runs.fusion if mode in ("fused", "emulated_casts") else None
        runs._res[key] = contract_bound(runs.graph, runs.case.inputs, mode=mode, fmt=runs.S, fusion=fusion,
                                        contract=getattr(runs.case, "contract", None), kernels=runs.kernels,
                                        library=runs.library)
    return runs._res[key]


def _responsible(runs, modes, source=None) -> list:
    """The nodes where inf bounds originate in ``modes`` (with mode): of the
    contract bound (``source="contract"``) or of numlab's trace enclosure."""
    out = []
    for mode in modes:
        src = _contract(runs, mode) if source == "contract" else _bounded(runs, mode)
        out += [{"mode": mode, **s} for s in src.inf_sources()]
    return out


def _undecided(reason: str, runs=None, modes=(), source=None, **extra) -> dict:
    return {"reason": reason, "responsible": _responsible(runs, modes, source) if runs is not None else [], **extra}


def responsible_ops(undecided: dict) -> list:
    """``["op (node): cause n, ..."]`` from a CaseResult's ``undecided``."""
    out = []
    for s in undecided.get("responsible", []):
        causes = ", ".join(f"{c} {n}" for c, n in s["causes"].items())
        out.append(f"{s['op']} ({s.get('mode', '')} node {s['node']}: {causes})")
    return out


# ---------------------------------------------------------------------------
# claims
# ---------------------------------------------------------------------------
def _worst(arr: np.ndarray) -> tuple:
    if arr.size == 0:
        return ()
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(arr)), arr.shape))


@dataclass(frozen=True)
class Claim:
    """A statement over runs.

    Parameters
    ----------
    name : str
        Registry key (CLI ``numlab check NAME``).
    statement : str
        The statement in words, with its source in the note.
    fn : callable
        ``fn(runs) -> CaseResult`` for per-case claims, or for population
        claims ``fn(list of per-case stats) -> CaseResult`` with
        ``case_fn(runs) -> stats``.
    scope : {"case", "population"}
    case_fn : callable, optional
        Population claims: per-case statistics.
    searchable : bool
        Whether the adversarial search and shrinking apply (determinism and
        structural claims have no margin to climb).
    requires : str
        The module the claim rests on (documentation).
    on_observed : str
        Empty when the claim runs on a real kernel's observed outputs (they
        take the fused run's place); else why it cannot: on observed
        outputs the claim is then undecided with the reason
        ``"needs a model of the fused kernel: <on_observed>"``.
    """

    name: str
    statement: str
    fn: Callable
    scope: str = "case"
    case_fn: Callable | None = None
    searchable: bool = True
    requires: str = ""
    on_observed: str = ""

    def evaluate(self, runs) -> CaseResult:
        """The claim on one case's runs; on observed outputs (``runs.observed``)
        a claim that needs a model of the fused kernel is undecided, naming why."""
        if self.scope != "case":
            raise ValueError(f"claim {self.name!r} is a population claim; use check()")
        if getattr(runs, "observed", None) is not None and self.on_observed:
            return _result(math.nan, {}, _undecided(f"{NEEDS_KERNEL_MODEL}: {self.on_observed}"))
        if self.name not in _STRUCTURAL:
            empty = [k for k, v in runs.outputs("reference").items() if np.asarray(v).size == 0]
            if empty:  # nothing at all decides nothing (a max over no elements is no margin)
                return _result(-math.inf, {}, _undecided(f"no output elements to compare: outputs {empty} "
                                                         "are empty"))
        try:
            return self.fn(runs)
        except KernelModelNeeded as exc:  # a claim that reached for the fused model: never a stand-in
            return _result(math.nan, {}, _undecided(f"{NEEDS_KERNEL_MODEL}: claim {self.name!r} asked for {exc}"))


_STRUCTURAL = ("compile_determinism",)
"""Claims decided by fingerprints and plans, not by output values (an empty output
does not make them vacuous)."""


def _errs(runs, mode: str, name: str):
    ref = runs.outputs("reference")[name]
    x = runs.outputs(mode)[name]
    return metrics.abs_error(ref, x), ref


def _claim_elementwise(runs) -> CaseResult:
    worst_m, detail, n_und, n_all = -math.inf, {}, 0, 0
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        q = metrics.ref_ulp(ref, runs.S)
        both_inf = np.isinf(ef) & np.isinf(ee)
        n_und += int(np.count_nonzero(both_inf))
        n_all += int(ef.size)
        with np.errstate(invalid="ignore"):
            d = np.where(both_inf, -np.inf, (ef - ee) / q)
        d = np.where(np.isnan(d), np.inf, d)
        if d.size == 0:
            continue
        idx = _worst(d)
        m = float(d[idx])
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "index": list(idx), "fused_err": float(ef[idx]),
                      "eager_err": float(ee[idx]), "reference": float(ref[idx]),
                      "fused": float(runs.outputs("fused")[name][idx]),
                      "eager": float(runs.outputs("eager")[name][idx]),
                      "violations": int(np.count_nonzero(d > 0)), "elements": int(d.size)}
    und = None
    if n_all == 0:
        und = _undecided("no output elements to compare")
    elif n_und:
        und = _undecided(f"fused and eager errors both infinite at {n_und} of {n_all} elements", runs,
                         ("eager", "fused"), elements=n_und)
    return _result(worst_m, detail, und)


def _tensor_scale(ref: np.ndarray, S: Format) -> float:
    """The unit of the tensor-level margins: ``u_S * max|ref|`` over the
    finite references, at least ``u_S * smallest_normal``."""
    return S.u * max(float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0)))), S.smallest_normal)


def _claim_tensor(runs) -> CaseResult:
    worst_m, detail, und_out = -math.inf, {}, []
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        fmax, emax = float(ef.max()), float(ee.max())
        scale = _tensor_scale(ref, runs.S)
        if math.isinf(fmax) and math.isinf(emax):
            und_out.append(name)
            continue
        if math.isinf(fmax):
            m = math.inf
        elif math.isinf(emax):
            m = -math.inf
        else:
            m = (fmax - emax) / scale
        if m > worst_m:
            worst_m = m
            idx = _worst(ef)
            detail = {"output": name, "fused_max": fmax, "eager_max": emax, "index": list(idx),
                      "margin_units": "u_S * max|ref|"}
    und = None
    if und_out:
        und = _undecided(f"max fused and eager errors both infinite for outputs {und_out}", runs,
                         ("eager", "fused"), outputs=und_out)
    return _result(worst_m if detail or not und_out else math.nan, detail, und)


def _population_stats(runs) -> dict:
    out = {}
    for name in runs.graph.outputs:
        ef, _ = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        out[name] = (ef.ravel().astype(np.float64), ee.ravel().astype(np.float64))
    return out


def _population_margin(fp99: float, ep99: float, fmax: float, emax: float) -> tuple[float, bool]:
    """Margin of "fused P99 <= eager P99 and fused max <= eager max" from
    the statistics that decide it, and whether a part stays undecided.

    Each statistic is compared on its own (errors are never NaN): both
    finite, ``(fused - eager) / scale`` with ``scale`` the largest *finite*
    eager statistic (so an infinite eager max does not scale a worse fused
    P99 down to 0); fused infinite and eager finite, ``+inf`` (violated);
    fused finite and eager infinite, ``-inf`` (satisfied); both infinite,
    undecided (left out of the margin).  ``-inf`` when nothing was decided."""
    finite_eager = [v for v in (ep99, emax) if math.isfinite(v)]
    scale = max(finite_eager + [1e-300])
    margins, undecided = [], False
    for f, e in ((fp99, ep99), (fmax, emax)):
        if math.isinf(f) and math.isinf(e):
            undecided = True
        elif math.isinf(f):
            margins.append(math.inf)
        elif math.isinf(e):
            margins.append(-math.inf)
        else:
            margins.append((f - e) / scale)
    return max(margins, default=-math.inf), undecided


def _claim_population(stats: list) -> CaseResult:
    worst_m, detail = -math.inf, {}
    names = list(stats[0]) if stats else []
    res, und_out = {}, []
    for name in names:
        ef = np.concatenate([s[name][0] for s in stats])
        ee = np.concatenate([s[name][1] for s in stats])
        if ef.size == 0:
            und_out.append(name)
            continue
        fp99, ep99 = metrics.percentile(ef, 99), metrics.percentile(ee, 99)
        fmax, emax = float(ef.max()), float(ee.max())
        res[name] = {"fused_p99": fp99, "eager_p99": ep99, "fused_max": fmax, "eager_max": emax,
                     "elements": int(ef.size)}
        m, undecided = _population_margin(fp99, ep99, fmax, emax)
        if undecided:
            und_out.append(name)
        if m > worst_m or not detail:
            worst_m, detail = m, {"output": name, **res[name]}
    und = None
    if not names:
        und = _undecided("no cases in the population")
    elif und_out:
        und = _undecided(f"P99 or max of fused and eager errors both infinite (or no elements) for outputs "
                         f"{und_out}", outputs=und_out)
    return _result(worst_m if detail or not und else math.nan, detail, und, stats=res)


def _claim_bound(runs) -> CaseResult:
    worst_m, detail, und_out = -math.inf, {}, []
    bf = _contract(runs, "fused")
    be = _contract(runs, "eager")
    for name in runs.graph.outputs:
        fmax, emax = float(np.max(bf[name])), float(np.max(be[name]))
        if math.isinf(fmax) or math.isinf(emax):
            und_out.append({"output": name, "fused_bound_max": fmax, "eager_bound_max": emax})
            continue
        ref = runs.outputs("reference")[name]
        m = (fmax - emax) / _tensor_scale(ref, runs.S)
        if m > worst_m:
            worst_m, detail = m, {"output": name, "fused_bound_max": fmax, "eager_bound_max": emax}
    und = None
    if und_out:
        und = _undecided("contract bound infinite (unknown) for outputs "
                         f"{[u['output'] for u in und_out]}", runs, ("eager", "fused"), "contract",
                         outputs=und_out)
        if not detail:
            detail = dict(und_out[0])
    return _result(worst_m if math.isfinite(worst_m) or not und else math.nan, detail, und)


def _within(runs, bounds_of, what: str, source) -> CaseResult:
    """Every element of eager and fused (numlab's, or the observed outputs in
    the fused place): ``|computed - exact| <= bounds_of(runs, mode)``."""
    worst_m, detail, n_inf, n_all, modes = -math.inf, {}, 0, 0, []
    for mode in ("eager", "fused"):
        b = bounds_of(runs, mode)
        for name in runs.graph.outputs:
            err, ref = _errs(runs, mode, name)
            bb = b[name]
            k = int(np.count_nonzero(np.isinf(bb)))
            n_inf, n_all = n_inf + k, n_all + int(bb.size)
            if k and mode not in modes:
                modes.append(mode)
            with np.errstate(invalid="ignore"):
                over = np.where(np.isinf(bb), -np.inf, (err - bb) / np.maximum(bb, 1e-300))
            if over.size == 0:
                continue
            idx = _worst(over)
            m = float(over[idx]) if over.ndim else float(over)
            if m > worst_m:
                worst_m = m
                detail = {"mode": mode, "output": name, "index": list(idx), "err": float(err[idx]),
                          "bound": float(bb[idx]), "inf_bounds": k}
    und = None
    if n_all == 0:
        und = _undecided("no output elements to check")
    elif n_inf:
        und = _undecided(f"{what} infinite (unknown) at {n_inf} of {n_all} output elements", runs,
                         modes, source, elements=n_inf)
    return _result(worst_m if n_inf < n_all else math.nan, detail, und)


def _claim_within_bound(runs) -> CaseResult:
    res = _within(runs, lambda r, m: _contract(r, m), "contract bound", "contract")
    d = res.detail
    if res.fails and d:  # name the node whose local term dominates the bound at the worst element
        cb = _contract(runs, d["mode"])
        top = cb.budget(d["output"], tuple(d["index"]))[:3]
        d["dominant"] = [{"node": n, "op": op, "share": round(sh, 4)} for n, op, sh in top]
        d["contract"] = cb.contract.spec
    return res


def _claim_trace(runs) -> CaseResult:
    return _within(runs, lambda r, m: _run_bounds(r, m), "trace enclosure", None)


def _movement_only(graph) -> list:
    return [n.name for n in graph.nodes if CATALOGUE[n.op].category != "data_movement"]


def _claim_bitexact(runs) -> CaseResult:
    bad_nodes = _movement_only(runs.graph)
    if bad_nodes:
        raise ValueError(
            f"claim 'data_movement_bitexact' applies to pure data-movement models; model "
            f"{runs.case.model!r} computes in nodes {bad_nodes[:5]} (use model 'movement')"
        )
    worst, detail, n_all = 0, {}, 0
    for name in runs.graph.outputs:
        e = runs.outputs("eager")[name]
        f = runs.outputs("fused")[name]
        r = np.asarray(round_to(runs.outputs("reference")[name], runs.S), dtype=np.float64)
        neq = ~metrics.bitwise_equal(e, f)
        neq_r = ~metrics.bitwise_equal(e.astype(np.float64), r)
        n_all += int(neq.size)
        n = int(np.count_nonzero(neq | neq_r))
        if n > worst:
            worst = n
            detail = {"output": name, "mismatches": n, "index": list(_worst((neq | neq_r).astype(float)))}
    und = _undecided("no output elements to compare") if n_all == 0 else None
    return _result(float(worst), detail, und)


def _claim_fp32_inside(runs) -> CaseResult:
    res = runs.run("fused", keep_internals=True)
    bad = [k for k in res.internals if np.asarray(res.values[k]).dtype != np.float32]
    if bad:
        return CaseResult(False, math.inf, {"non_fp32_internals": bad[:10]})
    worst_m, detail, und_out = -math.inf, {"internals": len(res.internals)}, []
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ec, _ = _errs(runs, "emulated_casts", name)
        scale = _tensor_scale(ref, runs.S)
        fmax, cmax = float(ef.max()), float(ec.max())
        if math.isinf(fmax) and math.isinf(cmax):
            und_out.append(name)
            continue
        m = (fmax - cmax) / scale
        if math.isnan(m):
            m = math.inf
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "fused_max": fmax, "emulated_casts_max": cmax,
                      "internals": len(res.internals)}
    und = None
    if und_out:
        und = _undecided(f"max fused and emulated-casts errors both infinite for outputs {und_out}", runs,
                         ("fused",), outputs=und_out)
    return _result(worst_m if math.isfinite(worst_m) or not und else math.nan, detail, und)


def _claim_compile_det(runs) -> CaseResult:
    r1 = runs.run("fused")
    g2 = runs.case.graph()  # a second compile from scratch: a fresh graph object and plan
    with np.errstate(all="ignore"), quiet():
        r2 = run(g2, runs.case.inputs, mode="fused", fmt=runs.S, fusion=runs.fusion,
                 **runs.kernel_args("fused"))
    plan_equal = str(r1.plan) == str(r2.plan)
    same = plan_equal and r1.fingerprint == r2.fingerprint
    return CaseResult(same, 0.0 if same else 1.0,
                      {"plan_equal": plan_equal, "fingerprint": r1.fingerprint, "fingerprint_2": r2.fingerprint},
                      fingerprints={"fused": r1.fingerprint})


def _claim_exec_det(runs) -> CaseResult:
    n_bad, detail = 0, {}
    for mode in ("eager", "fused"):
        a = runs.outputs(mode)
        with np.errstate(all="ignore"), quiet():
            b = run(runs.graph, runs.case.inputs, mode=mode, fmt=runs.S,
                    fusion=runs.fusion if mode == "fused" else None, **runs.kernel_args(mode)).outputs
        for name in a:
            neq = int(np.count_nonzero(~metrics.bitwise_equal(a[name], np.asarray(b[name]))))
            if neq:
                n_bad += neq
                detail = {"mode": mode, "output": name, "mismatches": neq}
    return CaseResult(n_bad == 0, float(n_bad), detail)


def _claim_inductor(runs) -> CaseResult:
    worst_m, detail, und_out = -math.inf, {}, []
    for name in runs.graph.outputs:
        ref = runs.outputs("reference")[name]
        e, f = runs.outputs("eager")[name], runs.outputs("fused")[name]
        r = metrics.inductor_check(np.asarray(ref, dtype=np.float64), e, f)
        if r.reason == "rmse":
            m = (r.res_error - r.threshold) / max(r.threshold, 1e-300)
        else:
            m = -1.0 if r.passed else math.inf
        if math.isnan(m):  # inf - inf: both rmse values infinite (or NaN)
            und_out.append({"output": name, "rmse_fused": r.res_error, "rmse_eager": r.ref_error})
            continue
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "reason": r.reason, "rmse_fused": r.res_error,
                      "rmse_eager": r.ref_error, "multiplier": r.multiplier, "threshold": r.threshold}
    und = None
    if und_out:
        und = _undecided("rmse of fused and eager both infinite or NaN for outputs "
                         f"{[u['output'] for u in und_out]}", runs, ("eager", "fused"), outputs=und_out)
    return _result(worst_m if math.isfinite(worst_m) or not und else math.nan, detail, und)


def _claim_emulated(runs) -> CaseResult:
    res = runs.run("emulated_casts", align=("instruction", "tiling", "algorithm"))
    n_bad, detail = 0, {}
    for name in runs.graph.outputs:
        e = runs.outputs("eager")[name]
        f = np.asarray(res.outputs[name])
        neq = ~metrics.bitwise_equal(e, f)
        k = int(np.count_nonzero(neq))
        if k > n_bad:
            n_bad = k
            idx = _worst(neq.astype(float))
            detail = {"output": name, "mismatches": k, "elements": int(neq.size), "index": list(idx),
                      "eager": float(np.asarray(e, dtype=np.float64)[idx]),
                      "emulated": float(np.asarray(f, dtype=np.float64)[idx])}
    return CaseResult(n_bad == 0, float(n_bad), detail, outputs={"eager": runs.outputs("eager"),
                                                                 "emulated_casts": dict(res.outputs)})


def _msprobe_margin(cos: float, mae: float) -> float:
    """Margin of msprobe's check_accuracy (> 0: "No"): the largest of the
    three failure terms, each scaled by its threshold, where the first
    (``cos < 0.99 and mae > 0.001``) is the smaller of its two parts."""
    t = metrics.MSPROBE_THRESHOLDS
    both = min((t["cosine"] - cos) / (1.0 - t["cosine"]), (mae - t["max_abs_err"]) / t["max_abs_err"])
    return max(both, (t["cosine_min"] - cos) / (1.0 - t["cosine_min"]),
               (mae - t["max_abs_err_max"]) / t["max_abs_err_max"])


def _claim_msprobe(runs) -> CaseResult:
    worst_m, detail, und_out = -math.inf, {}, []
    for name in runs.graph.outputs:
        e = metrics.as_f64(runs.outputs("eager")[name])
        f = metrics.as_f64(runs.outputs("fused")[name])
        cos = metrics.cosine_similarity(e, f, nonfinite="zero_matching")
        masks = metrics.nonfinite_masks(e, f)
        with np.errstate(invalid="ignore", over="ignore"):
            mae = float(np.max(np.abs(np.where(masks["finite"], f - e, 0.0)))) if e.size else math.nan
        if masks["mismatch"].any() or not (math.isfinite(cos) and math.isfinite(mae)):
            # msprobe's metrics are N/A here: NaN/inf at different places, an all-zero side, an overflow
            und_out.append({"output": name, "cosine": cos, "max_abs_err": mae,
                            "nonfinite_mismatch": int(np.count_nonzero(masks["mismatch"]))})
            continue
        m = _msprobe_margin(cos, mae)
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "cosine": cos, "max_abs_err": mae,
                      "accuracy_reached": "Yes" if metrics.msprobe_accuracy_reached(cos, mae) else "No",
                      "golden": "eager"}
    und = None
    if und_out:
        und = _undecided("msprobe's cosine or MaxAbsErr is N/A (NaN/inf positions differ between eager and "
                         f"fused, an all-zero side, or an overflow) for outputs {[u['output'] for u in und_out]}",
                         outputs=und_out)
        if not detail:
            detail = dict(und_out[0])
    return _result(worst_m if math.isfinite(worst_m) or not und else math.nan, detail, und)


CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in [
        Claim("no_worse_elementwise",
              "every element: |fused - ref| <= |eager - ref| (the autofusion note's 'fused is no worse than eager', read per element)",
              _claim_elementwise),
        Claim("no_worse_tensor",
              "every output tensor: max |fused - ref| <= max |eager - ref| (the note's 'no worse than eager', per tensor)",
              _claim_tensor),
        Claim("no_worse_population",
              "over the trial population: P99 and max of |fused - ref| <= those of eager "
              "(the note's 'no worse than eager'; the test plan's verdict)",
              _claim_population, scope="population", case_fn=_population_stats, searchable=False),
        Claim("bound_no_worse",
              "per output: max contract bound of the fused plan <= that of eager (the note: 'the accumulated "
              "rounding-error bound of autofusion <= eager'; numlab.bounds.contract_bound, for every "
              "implementation of the contract; a property of the plan and the contract: observed outputs do not enter)",
              _claim_bound, requires="numlab.contract_bounds"),
        Claim("error_within_bound",
              "every element of eager and fused (or the observed outputs): |computed - exact| <= the contract bound "
              "of the stated mode and plan (rigorous for every implementation of the contract; a violation proves "
              "the kernel breaks it)",
              _claim_within_bound, requires="numlab.contract_bounds"),
        Claim("trace_enclosure",
              "numlab's self-check: every element of numlab's own eager and fused run lies within the a-posteriori "
              "enclosure of its own trace (numlab.running_bounds; local errors measured on numlab's intermediate "
              "values, so no other kernel is held to it)",
              _claim_trace, requires="numlab.running_bounds",
              on_observed="the enclosure is built from numlab's own intermediate values; an observed kernel is held "
                          "to the contract bound instead (error_within_bound)"),
        Claim("data_movement_bitexact",
              "pure data movement is bit-exact: fused == eager == reference rounded to S (the note's data-movement claim)",
              _claim_bitexact, searchable=False),
        Claim("fp32_inside",
              "fused blocks keep intermediates in fp32 (the note's fp32-inside claim): internals are float32 and the fused "
              "max error <= the emulated-casts (intermediates rounded to S) max error per output",
              _claim_fp32_inside,
              on_observed="the kernel's internal values and an emulated-casts run of it; only its outputs were "
                          "given"),
        Claim("compile_determinism",
              "same model, shapes, dtype and options -> same plan and compile fingerprint (the note's determinism claim), "
              "also across executor processes",
              _claim_compile_det, searchable=False,
              on_observed="the kernel's compiler (plans and fingerprints); only its outputs were given"),
        Claim("execution_determinism",
              "same compiled plan and inputs -> bitwise identical outputs (the note's determinism claim)",
              _claim_exec_det, searchable=False,
              on_observed="a second run of the kernel on the same inputs; only one set of its outputs was given"),
        Claim("emulated_casts_match_eager",
              "with emulated precision casts (TORCHINDUCTOR_EMULATE_PRECISION_CASTS) and eager's instructions, "
              "tiling and algorithms, fused == eager bit for bit (the note's emulated-casts patch; decomposition must be patched off: "
              "use --fusion autofuse+nodecompose)",
              _claim_emulated,
              on_observed="a run of the kernel with emulated precision casts; only its outputs were given"),
        Claim("inductor_rule",
              "PyTorch Inductor's rule: rmse(fp64, fused) <= multiplier * rmse(fp64, eager) + tol/10 "
              "(torch._dynamo.utils.same, https://github.com/pytorch/pytorch/blob/main/torch/_dynamo/utils.py)",
              _claim_inductor),
        Claim("msprobe_accuracy",
              "msprobe's accuracy check with eager as the bench (golden) side: per output, not (cosine < 0.99 and "
              "MaxAbsErr > 0.001), cosine >= 0.9 and MaxAbsErr <= 1 (check_accuracy, CompareConst in "
              "msprobe/core/common/const.py; numlab.metrics.MSPROBE_THRESHOLDS)",
              _claim_msprobe),
    ]
}


def get_claim(name) -> Claim:
    """A built-in claim by name, or a Claim unchanged."""
    if isinstance(name, Claim):
        return name
    if name not in CLAIMS:
        raise ValueError(f"claim={name!r} is not known; valid claims: {sorted(CLAIMS)}")
    return CLAIMS[name]
