"""What causes a divergence between eager and fused, and the graph-mode
precision-compare workflow.

:func:`bisect_run` (``numlab bisect MODEL ...``) answers "which switch makes
the fused run diverge from eager" in three stages, each a sequence of fused
runs compared with :func:`numlab.compare.compare_dumps` against the eager run:

1. **Fusion kinds off, one at a time** -- the analogue of Ascend's
   ``fusion_switch_file``, with which the graph-mode accuracy guide of
   Ascend's TorchAir rules out operator fusion on a GE graph by switching
   fusion rules off (docs/design.md, "Compare and bisect"): for every enabled kind of the
   :class:`~numlab.fusion.FusionOptions`, the same run with that kind
   disabled; then composite decomposition off, then all fusion off.
2. **The four sources set to eager's choice, one at a time**
   (``align=("promotion",)``, ... of :func:`numlab.execute.run`).
3. **Delta debugging over node ranges** (Zeller's ddmin restricted to
   contiguous ranges of the topological order): a range is cut out as its own
   graph whose inputs are fed the *golden* (eager) values -- as PyTorch's
   accuracy minifier feeds a subgraph the recorded inputs -- and run eager and
   fused; the range is shrunk while it still diverges, then trimmed node by
   node at both ends to a 1-minimal culprit.

A run *diverges* when some row of the compare fails the thresholds
(:meth:`Thresholds.fails`; msprobe's accuracy rule by default).

:func:`precision_workflow` runs the workflow of Ascend TorchAir's
graph-mode accuracy-comparison guide (docs/design.md, "Compare and
bisect"): each operator alone first (its own graph,
eager and fused, against the fp64 reference), then the whole model eager
against fp64, then fused against eager by dump compare (first divergence),
then fusion rules switched off.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import fusion as F
from .._repr import Compact
from ..execute import SOURCES, quiet, run
from ..formats import get_format
from ..graph import Graph
from ..kernels import KernelSpec
from .compare import CompareReport, Thresholds, compare_dumps
from .dump import check_target, dump_run

__all__ = [
    "Trial",
    "BisectReport",
    "bisect_run",
    "range_graph",
    "range_diverges",
    "ddmin_range",
    "WorkflowReport",
    "precision_workflow",
]


# --------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------
@dataclass
class Trial:
    """One run tried by the bisection."""

    stage: str
    change: str
    diverges: bool
    n_failing: int
    first_divergence: str | None = None
    detail: str = ""

    def line(self) -> str:
        verdict = "DIVERGES" if self.diverges else "matches "
        fd = f" first divergence {self.first_divergence}" if self.first_divergence else ""
        return f"  [{self.stage:<7}] {self.change:<44} {verdict} ({self.n_failing} failing){fd}" + (
            f"  {self.detail}" if self.detail else "")


@dataclass(repr=False)
class BisectReport(Compact):
    """What :func:`bisect_run` tried and found."""

    model: str
    fmt: str
    baseline: CompareReport | None = None
    trials: list[Trial] = field(default_factory=list)
    fixing_kinds: list[str] = field(default_factory=list)
    fixing_sources: list[str] = field(default_factory=list)
    culprit_range: list[str] = field(default_factory=list)
    more_culprits: list[list[str]] = field(default_factory=list)
    range_tests: int = 0
    stages: tuple = ("fusion", "sources", "ranges")

    @property
    def diverges(self) -> bool:
        return self.baseline is not None and bool(self.baseline.failing)

    def text(self, trials: bool = True) -> str:
        """What was found; ``trials=False`` leaves out the list of runs tried
        (the CLI has already printed them one by one)."""
        lines = [f"bisect {self.model} (storage {self.fmt}): eager vs fused"]
        if self.baseline is None:
            return "\n".join(lines + ["  no baseline"])
        fd = self.baseline.first_divergence
        lines.append(
            f"baseline: {len(self.baseline.failing)} failing rows; first divergence "
            f"{fd['node'] if fd else 'none'}"
        )
        if not self.diverges:
            lines.append("no divergence under the thresholds: nothing to bisect")
            return "\n".join(lines)
        if trials:
            lines.append("tried:")
            lines.extend(t.line() for t in self.trials)
        lines.append("found:")
        if "fusion" in self.stages:
            lines.append("  fusion switches that remove the divergence: "
                         + (", ".join(self.fixing_kinds) or "none"))
        else:
            lines.append("  fusion switches: not tried (stage 'fusion' not run)")
        if "sources" in self.stages:
            lines.append("  sources whose eager choice removes it: "
                         + (", ".join(self.fixing_sources) or "none (or several together)"))
        else:
            lines.append("  sources: not tried (stage 'sources' not run)")
        if "ranges" not in self.stages:
            lines.append("  node ranges: not tried (stage 'ranges' not run)")
        elif self.culprit_range:
            lines.append(f"  smallest diverging node range ({len(self.culprit_range)} nodes, "
                         f"{self.range_tests} range runs): {', '.join(self.culprit_range)}")
            for c in self.more_culprits:
                lines.append(f"  another diverging range after it ({len(c)} nodes): {', '.join(c)}")
        else:
            lines.append("  no node range diverges on its own with golden inputs "
                         "(the divergence needs the accumulated error of several ranges)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_facts(self):
        fd = self.baseline.first_divergence if self.baseline is not None else None
        diverging = sum(t.diverges for t in self.trials)
        rows = [("baseline", "none" if self.baseline is None else
                 f"{len(self.baseline.failing)} failing rows, first divergence {fd['node'] if fd else 'none'}"),
                ("stages", ", ".join(self.stages)),
                ("trials", f"{len(self.trials)} runs, {diverging} diverging"),
                ("fixing kinds", _names(self.fixing_kinds) if "fusion" in self.stages else None),
                ("fixing sources", _names(self.fixing_sources) if "sources" in self.stages else None),
                ("culprit range", f"{len(self.culprit_range)} nodes ({self.range_tests} range runs): "
                                  + _names(self.culprit_range) if self.culprit_range else None),
                ("more culprits", f"{len(self.more_culprits)} range(s)" if self.more_culprits else None)]
        return f"BisectReport: {self.model} (storage {self.fmt}), diverges {self.diverges}", rows


def _names(names, limit: int = 8) -> str:
    """``a, b, c ... (N more)``: the first ``limit`` names."""
    out = ", ".join(str(n) for n in names[:limit]) or "none"
    return out + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _run(graph, inputs, mode, fmt, *, variant: bool = True, **kw):
    """One run; a ``variant`` (a fusion kind off, a source aligned, a
    subgraph) warns about no knob (:func:`numlab.execute.quiet`): a knob
    that changes nothing there is expected."""
    if not variant:
        return run(graph, inputs, mode=mode, fmt=fmt, **kw)
    with quiet():
        return run(graph, inputs, mode=mode, fmt=fmt, **kw)


def _fmt_arg(fmt, where: str):
    """The storage format S (``fmt=`` is required)."""
    if fmt is None:
        raise TypeError(f"{where}: fmt= (the storage format S, e.g. 'fp16') is required")
    return get_format(fmt, "fmt")


def _kernel_args(kernels, library):
    """(kernels, library) as KernelSpecs (spec strings parsed by
    :meth:`KernelSpec.parse`, objects kept); None stays None (executor
    defaults)."""
    return tuple(None if k is None else KernelSpec.parse(k, arg=arg)
                 for k, arg in ((kernels, "kernels"), (library, "library")))


def _verdict(stage: str, change: str, rep: CompareReport, detail: str = "") -> Trial:
    fd = rep.first_divergence
    return Trial(stage, change, bool(rep.failing), len(rep.failing), fd["node"] if fd else None, detail)


def _f64_inputs(values: Mapping, graph) -> dict:
    """Golden values as float64 arrays (exact widening of S values); index
    inputs keep their integer dtype."""
    out = {}
    for k in graph.inputs:
        v = np.asarray(values[k])
        out[k] = v if v.dtype.kind in "iub" else v.astype(np.float64)
    return out


def range_graph(graph, lo: int, hi: int):
    """The nodes ``graph.nodes[lo:hi]`` as their own graph.

    Its inputs are every value the range reads from outside (graph inputs or
    earlier nodes); its outputs are the range's nodes read after the range or
    outputs of ``graph`` (the last node when there are none), so values
    internal to the range may still be fused.
    """
    n = len(graph.nodes)
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo < hi <= n):
        raise ValueError(f"range [{lo}, {hi}) is not valid for a graph of {n} nodes")
    nodes = graph.nodes[lo:hi]
    names = {nd.name for nd in nodes}
    ins: dict = {}
    for nd in nodes:
        for i in nd.inputs:
            if i not in names and i not in ins:
                ins[i] = graph.shape(i)
    later = set()
    for nd in graph.nodes[hi:]:
        later.update(nd.inputs)
    outs = [nd.name for nd in nodes if nd.name in later or nd.name in graph.outputs]
    if not outs:
        outs = [nodes[-1].name]
    roles = {k: graph.roles[k] for k in ins if k in getattr(graph, "roles", {})}
    return Graph(ins, nodes, outs, name=f"{graph.name}[{lo}:{hi}]", roles=roles)


def range_diverges(graph, golden_values: Mapping, lo: int, hi: int, *, fmt=None,
                   fused_kw: Mapping, eager_kw: Mapping | None = None,
                   thresholds: Thresholds | None = None):
    """Run ``graph.nodes[lo:hi]`` alone, eager and fused, on golden inputs
    in the storage format ``fmt``; return ``(diverges, report)``."""
    S = _fmt_arg(fmt, "range_diverges")
    sub = range_graph(graph, lo, hi)
    xs = _f64_inputs(golden_values, sub)
    e = _run(sub, xs, "eager", S, **dict(eager_kw or {}))
    f = _run(sub, xs, "fused", S, **dict(fused_kw))
    rep = compare_dumps(e, f, thresholds=thresholds)
    return bool(rep.failing), rep


def ddmin_range(test, n: int, log=None) -> tuple[int, int] | None:
    """Smallest contiguous ``[lo, hi)`` of ``range(n)`` with ``test(lo, hi)``
    true, by delta debugging on contiguous ranges.

    ``test(0, n)`` must hold (else None).  The range is split into ``k``
    parts (k = 2 at first); a part that passes the test becomes the range
    (k back to 2); else the range minus its first or last part is tried
    (k - 1); else ``k`` doubles until it reaches the length.  Finally single
    nodes are trimmed from both ends while the test still holds, so the result
    is 1-minimal at its ends.  Results are cached; ``log(lo, hi, result)`` is
    called for every new test.
    """
    cache: dict = {}

    def t(lo, hi):
        if (lo, hi) not in cache:
            cache[(lo, hi)] = bool(test(lo, hi))
            if log is not None:
                log(lo, hi, cache[(lo, hi)])
        return cache[(lo, hi)]

    if n <= 0 or not t(0, n):
        return None
    lo, hi, k = 0, n, 2
    while hi - lo > 1:
        size = hi - lo
        k = min(k, size)
        step = math.ceil(size / k)
        parts = [(a, min(hi, a + step)) for a in range(lo, hi, step)]
        hit = next((p for p in parts if p != (lo, hi) and t(*p)), None)
        if hit is not None:
            lo, hi, k = hit[0], hit[1], 2
            continue
        comps = [(parts[1][0], hi), (lo, parts[-1][0])] if len(parts) > 1 else []
        hit = next((c for c in comps if c[0] < c[1] and c != (lo, hi) and t(*c)), None)
        if hit is not None:
            lo, hi, k = hit[0], hit[1], max(k - 1, 2)
            continue
        if k >= size:
            break
        k = min(size, 2 * k)
    while hi - lo > 1 and t(lo + 1, hi):
        lo += 1
    while hi - lo > 1 and t(lo, hi - 1):
        hi -= 1
    return lo, hi


# --------------------------------------------------------------------------
# bisection
# --------------------------------------------------------------------------
def bisect_run(
    graph,
    inputs: Mapping,
    *,
    fmt=None,
    fusion=None,
    kernels=None,
    library=None,
    thresholds: Thresholds | None = None,
    seed: int | None = None,
    model: str | None = None,
    stages: tuple = ("fusion", "sources", "ranges"),
    log=print,
    max_culprits: int = 4,
) -> BisectReport:
    """Find what makes the fused run of ``graph`` diverge from eager.

    Parameters
    ----------
    graph : numlab.graph.Graph
    inputs : dict
        Graph inputs (rounded to ``fmt`` by the executors).
    fmt : Format or str
        The storage format S.
    fusion : FusionOptions or str, optional
        The fused configuration under suspicion (default ``FusionOptions()``;
        a fusion spec string is parsed by :meth:`FusionOptions.parse`).
    kernels, library : KernelSpec or str, optional
        KernelSpecs or kernel spec strings (:meth:`KernelSpec.parse`).
        Fused code-generator kernels and the hand-written library (eager's
        kernels and eager's choice for the sources); executor defaults.
    thresholds : Thresholds, optional
        When a compare row fails (default msprobe's rule).
    seed : int, optional
        Schedule seed of nondeterministic orders.
    stages : tuple of str
        Any of ``"fusion"``, ``"sources"``, ``"ranges"``, run in this order.
    log : callable or None
        Called with one line per trial (default :func:`print`).
    max_culprits : int
        Stage 3 stops after this many culprit ranges: after the first
        (1-minimal) one, ddmin runs again on the nodes after it while they
        still diverge with golden inputs (``BisectReport.more_culprits``).

    Returns
    -------
    BisectReport
    """
    S = _fmt_arg(fmt, "bisect_run")
    valid = ("fusion", "sources", "ranges")
    bad = [s for s in stages if s not in valid]
    if bad:
        raise ValueError(f"stages={tuple(stages)!r} has unknown stages {bad}; valid: {valid}")
    if isinstance(max_culprits, bool) or not isinstance(max_culprits, int) or max_culprits < 1:
        raise ValueError(f"max_culprits={max_culprits!r} is not valid; it must be an int >= 1")
    opts = F.FusionOptions.parse(fusion, arg="fusion")
    kernels, library = _kernel_args(kernels, library)
    th = thresholds or Thresholds()
    say = log or (lambda *a, **k: None)
    eager_kw = {"seed": seed}
    if library is not None:
        eager_kw["kernels"] = library
    base_kw = {"seed": seed, "fusion": opts}
    if kernels is not None:
        base_kw["kernels"] = kernels
    if library is not None:
        base_kw["library"] = library

    eager = _run(graph, inputs, "eager", S, variant=False, **eager_kw)
    fused = _run(graph, inputs, "fused", S, variant=False, **base_kw)
    baseline = compare_dumps(eager, fused, thresholds=th)
    rep = BisectReport(model or getattr(graph, "name", "graph"), S.name, baseline,
                       stages=tuple(s for s in valid if s in stages))
    say(f"bisect {rep.model} ({S.name}): fusion {opts.describe()}")
    fd = baseline.first_divergence
    say(f"baseline eager vs fused: {len(baseline.failing)} failing rows, first divergence "
        f"{fd['node'] if fd else 'none'}")
    if not rep.diverges:
        say("no divergence under the thresholds: nothing to bisect")
        return rep

    b = _Bisection(graph, inputs, S, eager, base_kw, eager_kw, th, rep, say)
    if "fusion" in stages:
        b.fusion_stage(opts)
    if "sources" in stages:
        b.sources_stage()
    if "ranges" in stages:
        b.ranges_stage(max_culprits)
    say("found: " + "; ".join(
        [f"fusion switches {', '.join(rep.fixing_kinds) or 'none'}"] * ("fusion" in stages)
        + [f"sources {', '.join(rep.fixing_sources) or 'none'}"] * ("sources" in stages)
        + [f"culprit range {', '.join(rep.culprit_range) or 'none'}"] * ("ranges" in stages)
        + [f"another culprit {', '.join(c)}" for c in rep.more_culprits]))
    return rep


class _Bisection:
    """The trials of one :func:`bisect_run`: each stage runs fused variants
    against the same eager run and records the verdicts in ``rep``."""

    def __init__(self, graph, inputs, S, eager, base_kw, eager_kw, th, rep, say):
        self.graph, self.inputs, self.S, self.eager = graph, inputs, S, eager
        self.base_kw, self.eager_kw, self.th, self.rep, self.say = base_kw, eager_kw, th, rep, say

    def trial(self, stage, change, **kw):
        fused = _run(self.graph, self.inputs, "fused", self.S, **{**self.base_kw, **kw})
        tr = _verdict(stage, change, compare_dumps(self.eager, fused, thresholds=self.th))
        self.rep.trials.append(tr)
        self.say(tr.line())
        return tr

    def fusion_stage(self, opts) -> None:
        """Stage 1: each enabled fusion kind off, then decomposition, then all fusion."""
        rep = self.rep
        self.say("stage 1: fusion kinds switched off one at a time")
        for kind in [k for k in F.FUSION_KINDS if k in opts.enabled]:
            if not self.trial("fusion", f"--autofuse_disable_pass={kind}",
                              fusion=opts.disable(kind)).diverges:
                rep.fixing_kinds.append(kind)
        if opts.decompose:
            if not self.trial("fusion", "decompose=off (composites kept whole)",
                              fusion=dataclasses.replace(opts, decompose=False)).diverges:
                rep.fixing_kinds.append("decompose")
        if not self.trial("fusion", "all fusion off (--enable_autofuse=false)",
                          fusion=dataclasses.replace(opts, enable_autofuse=False)).diverges:
            rep.fixing_kinds.append("all")

    def sources_stage(self) -> None:
        """Stage 2: each source of difference set to eager's choice."""
        self.say("stage 2: each source of difference set to eager's choice")
        for src in SOURCES:
            if not self.trial("source", f"align={src}", align=(src,)).diverges:
                self.rep.fixing_sources.append(src)

    def ranges_stage(self, max_culprits: int) -> None:
        """Stage 3: ddmin over node ranges fed golden inputs, then more
        culprits after the first one."""
        rep, say, graph = self.rep, self.say, self.graph
        say("stage 3: delta debugging over node ranges (golden inputs fed to each range)")
        golden = dict(self.eager.values)
        golden.update({k: np.asarray(v) for k, v in self.inputs.items()})
        nodes = graph.nodes
        fkw = dict(self.base_kw)
        last: dict = {}

        def test(lo, hi):
            d, r = range_diverges(graph, golden, lo, hi, fmt=self.S, fused_kw=fkw,
                                  eager_kw=self.eager_kw, thresholds=self.th)
            last["report"] = r
            return d

        def log_range(lo, hi, d):
            rep.range_tests += 1
            names = f"{nodes[lo].name}..{nodes[hi - 1].name}" if hi - lo > 1 else nodes[lo].name
            tr = _verdict("range", f"nodes[{lo}:{hi}] {names}"[:44], last["report"])
            rep.trials.append(tr)
            say(tr.line())

        n = len(nodes)
        found = ddmin_range(test, n, log=log_range)
        if found is None:
            return
        rep.culprit_range = [nd.name for nd in nodes[found[0]:found[1]]]
        # ddmin returns one minimal culprit; look for more in the nodes after it
        hi = found[1]
        while hi < n and len(rep.more_culprits) < max_culprits - 1:
            off = hi
            more = ddmin_range(lambda a, b, off=off: test(off + a, off + b), n - off,
                               log=lambda a, b, d, off=off: log_range(off + a, off + b, d))
            if more is None:
                break
            rep.more_culprits.append([nd.name for nd in nodes[off + more[0]:off + more[1]]])
            hi = off + more[1]


# --------------------------------------------------------------------------
# the graph-mode precision workflow (docs/design.md, "Compare and bisect")
# --------------------------------------------------------------------------
@dataclass(repr=False)
class WorkflowReport(Compact):
    """Result of :func:`precision_workflow`, one entry per step."""

    model: str
    fmt: str
    single_ops: list[dict] = field(default_factory=list)
    eager_vs_ref: CompareReport | None = None
    fused_vs_eager: CompareReport | None = None
    dumps: dict = field(default_factory=dict)
    bisect: BisectReport | None = None
    conclusion: str = ""

    @property
    def bad_single_ops(self) -> list[dict]:
        return [s for s in self.single_ops if s["fails"]]

    def text(self) -> str:
        L = [f"graph-mode precision workflow: {self.model} (storage {self.fmt})"]
        L.append("step 1  each operator alone (its own graph, fp64 reference as golden):")
        for s in self.single_ops:
            L.append(f"   {s['node']:<22} {s['op']:<12} eager max ulp {s['eager_max_ulp']:>9.3g}  "
                     f"fused max ulp {s['fused_max_ulp']:>9.3g}  {'FAILS' if s['fails'] else 'ok'}")
        if self.eager_vs_ref is not None:
            fd = self.eager_vs_ref.first_divergence
            L.append(f"step 2  eager vs fp64: {len(self.eager_vs_ref.failing)} failing rows"
                     + (f", first divergence {fd['node']}" if fd else ""))
        if self.fused_vs_eager is not None:
            fd = self.fused_vs_eager.first_divergence
            L.append(f"step 3  fused vs eager by dump compare: {len(self.fused_vs_eager.failing)} "
                     "failing rows" + (f", first divergence {fd['node']} (op {fd['op']}"
                                       + (f", block {fd['block']}" if fd['block'] else "") + ")"
                                       if fd else ""))
            for k, v in self.dumps.items():
                L.append(f"        {k} dump: {v}")
        if self.bisect is not None:
            L.append("step 4  fusion rules switched off: "
                     + (", ".join(self.bisect.fixing_kinds) or "none") + " remove the divergence")
        L.append("conclusion: " + self.conclusion)
        return "\n".join(L)

    def __str__(self) -> str:
        return self.text()

    def _repr_facts(self):
        def failing(rep):
            if rep is None:
                return None
            fd = rep.first_divergence
            return f"{len(rep.failing)} failing rows, first divergence {fd['node'] if fd else 'none'}"

        bad = [s["node"] for s in self.bad_single_ops]
        rows = [("single ops", f"{len(self.single_ops)} operators, {len(bad)} fail alone"
                 + (": " + _names(bad) if bad else "")),
                ("eager vs fp64", failing(self.eager_vs_ref)), ("fused vs eager", failing(self.fused_vs_eager)),
                ("dumps", _names([f"{k} {v}" for k, v in self.dumps.items()], 2) if self.dumps else None),
                ("fusion rules off", None if self.bisect is None else
                 _names(self.bisect.fixing_kinds) + " remove the divergence"),
                ("conclusion", self.conclusion)]
        return f"WorkflowReport: {self.model} (storage {self.fmt})", rows


def precision_workflow(
    graph,
    inputs: Mapping,
    *,
    fmt=None,
    fusion=None,
    kernels=None,
    library=None,
    thresholds: Thresholds | None = None,
    dump_dir=None,
    force: bool = False,
    model: str | None = None,
    log=None,
) -> WorkflowReport:
    """The graph-mode precision workflow (TorchAir's accuracy guide), runnable.

    1. **Each operator alone** -- every node as its own one-node graph fed the
       golden (eager) values of its inputs, run eager and fused and compared
       with the operator's fp64 reference ("先在图外将单算子单独成图编译运行,
       确保单算子精度正常").
    2. **Eager against fp64** -- the whole model, the reference run as golden.
    3. **Fused against eager by dump compare** -- both runs dumped (to
       ``dump_dir/eager`` and ``dump_dir/fused``, or a temporary directory)
       and compared with :func:`compare_dumps`: first divergence.
    4. **Fusion rules off** -- stage 1 of :func:`bisect_run`.

    ``fmt`` is the storage format S.  ``fusion``, ``kernels`` and ``library`` are
    objects or spec strings, as in :func:`bisect_run`.  The thresholds (default msprobe's)
    decide every "fails".
    """
    S = _fmt_arg(fmt, "precision_workflow")
    fusion = None if fusion is None else F.FusionOptions.parse(fusion, arg="fusion")
    kernels, library = _kernel_args(kernels, library)
    th = thresholds or Thresholds()
    say = log or (lambda *a, **k: None)
    lib_kw = {"kernels": library} if library is not None else {}
    fkw = {"fusion": fusion} if fusion is not None else {}
    if kernels is not None:
        fkw["kernels"] = kernels
    if library is not None:
        fkw["library"] = library
    rep = WorkflowReport(model or getattr(graph, "name", "graph"), S.name)
    if dump_dir is not None:  # refuse existing dumps before the runs, not after them
        for sub in ("eager", "fused"):
            check_target(Path(dump_dir) / sub, force)

    eager = _run(graph, inputs, "eager", S, variant=False, **lib_kw)
    golden = dict(eager.values)
    golden.update({k: np.asarray(v) for k, v in inputs.items()})

    say("step 1: each operator alone")
    rep.single_ops = _single_ops(graph, golden, S, lib_kw, fkw, th)

    # 2. eager vs fp64
    say("step 2: eager vs fp64 reference")
    ref = _run(graph, inputs, "reference", S)
    rep.eager_vs_ref = compare_dumps(ref, eager, fmt=S, thresholds=th)

    # 3. fused vs eager through dumps on disk
    say("step 3: fused vs eager by dump compare")
    fused = _run(graph, inputs, "fused", S, variant=False, **fkw)
    rep.fused_vs_eager, paths = _compare_on_disk(eager, fused, dump_dir, force, rep.model, th)
    if dump_dir is not None:
        rep.dumps = paths

    # 4. fusion rules off
    if rep.fused_vs_eager.failing:
        say("step 4: fusion rules switched off one at a time")
        rep.bisect = bisect_run(graph, inputs, fmt=S, fusion=fusion, kernels=kernels, library=library,
                                thresholds=th, model=rep.model, stages=("fusion",), log=log)

    rep.conclusion = _conclusion(rep)
    say(rep.conclusion)
    return rep


def _single_ops(graph, golden: dict, S, lib_kw: dict, fkw: dict, th: Thresholds) -> list[dict]:
    """Workflow step 1: every node alone, fed golden inputs, eager and fused
    against its fp64 reference."""
    out = []
    for i, nd in enumerate(graph.nodes):
        sub = range_graph(graph, i, i + 1)
        xs = _f64_inputs(golden, sub)
        ref = _run(sub, xs, "reference", S)
        e = _run(sub, xs, "eager", S, **lib_kw)
        f = _run(sub, xs, "fused", S, **fkw)
        re_ = compare_dumps(ref, e, fmt=S, thresholds=th).row(nd.name)
        rf_ = compare_dumps(ref, f, fmt=S, thresholds=th).row(nd.name)
        out.append({
            "node": nd.name, "op": nd.op,
            "eager_max_ulp": _num(re_["max_ulp_error"]), "fused_max_ulp": _num(rf_["max_ulp_error"]),
            "eager_cosine": _num(re_["cosine_similarity"]), "fused_cosine": _num(rf_["cosine_similarity"]),
            "fails": bool(th.fails(re_) or th.fails(rf_)),
        })
    return out


def _compare_on_disk(eager, fused, dump_dir, force: bool, model: str, th: Thresholds):
    """Workflow step 3: both runs dumped (to ``dump_dir`` or a temporary
    directory) and compared from disk; returns (report, dump paths)."""
    tmp = None
    if dump_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="numlab-workflow-")
        base = Path(tmp.name)
    else:
        base = Path(dump_dir)
    try:
        pe = dump_run(eager, base / "eager", force=force, model=model)
        pf = dump_run(fused, base / "fused", force=force, model=model)
        return compare_dumps(pe, pf, thresholds=th), {"eager": str(pe), "fused": str(pf)}
    finally:
        if tmp is not None:
            tmp.cleanup()


def _conclusion(rep: WorkflowReport) -> str:
    """The workflow's one-line conclusion, in the guide's order of suspects."""
    bad_ops = rep.bad_single_ops
    fd = rep.fused_vs_eager.first_divergence
    if bad_ops:
        return ("single-operator precision is already off for "
                + ", ".join(f"{s['node']} ({s['op']})" for s in bad_ops)
                + ": fix the operator before looking at fusion")
    if rep.eager_vs_ref.failing:
        return "eager itself is off against fp64: a model-level (eager) precision problem"
    if fd is None:
        return "fused matches eager under the thresholds: no graph-mode precision problem"
    kinds = rep.bisect.fixing_kinds if rep.bisect else []
    return (f"error introduced by the fused graph at {fd['node']} (op {fd['op']}"
            + (f", fused block {fd['block']}" if fd["block"] else "") + ")"
            + (f"; switching off {', '.join(kinds)} removes it" if kinds else
               "; no single fusion switch removes it"))


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")
