"""Error metrics between a reference and a computed tensor.

The functions live in three modules of this package: ``_errors`` (elementwise
and aggregate metrics, the msprobe/msit columns one at a time), ``_summaries``
(:class:`CompareAccumulator`, :func:`compare_columns`, :func:`error_stats`) and
``_inductor`` (:func:`inductor_check`); import them from ``numlab.metrics``.

Every function takes ``(ref, x)``: ``ref`` the reference (usually the fp64
reference run, or the "golden"/"bench" dump of msit/msprobe) and ``x`` the
tensor under test.  Inputs may be float16/32/64, bfloat16 or fp8 arrays
(ml_dtypes) or nested lists; they are widened **exactly** to float64 before
any arithmetic, and the shapes must be equal (no broadcasting).

NaN and infinity policy (the same everywhere, never a silent drop)
-------------------------------------------------------------------
An element pair is

* **finite** when both values are finite: its errors are the usual ones;
* a **non-finite match** when both are NaN, or both are the same infinity:
  its absolute, relative and ULP errors are 0 (the values agree), and it is
  counted in ``nonfinite_match``;
* a **non-finite mismatch** otherwise (NaN against a number, an infinity
  against a finite value, +inf against -inf): its absolute, relative and ULP
  errors are ``inf``, and it is counted in ``nonfinite_mismatch``.

So the elementwise statistics (max, mean, percentiles, ULP shares) always run
over *all* elements, and one mismatched NaN makes ``max`` and ``mean`` inf.
Aggregate metrics (cosine similarity, KL divergence, Euclidean distances,
RMSE) take ``nonfinite=``:

* ``"propagate"`` (default): any NaN/inf in either tensor gives NaN;
* ``"zero_matching"``: msprobe's rule (``handle_inf_nan`` in msprobe's
  ``npy_compare.py``): when the NaN masks and the inf masks of both tensors
  are identical, those positions are set to 0 in both and the metric is
  computed; when they differ the metric is NaN.

Percentiles are nearest-rank (``numpy.percentile(method="inverted_cdf")``):
``P_q`` is the smallest error ``e`` such that at least ``q`` percent of the
elements have error ``<= e``.  It is always one of the observed errors, so
it is exact, needs no interpolation and is well defined with infinities.

Sources of the tool-specific formulas
-------------------------------------
* msit (``ait``/``msit`` ``compare``, ``cmp_algorithm.py``): cosine
  similarity; max/mean relative error ``|x/ref - 1|`` where
  ``|ref| > eps``, else 0; max/mean absolute error with the same mask (here
  ``eps = eps(float64)``, evaluated exactly; msit itself computes in float32
  and masks with float32's eps 1.19e-7: :mod:`numlab.compare.flavors`); KL divergence ``KL(softmax(ref) || softmax(x))`` along the last axis
  summed over rows and clamped at 0 (``F.kl_div(F.log_softmax(my),
  F.softmax(golden), reduction="sum")``); relative Euclidean distance
  ``sqrt(sum((x - ref)**2) / sum(ref**2))``, 0 when ``||ref|| <= eps``.
* msprobe (``msprobe/core/compare/npy_compare.py``): relative error
  ``|(x - ref) / ref|`` after adding ``eps`` to both where ``ref == 0``
  (here ``eps(float64)`` in float64; 8.3.3 adds it in the input dtype, where
  fp16 rounds it away, 26.2.0 adds float32's eps in float32:
  :mod:`numlab.compare.flavors`); the one-thousandth / five-thousandths ratios are the shares of
  elements with relative error strictly below 0.001 / 0.005; "accuracy
  reached" is ``No`` when ``cos < 0.99 and max_abs_err > 0.001`` or when
  ``cos < 0.9 or max_abs_err > 1``, else ``Yes``
  (``CompareConst.COS_THRESHOLD = 0.99``, ``MAX_ABS_ERR_THRESHOLD = 0.001``,
  ``COS_MAX_THRESHOLD = 0.9``, ``MAX_ABS_ERR_MAX_THRESHOLD = 1``).
* All msit/msprobe columns at once, streamed: :class:`CompareAccumulator`
  (fed chunks, O(chunk) memory; numlab.compare streams memory-mapped dumps
  through it) and its one-shot form :func:`compare_columns`.  Its
  elementwise formulas are the private kernels the one-shot functions above
  call (``_msit_rel``, ``_msit_abs``, ``_msprobe_rel``), so each formula
  exists once; msprobe's accuracy rule is :func:`msprobe_accuracy_reached`
  with the thresholds as parameters.
* PyTorch Inductor's acceptance rule: :func:`inductor_check`, a transcription
  of ``torch._dynamo.utils.same`` and ``rmse`` in torch 2.13.0
  (``torch/_dynamo/utils.py``).
"""

from __future__ import annotations

from ._errors import (
    MSPROBE_THRESHOLDS,
    NONFINITE_MODES,
    abs_error,
    as_f64,
    bitwise_equal,
    bitwise_equal_share,
    cosine_similarity,
    error_ratio,
    euclidean,
    kl_divergence,
    msit_absolute_error,
    msit_relative_error,
    msprobe_accuracy_reached,
    msprobe_relative_error,
    nonfinite_masks,
    ordinal,
    percentile,
    ref_ulp,
    rel_error,
    relative_euclidean,
    rmse,
    ulp_distance,
    ulp_error,
    ulp_shares,
)
from ._inductor import (
    InductorResult,
    inductor_check,
    inductor_multiplier,
)
from ._summaries import (
    CompareAccumulator,
    compare_columns,
    error_stats,
)

__all__ = [
    "NONFINITE_MODES",
    "as_f64",
    "nonfinite_masks",
    "abs_error",
    "rel_error",
    "ref_ulp",
    "ulp_error",
    "ordinal",
    "ulp_distance",
    "ulp_shares",
    "bitwise_equal",
    "bitwise_equal_share",
    "percentile",
    "cosine_similarity",
    "kl_divergence",
    "relative_euclidean",
    "euclidean",
    "rmse",
    "msprobe_relative_error",
    "error_ratio",
    "msprobe_accuracy_reached",
    "msit_relative_error",
    "msit_absolute_error",
    "MSPROBE_THRESHOLDS",
    "CompareAccumulator",
    "compare_columns",
    "InductorResult",
    "inductor_multiplier",
    "inductor_check",
    "error_stats",
]
