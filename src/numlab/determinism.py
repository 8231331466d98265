"""Determinism checks: the same compile inputs give the same kernel, and the
same kernel on the same inputs gives the same bits.

Two layers (``docs/design.md``, section "Determinism"; the autofusion
design note's section 3.3):

* **compile determinism** -- the compile fingerprint (sha256 of the canonical
  graph, storage format, mode, kernel specs, fusion options; see
  :func:`numlab.execute.fingerprint`) and the fusion plan itself are the same
  in every process.  Broken by anything that leaks process state into
  compilation: iteration over a ``set``/``dict`` of strings (order depends on
  ``PYTHONHASHSEED``), object addresses in a canonical form, timestamps.
* **execution determinism** -- the output bits are the same in every run.
  Broken by orders that follow the hardware schedule: atomic adds into global
  memory (the accumulation order is the order cores finish), and cross-core
  races (a core reads a region before another core's write lands; see
  :mod:`numlab.races`).

:func:`check_determinism` compiles and runs a model (a zoo model or
``"module:function"``, see :func:`numlab.zoo.model_factory`) in ``runs`` separate
Python processes, each with its own ``PYTHONHASHSEED``, and compares
fingerprints, plans and output bits.  :func:`determinism_plan` lists every
option that can break either layer and whether it is active for the given
settings.  ``numlab check determinism MODEL ...`` (:mod:`numlab.cli.check`)
calls :func:`check_determinism`.  ``kernels=`` and ``fusion=`` take spec
strings or objects (:meth:`numlab.kernels.KernelSpec.parse`,
:meth:`numlab.fusion.FusionOptions.parse`); the configuration holds their
canonical spec strings, which every worker process parses back.

The ``"atomic"`` reduction order models atomic adds: a
:class:`numlab.kernels.Shuffled` order whose seed is the run's schedule seed
(``seed=``), or, when no seed is given, fresh OS entropy in each process --
the way real atomics pick a different order from run to run.  The drawn seed
is reported, so a nondeterministic run can be replayed bit for bit with
``seed=<drawn>``.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import execute, zoo
from . import kernels as K
from ._digest import sha256_hex
from ._repr import Compact
from .formats import get_format
from .fusion import FusionOptions
from .graph import Graph
from .kernels import KernelSpec, parse_order
from .kernels.spec import mode_specs
from .metrics import ulp_distance

__all__ = [
    "Hazard",
    "determinism_plan",
    "RunRecord",
    "DeterminismReport",
    "run_once",
    "check_determinism",
    "INJECTIONS",
]



# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Hazard:
    """One option that can break determinism.

    ``layer`` is "compile" or "execution"; ``active`` says whether it breaks
    determinism with the settings given to :func:`determinism_plan`;
    ``why`` the mechanism; ``remedy`` how to get determinism back.
    """

    option: str
    layer: str
    active: bool
    why: str
    remedy: str

    def __str__(self) -> str:
        flag = "ACTIVE" if self.active else "ok    "
        return f"[{flag}] {self.layer:<9} {self.option}: {self.why} Remedy: {self.remedy}"


def _order_name(order) -> str | None:
    if order is None:
        return None
    return order if isinstance(order, str) else str(order)


def determinism_plan(*, order=None, seed=None, kernels=None, mode: str = "fused") -> list[Hazard]:
    """Every option that can break determinism, and whether it is active.

    Parameters
    ----------
    order : str or None
        Reduction-order override (``"atomic"``, ``"shuffled(3)"``, ``"pairwise"``,
        ...; None keeps the spec's order).
    seed : int or None
        Schedule seed of the run.
    kernels : KernelSpec, str or None
        The spec (or a kernel spec string, :meth:`KernelSpec.parse`);
        inspected for stochastic rounding and split-K.
    mode : str
        Execution mode; ``reference`` has no reductions orders to break.
    """
    o = _order_name(order)
    spec = None if kernels is None else KernelSpec.parse(kernels, arg="kernels")
    rounding = {getattr(spec, f, "rne") for f in ("scalar_rounding", "vector_rounding")} if spec else set()
    split_k = getattr(spec, "matmul_algo", None) == "split_k"
    spec_order = _order_name(getattr(spec, "reduce_order", None)) if spec else None
    ref = mode == "reference"
    atomic = o == "atomic" and not ref
    hz = [
        Hazard("reduce order 'atomic' without a seed", "execution", atomic and seed is None,
               "atomic adds into global memory accumulate in the order cores finish; floating-point "
               "addition is not associative, so each run can round differently (numlab draws the order "
               "from OS entropy in each process to model it).",
               "a fixed order (pairwise, blocked, lanes), a deterministic two-phase reduction "
               "(per-core partials to workspace, one core combines them in a fixed order), or "
               "seed=<the drawn seed> to replay one schedule."),
        Hazard("reduce order 'atomic' with a seed", "execution", False,
               "a seeded schedule replays the same accumulation order, so the bits repeat "
               "(real hardware offers no such seed: this is the replay of one run).",
               "-"),
        Hazard("shuffled(seed) order in the kernel spec", "execution", False,
               "the permutation comes from numpy.random.default_rng(seed): deterministic for a fixed "
               "seed; it changes the bits only when the seed changes"
               + (f" (spec uses {spec_order})." if spec_order and "shuffled" in spec_order else "."),
               "-"),
        Hazard("stochastic rounding", "execution", False,
               "needs a random stream; numlab refuses an unseeded one (round_to raises ValueError "
               "without rng=), so a run is either seeded or fails"
               + (" -- the spec uses it." if "stochastic" in rounding else "."),
               "pass seed= to the run."),
        Hazard("split-K matmul", "execution", False,
               "on hardware the K-slices are often combined with atomic adds (order = finish order); "
               "numlab combines them in a fixed order, so it is deterministic here"
               + (" -- the spec uses it." if split_k else "."),
               "combine K-slices in a fixed order."),
        Hazard("cross-core race (missing SyncAll / flag)", "execution", False,
               "a consumer core can read a global-memory region before the producer core's write "
               "lands and sees the previous contents (zeros, garbage, the previous case's values); "
               "the graph executors run one core and cannot race -- the multi-core simulator "
               "numlab.races reproduces it (`numlab race fused_linear_online_max_sum`).",
               "a barrier on every cross-core dependency; numlab.races.detect_races lists the "
               "unordered pairs and the barrier that orders them."),
        Hazard("PYTHONHASHSEED-dependent iteration during compilation", "compile", False,
               "iterating a set or dict of strings gives a per-process order (hash randomisation); "
               "a planner that does so emits different blocks in different processes. Checked by "
               "running every process with a different PYTHONHASHSEED and comparing plans.",
               "sort before iterating; canonical JSON (sorted keys, exact float hex) for fingerprints."),
        Hazard("object addresses / timestamps in compile inputs", "compile", False,
               "a repr with a memory address or a build time in a cache key makes every process's "
               "fingerprint differ; numlab.execute.canonical refuses objects without a canonical form.",
               "canonical forms only."),
        Hazard("BLAS thread count", "execution", False,
               "numpy's BLAS may split a matmul over threads; numlab calls it per K tile, and the "
               "workers run with OPENBLAS/OMP/MKL_NUM_THREADS pinned (1 unless set by the caller), "
               "so it is held fixed.",
               "pin the thread count."),
    ]
    return hz


# --------------------------------------------------------------------------- one run


def _default_kernels(mode: str) -> str:
    """The kernel spec a mode uses when none is given (for the report)."""
    spec = mode_specs(mode)[0]
    return "-" if spec is None else spec.name


def _digest(a: np.ndarray) -> str:
    return sha256_hex(a, lambda c: f"{c.dtype.str}|{c.shape}|")


def _plan_text(plan) -> str:
    if plan is None:
        return ""
    blocks = getattr(plan, "blocks", None)
    if blocks is None:
        return str(plan)
    return "\n".join(f"{getattr(b, 'name', '')}|{getattr(b, 'kind', '')}|{list(getattr(b, 'members', []))}|"
                     f"{getattr(b, 'tile', '')}" for b in blocks)


@dataclass
class RunRecord:
    """What one process saw: compile fingerprint, plan digest, per-output
    digests, the schedule seed used by an atomic order (drawn or given), the
    process's ``PYTHONHASHSEED`` and pid."""

    fingerprint: str
    plan_digest: str
    outputs: dict
    order_seed: int | None
    hashseed: str | None
    pid: int
    arrays_path: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


INJECTIONS = (None, "set_order")


def _config(model, fmt, mode, *, sizes=None, kernels=None, fusion=None, order=None, seed=None,
            input_kind="normal", input_seed=0, inject=None) -> dict:
    factory = zoo.model_factory(model, "model")  # a zoo model or "module:function"
    params = sorted(inspect.signature(factory).parameters)
    unknown = sorted(set(sizes or {}) - set(params))
    if unknown:
        raise ValueError(f"sizes={dict(sizes)!r}: {unknown} not parameters of model {model!r}; "
                         f"valid sizes: {params}")
    try:  # build it here so that a bad size fails with its name, not inside a worker
        graph = factory(**dict(sizes or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"sizes={dict(sizes or {})!r} are not valid for model {model!r} "
                         f"(parameters {params}): {exc}") from None
    if not isinstance(graph, Graph):
        raise TypeError(f"model {model!r} returned {type(graph).__name__}, not a numlab Graph "
                        "(build it with numlab.graph.trace)")
    if input_kind not in zoo.INPUT_KINDS:
        raise ValueError(f"input_kind={input_kind!r} is not valid; choose one of {zoo.INPUT_KINDS}")
    if isinstance(input_seed, bool) or not isinstance(input_seed, (int, np.integer)) or input_seed < 0:
        raise ValueError(f"input_seed={input_seed!r} must be a non-negative int")
    if mode not in execute.MODES:
        raise ValueError(f"mode={mode!r} is not an execution mode; valid modes: {list(execute.MODES)}")
    get_format(fmt, "fmt")
    kernels = None if kernels is None else KernelSpec.parse(kernels, arg="kernels").spec
    if mode in ("eager", "reference") and fusion is not None:
        raise ValueError(f"fusion= applies to modes 'fused' and 'emulated_casts', not {mode!r}")
    # fused modes: the one default ("autofuse") when not given, so the report names it
    fusion = FusionOptions.parse(fusion, arg="fusion").spec if mode in ("fused", "emulated_casts") else None
    if order is not None and order != "atomic":
        parse_order(order)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed={seed!r} must be None or a non-negative int")
    if inject not in INJECTIONS:
        raise ValueError(f"inject={inject!r} is not valid; choose one of {INJECTIONS}")
    return dict(model=model, fmt=str(getattr(fmt, "name", fmt)), mode=mode, sizes=dict(sizes or {}),
                kernels=kernels, fusion=fusion, order=order, seed=seed, input_kind=input_kind,
                input_seed=int(input_seed), inject=inject)


def run_once(cfg: dict, *, save: str | None = None) -> RunRecord:
    """Compile and run one configuration in this process (what each worker
    process of :func:`check_determinism` does)."""
    graph = zoo.get_model(cfg["model"], **cfg["sizes"])
    inputs = zoo.make_inputs(graph, kind=cfg["input_kind"], seed=cfg["input_seed"])
    mode = cfg["mode"]
    spec = None if cfg["kernels"] is None else KernelSpec.parse(cfg["kernels"])
    fusion = None if cfg["fusion"] is None else FusionOptions.parse(cfg["fusion"])
    order, seed = cfg["order"], cfg["seed"]
    order_seed = None
    library = None
    fused = mode in ("fused", "emulated_casts")
    if order is not None and mode != "reference":
        if spec is None:
            spec = mode_specs(mode)[0]
        if order == "atomic":
            order_seed = int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**31)
            o = K.Shuffled(order_seed)
        else:
            o = order
        spec_run = replace(spec, reduce_order=o)
        if fused:  # library calls inside the fused graph (blocks the code generator does not take) too
            library = replace(mode_specs(mode)[1], reduce_order=o)
    else:
        spec_run = spec
    kw = {} if mode == "reference" else {"kernels": spec_run}
    if library is not None:
        kw["library"] = library
    if fusion is not None:
        kw["fusion"] = fusion
    # an atomic order is replayed by its schedule seed: the run gets it as ``seed`` (execute
    # reseeds each node's Shuffled order from it), so seed=<drawn> reproduces an unseeded run
    run_seed = order_seed if order_seed is not None else seed
    res = execute.run(graph, inputs, mode=mode, fmt=cfg["fmt"], seed=run_seed, **kw)
    fp = res.fingerprint
    if order == "atomic" and mode != "reference":
        # the compiled kernel says "atomic adds"; the order itself is a run-time event
        declared = execute.fingerprint(res.source, mode=res.mode, fmt=res.fmt,
                                       kernels=replace(res.kernels, reduce_order=None),
                                       library=None if res.library is None else replace(res.library, reduce_order=None),
                                       fusion=res.fusion, align=res.align)
        fp = hashlib.sha256(f"{declared}|reduce_order=atomic".encode()).hexdigest()
    outs = {k: _digest(np.asarray(v)) for k, v in res.outputs.items()}
    if save:
        np.savez(save, **{k: np.asarray(v) for k, v in res.outputs.items()})
    plan_text = _plan_text(res.plan)
    if cfg.get("inject") == "set_order":
        # a planted compile step that walks a set of node names: its order follows the
        # process's string hashing (PYTHONHASHSEED), as a careless planner's would
        names = {n.name for n in graph.nodes} | {f"{n.name}.tile" for n in graph.nodes}
        walk = "|".join(names)
        plan_text += "\n" + walk
        fp = hashlib.sha256(f"{fp}|{walk}".encode()).hexdigest()
    plan_digest = hashlib.sha256(plan_text.encode()).hexdigest()
    return RunRecord(fingerprint=fp, plan_digest=plan_digest, outputs=outs, order_seed=order_seed,
                     hashseed=os.environ.get("PYTHONHASHSEED"), pid=os.getpid(),
                     arrays_path=save)


# --------------------------------------------------------------------------- many processes


@dataclass(repr=False)
class DeterminismReport(Compact):
    """Result of :func:`check_determinism`.

    ``compile_deterministic``: every process had the same fingerprint and the
    same plan.  ``execution_deterministic``: every output had the same bits
    in every process.  ``diffs[output]`` = (elements differing from run 0 in
    any run, max |difference|, max distance in ULPs of the storage format).
    """

    config: dict
    records: list
    plan: list
    diffs: dict = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.records)

    @property
    def compile_deterministic(self) -> bool:
        return len({r.fingerprint for r in self.records}) == 1 and len({r.plan_digest for r in self.records}) == 1

    @property
    def execution_deterministic(self) -> bool:
        return all(len({r.outputs[o] for r in self.records}) == 1 for o in self.records[0].outputs)

    @property
    def active_hazards(self) -> list:
        """The options of :attr:`plan` in effect with these settings (each
        can break determinism whatever the runs showed)."""
        return [h for h in self.plan if h.active]

    @property
    def ok(self) -> bool:
        """Deterministic: same fingerprint, plan and output bits in every
        process, and no option in effect that can break it (an unseeded
        atomic order can round to the same bits in a few runs by chance)."""
        return self.compile_deterministic and self.execution_deterministic and not self.active_hazards

    def __str__(self) -> str:
        c = self.config
        lines = [f"determinism check: {c['model']} {c['mode']} {c['fmt']}, {self.runs} processes "
                 f"(PYTHONHASHSEED {', '.join(str(r.hashseed) for r in self.records)})",
                 f"  options: kernels={c['kernels'] or _default_kernels(c['mode'])} "
                 f"fusion={c['fusion'] or '-'} "
                 f"order={c['order'] or 'spec'} seed={c['seed']} inputs={c['input_kind']}/{c['input_seed']}"
                 + (f" INJECTED={c['inject']}" if c.get("inject") else ""),
                 f"  compile determinism:   {'yes' if self.compile_deterministic else 'NO'} "
                 f"({len({r.fingerprint for r in self.records})} fingerprint(s), "
                 f"{len({r.plan_digest for r in self.records})} plan(s); fingerprint "
                 f"{self.records[0].fingerprint[:16]}...)",
                 f"  execution determinism: {self._execution_line()}"]
        for o in self.records[0].outputs:
            n = len({r.outputs[o] for r in self.records})
            line = f"    {o}: {n} distinct bit pattern(s)"
            if o in self.diffs and n > 1:
                nd, mx, mu = self.diffs[o]
                line += f"; {nd} element(s) differ, max |diff| {mx:.3g}, max {mu:g} ULP"
            lines.append(line)
        seeds = [r.order_seed for r in self.records if r.order_seed is not None]
        if seeds:
            lines.append(f"  atomic order seeds drawn: {seeds} (replay one with --seed)")
        lines.append("  plan (options that can break determinism; ACTIVE: in effect with these settings):")
        lines += [f"    {h}" for h in self.plan]
        return "\n".join(lines)

    def _repr_facts(self):
        c = self.config
        differ = {o: d for o, d in self.diffs.items() if d and d[0]}
        rows = [("runs", f"{self.runs} processes"),
                ("compile", f"deterministic {self.compile_deterministic} "
                            f"({len({r.fingerprint for r in self.records})} fingerprint(s))"),
                ("execution", f"deterministic {self.execution_deterministic}"),
                ("outputs differing", ", ".join(f"{o}: {d[0]} elements, max {d[2]:g} ULP"
                                                for o, d in list(differ.items())[:6]) or "none"),
                ("active hazards", ", ".join(h.option for h in self.active_hazards) or "none"),
                ("options", f"kernels={c.get('kernels') or '-'} fusion={c.get('fusion') or '-'} "
                            f"order={c.get('order') or 'spec'} seed={c.get('seed')}")]
        return f"DeterminismReport: {c.get('model')} {c.get('mode')} {c.get('fmt')}: ok {self.ok}", rows

    def _execution_line(self) -> str:
        if not self.execution_deterministic:
            return "NO"
        ex = [h.option for h in self.active_hazards if h.layer == "execution"]
        if not ex:
            return "yes"
        return (f"NOT GUARANTEED: the same bits in these {self.runs} runs, but {'; '.join(ex)} is in "
                "effect (ACTIVE below): each run accumulated in a different order, and the sums happened "
                f"to round to the same {self.config['fmt']} outputs; more runs, other inputs or a wider "
                "storage format can differ")


