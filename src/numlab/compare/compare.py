"""msit/msprobe-style dump compare: one row per node, first divergence.

Two dumps -- a *golden* one (eager, or the fp64 reference) and *mine* (fused,
or the run under suspicion) -- are matched by node name and compared array by
array.  A fused block's output is matched to the **last member** of the block
(msit does this for fused graph operators, whose dump carries the name of the
last fused operator); the other members have no data of their own in the
fused run and are listed as ``inside_block``.

Columns and formulas
--------------------
These are numlab's **exact** columns (the default flavour): the tools'
formulas evaluated exactly in float64, not the tools' own arithmetic.  The
tools' own columns (msit's float32 and its float32 eps mask, msprobe's
working dtypes, rounding and NaN verdicts) are the flavours of
:mod:`numlab.compare.flavors` (``--flavor``); docs/compare.md lists every
difference.

msit's formulas (``msit llm compare``; ``components/utils/cmp_algorithm.py``
and ``msit_llm/compare/cmp_utils.py``), with ``g`` golden, ``m`` mine, both
flattened, and ``eps = 2**-52`` -- numlab's mask, which hides only exact zeros
and values below float64's epsilon.  **msit itself masks with float32's eps
2**-23 = 1.19e-7** (``torch.finfo(torch.float).eps``, and
``np.finfo(np.float32).eps`` in its numpy variant), so on 1e-9-scale data
msit reports relative error 0 where these columns report the real error:

* ``cosine_similarity`` = ``g.m / (|g| |m|)``; 1.0 when both are all zero,
  NaN (with a reason) when one is.
* ``max_relative_error`` / ``mean_relative_error``: ``|m/g - 1|`` where
  ``|g| > eps``, else 0; max / mean over **all** elements
  (:func:`numlab.metrics.msit_relative_error`).
* ``max_absolute_error`` / ``mean_absolute_error``: ``|m - g|`` where
  ``|g| > eps``, else 0 -- msit masks the absolute error too
  (:func:`numlab.metrics.msit_absolute_error`).
* ``kl_divergence`` = ``KL(softmax(g) || softmax(m))`` over the flattened
  tensor (``F.kl_div(log_softmax(m), softmax(g), reduction="sum")``),
  clamped at 0.
* ``relative_euclidean_distance`` = ``sqrt(sum (m-g)^2 / sum g^2)``; 0 when
  ``|g| <= eps``.
* ``cmp_fail_reason``: why a row could not be compared, or notes.

msprobe's formulas (``msprobe/core/compare/npy_compare.py``,
``acc_compare.py`` and ``common/const.py``), exactly in float64 (8.3.3 works
in the input dtype, 26.2.0 in float32 for fp16/bf16/fp32 data):

* ``EucDist`` = ``|m - g|_2``; ``MaxAbsErr`` = ``max |m - g|`` (unmasked).
* ``MaxRelativeErr``, ``One Thousandth Err Ratio``,
  ``Five Thousandths Err Ratio``: relative error ``|m' - g'| / |g'|`` where
  positions with ``g == 0`` get ``eps64 = 2**-52`` added to both ``g`` and
  ``m``; the ratios are the shares of elements with relative error
  ``< 0.001`` and ``< 0.005`` (:func:`numlab.metrics.msprobe_relative_error`).
* ``Accuracy Reached or Not`` (``check_accuracy``): ``No`` if
  ``(Cosine < 0.99 and MaxAbsErr > 0.001)`` or ``Cosine < 0.9`` or
  ``MaxAbsErr > 1``; ``Unmatched`` for a shape mismatch; else ``Yes``
  (thresholds in :class:`Thresholds`).
* NaN/inf: when both sides have NaN/inf at the same positions with the same
  class (msprobe ``handle_inf_nan``), those positions are set to 0 on both
  sides and the rest is compared; the counts are reported, never dropped.  When
  positions differ, every error metric is NaN and the row fails.

numlab's own columns: ``max_ulp_error`` / ``mean_ulp_error`` =
``|m - g| / ulp(g)`` in the storage format (``ulp_format``;
:func:`numlab.metrics.ulp_error`), ``bitwise_equal_ratio``
(:func:`numlab.metrics.bitwise_equal`: same bits when the dtypes agree, else
same float64 bits, NaN equal to NaN), NaN/inf counts of each side,
``error_origin`` and ``inputs``.

Arithmetic is float64 for every dtype, and the KL divergence uses the
stable form of :func:`numlab.metrics.kl_divergence`.  NaN/inf: a NaN cosine
makes ``Accuracy Reached or Not`` ``No`` here; msprobe's own rule says
``Yes`` (its ``"Nan"`` string compares False with every threshold).

Everything is computed in one streaming pass over chunks of ``chunk_elems``
elements of the flattened (memory-mapped) arrays by
:class:`numlab.metrics.CompareAccumulator`: the elementwise formulas are
numlab.metrics' own (one implementation, shared with the one-shot
functions) reduced per chunk (max, sum, count); the aggregates (cosine,
Euclidean distances, KL) are accumulated in float64 with running scales (no
overflow) and an online log-sum-exp, so two 2 GB dumps are compared with
O(chunk) memory.  The tests check every column against numlab.metrics' whole-
array functions.

Modules: :mod:`~numlab.compare.columns` (columns, :class:`Thresholds`),
:mod:`~numlab.compare.stream` (:func:`compare_arrays`),
:mod:`~numlab.compare.match` (:func:`compare_dumps`, node matching, first
divergence), :mod:`~numlab.compare.table` (:class:`CompareReport`, CSV);
this module re-exports their public names.

First divergence
----------------
A row *fails* when :meth:`Thresholds.fails` says so (msprobe's accuracy rule,
optionally tightened).  In topological order, a failing node whose inputs
(for a block output: the block's external inputs; inputs without data of
their own are traced back to the nearest ancestors with data) all pass is
marked ``error_origin = "introduced"``; a failing node with a failing input is
``"carried"``.  The first ``introduced`` row is the first divergence -- where
the error is introduced rather than carried (msprobe's highlight rules, e.g.
"input's one-thousandth ratio > 0.9 while the output's < 0.6", compare
an API's output with its inputs in the same way).  An ``introduced`` row whose
passing inputs are not bit-identical, or one of whose inputs could not be
compared, says so in ``cmp_fail_reason``: the rule cannot tell a node that
introduces an error from one that amplifies a small one (cancellation);
feeding the node golden inputs (:mod:`numlab.compare.bisect`) can.
"""

from __future__ import annotations

from .columns import COLUMNS, MSIT_COLUMNS, MSPROBE_COLUMNS, Thresholds
from .match import as_dump, compare_dumps
from .stream import DEFAULT_CHUNK, compare_arrays
from .table import CompareReport, report_path

__all__ = [
    "Thresholds",
    "COLUMNS",
    "MSIT_COLUMNS",
    "MSPROBE_COLUMNS",
    "DEFAULT_CHUNK",
    "compare_arrays",
    "compare_dumps",
    "CompareReport",
    "as_dump",
    "report_path",
]
