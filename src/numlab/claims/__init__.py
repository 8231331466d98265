"""Claims about fused vs eager numerics, checked by search, with minimal
counterexamples.

A :class:`Claim` is a statement over runs of a model: eager, fused and the
fp64 reference on the same S-valued inputs (``docs/design.md``, section
"Execution modes").  The package is split along its seams:

* :mod:`~numlab.claims.catalogue` -- :class:`Claim`, :class:`CaseResult`,
  the built-in claims (:data:`CLAIMS`) and the models they run on;
* :mod:`~numlab.claims.cases` -- :class:`Case`, lazily computed runs,
  :func:`make_case`, :func:`evaluate`;
* :mod:`~numlab.claims.search` -- :func:`check` (random trials on any
  executor, adversarial search), :class:`CheckReport`, :func:`sweep`;
* :mod:`~numlab.claims.shrink` -- :func:`shrink` a violating case to a
  minimal one;
* :mod:`~numlab.claims.store` -- save, load and :func:`reproduce`
  counterexamples bit for bit;
* :mod:`~numlab.claims.plan` -- the autofusion precision test plan
  (:func:`run_plan`; its figures are drawn by :func:`numlab.plots.plan_figures`);
* :mod:`~numlab.claims.observed` -- a real kernel's outputs in place of
  numlab's fused run: ``check(claim, graph_or_function, inputs=...,
  observed=...)`` (:func:`resolve_graph`, :func:`given_inputs`,
  :func:`observed_outputs`).

Checking your own kernel
------------------------
``check("no_worse_tensor", fn, inputs={"x": x, ...}, observed={"y": y})``
traces ``fn`` (or takes a Graph, or a model name) with the shapes of the
inputs, runs numlab's eager and fp64 reference on them, and puts the
observed outputs where numlab's fused run would be.  Every claim about
output values runs on them: no worse than eager (per element, tensor,
population), error_within_bound (the observed errors against the contract
bound of the stated plan, ``fusion=``: rigorous for every implementation of
the contract, :func:`numlab.bounds.contract_bound`), bound_no_worse (the
plan's contract bounds), inductor_rule, msprobe_accuracy,
data_movement_bitexact.  Claims that need more of the kernel than one set of
its outputs (fp32_inside, compile_determinism, execution_determinism,
emulated_casts_match_eager, trace_enclosure) are
undecided there with the reason "needs a model of the fused kernel: ..."
(:attr:`Claim.on_observed`).  A violating case is saved with the real data
(inputs, observed, eager, reference) and :func:`reproduce` re-evaluates it.

Every evaluation returns a *margin* in comparable units (ULPs of S at the
reference scale, or a count): ``margin > 0`` means violated; the adversarial
search maximises it.  Verdicts are "holds", "fails" or "undecided": a
decision that rests on an infinite, NaN, unknown or empty result (an
infinite contract bound, infinite errors on both sides, no elements) is
undecided, never "holds", and names the operators responsible
(:attr:`CheckReport.exit_code`: 0 holds, 1 fails, 2 undecided;
``docs/design.md``, section "Verdicts").

Built-in claims (:data:`CLAIMS`) cover every statement of the autofusion
precision note: pure data movement is bit-exact; fused blocks compute in
fp32; fused is no worse than eager (per element, per tensor, over a
population, and for the error bound); compile and execution determinism;
Inductor's acceptance rule; and the rigorous claim that computed errors stay
within the contract bound (``trace_enclosure`` is numlab's self-check of its
own trace, which no other kernel is held to).

Fusion configurations are fusion specs or :class:`numlab.fusion.FusionOptions`
objects, coerced by ``FusionOptions.parse``; a case keeps the canonical spec.
Kernels likewise: ``kernels=`` (the fused side's kernels, default
``codegen``) and ``library=`` (eager's library kernels, which fused plans
also call; default ``handwritten``) of :func:`check` and :func:`make_case`
are kernel specs or :class:`numlab.kernels.KernelSpec` objects, coerced by
``KernelSpec.parse``; a case, a report and a saved counterexample keep the
canonical specs, and every run a claim makes (and the contract it derives) uses
them -- e.g. ``kernels="codegen:mma=H100/fp8_e4m3/fp32",
library="handwritten:mma=H100/fp8_e4m3/fp32"`` puts every matmul on a
matrix unit (``numlab mma sweep``'s claims table).
"""

from __future__ import annotations

from .cases import Case, Runs, evaluate, make_case, trial_seed
from .catalogue import (
    CLAIMS,
    EXTRA_MODELS,
    NEEDS_KERNEL_MODEL,
    VERDICTS,
    CaseResult,
    Claim,
    KernelModelNeeded,
    all_models,
    get_claim,
    get_model,
    model_path,
    model_sizes,
)
from .observed import given_inputs, observed_outputs, read_arrays, resolve_graph
from .plan import PLAN_CHAINS, PLAN_FUSIONS, plan_c1, plan_c2, plan_c3, run_plan
from .search import EXIT_CODES, SEARCHES, CheckReport, SearchOptions, check, sweep
from .shrink import shrink
from .store import load_counterexample, reproduce, save_counterexample, sha256_arrays

__all__ = [
    "CaseResult",
    "Case",
    "Claim",
    "CLAIMS",
    "EXTRA_MODELS",
    "all_models",
    "VERDICTS",
    "EXIT_CODES",
    "SEARCHES",
    "get_claim",
    "get_model",
    "model_path",
    "model_sizes",
    "make_case",
    "evaluate",
    "check",
    "CheckReport",
    "SearchOptions",
    "Runs",
    "shrink",
    "save_counterexample",
    "load_counterexample",
    "reproduce",
    "sha256_arrays",
    "sweep",
    "trial_seed",
    "run_plan",
    "plan_c1",
    "plan_c2",
    "plan_c3",
    "PLAN_CHAINS",
    "PLAN_FUSIONS",
    "KernelModelNeeded",
    "NEEDS_KERNEL_MODEL",
    "resolve_graph",
    "read_arrays",
    "given_inputs",
    "observed_outputs",
]