def check_determinism(model: str, fmt="fp16", mode: str = "fused", runs: int = 3, *, sizes=None,
                      kernels=None, fusion=None, order=None, seed=None, input_kind: str = "normal",
                      input_seed: int = 0, inject=None, timeout: float = 300.0) -> DeterminismReport:
    """Compile and run ``model`` in ``runs`` separate processes and compare.

    Process ``i`` runs ``python -m numlab.determinism --worker`` with
    ``PYTHONHASHSEED=i`` (0 disables hash randomisation, 1.. are distinct
    randomised orders), builds the graph with :func:`numlab.zoo.get_model` (a
    zoo model or ``"module:function"``, imported from the caller's
    ``sys.path``: :func:`_worker_env`), the
    inputs with ``zoo.make_inputs(kind=input_kind, seed=input_seed)``, runs
    :func:`numlab.execute.run` and reports the fingerprint, a plan digest, a
    sha256 of every output's bytes, and saves the outputs for the diff.

    Parameters
    ----------
    model, fmt, mode, sizes
        What to run (``fmt``: the storage format S; ``sizes``: keyword
        arguments of the model factory).
    runs : int
        Number of processes (>= 2).
    kernels : KernelSpec, kernel spec string or None
        Kernel spec (:meth:`KernelSpec.parse`, e.g. ``"codegen"``,
        ``"handwritten:fma=true"``); None: the mode's default.
    fusion : FusionOptions, fusion spec string or None
        Fused modes only (:meth:`FusionOptions.parse`; None: ``"autofuse"``).
    order : str or None
        Reduction order for every reduction: ``"atomic"`` (see module
        docstring) or an order string of :func:`numlab.kernels.parse_order`.
    seed : int or None
        Schedule seed passed to the run (and to the atomic order).
    input_kind, input_seed
        Inputs: ``zoo.make_inputs(graph, kind=input_kind, seed=input_seed)``.
    inject : {None, "set_order"}
        Plant a known defect to see the check catch it: ``"set_order"`` adds
        a compile step that walks a Python set of node names (its order
        follows ``PYTHONHASHSEED``) and feeds it into the fingerprint and the
        plan -- compile determinism breaks, execution determinism does not.
    timeout : float
        Seconds for the whole batch of workers (default 300); on expiry every
        worker is killed and RuntimeError is raised.

    Workers run with stdin from ``/dev/null``, output to files, at most
    ``os.cpu_count()`` at a time and the BLAS thread counts pinned (see
    :func:`_run_workers`, :func:`_worker_env`), so a check is safe to run
    from a Jupyter kernel.

    Returns
    -------
    DeterminismReport
    """
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 2:
        raise ValueError(f"runs={runs!r} must be an int >= 2 (determinism compares processes)")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout={timeout!r} must be a number of seconds > 0")
    cfg = _config(model, fmt, mode, sizes=sizes, kernels=kernels, fusion=fusion, order=order, seed=seed,
                  input_kind=input_kind, input_seed=input_seed, inject=inject)
    with tempfile.TemporaryDirectory(prefix="numlab-det-") as tmp:
        jobs, saves = [], []
        for i in range(runs):
            saves.append(os.path.join(tmp, f"run{i}.npz"))
            cmd = [sys.executable, "-m", "numlab.determinism", "--worker", json.dumps(cfg), "--save", saves[-1]]
            jobs.append((cmd, _worker_env(i)))
        outs = _run_workers(jobs, timeout=timeout, workdir=tmp)
        records = []
        for i, so in enumerate(outs):
            lines = so.strip().splitlines()
            if not lines:
                raise RuntimeError(f"determinism worker {i} (PYTHONHASHSEED={i}) printed no record")
            records.append(RunRecord(**json.loads(lines[-1])))
        arrays = []
        for path in saves:
            with np.load(path) as z:
                arrays.append({k: z[k] for k in z.files})
    diffs = _diffs(arrays, cfg["fmt"])
    for r in records:
        r.arrays_path = None
    plan = determinism_plan(order=order, seed=seed, kernels=kernels, mode=mode)
    return DeterminismReport(config=cfg, records=records, plan=plan, diffs=diffs)


