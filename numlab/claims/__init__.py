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
  (:func:`run_plan`; its figures are drawn by :func:`numlab.plots.plan_figures`).

Every evaluation returns a *margin* in comparable units (ULPs of S at the
reference scale, or a count): ``margin > 0`` means violated; the adversarial
search maximises it.  Verdicts are "holds", "fails" or "undecided": a
decision that rests on an infinite, NaN, unknown or empty result (an
infinite running bound, infinite errors on both sides, no elements) is
undecided, never "holds", and names the operators responsible
(:attr:`CheckReport.exit_code`: 0 holds, 1 fails, 2 undecided;
``docs/design.md``, section "Verdicts").

Built-in claims (:data:`CLAIMS`) cover every statement of the autofusion
precision note: pure data movement is bit-exact; fused blocks compute in
fp32; fused is no worse than eager (per element, per tensor, over a
population, and for the error bound); compile and execution determinism;
Inductor's acceptance rule; and the rigorous claim that computed errors stay
within the running bound.

Fusion configurations are fusion specs or :class:`numlab.fusion.FusionOptions`
objects, coerced by ``FusionOptions.parse``; a case keeps the canonical spec.
"""

from __future__ import annotations

from .cases import Case, Runs, evaluate, make_case, trial_seed
from .catalogue import (
    CLAIMS,
    EXTRA_MODELS,
    VERDICTS,
    CaseResult,
    Claim,
    all_models,
    get_claim,
    get_model,
    model_path,
    model_sizes,
)
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
]
