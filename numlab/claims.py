"""Claims about fused vs eager numerics, checked by search, with minimal
counterexamples.

A :class:`Claim` is a statement over runs of a model: eager, fused and the
fp64 reference on the same S-valued inputs (DESIGN.md section 1).  The
checker (:func:`check`) evaluates it

1. on random inputs (the zoo's input kinds, one seed per trial), then
2. optionally with an **adversarial** search: hill climbing from the cases
   closest to a violation, with mutations that push towards one -- nudging
   values by a few ULPs, putting products of the graph's scalar constants on
   rounding midpoints, scaling towards the overflow threshold, planting
   cancellation (large mean, small spread; ``x`` next to ``-x``), and tiny or
   subnormal values;
3. and **shrinks** a violating case to a minimal one: smaller model sizes
   (fewest elements), then simpler values (zeros, powers of two, few
   significant bits), keeping the violation at every step.

Every evaluation returns a *margin* in comparable units (ULPs of S at the
reference scale, or a count): ``margin > 0`` means violated; the adversarial
search maximises it.  A counterexample is saved as ``.npz`` (inputs and the
eager / fused / reference outputs) plus ``.json`` (claim, model, sizes,
dtype, fusion options, seed, trial, compile fingerprints, hashes, margin,
worst element); :func:`load_counterexample` + :func:`reproduce` recompute it
and compare bit for bit.

Built-in claims (:data:`CLAIMS`) cover every statement of the autofusion
precision note (seed ``000``): §2 pure data movement is bit-exact; §3.1 fused
blocks compute in fp32; §3.2 fused is no worse than eager (per element, per
tensor, over a population, and for the error bound); §3.3 compile and
execution determinism; §4 Inductor's acceptance rule; and the rigorous claim
that computed errors stay within the running bound.

Scale out: :func:`check` and :func:`sweep` take any
``concurrent.futures.Executor`` (or a ``dask.distributed.Client``); trials are
split into tasks with per-trial seeds, so results are identical whatever the
executor.  Long runs show a ``tqdm.auto`` progress bar.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import metrics
from .formats import Format, get_format
from .rounding import round_to

__all__ = [
    "CaseResult",
    "Case",
    "Claim",
    "CLAIMS",
    "EXTRA_MODELS",
    "get_claim",
    "get_model",
    "parse_fusion",
    "make_case",
    "evaluate",
    "check",
    "CheckReport",
    "SearchOptions",
    "shrink",
    "save_counterexample",
    "load_counterexample",
    "reproduce",
    "sweep",
    "trial_seed",
    "run_plan",
    "PLAN_CHAINS",
    "PLAN_FUSIONS",
    "parse_fusion_list",
    "describe_fusion",
]

SEARCHES = ("random", "adversarial")


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
def _mul_add_gelu_mul(batch: int = 4, hidden: int = 64):
    from . import ops
    from .graph import trace

    def mul_add_gelu_mul(x, b, w):
        return {"y": ops.gelu(x * 0.7 + b) * w}

    return trace(mul_add_gelu_mul, x=(batch, hidden), b=(hidden,), w=(hidden,))


def _matmul_add_layernorm(batch: int = 4, d_in: int = 32, hidden: int = 64):
    from . import ops
    from .graph import trace

    def matmul_add_layernorm(x, w, b, gamma, beta):
        return {"y": ops.layer_norm(x @ w + b, gamma, beta)}

    g = trace(matmul_add_layernorm, x=(batch, d_in), w=(d_in, hidden), b=(hidden,),
              gamma=(hidden,), beta=(hidden,))
    return g.with_roles(b="beta")


def _movement(batch: int = 4, hidden: int = 16):
    from . import ops
    from .graph import trace

    def movement(x):
        t = x.transpose(1, 0)
        c = ops.concat([t, t], axis=0)
        return {"y": c.reshape(2 * hidden * batch)}

    return trace(movement, x=(batch, hidden))


def _mul_scalar(batch: int = 8, hidden: int = 64):
    from .graph import trace

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


def _all_models() -> dict:
    from . import zoo

    return {**zoo.MODELS, **EXTRA_MODELS}


def get_model(name: str, sizes: dict | None = None):
    """Graph of a zoo model or an :data:`EXTRA_MODELS` model with ``sizes``."""
    models = _all_models()
    if name not in models:
        raise ValueError(f"model={name!r} is not known; valid models: {sorted(models)}")
    return models[name](**(sizes or {}))


def model_sizes(name: str, sizes: dict | None = None) -> dict:
    """The full size dict of model ``name`` (defaults filled in)."""
    models = _all_models()
    if name not in models:
        raise ValueError(f"model={name!r} is not known; valid models: {sorted(models)}")
    sig = inspect.signature(models[name])
    out = {k: p.default for k, p in sig.parameters.items()
           if isinstance(p.default, int) and not isinstance(p.default, bool)}
    for k, v in (sizes or {}).items():
        if k not in sig.parameters:
            raise ValueError(f"size {k!r} is not a parameter of model {name!r}; valid: {list(sig.parameters)}")
        out[k] = v
    return out


def parse_fusion(spec: str | None):
    """FusionOptions from a spec string: ``"autofuse"`` (default),
    ``"autofuse:--autofuse_enable_pass=reduce"`` (AUTOFUSE_FLAGS),
    ``"inductor"``, ``"off"``; a ``"+nodecompose"`` suffix keeps composites
    undecomposed (``FusionOptions.decompose=False``, the note's §6.1 patch)."""
    from .fusion import FusionOptions

    if isinstance(spec, str) and spec.endswith("+nodecompose"):
        return dataclasses.replace(parse_fusion(spec[: -len("+nodecompose")]), decompose=False)
    if spec is None or spec == "autofuse":
        return FusionOptions()
    if isinstance(spec, FusionOptions):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"fusion must be a spec string, got {type(spec).__name__}")
    if spec.startswith("autofuse:"):
        return FusionOptions.autofuse(spec.split(":", 1)[1])
    if spec == "inductor":
        return FusionOptions.inductor()
    if spec == "off":
        return FusionOptions.off()
    raise ValueError(f"fusion={spec!r} is not valid; valid: 'autofuse', 'autofuse:FLAGS', 'inductor', 'off', "
                     "each optionally with '+nodecompose'")


def trial_seed(seed: int, trial: int) -> int:
    """Per-trial seed (independent of the executor and of the task split)."""
    return int(np.random.SeedSequence([int(seed), int(trial)]).generate_state(1)[0])


# ---------------------------------------------------------------------------
# cases and results
# ---------------------------------------------------------------------------
@dataclass
class Case:
    """One input configuration: model, sizes, storage format, fusion spec and
    the S-valued inputs (float64 arrays)."""

    model: str
    sizes: dict
    dtype: str
    fusion: str
    inputs: dict
    kind: str = "normal"
    seed: int = 0
    trial: int = 0
    origin: str = "random"

    def graph(self):
        return get_model(self.model, self.sizes)

    def n_elements(self) -> int:
        return int(sum(np.asarray(v).size for v in self.inputs.values()))

    def complexity(self) -> int:
        """Total significant bits of the inputs (0 for a zero): the
        "simplest values" measure the shrinker lowers."""
        tot = 0
        for v in self.inputs.values():
            a = np.abs(np.asarray(v, dtype=np.float64).ravel())
            a = a[np.isfinite(a) & (a > 0)]
            if a.size == 0:
                continue
            m, _ = np.frexp(a)
            ki = (m * 2.0**53).astype(np.uint64)  # the 53-bit significand, exact
            low = ki & (~ki + np.uint64(1))  # its lowest set bit (a power of two)
            tz = np.log2(low.astype(np.float64)).astype(np.int64)  # trailing zeros
            tot += int(np.sum(53 - tz))
        return tot


@dataclass
class CaseResult:
    """Outcome of a claim on one case: ``holds``; ``margin`` (> 0 violated;
    the adversarial search maximises it); ``detail`` (the worst output,
    element and numbers); ``outputs`` (mode -> {output -> array}, for saving);
    ``fingerprints`` (mode -> compile fingerprint)."""

    holds: bool
    margin: float
    detail: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    fingerprints: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)