#: thread-count variables pinned to 1 in the workers unless the caller's environment sets them
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _import_path() -> str:
    """The caller's ``sys.path`` as absolute directories joined for
    ``PYTHONPATH`` (``""``, the current directory, made absolute): every
    worker imports numlab and a ``module:function`` model from where the
    caller did, even when the caller's path was set at run time (a notebook,
    a test's ``sys.path`` entry) rather than through ``PYTHONPATH``."""
    return os.pathsep.join(dict.fromkeys(os.path.abspath(p or os.curdir) for p in sys.path))


def _worker_env(i: int) -> dict:
    """Environment of worker ``i``: the caller's, with ``PYTHONHASHSEED=i``,
    ``PYTHONPATH`` = the caller's ``sys.path`` (:func:`_import_path`) and the
    BLAS thread counts pinned (1 unless already set), so every worker
    computes with the same thread count and a loaded machine is not
    oversubscribed by ``runs`` x ``cores`` spinning BLAS threads."""
    env = dict(os.environ, PYTHONHASHSEED=str(i), PYTHONPATH=_import_path())
    for var in BLAS_THREAD_VARS:
        env.setdefault(var, "1")
    return env


def _tail(path: str, n: int = 4000) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - n))
        return f.read().decode("utf-8", "replace").strip()


