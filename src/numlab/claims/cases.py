"""Cases (model, sizes, storage format, fusion spec, inputs and, for a real
kernel, its observed outputs), their lazily computed runs, and the
evaluation of a claim on one case."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import zoo
from .._repr import Compact, mapping_summary
from ..contract import Contract
from ..execute import quiet, run
from ..formats import get_format
from ..graph import Graph
from ..kernels import KernelSpec
from ._fusion import fusion_options, fusion_spec
from ._kernels import DEFAULT_KERNELS, DEFAULT_LIBRARY, kernel_args, kernel_spec
from .catalogue import CaseResult, KernelModelNeeded, get_claim, get_model, model_sizes

__all__ = ["Case", "Runs", "KernelModelNeeded", "make_case", "evaluate", "trial_seed", "data_inputs",
           "contract_spec"]


def trial_seed(seed: int, trial: int) -> int:
    """Per-trial seed (independent of the executor and of the task split)."""
    return int(np.random.SeedSequence([int(seed), int(trial)]).generate_state(1)[0])


@dataclass(repr=False)
class Case(Compact):
    """One input configuration: model, sizes, storage format, fusion spec
    (the canonical ``FusionOptions.spec`` string) and the S-valued inputs
    (float64 arrays).

    ``source``: the graph itself when the model is not a registered name
    (a Graph or a traced function given to :func:`numlab.claims.check`;
    ``model`` is then a label and ``sizes`` empty).  ``observed``: output name
    -> array in S's container, a real kernel's outputs that take the place of
    numlab's fused run (None: numlab runs its model of the fused kernel).
    ``kernels``: canonical spec (``KernelSpec.spec``) of the fused side's
    kernels (the code generator; default ``"codegen"``); ``library``: that
    of eager's library kernels, which fused plans also call for the blocks
    they do not generate (default ``"handwritten"``).  ``contract``: the
    canonical contract spec (:attr:`numlab.contract.Contract.spec`) the bound
    claims hold the case to, or None for the contract derived from
    ``kernels`` and ``library``."""

    model: str
    sizes: dict
    fmt: str
    fusion: str
    inputs: dict
    kind: str = "normal"
    seed: int = 0
    trial: int = 0
    origin: str = "random"
    source: Graph | None = None
    observed: dict | None = None
    kernels: str = DEFAULT_KERNELS
    library: str = DEFAULT_LIBRARY
    contract: str | None = None

    def _repr_facts(self):
        rows = [("inputs", f"{self.n_elements()} elements: {mapping_summary(self.inputs)}"),
                ("observed", mapping_summary(self.observed) if self.observed is not None else None),
                ("origin", f"{self.origin}, kind {self.kind}, seed {self.seed}, trial {self.trial}"),
                ("fusion", self.fusion), ("kernels", f"fused {self.kernels}, eager's library {self.library}"),
                ("contract", self.contract), ("source", repr(self.source) if self.source is not None else None)]
        return f"Case: {self.model} sizes {self.sizes} ({self.fmt})", rows

    def graph(self):
        return self.source if self.source is not None else get_model(self.model, self.sizes)

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


class Runs:
    """Lazily computed runs of one case (each mode at most once).

    With observed outputs (``case.observed``), ``outputs("fused")`` are the
    observed arrays and ``run`` of a fused mode raises
    :class:`KernelModelNeeded`: numlab's model never stands in for the real
    kernel.

    Every run uses the case's kernel specs (:meth:`kernel_args`): eager the
    library (``case.library``), fused modes the code generator
    (``case.kernels``) with that library."""

    def __init__(self, case: Case, *, graph=None):
        self.case = case
        self.graph = graph if graph is not None else case.graph()
        self.S = get_format(case.fmt)
        self.fusion = fusion_options(case.fusion)
        self.observed = case.observed
        self.kernels = KernelSpec.parse(case.kernels, arg="kernels")
        self.library = KernelSpec.parse(case.library, arg="library")
        self._res: dict = {}

    def kernel_args(self, mode: str) -> dict:
        """The case's kernel specs as keyword arguments of
        :func:`numlab.execute.run` for ``mode`` (eager: ``kernels`` = the
        library; fused modes: ``kernels`` and ``library``; reference: none).
        Every run a claim makes, with or without running bounds, takes them."""
        return kernel_args(mode, self.kernels, self.library)

    def run(self, mode: str, **kw):
        if self.observed is not None and mode in ("fused", "emulated_casts"):
            raise KernelModelNeeded(f"a {mode} run"
                                    + (f" ({', '.join(f'{k}={v}' for k, v in kw.items())})" if kw else "")
                                    + "; only its observed outputs were given")
        key = (mode, tuple(sorted(kw.items())))
        if key not in self._res:
            fusion = self.fusion if mode in ("fused", "emulated_casts") else None
            with np.errstate(all="ignore"), quiet():  # the harness's runs: its knobs span modes
                self._res[key] = run(self.graph, self.case.inputs, mode=mode, fmt=self.S,
                                     fusion=fusion, **{**self.kernel_args(mode), **kw})
        return self._res[key]

    def outputs(self, mode: str) -> dict:
        if mode == "fused" and self.observed is not None:
            return dict(self.observed)
        return {k: np.asarray(v) for k, v in self.run(mode).outputs.items()}


def make_case(model, *, sizes=None, fmt="fp16", fusion=None, kind="normal",
              seed: int = 0, trial: int = 0, graph=None, kernels=None, library=None, contract=None) -> Case:
    """A case with zoo-generated inputs (``kind``) for trial ``trial``: the
    inputs depend only on (model, sizes, fmt, kind, seed, trial).  ``model``
    is a model name or a :class:`~numlab.graph.Graph` (kept as the case's
    ``source``, labelled by its name; no sizes).  ``fmt``
    is the storage format S (default fp16).
    ``fusion`` is a fusion spec or a FusionOptions (``FusionOptions.parse``;
    None: the default ``"autofuse"``); the case keeps its canonical spec.
    ``kernels`` (the fused side's kernels, default ``"codegen"``) and
    ``library`` (eager's library kernels, default ``"handwritten"``) are
    kernel specs or :class:`~numlab.kernels.KernelSpec` objects
    (``KernelSpec.parse``, e.g. ``"codegen:mma=H100/fp8_e4m3/fp32"``); the
    case keeps their canonical specs.  They do not change the inputs.
    ``contract``: a contract string or Contract for the bound claims (None:
    derived from the kernels; :func:`contract_spec`)."""
    S = get_format(fmt, "fmt")
    spec = fusion_spec(fusion)
    kspec = kernel_spec(kernels, "kernels", DEFAULT_KERNELS)
    lspec = kernel_spec(library, "library", DEFAULT_LIBRARY)
    source = None
    if isinstance(model, Graph):
        if sizes:
            raise ValueError(f"sizes={sizes!r}: a Graph has fixed shapes; sizes apply to a model name only")
        source, g, model, sizes = model, model, model.name, {}
    else:
        sizes = model_sizes(model, sizes)
        g = graph if graph is not None else get_model(model, sizes)
    inputs = zoo.make_inputs(g, kind=kind, seed=trial_seed(seed, trial), fmt=S)
    return Case(model, sizes, S.name, spec, inputs, kind, seed, trial, source=source, kernels=kspec,
                library=lspec, contract=contract_spec(contract))


def contract_spec(contract) -> str | None:
    """The canonical spec of a contract string or Contract (None stays None:
    the contract derived from a case's kernels)."""
    return None if contract is None else Contract.parse(contract).spec


def evaluate(claim, case: Case, graph=None) -> CaseResult:
    """Evaluate a per-case claim on one case (with the runs' outputs kept)."""
    claim = get_claim(claim)
    runs = Runs(case, graph=graph)
    r = claim.evaluate(runs)
    if not r.outputs:
        r.outputs = {m: runs.outputs(m) for m in ("eager", "fused", "reference")
                     if any(k[0] == m for k in runs._res)}
        if runs.observed is not None:  # the real kernel's side, saved under its own name
            r.outputs["observed"] = dict(runs.observed)
    r.fingerprints = {**{m: runs.run(m).fingerprint for m in ("eager", "fused")
                         if any(k[0] == m for k in runs._res)}, **r.fingerprints}
    return r


def data_inputs(graph) -> list:
    """The graph inputs that hold data (not index or mask inputs): what the
    mutations and the shrinker change."""
    return [k for k in graph.inputs if graph.role(k) not in ("index", "mask")]
