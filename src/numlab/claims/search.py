"""The checker: random trials on any executor, an adversarial search, and
the report.

:func:`check` evaluates a claim

1. on random inputs (the zoo's input kinds, one seed per trial), then
2. optionally with an **adversarial** search: hill climbing from the cases
   closest to a violation, with mutations that push towards one -- nudging
   values by a few ULPs, putting products of the graph's scalar constants on
   rounding midpoints, scaling towards the overflow threshold, planting
   cancellation (large mean, small spread; ``x`` next to ``-x``), and tiny or
   subnormal values;
3. and **shrinks** a violating case (:mod:`numlab.claims.shrink`) and saves
   it (:mod:`numlab.claims.store`).

Verdicts: "fails" when some case violates the claim (a decided
counterexample), else "undecided" when some case's decision rests on an
infinite, NaN, unknown or empty result (the report names the operators
responsible), else "holds".  :attr:`CheckReport.exit_code` is 0 / 1 / 2.

Scale out: :func:`check` and :func:`sweep` take any
``concurrent.futures.Executor`` (or a ``dask.distributed.Client``); trials are
split into tasks with per-trial seeds, so results are identical whatever the
executor.  Long runs show a ``tqdm.auto`` progress bar.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from .. import metrics
from .._repr import Compact, brief
from ..contract import Contract
from ..formats import get_format
from ..graph import Graph
from ..rounding import round_to
from ._fusion import fusion_spec
from ._kernels import DEFAULT_KERNELS, DEFAULT_LIBRARY, kernel_spec
from .cases import Case, Runs, contract_spec, data_inputs, evaluate, make_case
from .catalogue import CLAIMS, get_claim, get_model, model_path, model_sizes, responsible_ops
from .observed import given_inputs, model_label, observed_outputs, read_arrays, resolve_graph
from .shrink import shrink
from .store import _json_default, save_counterexample

__all__ = ["SearchOptions", "CheckReport", "check", "sweep", "SEARCHES", "EXIT_CODES"]

SEARCHES = ("random", "adversarial")
EXIT_CODES = {"holds": 0, "fails": 1, "undecided": 2}
"""Exit code of each verdict (``numlab check``): 0 holds, 1 fails, 2 undecided."""


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


@dataclass(repr=False)
class CheckReport(Compact):
    """What :func:`check` returns.

    ``verdict`` ("holds", "fails" or "undecided"; :attr:`holds` is
    ``verdict == "holds"``, :attr:`exit_code` 0 / 1 / 2); ``claim``;
    ``search`` ("random", "adversarial", or for given data "given" /
    "observed": ``trials`` is then the number of given cases and the
    "fused" numbers in ``worst_detail`` are the observed outputs');
    ``fusion`` (the canonical fusion spec); ``trials``; ``violations``
    (violating cases); ``undecided`` (cases whose decision rests on an
    infinite, NaN, unknown or empty result); ``undecided_detail`` (the first
    such case: trial, reason, responsible operators); ``worst_margin`` /
    ``worst_detail`` / ``worst_trial`` (largest margin over the decided
    cases); ``counterexample`` (shrunk case and result, or None); ``saved``
    (path stem or None); ``shrink_stats``; ``population`` (population
    claims); ``fingerprints`` (fused fingerprints seen across tasks);
    ``kernels`` / ``library`` (the canonical kernel specs of the fused side
    and of eager's library)."""

    claim: str
    model: str
    fmt: str
    verdict: str
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
    fusion: str = "autofuse"
    undecided: int = 0
    undecided_detail: dict = field(default_factory=dict)
    kernels: str = DEFAULT_KERNELS
    library: str = DEFAULT_LIBRARY
    contract: str | None = None

    @property
    def holds(self) -> bool:
        """Whether the verdict is "holds" (never for an undecided check)."""
        return self.verdict == "holds"

    @property
    def exit_code(self) -> int:
        """0 holds, 1 fails, 2 undecided (:data:`EXIT_CODES`)."""
        return EXIT_CODES[self.verdict]

    @property
    def responsible(self) -> list:
        """The operators responsible for an undecided verdict, as text."""
        return responsible_ops(self.undecided_detail)

    def _repr_facts(self):
        where = f"trial {self.worst_trial}" if self.worst_trial is not None else "pooled trials"
        rows = [("search", f"{self.search}, {self.trials} trial(s), fusion {self.fusion}"),
                ("violations", self.violations),
                ("undecided", f"{self.undecided} case(s)" + (f": {self.undecided_detail.get('reason')}"
                                                             if self.undecided else "")),
                ("worst margin", f"{brief(self.worst_margin)} ({where})"),
                ("worst detail", brief(self.worst_detail))]
        if (self.kernels, self.library) != (DEFAULT_KERNELS, DEFAULT_LIBRARY):
            rows.append(("kernels", f"fused {self.kernels}, eager's library {self.library}"))
        if self.contract:
            rows.append(("contract", self.contract))
        if self.responsible:
            rows.append(("responsible", "; ".join(self.responsible)))
        if self.counterexample is not None:
            c = self.counterexample[0]
            rows.append(("counterexample", f"{c.model} sizes {c.sizes}, {c.n_elements()} input elements, "
                                           f"origin {c.origin}"))
        rows += [("saved", self.saved), ("population", brief(self.population) if self.population else None),
                 ("fingerprints", f"{len(self.fingerprints)} distinct" if self.fingerprints else None)]
        return f"CheckReport: claim {self.claim} on {self.model} ({self.fmt}): {self.verdict}", rows

    def summary(self) -> str:
        head = {"holds": "HOLDS", "fails": f"VIOLATED ({self.violations} violating cases)",
                "undecided": f"UNDECIDED ({self.undecided} of {self.trials} cases rest on an infinite, NaN, "
                             "unknown or empty result)"}[self.verdict]
        if self.search in ("given", "observed"):
            fused = ("the observed outputs in place of numlab's fused run" if self.search == "observed"
                     else "numlab's fused run")
            lines = [f"claim {self.claim} on {self.model} ({self.fmt}), stated plan {self.fusion}, "
                     f"{self.trials} given case(s), fused = {fused}: {head}"]
        else:
            lines = [f"claim {self.claim} on {self.model} ({self.fmt}), fusion {self.fusion}, {self.trials} trials, "
                     f"search={self.search}: {head}"]
        if (self.kernels, self.library) != (DEFAULT_KERNELS, DEFAULT_LIBRARY):
            lines.append(f"  kernels: fused {self.kernels}, eager's library {self.library}")
        if self.claim in CLAIMS and CLAIMS[self.claim].requires == "numlab.contract_bounds":
            lines.append("  " + Contract.parse(self.contract, kernels=self.kernels, library=self.library).header())
        where = (f"trial {self.worst_trial}" if self.worst_trial is not None
                 else f"the pooled outputs of all {self.trials} trials: a population claim, no single trial")
        lines.append(f"  worst margin {self.worst_margin:.4g} ({where}): "
                     + json.dumps(self.worst_detail, default=_json_default))
        if self.undecided:
            d = self.undecided_detail
            lines.append(f"  undecided (e.g. trial {d.get('trial')}): {d.get('reason')}")
            if self.responsible:
                lines.append("  responsible operators: " + "; ".join(self.responsible))
        if self.counterexample is not None:
            c = self.counterexample[0]
            lines.append(f"  counterexample: sizes {c.sizes}, {c.n_elements()} input elements, origin {c.origin}; "
                         f"shrink {self.shrink_stats}")
        if self.saved:
            lines.append(f"  saved: {self.saved}.npz / .json")
        return "\n".join(lines)


def _task(payload: dict) -> list:
    """One executor task: evaluate trials [lo, hi) (top level: picklable).
    Per trial ``(trial, kind, (verdict, margin, detail, undecided), fingerprint)``."""
    claim = get_claim(payload["claim"])
    model = payload["model"]
    graph = model if isinstance(model, Graph) else get_model(model, payload["sizes"], payload.get("path", ()))
    out = []
    for t in range(payload["lo"], payload["hi"]):
        kind = payload["kinds"][t % len(payload["kinds"])]
        case = make_case(payload["model"], sizes=payload["sizes"], fmt=payload["fmt"],
                         fusion=payload["fusion"], kind=kind, seed=payload["seed"], trial=t, graph=graph,
                         kernels=payload.get("kernels"), library=payload.get("library"),
                         contract=payload.get("contract"))
        runs = Runs(case, graph=graph)
        if claim.scope == "population":
            out.append((t, kind, claim.case_fn(runs), runs.run("fused").fingerprint))
        else:
            r = claim.evaluate(runs)
            fp = runs.run("fused").fingerprint if any(k[0] == "fused" for k in runs._res) else None
            out.append((t, kind, (r.verdict, r.margin, r.detail, r.undecided), fp))
    return out


def _submit_all(executor, payloads: list, progress: bool, desc: str, fn=None) -> list:
    """Run ``fn`` (default :func:`_task`) on each payload on ``executor``
    (None: in process); results in payload order."""
    return sweep(_task if fn is None else fn, payloads, executor=executor, progress=progress, desc=desc)


def _key(margin: float) -> float:
    """Margin for ranking cases: NaN (nothing decided) ranks lowest."""
    return -math.inf if math.isnan(margin) else margin


def check(claim, model, *, inputs=None, observed=None, fmt="fp16", sizes=None, fusion=None,
          trials: int = 100, search: str = "random", seed: int = 0, executor=None, save: str | None = None,
          options: SearchOptions | None = None, progress: bool = False, shrink_cex: bool = True,
          force: bool = False, kernels=None, library=None, contract=None) -> CheckReport:
    """Check ``claim`` on ``model``, on random inputs or on given data.

    ``model`` is a zoo model, a claims model (:data:`EXTRA_MODELS
    <numlab.claims.catalogue.EXTRA_MODELS>`), ``"module:function"``, a
    :class:`numlab.graph.Graph`, or a traceable Python function (traced by
    :func:`numlab.graph.trace` with the shapes of ``inputs``, which it then
    needs).  ``fmt`` is the storage format S (default fp16).  ``fusion`` is a
    fusion spec or a :class:`numlab.fusion.FusionOptions` (coerced by
    ``FusionOptions.parse``; None: ``"autofuse"``): the stated plan.
    ``kernels`` is the fused side's kernel spec (the code generator; None:
    ``"codegen"``) and ``library`` eager's library kernel spec (also called
    by fused plans for the blocks they do not generate; None:
    ``"handwritten"``), each a :class:`numlab.kernels.KernelSpec` or a spec
    string (``KernelSpec.parse``, e.g. ``"codegen:mma=H100/fp8_e4m3/fp32"``
    puts the fused matmuls on a matrix unit).  Every run a claim makes
    (eager, fused, emulated casts, the trace enclosure) takes them; cases and
    saved counterexamples keep their canonical specs.  ``contract`` (a
    contract string such as ``"triton_cuda"``, a Contract, or None: derived
    from the kernels) is the contract the bound claims hold the outputs to.

    **Random trials** (``inputs`` None): ``options.trials`` zoo-generated
    cases run as executor tasks of ``options.chunk`` trials (per-trial seeds
    from :func:`numlab.claims.cases.trial_seed`; identical results with any
    executor; each task carries :func:`~numlab.claims.catalogue.model_path`,
    so workers that did not start with the caller's ``sys.path`` import the
    same module).  The adversarial search and the shrinker run in this
    process (sequential hill climbing).

    **Given data** (``inputs`` given): the claim is checked on exactly those
    cases, no search.  ``inputs`` is a dict name -> array, a ``.npz`` file, a
    directory of ``NAME.npy`` files, or a list of those (one case each; a
    population claim pools them).  ``observed`` (optional) holds a real
    kernel's outputs on those inputs, in the same forms (or a loaded dump,
    :func:`numlab.compare.layouts.load_any`, or one array for a graph with
    one output; one per case): they take the place of
    numlab's fused run, while eager and the fp64 reference come from numlab
    (:mod:`numlab.claims.observed` checks names, shapes and dtypes).  Claims
    that need more of the kernel than its outputs (``Claim.on_observed``:
    bound_no_worse, fp32_inside, the determinism claims,
    emulated_casts_match_eager) are undecided there, with the reason
    "needs a model of the fused kernel: ...".  A violating case is saved as
    given (with the observed outputs; shrunk only without ``observed``, as
    other inputs have no observed outputs).

    When violated, the worst case is saved under ``save`` (a directory; None:
    not saved; an existing different file is never overwritten unless
    ``force``).  ``options`` (a :class:`SearchOptions`), when given,
    replaces ``trials`` and ``search``.  The verdict is "fails" when a case
    violates the claim, else "undecided" when a case rests on an infinite,
    NaN, unknown or empty result, else "holds".
    """
    claim = get_claim(claim)
    opts = options if options is not None else SearchOptions(trials=trials, search=search)
    S = get_format(fmt, "fmt")
    spec = fusion_spec(fusion)
    ks = {"kernels": kernel_spec(kernels, "kernels", DEFAULT_KERNELS),
          "library": kernel_spec(library, "library", DEFAULT_LIBRARY), "contract": contract_spec(contract)}
    if inputs is not None:
        return _check_given(claim, model, inputs, observed, S, sizes, spec, opts, save, shrink_cex, force, ks)
    if observed is not None:
        raise ValueError("observed outputs need the inputs they were computed on: pass inputs= too")
    if not isinstance(model, (str, Graph)):
        model = resolve_graph(model)  # a function without inputs: raises, naming what to give
    if isinstance(model, Graph) and sizes:
        raise ValueError(f"sizes={sizes!r}: a Graph has fixed shapes; sizes apply to a model name only")
    sizes = {} if isinstance(model, Graph) else model_sizes(model, sizes)
    label = model_label(model)
    payloads = [{"claim": claim.name if claim.name in CLAIMS and CLAIMS[claim.name] is claim else claim,
                 "model": model, "path": model_path(model), "sizes": sizes, "fmt": S.name, "fusion": spec,
                 "seed": seed, **ks,
                 "kinds": tuple(opts.kinds), "lo": lo, "hi": min(lo + opts.chunk, opts.trials)}
                for lo in range(0, opts.trials, opts.chunk)]
    results = [r for chunk in _submit_all(executor, payloads, progress, f"check {claim.name}") for r in chunk]
    fps = sorted({r[3] for r in results if r[3] is not None})
    if claim.scope == "population":
        res = claim.fn([r[2] for r in results])
        return CheckReport(claim.name, label, S.name, res.verdict, opts.trials, int(res.fails),
                           res.margin, res.detail, population=res.stats, fingerprints=fps, search=opts.search,
                           fusion=spec, undecided=0 if not res.undecided else 1,
                           undecided_detail=dict(res.undecided), **ks)
    rep = _report(claim, label, S.name, spec, results, fps, opts, ks)
    viol = [r for r in results if r[2][0] == "fails"]
    cex = None
    if viol:
        t = viol[int(np.argmax([r[2][1] for r in viol]))]
        cex = make_case(model, sizes=sizes, fmt=S.name, fusion=spec, kind=t[1], seed=seed, trial=t[0], **ks)
    elif opts.search == "adversarial" and claim.searchable:
        cex = _adversarial(claim, model, sizes, S, spec, seed, results, opts, rep, progress, ks)
    if cex is not None:
        _keep_counterexample(claim, cex, rep, opts, save, shrink_cex, force)
    return rep


def _listed(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _check_given(claim, model, inputs, observed, S, sizes, spec, opts, save, shrink_cex, force,
                 ks) -> CheckReport:
    """:func:`check` on given inputs (and observed outputs): one case each."""
    if opts.search != "random":
        raise ValueError(f"search={opts.search!r}: the adversarial search mutates inputs; with given inputs "
                         "the check runs exactly those cases (observed outputs exist for them only)")
    ins = _listed(inputs)
    obs = None if observed is None else _listed(observed)
    if not ins:
        raise ValueError("inputs=[] holds no case; give a dict name -> array, a .npz file or a directory")
    if obs is not None and len(obs) != len(ins):
        raise ValueError(f"observed holds {len(obs)} set(s) of outputs for {len(ins)} set(s) of inputs; give "
                         "one per case, in the same order")
    many = len(ins) > 1
    arrays = [read_arrays(src, f"inputs[{i}]" if many else "inputs") for i, src in enumerate(ins)]
    graph = resolve_graph(model, arrays[0], sizes)
    named = isinstance(model, str)
    sizes = model_sizes(model, sizes) if named else {}
    cases = []
    for i, arrs in enumerate(arrays):
        xs = given_inputs(graph, arrs, f"inputs[{i}]" if many else "inputs", S)
        o = None if obs is None else observed_outputs(graph, obs[i], S, f"observed[{i}]" if many else "observed")
        cases.append(Case(model_label(model), sizes, S.name, spec, xs, kind="given", seed=0, trial=i,
                          origin="observed" if o is not None else "given",
                          source=None if named else graph, observed=o, **ks))
    search = "observed" if obs is not None else "given"
    if claim.scope == "population":
        res = claim.fn([claim.case_fn(Runs(c, graph=graph)) for c in cases])
        return CheckReport(claim.name, model_label(model), S.name, res.verdict, len(cases), int(res.fails),
                           res.margin, res.detail, population=res.stats, search=search, fusion=spec,
                           undecided=0 if not res.undecided else 1, undecided_detail=dict(res.undecided), **ks)
    results = [evaluate(claim, c, graph=graph) for c in cases]
    viol = [i for i, r in enumerate(results) if r.fails]
    und = [i for i, r in enumerate(results) if r.verdict == "undecided"]
    wi = int(np.argmax([_key(r.margin) for r in results]))
    verdict = "fails" if viol else ("undecided" if und else "holds")
    fps = sorted({r.fingerprints["fused"] for r in results if "fused" in r.fingerprints})
    rep = CheckReport(claim.name, model_label(model), S.name, verdict, len(cases), len(viol),
                      float(results[wi].margin), results[wi].detail, worst_trial=wi, fingerprints=fps,
                      search=search, fusion=spec, undecided=len(und),
                      undecided_detail={"trial": und[0], "kind": "given", **results[und[0]].undecided} if und else {},
                      **ks)
    if viol:
        i = viol[int(np.argmax([results[j].margin for j in viol]))]
        if obs is not None or not shrink_cex or not claim.searchable:
            # observed outputs belong to exactly these inputs: the case is kept as given
            rep.counterexample = (cases[i], results[i])
            if save:
                rep.saved = save_counterexample(claim, cases[i], results[i], save, extra={"search": search},
                                                force=force)
        else:
            _keep_counterexample(claim, cases[i], rep, opts, save, True, force)
    return rep


def _report(claim, model, fmt, spec, results, fps, opts, ks) -> CheckReport:
    """The report of the random trials (before any adversarial search)."""
    viol = [r for r in results if r[2][0] == "fails"]
    und = [r for r in results if r[2][0] == "undecided"]
    wi = int(np.argmax([_key(r[2][1]) for r in results]))
    worst = results[wi]
    verdict = "fails" if viol else ("undecided" if und else "holds")
    rep = CheckReport(claim.name, model, fmt, verdict, opts.trials, len(viol), float(worst[2][1]), worst[2][2],
                      worst_trial=worst[0], fingerprints=fps, search=opts.search, fusion=spec, undecided=len(und),
                      undecided_detail={"trial": und[0][0], "kind": und[0][1], **und[0][2][3]} if und else {},
                      **ks)
    if len(fps) > 1:  # the trials of one check must see one compiled plan
        rep.verdict = "fails"
        if claim.name == "compile_determinism":
            rep.worst_detail = {"fingerprints_differ_across_tasks": fps}
    return rep


def _keep_counterexample(claim, cex: Case, rep: CheckReport, opts, save, shrink_cex: bool, force: bool) -> None:
    """Shrink (searchable claims), attach and save a violating case."""
    rep.verdict = "fails"
    if claim.searchable:
        if shrink_cex:
            c2, r2, st = shrink(claim, cex, budget=opts.shrink_budget)
        else:
            c2, r2, st = cex, evaluate(claim, cex), {}
        rep.counterexample = (c2, r2)
        rep.shrink_stats = st
        if save:
            rep.saved = save_counterexample(claim, c2, r2, save, extra={"search": opts.search, "shrink": st},
                                            force=force)
    else:
        rep.counterexample = (cex, evaluate(claim, cex))
        if save:
            rep.saved = save_counterexample(claim, cex, rep.counterexample[1], save, force=force)


def _adversarial(claim, model, sizes, S, fusion, seed, results, opts, rep, progress, ks) -> Case | None:
    """Hill climbing from the 3 highest-margin random cases (module
    docstring); undecided candidates are not climbed into."""
    order = np.argsort([-_key(r[2][1]) for r in results], kind="stable")[:3]
    starts = [results[i] for i in order]
    graph = model if isinstance(model, Graph) else get_model(model, sizes)
    rng = np.random.default_rng([int(seed), zlib.crc32(b"adversarial")])
    bar = None
    if progress:
        bar = tqdm(total=opts.adversarial_steps, desc=f"adversarial {claim.name}", leave=False)
    best_overall = (-math.inf, None)
    per_start = max(1, opts.adversarial_steps // max(len(starts), 1))
    try:
        for t, kind, (_, margin, _, _), _ in starts:
            case = make_case(model, sizes=sizes, fmt=S.name, fusion=fusion, kind=kind, seed=seed, trial=t,
                             graph=graph, **ks)
            best = _key(margin)
            for _ in range(per_start):
                cand, _how = _mutate(case, graph, rng)
                r = claim.evaluate(Runs(cand, graph=graph))
                if bar:
                    bar.update(1)
                if r.fails:
                    rep.violations += 1
                    rep.worst_margin, rep.worst_detail = float(r.margin), r.detail
                    return cand
                m = -math.inf if r.verdict == "undecided" else _key(r.margin)
                if m >= best:
                    case, best = cand, m
            if best > best_overall[0]:
                best_overall = (best, case)
    finally:
        if bar:
            bar.close()
    if best_overall[0] > _key(rep.worst_margin):
        rep.worst_margin = float(best_overall[0])
    return None


# ---------------------------------------------------------------------------
# mutations (adversarial search)
# ---------------------------------------------------------------------------
def _scalars(graph) -> list:
    out = []
    for n in graph.nodes:
        for v in n.op_attrs.values():
            if isinstance(v, float) and v not in (0.0,) and math.isfinite(v):
                out.append(v)
    return out or [1.0]


def _mutate(case: Case, graph, rng: np.random.Generator) -> tuple[Case, str]:
    S = get_format(case.fmt)
    names = data_inputs(graph)
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



def sweep(fn, params: list, *, executor=None, progress: bool = False, desc: str = "sweep") -> list:
    """Map ``fn`` (a picklable top-level function) over ``params`` on
    ``executor`` (None: in process; any ``concurrent.futures.Executor`` or a
    ``dask.distributed.Client``, whose ``submit``/``result`` have the same
    shape).  Results come back in ``params`` order, so they do not depend on
    the executor."""
    bar = None
    if progress:
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