def _run_workers(jobs, *, timeout: float, workdir: str, parallel: int | None = None,
                 poll: float = 0.02) -> list[str]:
    """Run ``jobs`` (a list of ``(argv, env)``) as child processes; return
    each one's stdout text, in order.

    Safe inside a Jupyter kernel or any long-lived process:

    * ``stdin`` is ``/dev/null`` (a kernel's own stdin is a pipe nobody
      writes to: a child that read it would block forever) and
      ``close_fds=True``, so a child holds none of the parent's sockets or
      pipes;
    * stdout and stderr go to files in ``workdir``, not pipes: no pipe can
      fill up while the parent waits for another child, and nothing waits
      for an EOF that a grandchild could hold back;
    * at most ``parallel`` children run at a time (default: the CPU count);
    * ``timeout`` bounds the whole batch; on expiry, on a failing child, on
      an exception or a KeyboardInterrupt (a kernel interrupt) every child
      still running is killed and reaped before the error propagates.

    Raises RuntimeError naming the job, its exit code and the tail of its
    stderr when a child fails, or when the batch does not finish in time.
    """
    n = len(jobs)
    parallel = max(1, min(n, parallel or os.cpu_count() or 1))
    deadline = time.monotonic() + timeout
    running: dict = {}
    done: dict = {}
    pending = list(range(n))
    paths = [(os.path.join(workdir, f"worker{i}.out"), os.path.join(workdir, f"worker{i}.err")) for i in range(n)]
    try:
        while pending or running:
            while pending and len(running) < parallel:
                i = pending.pop(0)
                argv, env = jobs[i]
                with open(paths[i][0], "wb") as fo, open(paths[i][1], "wb") as fe:
                    running[i] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fo,
                                                  stderr=fe, close_fds=True)
            for i, p in list(running.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del running[i]
                if rc != 0:
                    raise RuntimeError(f"determinism worker {i} failed (exit {rc}; env PYTHONHASHSEED="
                                       f"{jobs[i][1].get('PYTHONHASHSEED')}):\n{_tail(paths[i][1])}")
                with open(paths[i][0], encoding="utf-8", errors="replace") as f:
                    done[i] = f.read()
            if running and time.monotonic() > deadline:
                raise RuntimeError(f"determinism workers timed out after {timeout:g} s "
                                   f"({len(done)} of {n} finished; the others were killed)")
            if running:
                time.sleep(poll)
    finally:
        for p in running.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    return [done[i] for i in range(n)]


def _diffs(arrays: list, fmt) -> dict:
    fmt = get_format(fmt)
    out = {}
    for o in arrays[0]:
        a0 = arrays[0][o].astype(np.float64)
        nd, mx, mu = 0, 0.0, 0.0
        diff_any = np.zeros(a0.shape, dtype=bool)
        for a in arrays[1:]:
            a = a[o].astype(np.float64)
            neq = (a.view(np.uint64) != a0.view(np.uint64)) if a.shape == a0.shape else np.ones(a0.shape, bool)
            diff_any |= neq
            if neq.any():
                with np.errstate(invalid="ignore"):
                    mx = max(mx, float(np.nanmax(np.abs(a - a0)[neq])))
                mu = max(mu, float(np.max(ulp_distance(a0[neq], a[neq], fmt))))
        nd = int(diff_any.sum())
        out[o] = (nd, mx, mu)
    return out


# --------------------------------------------------------------------------- worker entry point


def _worker_main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m numlab.determinism")
    ap.add_argument("--worker", required=True, help="JSON configuration")
    ap.add_argument("--save", default=None, help="save the outputs (.npz) here")
    a = ap.parse_args(argv)
    rec = run_once(json.loads(a.worker), save=a.save)
    print(json.dumps(rec.to_json()))
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    sys.exit(_worker_main())