class Runs:
    """Lazily computed runs of one case (each mode at most once)."""

    def __init__(self, case: Case, *, graph=None):
        self.case = case
        self.graph = graph if graph is not None else case.graph()
        self.S = get_format(case.dtype)
        self._res: dict = {}

    def run(self, mode: str, **kw):
        from .execute import run

        key = (mode, tuple(sorted(kw.items())))
        if key not in self._res:
            fusion = parse_fusion(self.case.fusion) if mode in ("fused", "emulated_casts") else None
            with np.errstate(all="ignore"):
                self._res[key] = run(self.graph, self.case.inputs, mode=mode, dtype=self.S,
                                     fusion=fusion, **kw)
        return self._res[key]

    def outputs(self, mode: str) -> dict:
        return {k: np.asarray(v) for k, v in self.run(mode).outputs.items()}


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
    """

    name: str
    statement: str
    fn: Callable
    scope: str = "case"
    case_fn: Callable | None = None
    searchable: bool = True
    requires: str = ""

    def evaluate(self, runs: Runs) -> CaseResult:
        if self.scope != "case":
            raise ValueError(f"claim {self.name!r} is a population claim; use check()")
        return self.fn(runs)


def _errs(runs: Runs, mode: str, name: str):
    ref = runs.outputs("reference")[name]
    x = runs.outputs(mode)[name]
    return metrics.abs_error(ref, x), ref


def _claim_elementwise(runs: Runs) -> CaseResult:
    worst_m, detail = -math.inf, {}
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        q = metrics.ref_ulp(ref, runs.S)
        with np.errstate(invalid="ignore"):
            d = np.where(np.isinf(ef) & np.isinf(ee), 0.0, (ef - ee) / q)
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
    return CaseResult(worst_m <= 0, worst_m, detail)


def _tensor_scale(ref: np.ndarray, S: Format) -> float:
    """The unit of the tensor-level margins: ``u_S * max|ref|`` over the
    finite references, at least ``u_S * smallest_normal``."""
    return S.u * max(float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0)))), S.smallest_normal)


def _claim_tensor(runs: Runs) -> CaseResult:
    worst_m, detail = -math.inf, {}
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        fmax, emax = float(ef.max()), float(ee.max())
        scale = _tensor_scale(ref, runs.S)
        if math.isinf(fmax) and math.isinf(emax):
            m = 0.0
        elif math.isinf(fmax):
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
    return CaseResult(worst_m <= 0, worst_m, detail)


def _population_stats(runs: Runs) -> dict:
    out = {}
    for name in runs.graph.outputs:
        ef, _ = _errs(runs, "fused", name)
        ee, _ = _errs(runs, "eager", name)
        out[name] = (ef.ravel().astype(np.float64), ee.ravel().astype(np.float64))
    return out


def _claim_population(stats: list) -> CaseResult:
    worst_m, detail = -math.inf, {}
    names = list(stats[0]) if stats else []
    res = {}
    for name in names:
        ef = np.concatenate([s[name][0] for s in stats])
        ee = np.concatenate([s[name][1] for s in stats])
        fp99, ep99 = metrics.percentile(ef, 99), metrics.percentile(ee, 99)
        fmax, emax = float(ef.max()), float(ee.max())
        res[name] = {"fused_p99": fp99, "eager_p99": ep99, "fused_max": fmax, "eager_max": emax,
                     "elements": int(ef.size)}
        scale = max(ep99, emax, 1e-300)
        m = max((fp99 - ep99) / scale, (fmax - emax) / scale) if math.isfinite(scale) else 0.0
        if math.isnan(m):
            m = math.inf
        if m > worst_m:
            worst_m, detail = m, {"output": name, **res[name]}
    return CaseResult(worst_m <= 0, worst_m, detail, stats=res)


def _run_bounds(runs: Runs, mode: str) -> dict:
    """Running bounds of the outputs of ``mode`` (numlab.running_bounds), cached."""
    from . import running_bounds as RB

    key = ("bounds", mode)
    if key not in runs._res:
        fusion = parse_fusion(runs.case.fusion) if mode in ("fused", "emulated_casts") else None
        br = RB.run_with_bounds(runs.graph, runs.case.inputs, mode=mode, dtype=runs.S, reference=False,
                                fusion=fusion)
        runs._res[key] = br.output_bounds()
    return runs._res[key]


def _claim_bound(runs: Runs) -> CaseResult:
    worst_m, detail = -math.inf, {}
    bf = _run_bounds(runs, "fused")
    be = _run_bounds(runs, "eager")
    for name in runs.graph.outputs:
        fmax, emax = float(np.max(bf[name])), float(np.max(be[name]))
        ref = runs.outputs("reference")[name]
        scale = _tensor_scale(ref, runs.S)
        m = 0.0 if (math.isinf(fmax) and math.isinf(emax)) else (
            math.inf if math.isinf(fmax) else (fmax - emax) / scale)
        if m > worst_m:
            worst_m, detail = m, {"output": name, "fused_bound_max": fmax, "eager_bound_max": emax}
    return CaseResult(worst_m <= 0, worst_m, detail)


def _claim_within_bound(runs: Runs) -> CaseResult:
    worst_m, detail = -math.inf, {}
    for mode in ("eager", "fused"):
        b = _run_bounds(runs, mode)
        for name in runs.graph.outputs:
            err, ref = _errs(runs, mode, name)
            bb = b[name]
            with np.errstate(invalid="ignore"):
                over = np.where(np.isinf(bb), -np.inf, (err - bb) / np.maximum(bb, 1e-300))
            idx = _worst(over)
            m = float(over[idx]) if over.ndim else float(over)
            if m > worst_m:
                worst_m = m
                detail = {"mode": mode, "output": name, "index": list(idx), "err": float(err[idx]),
                          "bound": float(bb[idx]), "inf_bounds": int(np.count_nonzero(np.isinf(bb)))}
    return CaseResult(worst_m <= 0, worst_m, detail)


def _movement_only(graph) -> list:
    from .ops import CATALOGUE

    return [n.name for n in graph.nodes if CATALOGUE[n.op].category != "data_movement"]


def _claim_bitexact(runs: Runs) -> CaseResult:
    bad_nodes = _movement_only(runs.graph)
    if bad_nodes:
        raise ValueError(
            f"claim 'data_movement_bitexact' applies to pure data-movement models; model "
            f"{runs.case.model!r} computes in nodes {bad_nodes[:5]} (use model 'movement')"
        )
    worst, detail = 0, {}
    for name in runs.graph.outputs:
        e = runs.outputs("eager")[name]
        f = runs.outputs("fused")[name]
        r = np.asarray(round_to(runs.outputs("reference")[name], runs.S), dtype=np.float64)
        neq = ~metrics.bitwise_equal(e, f)
        neq_r = ~metrics.bitwise_equal(e.astype(np.float64), r)
        n = int(np.count_nonzero(neq | neq_r))
        if n > worst:
            worst = n
            detail = {"output": name, "mismatches": n, "index": list(_worst((neq | neq_r).astype(float)))}
    return CaseResult(worst == 0, float(worst), detail)


def _claim_fp32_inside(runs: Runs) -> CaseResult:
    res = runs.run("fused", keep_internals=True)
    bad = [k for k in res.internals if np.asarray(res.values[k]).dtype != np.float32]
    if bad:
        return CaseResult(False, math.inf, {"non_fp32_internals": bad[:10]})
    worst_m, detail = -math.inf, {"internals": len(res.internals)}
    for name in runs.graph.outputs:
        ef, ref = _errs(runs, "fused", name)
        ec, _ = _errs(runs, "emulated_casts", name)
        scale = _tensor_scale(ref, runs.S)
        fmax, cmax = float(ef.max()), float(ec.max())
        m = 0.0 if math.isinf(fmax) and math.isinf(cmax) else (fmax - cmax) / scale
        if math.isnan(m):
            m = math.inf
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "fused_max": fmax, "emulated_casts_max": cmax,
                      "internals": len(res.internals)}
    return CaseResult(worst_m <= 0, worst_m, detail)


def _claim_compile_det(runs: Runs) -> CaseResult:
    from .execute import run

    r1 = runs.run("fused")
    g2 = runs.case.graph()  # a second compile from scratch: a fresh graph object and plan
    with np.errstate(all="ignore"):
        r2 = run(g2, runs.case.inputs, mode="fused", dtype=runs.S, fusion=parse_fusion(runs.case.fusion))
    plan_equal = str(r1.plan) == str(r2.plan)
    same = plan_equal and r1.fingerprint == r2.fingerprint
    return CaseResult(same, 0.0 if same else 1.0,
                      {"plan_equal": plan_equal, "fingerprint": r1.fingerprint, "fingerprint_2": r2.fingerprint},
                      fingerprints={"fused": r1.fingerprint})


def _claim_exec_det(runs: Runs) -> CaseResult:
    from .execute import run

    fusion = parse_fusion(runs.case.fusion)
    n_bad, detail = 0, {}
    for mode in ("eager", "fused"):
        a = runs.outputs(mode)
        with np.errstate(all="ignore"):
            b = run(runs.graph, runs.case.inputs, mode=mode, dtype=runs.S,
                    fusion=fusion if mode == "fused" else None).outputs
        for name in a:
            neq = int(np.count_nonzero(~metrics.bitwise_equal(a[name], np.asarray(b[name]))))
            if neq:
                n_bad += neq
                detail = {"mode": mode, "output": name, "mismatches": neq}
    return CaseResult(n_bad == 0, float(n_bad), detail)


def _claim_inductor(runs: Runs) -> CaseResult:
    worst_m, detail = -math.inf, {}
    for name in runs.graph.outputs:
        ref = runs.outputs("reference")[name]
        e, f = runs.outputs("eager")[name], runs.outputs("fused")[name]
        r = metrics.inductor_check(np.asarray(ref, dtype=np.float64), e, f)
        if r.reason == "rmse":
            m = (r.res_error - r.threshold) / max(r.threshold, 1e-300)
        else:
            m = -1.0 if r.passed else math.inf
        if math.isnan(m):
            m = math.inf
        if m > worst_m:
            worst_m = m
            detail = {"output": name, "reason": r.reason, "rmse_fused": r.res_error,
                      "rmse_eager": r.ref_error, "multiplier": r.multiplier, "threshold": r.threshold}
    return CaseResult(worst_m <= 0, worst_m, detail)


def _claim_emulated(runs: Runs) -> CaseResult:
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


CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in [
        Claim("no_worse_elementwise",
              "every element: |fused - ref| <= |eager - ref| (note §3.2 read per element)",
              _claim_elementwise),
        Claim("no_worse_tensor",
              "every output tensor: max |fused - ref| <= max |eager - ref| (note §3.2 per tensor)",
              _claim_tensor),
        Claim("no_worse_population",
              "over the trial population: P99 and max of |fused - ref| <= those of eager "
              "(note §3.2; the test plan's verdict)",
              _claim_population, scope="population", case_fn=_population_stats, searchable=False),
        Claim("bound_no_worse",
              "per output: max running error bound of fused <= that of eager "
              "(note §3.2: 'the accumulated rounding-error bound of autofusion <= eager')",
              _claim_bound, requires="numlab.running_bounds"),
        Claim("error_within_bound",
              "every element of eager and fused: |computed - exact| <= running bound (rigorous)",
              _claim_within_bound, requires="numlab.running_bounds"),
        Claim("data_movement_bitexact",
              "pure data movement is bit-exact: fused == eager == reference rounded to S (note §2)",
              _claim_bitexact, searchable=False),
        Claim("fp32_inside",
              "fused blocks keep intermediates in fp32 (note §3.1): internals are float32 and the fused "
              "max error <= the emulated-casts (intermediates rounded to S) max error per output",
              _claim_fp32_inside),
        Claim("compile_determinism",
              "same model, shapes, dtype and options -> same plan and compile fingerprint (note §3.3), "
              "also across executor processes",
              _claim_compile_det, searchable=False),
        Claim("execution_determinism",
              "same compiled plan and inputs -> bitwise identical outputs (note §3.3)",
              _claim_exec_det, searchable=False),
        Claim("emulated_casts_match_eager",
              "with emulated precision casts (TORCHINDUCTOR_EMULATE_PRECISION_CASTS) and eager's instructions, "
              "tiling and algorithms, fused == eager bit for bit (note §6.1; decomposition must be patched off: "
              "use --fusion autofuse+nodecompose)",
              _claim_emulated),
        Claim("inductor_rule",
              "PyTorch Inductor's rule: rmse(fp64, fused) <= multiplier * rmse(fp64, eager) + tol/10 "
              "(note §4; torch._dynamo.utils.same)",
              _claim_inductor),
    ]
}


def get_claim(name) -> Claim:
    """A built-in claim by name, or a Claim unchanged."""
    if isinstance(name, Claim):
        return name
    if name not in CLAIMS:
        raise ValueError(f"claim={name!r} is not known; valid claims: {sorted(CLAIMS)}")
    return CLAIMS[name]


# ---------------------------------------------------------------------------
# input generation
# ---------------------------------------------------------------------------
def make_case(model: str, *, sizes=None, dtype="fp16", fusion="autofuse", kind="normal",
              seed: int = 0, trial: int = 0, graph=None) -> Case:
    """A case with zoo-generated inputs (``kind``) for trial ``trial``: the
    inputs depend only on (model, sizes, dtype, kind, seed, trial)."""
    from . import zoo

    S = get_format(dtype)
    sizes = model_sizes(model, sizes)
    g = graph if graph is not None else get_model(model, sizes)
    inputs = zoo.make_inputs(g, kind=kind, seed=trial_seed(seed, trial), dtype=S)
    return Case(model, sizes, S.name, fusion if isinstance(fusion, str) else "autofuse", inputs,
                kind, seed, trial)


def evaluate(claim, case: Case, graph=None) -> CaseResult:
    """Evaluate a per-case claim on one case (with the runs' outputs kept)."""
    claim = get_claim(claim)
    runs = Runs(case, graph=graph)
    r = claim.evaluate(runs)
    if not r.outputs:
        r.outputs = {m: runs.outputs(m) for m in ("eager", "fused", "reference")
                     if any(k[0] == m for k in runs._res)}
    r.fingerprints = {**{m: runs.run(m).fingerprint for m in ("eager", "fused")
                         if any(k[0] == m for k in runs._res)}, **r.fingerprints}
    return r


# ---------------------------------------------------------------------------
# mutations (adversarial search)
# ---------------------------------------------------------------------------
def _data_inputs(graph) -> list:
    return [k for k in graph.inputs if graph.role(k) not in ("index", "mask")]


def _scalars(graph) -> list:
    out = []
    for n in graph.nodes:
        for v in n.op_attrs.values():
            if isinstance(v, float) and v not in (0.0,) and math.isfinite(v):
                out.append(v)
    return out or [1.0]


def _mutate(case: Case, graph, rng: np.random.Generator) -> tuple[Case, str]:
    S = get_format(case.dtype)
    names = _data_inputs(graph)
    inputs = {k: np.array(v, dtype=np.float64, copy=True) for k, v in case.inputs.items()}
    name = names[int(rng.integers(len(names)))] if names else None
    if name is None:
        return case, "none"
    a = inputs[name]
    flat = a.reshape(-1)
    n = flat.size
    kind = ["nudge", "midpoint", "overflow", "underflow", "cancel", "pair_cancel", "spike"][int(rng.integers(7))]
    sel = rng.random(n) < max(1.0 / n, float(rng.choice([0.02, 0.1, 0.5])))
    with np.errstate(all="ignore"):
        if kind == "nudge":
            step = rng.integers(-4, 5, n).astype(np.float64)
            ul = metrics.ref_ulp(flat, S)
            flat = np.where(sel, flat + step * ul, flat)
        elif kind == "midpoint":
            c = float(rng.choice(_scalars(graph)))
            # x such that x * c is near a midpoint of S: (m + 1/2) ulp
            y = flat * c
            ul = metrics.ref_ulp(y, S)
            mid = (np.floor(y / ul) + 0.5) * ul
            flat = np.where(sel, mid / c, flat)
        elif kind == "overflow":
            mx = float(np.max(np.abs(flat))) or 1.0
            flat = flat * (S.max * float(rng.uniform(0.05, 1.2)) / mx)
        elif kind == "underflow":
            flat = np.where(sel, flat * S.smallest_normal * float(rng.uniform(0.01, 4)), flat)
        elif kind == "cancel":
            mean = float(rng.choice([8.0, 32.0, 256.0, 1024.0])) * float(rng.choice([-1, 1]))
            spread = float(rng.choice([1e-3, 1e-2, 0.25]))
            flat = (mean + spread * rng.standard_normal(n)).reshape(-1)
        elif kind == "pair_cancel":
            half = n // 2
            if half:
                flat = flat.copy()
                flat[half: 2 * half] = -flat[:half][::-1] + rng.standard_normal(half) * 1e-3
        else:  # spike
            flat = np.where(sel, rng.choice([-1.0, 1.0], n) * S.max * float(rng.uniform(0.01, 0.5)), flat)
    flat = np.asarray(round_to(np.clip(flat, -S.max, S.max), S), dtype=np.float64)
    inputs[name] = flat.reshape(a.shape)
    return dataclasses.replace(case, inputs=inputs, origin=f"adversarial:{kind}"), kind


# ---------------------------------------------------------------------------
# shrinking
# ---------------------------------------------------------------------------
def _crop(arr: np.ndarray, new_shape: tuple, offsets: tuple) -> np.ndarray:
    sl = []
    for ax, (old, new) in enumerate(zip(arr.shape, new_shape, strict=True)):
        o = offsets[ax] if ax < len(offsets) else 0
        o = max(0, min(o, old - new))
        sl.append(slice(o, o + new))
    return arr[tuple(sl)]


def _resized(case: Case, sizes: dict, anchor: tuple) -> Case | None:
    try:
        g = get_model(case.model, sizes)
    except (ValueError, TypeError):
        return None
    old = case.graph()
    new_inputs = {}
    for k, shape in g.inputs.items():
        if k not in case.inputs:
            return None
        a = np.asarray(case.inputs[k])
        if a.ndim != len(shape) or any(n > o for n, o in zip(shape, a.shape, strict=True)):
            return None
        offs = tuple(anchor[i] if (i < len(anchor) and old.inputs[k][i] != shape[i]) else 0
                     for i in range(len(shape)))
        new_inputs[k] = _crop(a, tuple(shape), offs)
    return dataclasses.replace(case, sizes=sizes, inputs=new_inputs)


def _simplify_values(v: np.ndarray, how: str, S: Format) -> np.ndarray:
    with np.errstate(all="ignore"):
        if how == "zero":
            return np.zeros_like(v)
        if how == "one":
            return np.where(v == 0, 0.0, np.sign(v))
        if how == "pow2":
            m, e = np.frexp(v)
            return np.where(v == 0, 0.0, np.ldexp(np.sign(m) * 0.5, e))
        bits = int(how[4:])  # "bits2", "bits4"
        p = min(bits, S.p)
        from .formats import Format as _F

        f = _F(f"p{p}", p, S.emax, S.emin)
        return np.asarray(round_to(v, f), dtype=np.float64)


def shrink(claim, case: Case, *, budget: int = 120, progress=None) -> tuple[Case, CaseResult, dict]:
    """Shrink a violating ``case`` to a minimal one.

    Greedy and deterministic: (1) model sizes -- each integer size is tried
    at 1, then halved repeatedly; inputs are cropped to the new shapes with
    windows anchored at the worst element; (2) values -- chunks of elements
    (halves, quarters, ... of each data input) are replaced by zero, the sign,
    the nearest power of two, or 2/4 significant bits.  A step is kept only
    when the claim is still violated.  At most ``budget`` evaluations.
    Returns (case, result, stats).
    """
    claim = get_claim(claim)
    res = evaluate(claim, case)
    if res.holds:
        raise ValueError("shrink needs a violating case; the claim holds on this one")
    evals = 1
    stats = {"elements_before": case.n_elements(), "complexity_before": case.complexity()}

    def attempt(c: Case):
        nonlocal evals
        evals += 1
        try:
            r = evaluate(claim, c)
        except (ValueError, TypeError, KeyError):
            return None
        return r if not r.holds else None

    # (1) sizes
    anchor = tuple(res.detail.get("index", ()))
    for key in list(case.sizes):
        cur = case.sizes[key]
        cands = [1] + [cur // 2**k for k in range(1, 8) if cur // 2**k > 1]
        for cand in sorted(set(c for c in cands if c < cur)):
            if evals >= budget:
                break
            c2 = _resized(case, {**case.sizes, key: cand}, anchor)
            if c2 is None:
                continue
            r2 = attempt(c2)
            if r2 is not None:
                case, res = c2, r2
                anchor = tuple(res.detail.get("index", ()))
                break
    # (2) values
    S = get_format(case.dtype)
    g = case.graph()
    for name in _data_inputs(g):
        a = np.asarray(case.inputs[name], dtype=np.float64)
        n = a.size
        chunk = n
        while chunk >= 1 and evals < budget:
            for start in range(0, n, chunk):
                if evals >= budget:
                    break
                for how in ("zero", "one", "pow2", "bits2", "bits4"):
                    cur = np.asarray(case.inputs[name], dtype=np.float64).reshape(-1)
                    seg = cur[start:start + chunk]
                    new_seg = _simplify_values(seg, how, S)
                    if np.array_equal(new_seg, seg):
                        continue
                    cand = cur.copy()
                    cand[start:start + chunk] = new_seg
                    c2 = dataclasses.replace(case, inputs={**case.inputs, name: cand.reshape(a.shape)})
                    r2 = attempt(c2)
                    if r2 is not None:
                        case, res = c2, r2
                        break
                    if evals >= budget:
                        break
            if chunk == 1:
                break
            chunk = max(1, chunk // 4)
    stats.update({"elements_after": case.n_elements(), "complexity_after": case.complexity(),
                  "evaluations": evals})
    return dataclasses.replace(case, origin=case.origin + "+shrunk"), res, stats


# ---------------------------------------------------------------------------
# saving / loading
# ---------------------------------------------------------------------------
def _sha(arrs: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(arrs):
        a = np.ascontiguousarray(arrs[k])
        h.update(k.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_counterexample(claim, case: Case, result: CaseResult, directory="data/counterexamples", *,
                        extra: dict | None = None, force: bool = False) -> str:
    """Save ``case`` as ``<dir>/<claim>__<model>__<dtype>__<hash12>.npz`` and
    ``.json``; returns the path stem.  The name holds a hash of the inputs
    and the claim, so the same counterexample maps to the same files; an
    existing file with different content is never overwritten unless
    ``force``."""
    claim = get_claim(claim)
    os.makedirs(directory, exist_ok=True)
    arrs = {f"input/{k}": np.asarray(v, dtype=np.float64) for k, v in case.inputs.items()}
    for mode, outs in result.outputs.items():
        for k, v in outs.items():
            arrs[f"output/{mode}/{k}"] = np.asarray(v)
    ih = _sha({k: v for k, v in arrs.items() if k.startswith("input/")})
    oh = _sha({k: v for k, v in arrs.items() if k.startswith("output/")})
    stem = os.path.join(directory, f"{claim.name}__{case.model}__{case.dtype}__{ih[:12]}")
    meta = {
        "claim": claim.name,
        "statement": claim.statement,
        "model": case.model,
        "sizes": case.sizes,
        "dtype": case.dtype,
        "fusion": case.fusion,
        "fusion_options": parse_fusion(case.fusion).canonical(),
        "kernels": {"eager": "KernelSpec.handwritten()", "fused": "KernelSpec.codegen()",
                    "fused_library": "KernelSpec.handwritten()"},
        "kind": case.kind,
        "seed": case.seed,
        "trial": case.trial,
        "origin": case.origin,
        "fingerprints": result.fingerprints,
        "inputs_sha256": ih,
        "outputs_sha256": oh,
        "margin": result.margin,
        "detail": result.detail,
        **(extra or {}),
    }
    jpath, npath = stem + ".json", stem + ".npz"
    text = json.dumps(meta, indent=2, sort_keys=True, default=_json_default)
    if os.path.exists(jpath) and not force:
        with open(jpath) as fh:
            old = json.load(fh)
        if old.get("inputs_sha256") == ih and old.get("outputs_sha256") == oh:
            return stem  # the same counterexample is already saved
        raise FileExistsError(f"{jpath} exists with different content; pass force=True (--force) to overwrite")
    np.savez(npath, **arrs)
    with open(jpath, "w") as fh:
        fh.write(text)
    return stem


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def load_counterexample(path) -> tuple[Case, dict, dict]:
    """Load a saved counterexample (``.npz``/``.json`` path or their stem):
    returns (case, metadata, saved arrays)."""
    stem = str(path)
    for ext in (".json", ".npz"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    with open(stem + ".json") as fh:
        meta = json.load(fh)
    with np.load(stem + ".npz") as z:
        arrs = {k: z[k] for k in z.files}
    inputs = {k.split("/", 1)[1]: v for k, v in arrs.items() if k.startswith("input/")}
    case = Case(meta["model"], meta["sizes"], meta["dtype"], meta["fusion"], inputs,
                meta.get("kind", "normal"), meta.get("seed", 0), meta.get("trial", 0), meta.get("origin", ""))
    return case, meta, arrs


def reproduce(path) -> dict:
    """Re-run a saved counterexample: ``{"bitwise": all saved outputs equal bit
    for bit, "violated": claim still violated, "fingerprints_equal": ...,
    "result": CaseResult}``."""
    case, meta, arrs = load_counterexample(path)
    res = evaluate(meta["claim"], case)
    same = True
    for k, v in arrs.items():
        if not k.startswith("output/"):
            continue
        _, mode, name = k.split("/", 2)
        got = res.outputs.get(mode, {}).get(name)
        if got is None or got.dtype != v.dtype or not np.array_equal(
                np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(v).view(np.uint8)):
            same = False
    fp_equal = all(res.fingerprints.get(m) == f for m, f in meta.get("fingerprints", {}).items())
    return {"bitwise": same, "violated": not res.holds, "fingerprints_equal": fp_equal, "result": res}


# ---------------------------------------------------------------------------
# the checker
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchOptions:
    """Knobs of :func:`check`.

    trials : int
        Random trials (default 100).
    search : {"random", "adversarial"}
    adversarial_steps : int
        Mutations tried by the adversarial search (default 200).
    kinds : tuple of str
        Zoo input kinds cycled over the trials (default normal, uniform,
        shifted_mean, heavy_tailed, near_overflow).
    shrink_budget : int
        Evaluations allowed to the shrinker (default 120).
    chunk : int
        Trials per executor task (default 25).
    """

    trials: int = 100
    search: str = "random"
    adversarial_steps: int = 200
    kinds: tuple = ("normal", "uniform", "shifted_mean", "heavy_tailed", "near_overflow")
    shrink_budget: int = 120
    chunk: int = 25

    def __post_init__(self):
        if self.search not in SEARCHES:
            raise ValueError(f"search={self.search!r} is not valid; choose one of {SEARCHES}")
        if not isinstance(self.trials, int) or self.trials < 1:
            raise ValueError(f"trials={self.trials!r} must be an int >= 1")
        if self.chunk < 1:
            raise ValueError(f"chunk={self.chunk!r} must be >= 1")


@dataclass
class CheckReport:
    """What :func:`check` returns: ``holds``; ``claim``; ``trials``;
    ``worst`` (largest margin: case, result); ``violations`` (count);
    ``counterexample`` (shrunk case and result, or None); ``saved`` (path
    stem or None); ``shrink_stats``; ``population`` (population claims);
    ``fingerprints`` (set of fused fingerprints seen across tasks)."""

    claim: str
    model: str
    dtype: str
    holds: bool
    trials: int
    violations: int
    worst_margin: float
    worst_detail: dict
    worst_trial: int | None = None
    counterexample: tuple | None = None
    saved: str | None = None
    shrink_stats: dict = field(default_factory=dict)
    population: dict = field(default_factory=dict)
    fingerprints: list = field(default_factory=list)
    search: str = "random"

    def summary(self) -> str:
        lines = [f"claim {self.claim} on {self.model} ({self.dtype}), {self.trials} trials, search={self.search}: "
                 + ("HOLDS" if self.holds else f"VIOLATED ({self.violations} violating cases)")]
        lines.append(f"  worst margin {self.worst_margin:.4g} (trial {self.worst_trial}): "
                     + json.dumps(self.worst_detail, default=_json_default))
        if self.counterexample is not None:
            c = self.counterexample[0]
            lines.append(f"  counterexample: sizes {c.sizes}, {c.n_elements()} input elements, origin {c.origin}; "
                         f"shrink {self.shrink_stats}")
        if self.saved:
            lines.append(f"  saved: {self.saved}.npz / .json")
        return "\n".join(lines)


def _task(payload: dict) -> list:
    """One executor task: evaluate trials [lo, hi) (top level: picklable)."""
    claim = get_claim(payload["claim"])
    graph = get_model(payload["model"], payload["sizes"])
    out = []
    for t in range(payload["lo"], payload["hi"]):
        kind = payload["kinds"][t % len(payload["kinds"])]
        case = make_case(payload["model"], sizes=payload["sizes"], dtype=payload["dtype"],
                         fusion=payload["fusion"], kind=kind, seed=payload["seed"], trial=t, graph=graph)
        runs = Runs(case, graph=graph)
        if claim.scope == "population":
            out.append((t, kind, claim.case_fn(runs), runs.run("fused").fingerprint))
        else:
            r = claim.evaluate(runs)
            fp = runs.run("fused").fingerprint if any(k[0] == "fused" for k in runs._res) else None
            out.append((t, kind, (r.holds, r.margin, r.detail), fp))
    return out


def _submit_all(executor, payloads: list, progress: bool, desc: str, fn=None) -> list:
    """Run ``fn`` (default :func:`_task`) on each payload on ``executor``
    (None: in process); results in payload order."""
    fn = _task if fn is None else fn
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(payloads), desc=desc, leave=False)
    results = [None] * len(payloads)
    try:
        if executor is None:
            for i, p in enumerate(payloads):
                results[i] = fn(p)
                if bar:
                    bar.update(1)
        else:
            futs = [executor.submit(fn, p) for p in payloads]
            for i, f in enumerate(futs):
                results[i] = f.result()
                if bar:
                    bar.update(1)
    finally:
        if bar:
            bar.close()
    return results


def check(claim, model: str, *, dtype="fp16", sizes=None, fusion: str = "autofuse", trials: int = 100,
          search: str = "random", seed: int = 0, executor=None, save: str | None = None,
          options: SearchOptions | None = None, progress: bool = False, shrink_cex: bool = True,
          force: bool = False) -> CheckReport:
    """Check ``claim`` on ``model``.

    Random trials run as executor tasks of ``options.chunk`` trials (per-trial
    seeds from :func:`trial_seed`; identical results with any executor).  The
    adversarial search and the shrinker run in this process (sequential hill
    climbing).  When violated, the worst case is shrunk and saved under
    ``save`` (a directory; None: not saved).  ``options`` (a
    :class:`SearchOptions`), when given, replaces ``trials`` and ``search``.
    """
    claim = get_claim(claim)
    opts = options if options is not None else SearchOptions(trials=trials, search=search)
    S = get_format(dtype)
    sizes = model_sizes(model, sizes)
    parse_fusion(fusion)
    payloads = [{"claim": claim.name if claim.name in CLAIMS and CLAIMS[claim.name] is claim else claim,
                 "model": model, "sizes": sizes, "dtype": S.name, "fusion": fusion, "seed": seed,
                 "kinds": tuple(opts.kinds), "lo": lo, "hi": min(lo + opts.chunk, opts.trials)}
                for lo in range(0, opts.trials, opts.chunk)]
    results = [r for chunk in _submit_all(executor, payloads, progress, f"check {claim.name}") for r in chunk]
    fps = sorted({r[3] for r in results if r[3] is not None})
    if claim.scope == "population":
        res = claim.fn([r[2] for r in results])
        rep = CheckReport(claim.name, model, S.name, res.holds, opts.trials, 0 if res.holds else 1,
                          res.margin, res.detail, population=res.stats, fingerprints=fps, search=opts.search)
        return rep
    margins = [r[2][1] for r in results]
    viol = [r for r in results if not r[2][0]]
    wi = int(np.argmax(margins))
    worst = results[wi]
    rep = CheckReport(claim.name, model, S.name, not viol and len(fps) <= 1, opts.trials, len(viol),
                      float(worst[2][1]), worst[2][2], worst_trial=worst[0], fingerprints=fps,
                      search=opts.search)
    if claim.name == "compile_determinism" and len(fps) > 1:
        rep.holds = False
        rep.worst_detail = {"fingerprints_differ_across_tasks": fps}
    cex = None
    if viol:
        t = viol[int(np.argmax([r[2][1] for r in viol]))]
        cex = make_case(model, sizes=sizes, dtype=S.name, fusion=fusion, kind=t[1], seed=seed, trial=t[0])
    elif opts.search == "adversarial" and claim.searchable:
        cex = _adversarial(claim, model, sizes, S, fusion, seed, results, opts, rep, progress)
    if cex is not None and claim.searchable:
        rep.holds = False
        if shrink_cex:
            c2, r2, st = shrink(claim, cex, budget=opts.shrink_budget)
        else:
            c2, r2, st = cex, evaluate(claim, cex), {}
        rep.counterexample = (c2, r2)
        rep.shrink_stats = st
        if save:
            rep.saved = save_counterexample(claim, c2, r2, save, extra={"search": opts.search,
                                                                        "shrink": st}, force=force)
    elif cex is not None:
        rep.counterexample = (cex, evaluate(claim, cex))
        if save:
            rep.saved = save_counterexample(claim, cex, rep.counterexample[1], save, force=force)
    return rep


def _adversarial(claim, model, sizes, S, fusion, seed, results, opts, rep, progress) -> Case | None:
    """Hill climbing from the 3 highest-margin random cases (module docstring)."""
    order = np.argsort([-r[2][1] for r in results], kind="stable")[:3]
    starts = [results[i] for i in order]
    graph = get_model(model, sizes)
    rng = np.random.default_rng([int(seed), zlib.crc32(b"adversarial")])
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=opts.adversarial_steps, desc=f"adversarial {claim.name}", leave=False)
    best_overall = (-math.inf, None)
    per_start = max(1, opts.adversarial_steps // max(len(starts), 1))
    try:
        for t, kind, (_, margin, _), _ in starts:
            case = make_case(model, sizes=sizes, dtype=S.name, fusion=fusion, kind=kind, seed=seed, trial=t,
                             graph=graph)
            best = margin
            for _ in range(per_start):
                cand, _how = _mutate(case, graph, rng)
                r = claim.evaluate(Runs(cand, graph=graph))
                if bar:
                    bar.update(1)
                m = r.margin if not math.isnan(r.margin) else -math.inf
                if not r.holds:
                    rep.violations += 1
                    rep.worst_margin, rep.worst_detail = float(m), r.detail
                    return cand
                if m >= best:
                    case, best = cand, m
            if best > best_overall[0]:
                best_overall = (best, case)
    finally:
        if bar:
            bar.close()
    if best_overall[0] > rep.worst_margin:
        rep.worst_margin = float(best_overall[0])
    return None


def sweep(fn, params: list, *, executor=None, progress: bool = False, desc: str = "sweep") -> list:
    """Map ``fn`` (a picklable top-level function) over ``params`` on
    ``executor`` (None: in process; any ``concurrent.futures.Executor`` or a
    ``dask.distributed.Client``, whose ``submit``/``result`` have the same
    shape).  Results come back in ``params`` order, so they do not depend on
    the executor."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(params), desc=desc, leave=False)
    out = []
    try:
        if executor is None:
            for p in params:
                out.append(fn(p))
                if bar:
                    bar.update(1)
        else:
            futs = [executor.submit(fn, p) for p in params]
            for f in futs:
                out.append(f.result())
                if bar:
                    bar.update(1)
    finally:
        if bar:
            bar.close()
    return out


# ---------------------------------------------------------------------------
# the autofusion precision test plan (`numlab check plan`)
# ---------------------------------------------------------------------------
PLAN_CHAINS = {
    "mul->add->gelu->mul": ("mul_add_gelu_mul", {"batch": 4, "hidden": 64}),
    "layernorm": ("layernorm", {"batch": 4, "hidden": 64}),
    "softmax": ("softmax", {"batch": 4, "n": 64}),
    "matmul->add->layernorm": ("matmul_add_layernorm", {"batch": 4, "d_in": 32, "hidden": 64}),
}


def plan_c1(n: int = 1024, *, scalar: float = 0.7, seed: int = 0, dtype="fp16") -> dict:
    """C1: ``x * 0.7`` for ``x ~ U(-1, 1)`` in S ``[n, n]`` by the ``muls``
    (scalar unit keeps 0.7 in fp32) and ``broadcast`` (0.7 first rounded to S)
    instructions; shares of elements at 0, 1 and >= 2 ULP from the correctly
    rounded product (the exact product of the S value and the fp64 scalar)."""
    from .kernels import scalar_mul

    S = get_format(dtype)
    rng = np.random.default_rng([seed, 1])
    x = np.asarray(round_to(rng.uniform(-1, 1, (n, n)), S), dtype=np.float64)
    ref = x * scalar  # exact enough: an fp16 value times a double, compared after rounding to S
    out = {}
    for how in ("muls", "broadcast"):
        y = scalar_mul(x.astype(S.container), scalar, fmt=S, how=how)
        d = metrics.ulp_distance(ref, y, S)
        out[how] = {**metrics.ulp_shares(d), "ulp_max": float(d.max()),
                    "rel_max": float(metrics.rel_error(ref, y).max())}
    return out


def plan_c2(n: int = 16384, tiles=(512, 1024, 2048), *, rows: int = 64, seed: int = 0, dtype="fp16",
            inner: str = "sequential", outer: str = "sequential") -> dict:
    """C2: sum of ``[rows, n]`` S values (U(-1, 1)) with an fp32 accumulator,
    ``blocked(T, inner, outer)`` for each tile T, rounded to S; errors against
    fp64 (exact fsum per row) before and after the final rounding, with the
    a-priori bound of :func:`numlab.bounds.sum_bound`."""
    from . import bounds
    from .kernels.reduce import reduce

    S = get_format(dtype)
    rng = np.random.default_rng([seed, 2])
    x = np.asarray(round_to(rng.uniform(-1, 1, (rows, n)), S), dtype=np.float64)
    exact = np.array([math.fsum(r) for r in x])
    out = {}
    for T in tiles:
        order = f"blocked({T},{inner},{outer})"
        acc32 = np.asarray(reduce(x, "sum", order=order, acc="fp32"), dtype=np.float64)
        outS = np.asarray(reduce(x, "sum", order=order, acc="fp32", out=S), dtype=np.float64)
        e32 = np.abs(acc32 - exact)
        eS = np.abs(outS - exact)
        bnd = bounds.sum_bound(np.abs(x).sum(1), n, order, "fp32")
        out[T] = {"order": order, "fp32_err_max": float(e32.max()), "fp32_err_mean": float(e32.mean()),
                  "out_err_max": float(eS.max()), "out_err_mean": float(eS.mean()),
                  "bound_fp32_max": float(np.max(bnd)), "bound_holds": bool(np.all(e32 <= bnd)),
                  "ulp_out_max": float(metrics.ulp_distance(exact, outS, S).max())}
    return out


def plan_c3(n: int = 100_000, *, steps=(2, 3), seed_algo: str = "magic", step_fmt: str = "fp32",
            seed: int = 0, dtype="fp16") -> dict:
    """C3: ``rsqrt`` of S values ``x ~ U(0.01, 100)`` by a ``seed_algo``
    estimate plus 2 or 3 Newton steps in ``step_fmt``, rounded to S; ULP
    shares against the correctly rounded ``1/sqrt(x)``."""
    from .kernels.algorithms import rsqrt

    S = get_format(dtype)
    rng = np.random.default_rng([seed, 3])
    x = np.asarray(round_to(rng.uniform(0.01, 100, n), S), dtype=np.float64)
    ref = 1.0 / np.sqrt(x)
    out = {}
    for k in steps:
        y = rsqrt(x.astype(S.container), fmt=S, algo=f"newton({seed_algo},{k},{step_fmt})")
        d = metrics.ulp_distance(ref, y, S)
        out[k] = {**metrics.ulp_shares(d), "ulp_max": float(d.max()),
                  "ulp_err_max": float(metrics.ulp_error(ref, y, S).max())}
    return out


PLAN_FUSIONS = (
    "autofuse",
    "autofuse+nodecompose",
    "autofuse:--autofuse_enable_pass=reduce",
    "inductor",
)
"""Fusion configurations the plan's chains run under by default.  The note
(seed 000, §6.2) fixes autofuse's fused kinds (elementwise incl. broadcast on;
reduce, concat, slice, gather, transpose off) but does not say whether
autofuse decomposes composites such as layer_norm; numlab's
``FusionOptions()`` does (``decompose=True``, as Inductor does).  The plan
therefore reports every chain under both readings, with reduce fusion
enabled, and under the Inductor-like preset."""

_SPEC_STARTS = ("autofuse", "inductor", "off")


def parse_fusion_list(fusion=None) -> list:
    """The fusion spec strings of ``fusion``: None gives :data:`PLAN_FUSIONS`;
    a str is a comma-separated list of :func:`parse_fusion` specs (a comma
    inside an ``autofuse:FLAGS`` pass list, as in
    ``autofuse:--autofuse_enable_pass=concat,reduce``, stays in its spec: a
    new spec starts only at a piece beginning with autofuse, inductor or
    off); a list or tuple holds such strings.  Duplicates are dropped, order
    kept.  Each spec is validated by :func:`parse_fusion` (ValueError naming
    it and the valid forms)."""
    if fusion is None:
        return list(PLAN_FUSIONS)
    items = [fusion] if isinstance(fusion, str) else fusion
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"fusion must be a spec string or a list of them, got {type(fusion).__name__}")
    out: list = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"fusion holds {item!r} ({type(item).__name__}); specs are strings like "
                            f"'autofuse', 'autofuse:FLAGS', 'inductor', 'off', optionally '+nodecompose'")
        specs: list = []
        for piece in item.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if specs and not piece.startswith(_SPEC_STARTS):
                specs[-1] += "," + piece
            else:
                specs.append(piece)
        for sp in specs:
            parse_fusion(sp)
            if sp not in out:
                out.append(sp)
    if not out:
        raise ValueError(f"fusion={fusion!r} names no configuration; valid: 'autofuse', 'autofuse:FLAGS', "
                         "'inductor', 'off', each optionally with '+nodecompose'")
    return out


def describe_fusion(spec) -> str:
    """One line saying what a fusion configuration means for the plan's
    chains: whether composites are decomposed, which kinds are fused, and
    what that implies for layer_norm / softmax (stated from the
    :class:`numlab.fusion.FusionOptions` fields, not measured)."""
    from .fusion import KINDS

    fo = parse_fusion(spec)
    if not fo.enable_autofuse:
        fused, unfused = [], list(KINDS)
    else:
        fused = [k for k in KINDS if k in fo.enabled]
        unfused = [k for k in KINDS if k not in fo.enabled]
    comp = ("composites (layer_norm, softmax) decomposed into primitives" if fo.decompose
            else "composites kept whole (eager's fp32 library kernel)")
    if fo.decompose and fo.fuses("reduce") and fo.fuses("elementwise"):
        effect = "a decomposed layer_norm/softmax is one fp32 block"
    elif fo.decompose:
        effect = ("decomposed reductions are separate kernels: mean, variance and the other values crossing "
                  "block boundaries are stored in S")
    else:
        effect = "layer_norm/softmax run exactly as in eager"
    return (f"{comp}; fused: {', '.join(fused) or 'nothing'}; separate kernels: {', '.join(unfused) or 'none'}"
            f" -> {effect}")


def _plan_task(payload: dict) -> list:
    """One executor task of the plan: trials [lo, hi) of one chain.  Each
    trial's inputs, eager and reference runs are computed once and shared by
    every fusion configuration (so every configuration sees the same inputs);
    returns per trial {spec: per-case stats of ``no_worse_population``}."""
    graph = get_model(payload["model"], payload["sizes"])
    out = []
    for t in range(payload["lo"], payload["hi"]):
        kind = payload["kinds"][t % len(payload["kinds"])]
        base = None
        per = {}
        for spec in payload["fusions"]:
            case = make_case(payload["model"], sizes=payload["sizes"], dtype=payload["dtype"], fusion=spec,
                             kind=kind, seed=payload["seed"], trial=t, graph=graph)
            runs = Runs(case, graph=graph)
            if base is None:
                base = runs
            else:
                runs._res.update({k: v for k, v in base._res.items() if k[0] in ("eager", "reference")})
            st = _population_stats(runs)
            e, f = runs.outputs("eager"), runs.outputs("fused")
            same = sum(int(np.count_nonzero(metrics.bitwise_equal(e[k], f[k]))) for k in st)
            per[spec] = (st, same)
        out.append(per)
    return out


def run_plan(out: str | None = "out/check_plan", *, trials: int = 1000, seed: int = 0, executor=None,
             progress: bool = False, quick: bool = False, kinds=("normal",), figures: bool = True,
             force: bool = False, fusion=None, chunk: int = 50) -> dict:
    """Run the whole test plan: C1, C2, C3 and the four chains (``trials``
    inputs each) under every fusion configuration of ``fusion`` (see
    :func:`parse_fusion_list`; default :data:`PLAN_FUSIONS`).  Verdict per
    chain and configuration: "fused P99 and max <= eager P99 and max" over
    the pooled elementwise absolute errors against the fp64 reference
    (= claim ``no_worse_population``, same inputs for every configuration).
    Writes ``plan.csv`` (with a ``fusion`` column), ``plan.txt`` and figures
    ``plan_c1.png``, ``plan_c2.png``, ``plan_c3.png``, ``plan_chains.png``
    into ``out`` (unless None); refuses to overwrite an existing
    ``plan.csv`` without ``force``.

    Returns ``{"c1", "c2", "c3", "chains", "fusions", "trials", "table"}``:
    ``chains[label][spec]`` holds ``fused_p99``, ``eager_p99``,
    ``fused_max``, ``eager_max``, ``elements``, ``bitwise_equal_share``
    (share of output elements where fused and eager have the same bits: a
    PASS at 100% is equality, not improvement), ``fusion`` and ``verdict``
    (PASS/FAIL); ``fusions[spec]`` is :func:`describe_fusion`."""
    if out is not None and os.path.exists(os.path.join(out, "plan.csv")) and not force:
        raise FileExistsError(f"{os.path.join(out, 'plan.csv')} exists; pass force=True (--force) to overwrite")
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} must be an int >= 1")
    fusions = parse_fusion_list(fusion)
    kinds = tuple(kinds)
    n1, n2, n3 = (256, 4096, 20_000) if quick else (1024, 16384, 100_000)
    c1 = plan_c1(n1, seed=seed)
    c2 = plan_c2(n2, (512, 1024, 2048), seed=seed, rows=16 if quick else 64)
    c3 = plan_c3(n3, seed=seed)
    chains: dict = {}
    for label, (model, sizes) in PLAN_CHAINS.items():
        payloads = [{"model": model, "sizes": model_sizes(model, sizes), "dtype": "fp16", "seed": seed,
                     "kinds": kinds, "fusions": tuple(fusions), "lo": lo, "hi": min(lo + chunk, trials)}
                    for lo in range(0, trials, chunk)]
        per_trial = [r for ch in _submit_all(executor, payloads, progress, f"plan {label}", fn=_plan_task)
                     for r in ch]
        chains[label] = {}
        for spec in fusions:
            res = _claim_population([r[spec][0] for r in per_trial])
            st = res.stats.get("y", next(iter(res.stats.values())))
            n_all = sum(v["elements"] for v in res.stats.values())
            same = sum(r[spec][1] for r in per_trial) / n_all if n_all else math.nan
            chains[label][spec] = {**st, "bitwise_equal_share": same, "fusion": spec,
                                   "verdict": "PASS" if res.holds else "FAIL"}
    rows = []
    for how, r in c1.items():
        rows.append(("C1", f"x*0.7 {how}", f"0ulp {r['ulp0']:.4f}", f"1ulp {r['ulp1']:.4f}",
                     f">=2ulp {r['ulp_ge2']:.4f}", f"max {r['ulp_max']:.0f} ulp", ""))
    for T, r in c2.items():
        rows.append(("C2", f"sum tile {T}", f"fp32 err max {r['fp32_err_max']:.3g}",
                     f"fp16 err max {r['out_err_max']:.3g}", f"bound {r['bound_fp32_max']:.3g}",
                     f"max {r['ulp_out_max']:.0f} ulp", "bound holds" if r["bound_holds"] else "BOUND VIOLATED"))
    for k, r in c3.items():
        rows.append(("C3", f"rsqrt {k} Newton", f"0ulp {r['ulp0']:.4f}", f"1ulp {r['ulp1']:.4f}",
                     f">=2ulp {r['ulp_ge2']:.4f}", f"max {r['ulp_max']:.0f} ulp", ""))
    table = "\n".join(" | ".join(f"{c:<26}" if i == 1 else f"{c:<22}" for i, c in enumerate(row)) for row in rows)
    tags = {spec: f"F{i + 1}" for i, spec in enumerate(fusions)}
    head = [f"chains: fp16, {trials} inputs each (kinds {','.join(kinds)}), the same inputs for every "
            "configuration; verdict: fused P99 and max <= eager P99 and max (|error| vs fp64, pooled)",
            "fusion configurations:"]
    for spec in fusions:
        head.append(f"  {tags[spec]} = {spec}: {describe_fusion(spec)}")
    w = max(len(lb) for lb in PLAN_CHAINS)
    crow = [f"{'chain':<{w}} | fusion | {'eager P99':>9} | {'fused P99':>9} | {'eager max':>9} | "
            f"{'fused max':>9} | fused==eager bits | verdict"]
    for label, per in chains.items():
        for spec, r in per.items():
            crow.append(f"{label:<{w}} | {tags[spec]:<6} | {r['eager_p99']:>9.3g} | {r['fused_p99']:>9.3g} | "
                        f"{r['eager_max']:>9.3g} | {r['fused_max']:>9.3g} | "
                        f"{100 * r['bitwise_equal_share']:>16.2f}% | {r['verdict']}")
    table = table + "\n\n" + "\n".join(head + crow)
    result = {"c1": c1, "c2": c2, "c3": c3, "chains": chains,
              "fusions": {spec: describe_fusion(spec) for spec in fusions}, "trials": trials, "table": table}
    if out is not None:
        _write_plan(out, result, trials, figures)
    return result


def _write_plan(out: str, res: dict, trials: int, figures: bool) -> None:
    import csv

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "plan.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["check", "case", "fusion", "metric", "value"])
        for how, r in res["c1"].items():
            for k, v in r.items():
                w.writerow(["C1", how, "", k, v])
        for T, r in res["c2"].items():
            for k, v in r.items():
                w.writerow(["C2", f"tile{T}", "", k, v])
        for s, r in res["c3"].items():
            for k, v in r.items():
                w.writerow(["C3", f"newton{s}", "", k, v])
        for label, per in res["chains"].items():
            for spec, r in per.items():
                for k, v in r.items():
                    if k != "fusion":
                        w.writerow(["chain", label, spec, k, v])
                w.writerow(["chain", label, spec, "trials", trials])
                w.writerow(["chain", label, spec, "meaning", res["fusions"][spec]])
    with open(os.path.join(out, "plan.txt"), "w") as fh:
        fh.write(res["table"] + "\n")
    if not figures:
        return
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = ["0 ulp", "1 ulp", ">=2 ulp"]
    xs = np.arange(3)
    for i, (how, r) in enumerate(res["c1"].items()):
        ax.bar(xs + 0.4 * i, [r["ulp0"], r["ulp1"], r["ulp_ge2"]], 0.4, label=how)
    ax.set_xticks(xs + 0.2, labels)
    ax.set_ylabel("share of elements")
    ax.set_title("C1: fp16 x*0.7, muls vs broadcast")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c1.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    T = list(res["c2"])
    ax.loglog(T, [res["c2"][t]["fp32_err_max"] for t in T], "o-", label="fp32 accumulator error (max)")
    ax.loglog(T, [res["c2"][t]["out_err_max"] for t in T], "s-", label="after rounding to fp16 (max)")
    ax.loglog(T, [res["c2"][t]["bound_fp32_max"] for t in T], "k--", label="a-priori bound (fp32 acc)")
    ax.axhline(2.0**-11, color="grey", lw=0.8, label="u (fp16)")
    ax.set_xlabel("tile T (elements)")
    ax.set_ylabel("|sum error| vs fp64")
    ax.set_title("C2: fp16 [1,16384] sum, blocked tiles")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c2.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (s, r) in enumerate(res["c3"].items()):
        ax.bar(xs + 0.4 * i, [r["ulp0"], r["ulp1"], r["ulp_ge2"]], 0.4, label=f"{s} Newton steps")
    ax.set_xticks(xs + 0.2, labels)
    ax.set_ylabel("share of elements")
    ax.set_title("C3: fp16 rsqrt on U(0.01, 100)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c3.png"), dpi=100)
    plt.close(fig)

    names = list(res["chains"])
    specs = list(res["fusions"])
    fig, axes = plt.subplots(1, len(specs), figsize=(3.2 * len(specs) + 1, 3.8), sharey=True, squeeze=False)
    xs = np.arange(len(names))
    for j, (ax, spec) in enumerate(zip(axes[0], specs, strict=True)):
        for i, (key, lab) in enumerate([("eager_p99", "eager P99"), ("fused_p99", "fused P99"),
                                        ("eager_max", "eager max"), ("fused_max", "fused max")]):
            ax.bar(xs + 0.2 * i, [max(res["chains"][n][spec][key], 1e-12) for n in names], 0.2, label=lab)
        ax.set_yscale("log")
        ax.set_xticks(xs + 0.3, names, fontsize=6, rotation=30, ha="right")
        ax.axhline(2.0**-11, color="grey", lw=0.8, label="u (fp16)")
        verdicts = "".join("P" if res["chains"][n][spec]["verdict"] == "PASS" else "F" for n in names)
        ax.set_title(f"F{j + 1} {spec}\nverdicts {verdicts}", fontsize=7)
        if j == 0:
            ax.set_ylabel("|error| vs fp64 reference")
            ax.legend(fontsize=6)
    fig.suptitle(f"chains over {trials} inputs: fused vs eager per fusion configuration", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_chains.png"), dpi=100)
    plt.close(fig)
