"""The columns of msit 8.2.0, mindstudio-probe 8.3.3 and 26.2.0, computed as
each tool computes them (``numlab compare --flavor``).

numlab's default report (flavor ``exact``) computes every metric exactly in
float64 (:class:`numlab.metrics.CompareAccumulator`).  The tools do not, and
they differ from each other; a flavour reproduces one tool's formulas on the
same arrays, with the tool's header names and order, so its CSV can be put
next to the tool's own.  Every difference is listed, with a reproducer, in
docs/compare.md.  Sources (read from the installed packages):

msit 8.2.0 (``components/utils/cmp_algorithm.py``,
``msit_llm/compare/cmp_utils.py``): both tensors are flattened and cast to
**torch float32** (``reshape(-1).float()``); a NaN/inf on either side gives
no metrics, only ``cmp_fail_reason``; the relative and absolute errors are
masked where ``|golden| <= eps`` with **float32's** eps ``2**-23 =
1.19e-7``; cosine is computed in float64 and rounded to 10 decimals; KL is
``F.kl_div(log_softmax(m), softmax(g), reduction="sum")`` in float32 clamped
at 0; relative Euclidean distance is 0 when ``sqrt(sum g^2) <= eps32``.
msit's float32 sums (the means, the mean errors and both sums of the relative
Euclidean distance) are ``torch.sum``'s cascade, whose order follows the vector
width of the ATen kernel the CPU selects: numlab computes them in numpy in one
fixed order, ATen's cascade with 8 lanes (:class:`~numlab.kernels.orders.cpu.AtenCascade`,
the order the recordings in tests/data/compare_tools were made with), so the
cells are the same on every CPU.  The KL divergence goes through ATen's
softmax/log_softmax vector kernels and its exp/log, which the CPU capability
changes (SLEEF on AVX2/AVX-512, the scalar libm on the ``default`` build): it is
computed with torch, as msit does, and its last float32 digits depend on the
machine (docs/compare.md says which).  The cosine is torch float64 rounded to 10
decimals.  The ``msit`` flavour needs torch for those two.

mindstudio-probe 8.3.3 (``msprobe/core/compare/npy_compare.py``,
``multiprocessing_compute.py``): bf16 is read as float32, fp16 stays fp16;
matching NaN/inf positions are zeroed, mismatching ones give ``N/A``; the
relative error ``|(m - g) / g|`` is computed **in the input dtype** with
float64's eps added where ``g == 0`` (in fp16 that addition rounds back to 0,
so a zero golden value gives 0/0 = NaN, or x/0 = inf); cosine, EucDist and
MaxAbsErr in float64; values through ``format_value`` (12 decimals), cosine
above 0.99 rounded to 6; verdict column ``Accuracy Reached or Not`` from
``check_accuracy``: a NaN cosine (the string ``Nan``) compares False with
every threshold, so the verdict is ``Yes``.

mindstudio-probe 26.2.0 (``msprobe/core/compare/utils.py``,
``algorithm/builtin_algorithm``, ``indicator_analysis``): bf16 and fp8 are
read as float32 and squeezed (``np.squeeze``); the relative error is
computed in ``result_type(m, g, float32)`` with **that type's** eps added
where ``g == 0`` (fp16/bf16/fp32 data: float32 and 1.19e-7); a 1-element
tensor has no cosine (``unsupported``); the verdict column is ``Result``
(pass/warning/error) from the seven tensor-mode checkers of
``indicator_analysis`` (:func:`msprobe26_results`).  ``check_accuracy`` (the ``Accuracy Reached or Not`` rule,
NaN cosine -> ``Yes``) is unchanged in 26.2.0 but only used by its MindSpore
graph compare; it is reported in the numlab columns.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..formats import get_format
from ..kernels import reduce
from ..kernels.orders.cpu import AtenCascade

__all__ = [
    "FLAVORS",
    "FLAVOR_HEADERS",
    "EXACT_NOTE",
    "FLAVOR_NOTES",
    "check_flavor",
    "flavor_cells",
    "flavor_rows",
    "tool_view",
    "msit_columns",
    "msprobe_columns",
    "msprobe_check_accuracy",
    "msprobe26_results",
    "msprobe_api_name",
    "msprobe_items",
    "msprobe_stats",
    "MSIT_HEADER",
    "MSIT_SUM_ORDER",
    "MSPROBE83_HEADER",
    "MSPROBE26_HEADER",
]

FLAVORS = ("exact", "msit", "msprobe-8.3", "msprobe-26")

MSIT_HEADER = [
    "token_id", "data_id", "golden_data_path", "golden_op_type", "golden_dtype", "golden_shape",
    "golden_max_value", "golden_min_value", "golden_mean_value", "my_data_path", "my_op_type",
    "my_dtype", "my_shape", "my_max_value", "my_min_value", "my_mean_value",
    "cosine_similarity", "max_relative_error", "mean_relative_error", "max_absolute_error",
    "mean_absolute_error", "kl_divergence", "relative_euclidean_distance", "cmp_fail_reason",
]
_MSPROBE_HEAD = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
    "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean",
    "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent",
]
MSPROBE83_HEADER = [*_MSPROBE_HEAD, "Accuracy Reached or Not", "Err_message", "NPU_Stack_Info", "Data_name"]
MSPROBE26_HEADER = [*_MSPROBE_HEAD, "Result", "Err_message", "NPU_Stack_Info", "Data_name"]
FLAVOR_HEADERS = {"msit": MSIT_HEADER, "msprobe-8.3": MSPROBE83_HEADER, "msprobe-26": MSPROBE26_HEADER}
"""The tools' CSV headers, in their order: msit 8.2.0 ``CSV_GOLDEN_HEADER``;
msprobe 8.3.3 and 26.2.0 ``COMPARE_RESULT_HEADER_STACK`` (PyTorch, real
data; 8.3.3 writes it to .xlsx, 26.2.0 to .csv)."""

EXACT_NOTE = ("flavor=exact: every metric is computed exactly in float64 on the stored values (msit's "
              "columns without its float32 arithmetic, msprobe's without its working dtype; see "
              "docs/compare.md); --flavor msit|msprobe-8.3|msprobe-26 gives a tool's own columns")
"""What the default columns compute (the ``flavor_note`` of the CSV's JSON sidecar)."""
FLAVOR_NOTES = {
    "exact": EXACT_NOTE,
    "msit": ("flavor=msit: msit 8.2.0's CSV_GOLDEN_HEADER and formulas (float32 sums in one fixed order, float32's eps "
             "mask), rows in model-tree order; see docs/compare.md"),
    "msprobe-8.3": ("flavor=msprobe-8.3: mindstudio-probe 8.3.3's COMPARE_RESULT_HEADER_STACK and "
                    "formulas (relative error in the input dtype), 'Accuracy Reached or Not' verdicts; "
                    "see docs/compare.md"),
    "msprobe-26": ("flavor=msprobe-26: mindstudio-probe 26.2.0's COMPARE_RESULT_HEADER_STACK and "
                   "formulas (relative error in result_type(m, g, float32)), 'Result' verdicts; see "
                   "docs/compare.md"),
}
"""Per flavour, what its CSV's columns compute (the sidecar's ``flavor_note``)."""

_MSPROBE_ROW = re.compile(r"^(.+\.(?:forward|backward))\.(?:input|output|parameters)\.")
_EPS64 = float(np.finfo(np.float64).eps)


def check_flavor(flavor: str) -> str:
    """``flavor`` itself when valid, else ValueError naming the choices."""
    if flavor not in FLAVORS:
        raise ValueError(f"flavor={flavor!r} is not valid; valid: {list(FLAVORS)}")
    return flavor


def _torch_dtype_name(a: np.ndarray) -> str:
    """The ``torch.<dtype>`` name the tools print for an array of ``a``'s format."""
    names = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
             "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
    if a.dtype.kind in "biu":
        return "torch." + {"b": "bool"}.get(a.dtype.kind, str(a.dtype))
    try:
        return "torch." + names.get(get_format(a.dtype).name, str(a.dtype))
    except (TypeError, ValueError):
        return "torch." + str(a.dtype)


def tool_view(a: np.ndarray, flavor: str) -> np.ndarray | None:
    """The array as the tool holds it after reading a dump: msprobe turns
    bf16 (and in 26.2.0 fp8) into float32 with ``tensor.to(float32)`` and
    26.2.0 squeezes; None when the tool cannot read the dtype (fp8 in 8.3.3:
    ``Tensor.numpy()`` refuses it)."""
    a = np.asarray(a)
    narrow = a.dtype.kind not in "biufc" or a.dtype.type.__module__ != "numpy"
    if narrow:
        name = get_format(a.dtype).name
        if flavor == "msprobe-8.3" and name != "bf16":
            return None
        a = a.astype(np.float32)  # exact: every bf16/fp8 value is a float32
    if flavor == "msprobe-26":
        a = np.squeeze(a)
    return a


# --------------------------------------------------------------------------
# msit
# --------------------------------------------------------------------------
MSIT_SUM_ORDER = AtenCascade(8)
"""The one fixed order of msit's float32 sums: ATen's cascade with 8 lanes."""


def _msit_sum(x: np.ndarray) -> np.float32:
    """``torch.sum`` of a flat float32 array in :data:`MSIT_SUM_ORDER`, the same bits on every CPU."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(1, -1)
    return np.float32(reduce(x, "sum", -1, order=MSIT_SUM_ORDER, acc="fp32")[0])


def _msit_mean(x: np.ndarray) -> float:
    """``torch.mean`` of a flat float32 array: the sum, then one float32 division by the count."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if x.size == 0:
        return math.nan  # torch.mean of an empty tensor
    return float(_msit_sum(x) / np.float32(x.size))


def msit_columns(golden, mine) -> dict:
    """msit 8.2.0's metric cells for one pair (``compare_data`` then
    ``set_tensor_basic_info_in_row_data``): msit's formulas, its float32 sums
    in :data:`MSIT_SUM_ORDER` (numpy, the same bits on every CPU), the KL
    divergence and the cosine with torch as msit computes them (module
    docstring).  Keys: the metric columns of :data:`MSIT_HEADER`,
    ``cmp_fail_reason`` and the dtype/shape/max/min/mean columns.

    Raises
    ------
    ImportError
        torch is not installed (msit's KL goes through ATen's softmax kernels).
    """
    try:
        import torch  # optional heavy dependency: only the msit flavour needs it
        from torch.nn import functional as F
    except ImportError as exc:  # pragma: no cover - torch is in the test environment
        raise ImportError("--flavor msit needs torch: msit computes its columns in torch float32") from exc
    g_np, m_np = np.asarray(golden), np.asarray(mine)
    row: dict = {"golden_dtype": _torch_dtype_name(g_np), "golden_shape": str(list(g_np.shape)),
                 "my_dtype": _torch_dtype_name(m_np), "my_shape": str(list(m_np.shape))}
    g = torch.from_numpy(np.ascontiguousarray(g_np.astype(np.float32)))
    m = torch.from_numpy(np.ascontiguousarray(m_np.astype(np.float32)))
    for side, t in (("golden", g), ("my", m)):
        if t.numel():  # msit: 0 not in shape
            row[f"{side}_max_value"] = t.max().item()
            row[f"{side}_min_value"] = t.min().item()
            row[f"{side}_mean_value"] = _msit_mean(t.numpy())
    g, m = g.reshape(-1), m.reshape(-1)
    reasons = []
    if len(g) != len(m):
        reasons.append("data shape doesn't match.")
    if not torch.all(torch.isfinite(g)):
        reasons.append("golden_data includes NAN or inf.")
    if not torch.all(torch.isfinite(m)):
        reasons.append("my_data includes NAN or inf.")
    if reasons:
        row["cmp_fail_reason"] = " ".join(reasons)
        return row
    eps = torch.finfo(torch.float).eps
    zero32 = torch.tensor(0, dtype=torch.float32)
    if torch.all(g == 0) and torch.all(m == 0):
        row["cosine_similarity"] = 1.0
    else:
        row["cosine_similarity"] = round(torch.cosine_similarity(g.double(), m.double(), dim=0).item(), 10)
    mask = torch.abs(g) > eps
    rel = torch.where(mask, torch.abs(m / g - 1), zero32)
    ab = torch.where(mask, torch.abs(m - g), zero32)
    row["max_relative_error"] = rel.max().item()
    row["mean_relative_error"] = _msit_mean(rel.numpy())
    row["max_absolute_error"] = ab.max().item()
    row["mean_absolute_error"] = _msit_mean(ab.numpy())
    row["kl_divergence"] = max(F.kl_div(F.log_softmax(m, dim=-1), F.softmax(g, dim=-1), reduction="sum").item(), 0)
    g32, d32 = g.numpy(), (m - g).numpy()
    gsq = _msit_sum(g32 * g32)
    if float(np.sqrt(gsq)) <= eps:  # msit: gsq ** 0.5 in float32
        row["relative_euclidean_distance"] = 0.0
    else:
        row["relative_euclidean_distance"] = float(np.sqrt(_msit_sum(d32 * d32) / gsq))
    row["cmp_fail_reason"] = ""
    return row


# --------------------------------------------------------------------------
# msprobe
# --------------------------------------------------------------------------
def _format_value(v) -> float:
    """msprobe's ``format_value``: ``float('{:.12f}'.format(v))``."""
    return float(f"{v:.12f}")


def _handle_inf_nan(n: np.ndarray, b: np.ndarray):
    """msprobe's ``handle_inf_nan``: zero matching NaN/inf positions (on
    copies), or ("Nan", "Nan") when the positions differ."""
    nf, bf = n.astype(float), b.astype(float)
    n_inf, b_inf, n_nan, b_nan = np.isinf(nf), np.isinf(bf), np.isnan(nf), np.isnan(bf)
    if n_inf.any() or n_nan.any() or b_inf.any() or b_nan.any():
        if np.array_equal(n_inf, b_inf) and np.array_equal(n_nan, b_nan):
            n, b = n.copy(), b.copy()
            n[n_inf | n_nan] = 0
            b[b_inf | b_nan] = 0
        else:
            return "Nan", "Nan"
    return n, b


def _relative_err(n: np.ndarray, b: np.ndarray, flavor: str) -> np.ndarray:
    """``get_relative_err`` of the version: 8.3.3 in the input dtype with
    float64's eps; 26.2.0 in ``result_type(n, b, float32)`` with its eps."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if n.dtype.kind != "f":
            n = n.astype(float)
        if b.dtype.kind != "f":
            b = b.astype(float)
        zero = b == 0
        if flavor == "msprobe-8.3":
            n, b = n.copy(), b.copy()
            eps = _EPS64
        else:
            rt = np.result_type(n, b, np.float32)
            n, b = n.astype(rt), b.astype(rt)
            eps = np.finfo(rt).eps
        n[zero] += eps
        b[zero] += eps
        return np.abs(np.divide(n - b, b))


def msprobe_check_accuracy(cos, max_abs_err) -> str:
    """msprobe's ``check_accuracy`` (8.3.3 and 26.2.0 alike), on the cells as
    the tool holds them (floats or the strings ``Nan``, ``N/A``,
    ``unsupported``, ``Shape unmatched``): a NaN cosine passes every
    comparison, so the verdict is ``Yes`` unless MaxAbsErr > 1."""
    if cos == "Shape unmatched":
        return "Unmatched"
    if "None" in (cos, max_abs_err):
        return "None"
    if cos == "N/A" or max_abs_err == "N/A":
        return "No"
    try:
        cos, max_abs_err = float(cos), float(max_abs_err)
    except ValueError:
        return "None"
    if cos < 0.99 and max_abs_err > 0.001:
        return "No"
    if cos < 0.9 or max_abs_err > 1:
        return "No"
    return "Yes"


_METRICS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
            "Five Thousandths Err Ratio"]


def msprobe_columns(golden, mine, flavor: str) -> dict:
    """The metric cells of msprobe (``flavor`` ``msprobe-8.3`` or
    ``msprobe-26``) for one pair: the six metric columns, ``Err_message``,
    the dtype/shape/max/min/mean/l2norm columns and, for 8.3,
    ``Accuracy Reached or Not``.  ``golden`` is msprobe's Bench, ``mine``
    its NPU."""
    if flavor not in ("msprobe-8.3", "msprobe-26"):
        raise ValueError(f"flavor={flavor!r} is not valid here; valid: ['msprobe-8.3', 'msprobe-26']")
    g_raw, m_raw = np.asarray(golden), np.asarray(mine)
    row: dict = {"NPU Dtype": _torch_dtype_name(m_raw), "Bench Dtype": _torch_dtype_name(g_raw),
                 "NPU Tensor Shape": str(list(m_raw.shape)), "Bench Tensor Shape": str(list(g_raw.shape)),
                 "NPU Requires_grad": "False", "Bench Requires_grad": "False",
                 "Requires_grad Consistent": "True"}
    for side, a in (("NPU", m_raw), ("Bench", g_raw)):  # the dump.json statistics
        st = msprobe_stats(a)
        row.update({f"{side} {k.lower() if k != 'Norm' else 'l2norm'}": v for k, v in st.items()
                    if v is not None})
    n, b = tool_view(m_raw, flavor), tool_view(g_raw, flavor)
    cells, msg = _msprobe_metrics(n, b, flavor)
    row.update(zip(_METRICS, cells, strict=True))
    row["Err_message"] = msg
    if flavor == "msprobe-8.3":
        row["Accuracy Reached or Not"] = msprobe_check_accuracy(row["Cosine"], row["MaxAbsErr"])
    return row


def msprobe_stats(a) -> dict:
    """The statistics msprobe writes to ``dump.json`` for a tensor, and prints
    as ``NPU max/min/mean/l2norm``: ``{"Max", "Min", "Mean", "Norm"}``
    computed by torch in the tensor's dtype (fp16 and bf16 in their own
    dtype, fp8 through ``tensor.float()``, integers in float64), as msprobe's
    dump does; None
    values for an empty tensor.  Without torch, float64 numpy (the last bits
    of Mean and Norm may then differ from the tool's)."""
    a = np.asarray(a)
    if a.size == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if a.dtype.kind == "b":
        return {"Max": bool(a.any()), "Min": bool(a.all()), "Mean": None, "Norm": None}
    narrow = a.dtype.kind not in "biufc" or a.dtype.type.__module__ != "numpy"
    bf16 = narrow and get_format(a.dtype).name == "bf16"
    # torch: a 2-byte float (fp16, bf16) in its own dtype, fp8 through .float(), integers in float64
    f = a.view(np.uint16) if bf16 else a.astype(np.float32) if narrow else \
        a.astype(np.float64) if a.dtype.kind != "f" else a
    try:
        import torch  # optional heavy dependency: the tool's statistics are torch's
    except ImportError:  # pragma: no cover - torch is in the test environment
        f = a.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            return {"Max": float(np.max(f)), "Min": float(np.min(f)), "Mean": float(np.mean(f)),
                    "Norm": float(np.sqrt(np.sum(f * f)))}
    f = np.ascontiguousarray(f)
    t = torch.from_numpy(f if f.flags.writeable else f.copy())  # torch warns on read-only memory maps
    if bf16:
        t = t.view(torch.bfloat16)
    return {"Max": t.max().item(), "Min": t.min().item(), "Mean": t.mean().item(),
            "Norm": torch.linalg.vector_norm(t).item()}


def _msprobe_metrics(n, b, flavor: str) -> tuple[list, str]:
    """(six metric cells, error message) as ``compare_by_op`` +
    ``compare_ops_apply`` of the version produce them."""
    if n is None or b is None:
        return ["unsupported"] * 6, "Dump file: dtype not readable by msprobe 8.3.3 (Tensor.numpy())."
    # the validation chain (8.3.3: get_error_flag_and_msg; 26.2.0: ValidateTensor)
    if n.size == 0:
        return ["unsupported"] * 6, "This is empty data, can not compare."
    if flavor == "msprobe-26" and n.shape != b.shape:  # 26.2.0 prints it in lower case
        return ["shape unmatched"] * 6, "Shape of NPU and bench tensor do not match. Skipped."
    msg = ""
    if not n.shape:
        msg = ("This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', "
               "'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ")
    elif flavor == "msprobe-8.3" and n.shape != b.shape:
        return ["Shape unmatched"] * 6, "Shape of NPU and bench tensor do not match. Skipped."
    if not msg:  # both versions return before the NaN/inf check for a 0-d tensor
        r = _handle_inf_nan(n, b)
        if isinstance(r[0], str):
            return ["N/A"] * 6, "The position of inf or nan in NPU and bench Tensor do not match."
        n, b = r
        if n.dtype != b.dtype and not msg:
            msg = "Dtype of NPU and bench tensor do not match."
    rel = _relative_err(n, b, flavor)
    nf, bf = n.reshape(-1).astype(float) if n.shape else n.astype(float), \
        b.reshape(-1).astype(float) if b.shape else b.astype(float)
    cells = []
    scalar = "This is type of 0-d tensor" in msg
    # Cosine
    if scalar:
        cells.append("unsupported")
    elif nf.size == 1:
        cells.append("unsupported")
        msg += "This is a 1-d tensor of length 1." if flavor == "msprobe-8.3" else ""
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            num = nf.dot(bf)
            a_norm, b_norm = np.linalg.norm(nf), np.linalg.norm(bf)
        if a_norm <= _EPS64 and b_norm <= _EPS64:
            cells.append(1.0)
        elif a_norm <= _EPS64:
            cells.append("Nan")
            msg += "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
        elif b_norm <= _EPS64:
            cells.append("Nan")
            msg += "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                cos = num / (a_norm * b_norm)
            if np.isnan(cos):
                cells.append("Nan")
                msg += "Cannot compare by Cosine Similarity, the dump data has NaN."
            else:
                c = _format_value(cos)
                cells.append(round(c, 6) if c > 0.99 else c)
    # EucDist
    cells.append("unsupported" if scalar else float(np.linalg.norm(nf - bf, ord=2)))
    # MaxAbsErr, MaxRelativeErr
    with np.errstate(invalid="ignore", over="ignore"):
        mx = np.max(np.abs(nf - bf))
    if np.isnan(mx):
        cells.append("Nan")
        msg += "Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data."
    else:
        cells.append(_format_value(mx))
    mr = np.max(np.abs(rel))
    if np.isnan(mr):
        cells.append("Nan")
        msg += "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data."
    else:
        cells.append(_format_value(mr))
    # error ratios
    for thr in (0.001, 0.005):
        if scalar:
            cells.append("unsupported")
        elif not np.size(rel):
            cells.append("Nan")
        else:
            cells.append(_format_value(np.sum(rel < thr) / np.size(rel)))
    return cells, msg


def _num(v) -> float | None:
    """A metric cell as a float, None for the tool's strings."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


_LEVELS = ("pass", "warning", "error")
_ALL_IGNORE = frozenset({"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format",
                         "new_empty_strided", "new_empty", "empty_strided"})
_INPUT_IGNORE = frozenset({"_reduce_scatter_base", "_all_gather_base", "all_to_all_single",
                           "batch_isend_irecv"})


def _inf_or_nan(v) -> bool:
    """``indicator_analysis.utils.is_inf_or_nan``: a NaN/inf float, or the
    text inf/-inf/nan."""
    if isinstance(v, float):
        return not math.isfinite(v)
    return isinstance(v, str) and v.strip().lower() in ("inf", "-inf", "nan")


def _min_metric(rows: list[Mapping], key: str) -> float:
    """``ApiData.get_min_or_max_value`` (is_min): the smallest number of the
    column over ``rows``, starting from 1.0; ``Nan``/``N/A``/other text skipped."""
    best = 1.0
    for r in rows:
        v = r.get(key)
        if v is None or v in ("Nan", "N/A"):
            continue
        if isinstance(v, str) and v.endswith("%"):
            try:
                v = float(v.strip("%")) / 100
            except ValueError:
                v = 0
        if isinstance(v, str):
            continue
        best = min(best, v)
    return best


def _grad(v):
    """A Requires_grad cell as the tool holds it (bool from dump.json, else the text)."""
    return {"True": True, "False": False}.get(v, v) if isinstance(v, str) else v


def msprobe26_results(api_rows: list[Mapping]) -> list[tuple[str, str]]:
    """(``Result``, ``Err_message``) of each row of one API, as
    mindstudio-probe 26.2.0's tensor-mode checkers give them
    (``indicator_analysis/algorithm.py`` ``TENSOR_CHECKERS``, run in this
    order by ``ApiIndicatorCalculator``):

    1. InfNanErrChecker: NaN/inf in NPU max/min where Bench has none -> error;
    2. OneThousandthErrChecker: inputs' smallest One Thousandth Err Ratio
       > 0.9 while the outputs' < 0.1 -> error on the first output row;
    3. RequiresGradErrChecker: both Requires_grad truthy and different -> error
       (the tool holds dump.json's bools, so ``False`` on either side skips it);
    4. ParametersErrChecker: a non-tensor input (dtype ``<class ...>``, shape
       ``[]``) whose NPU value differs from Bench's -> error;
    5. DTypeErrChecker: dtypes differ (names with ``qkv``/``gate_up`` skipped) -> error;
    6. ShapeErrChecker: shapes differ -> error;
    7. CosineWarnChecker: inputs' smallest cosine > 0.9 and it minus the
       outputs' smallest > 0.1 -> warning on the first output row.

    Smallest values start from 1.0 and skip text cells (an API without
    inputs has input minimum 1.0).  Rows are inputs unless their name holds
    ``.output.``.  APIs in the tool's ignore lists (``to``, ``empty``, ...;
    ``all_to_all_single``, ...) skip every rule or the input-based ones.  A
    row's level is the worst set; its messages accumulate in checker order,
    printed as a JSON list."""
    rows = list(api_rows)
    ins = [r for r in rows if ".output." not in str(r.get("NPU Name", ""))]
    outs = [r for r in rows if ".output." in str(r.get("NPU Name", ""))]
    ignore = "none"
    if ins:
        parts = str(ins[0].get("NPU Name", "")).split(".")
        if len(parts) >= 2:
            ignore = "all" if parts[1] in _ALL_IGNORE else "input" if parts[1] in _INPUT_IGNORE else "none"
    checked = [] if ignore == "all" else outs if ignore == "input" else ins + outs
    level = {id(r): 0 for r in rows}
    msgs: dict[int, list] = {id(r): [] for r in rows}

    def mark(r, lvl: str, msg: str) -> None:
        level[id(r)] = max(level[id(r)], _LEVELS.index(lvl))
        msgs[id(r)].append(msg)

    def paired(r) -> bool:
        b = r.get("Bench Name")
        return bool(b) and b != "N/A"

    for r in checked:  # 1
        if not (_inf_or_nan(r.get("Bench max")) or _inf_or_nan(r.get("Bench min"))) and \
                (_inf_or_nan(r.get("NPU max")) or _inf_or_nan(r.get("NPU min"))):
            mark(r, "error", "error: There is nan/inf/-inf in the maximum or minimum value of NPU.")
    if ignore == "none" and outs:  # 2
        if _min_metric(ins, "One Thousandth Err Ratio") > 0.9 and _min_metric(outs, "One Thousandth Err Ratio") < 0.1:
            mark(outs[0], "error", "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the "
                                   "output < 0.6.")
    for r in checked:  # 3
        a, b = _grad(r.get("NPU Requires_grad")), _grad(r.get("Bench Requires_grad"))
        if paired(r) and a and b and a != b:
            mark(r, "error", "error: The Required_Grad of NPU and Bench are inconsistent")
    if ignore == "none":  # 4
        for r in ins:
            nd, bd = r.get("NPU Dtype"), r.get("Bench Dtype")
            if paired(r) and nd and bd and "class" in str(nd) and "class" in str(bd) and \
                    str(r.get("NPU Tensor Shape")) == "[]" and r.get("NPU max") != r.get("Bench max"):
                mark(r, "error", "error: The scalar parameters of NPU and Bench are inconsistent.")
    for r in checked:  # 5
        bn, nn = r.get("Bench Name"), r.get("NPU Name")
        if not bn or "N/A" in (bn, nn) or "qkv" in str(bn) or "gate_up" in str(bn):
            continue
        nd, bd = r.get("NPU Dtype"), r.get("Bench Dtype")
        if nd and bd and nd != bd:
            mark(r, "error", "error: The dtype of NPU and Bench are inconsistent.")
    for r in checked:  # 6
        ns, bs = r.get("NPU Tensor Shape"), r.get("Bench Tensor Shape")
        if paired(r) and ns is not None and bs is not None and ns != bs:
            mark(r, "error", "error: The shape of NPU and Bench are inconsistent.")
    if ignore == "none" and outs:  # 7
        cin, cout = _min_metric(ins, "Cosine"), _min_metric(outs, "Cosine")
        if cin > 0.9 and cin - cout > 0.1:
            mark(outs[0], "warning", "warning: The input/parameters of Cosine > 0.9, and input/parameters - "
                                     "output > 0.1")
    return [(_LEVELS[level[id(r)]], json.dumps(msgs[id(r)])) for r in rows]


def flavor_cells(golden, mine, flavor: str) -> dict:
    """The metric cells of ``flavor`` for one pair of arrays (whole arrays:
    the tools do not stream)."""
    check_flavor(flavor)
    if flavor == "msit":
        return msit_columns(golden, mine)
    if flavor == "exact":
        return {}
    return msprobe_columns(golden, mine, flavor)


def msprobe_items(rec: Mapping) -> list[tuple[str, Mapping]]:
    """The dumped items of one API record of an msprobe ``dump.json``, as
    ``(suffix, item)`` in the order msprobe compare lists them:
    ``input.<i>`` for ``input_args`` (a nested list gives ``input.<i>.<j>``),
    ``input.<key>`` for ``input_kwargs``, then ``output.<i>``."""
    out: list[tuple[str, Mapping]] = []

    def walk(prefix: str, t) -> None:
        if isinstance(t, list | tuple):
            for j, u in enumerate(t):
                walk(f"{prefix}.{j}", u)
        elif isinstance(t, Mapping) and t.get("type"):  # 8.3.3 dumps a torch.dtype as {}: no row
            out.append((prefix, t))

    for i, t in enumerate(rec.get("input_args") or []):
        walk(f"input.{i}", t)
    for k, t in (rec.get("input_kwargs") or {}).items():
        walk(f"input.{k}", t)
    for i, t in enumerate(rec.get("output") or []):
        walk(f"output.{i}", t)
    return out


def _dump_json_items(file_path) -> dict[str, Mapping] | None:
    """``{row name: dump.json item}`` in dump.json order for the msprobe dump
    holding tensor file ``file_path`` (``<root>/dump_tensor_data/<name>.pt``),
    None when there is none (a dump msprobe did not write)."""
    if not file_path:
        return None
    dj = Path(str(file_path)).parent.parent / "dump.json"
    try:
        data = json.loads(dj.read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if not isinstance(data, Mapping):
        return None
    return {f"{api}.{suffix}": item for api, rec in data.items() if isinstance(rec, Mapping)
            for suffix, item in msprobe_items(rec)}


def _stacks(file_path) -> dict[str, str]:
    """``{API: NPU_Stack_Info cell}`` from the ``stack.json`` beside the
    msprobe dump holding ``file_path`` (``{"0": [[API, ...], [frame, ...]]}``;
    the tool prints ``str(frames)`` on an API's first row, ``N/A`` on the
    others); empty when there is none."""
    if not file_path:
        return {}
    try:
        st = json.loads((Path(str(file_path)).parent.parent / "stack.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    out: dict[str, str] = {}
    for v in st.values() if isinstance(st, Mapping) else ():
        if isinstance(v, list) and len(v) == 2 and isinstance(v[0], list):
            for api in v[0]:
                out.setdefault(str(api), str(v[1]))
    return out


def _msprobe_scalar_row(name: str, npu: Mapping, bench: Mapping, flavor: str) -> dict:
    """msprobe's row of a non-tensor argument (``{"type": "float", "value":
    1.001}``): no data file, every metric ``unsupported``, the value as
    max/min/mean/l2norm; 26.2.0 marks differing values as an error."""
    row: dict = {"NPU Name": name, "Bench Name": name, "NPU Requires_grad": "N/A",
                 "Bench Requires_grad": "N/A", "Requires_grad Consistent": "True",
                 "NPU_Stack_Info": "N/A", "Data_name": str(["-1", "-1"])}
    for side, item in (("NPU", npu), ("Bench", bench)):
        row[f"{side} Dtype"] = f"<class '{item.get('type')}'>"
        row[f"{side} Tensor Shape"] = "[]"
        for stat in ("max", "min", "mean", "l2norm"):
            row[f"{side} {stat}"] = item.get("value")
    row.update(dict.fromkeys(_METRICS, "unsupported"))
    if flavor == "msprobe-8.3":
        row["Accuracy Reached or Not"] = "None"
        row["Err_message"] = "NPU does not have data file."
    return row


def msprobe_api_name(node: str) -> str:
    """The msprobe API name numlab uses for a node: ``Numlab.<node>.0.forward``
    (dots in the node name become ``_``: msprobe splits names at dots)."""
    return f"Numlab.{node.replace('.', '_')}.0.forward"


def _msprobe_tensor_row(name: str, cells: Mapping, items=None) -> dict:
    """msprobe's row of a tensor: the metric cells, with ``requires_grad`` and
    the statistics of ``items`` (the NPU and Bench ``dump.json`` records) when
    the dump has them (msprobe prints dump.json's statistics)."""
    row = dict(cells)
    row.update({"NPU Name": name, "Bench Name": name, "NPU_Stack_Info": "N/A",
                "Data_name": str([name + ".pt", name + ".pt"])})
    for side, item in zip(("NPU", "Bench"), items or (), strict=False):
        if item is None:
            continue
        if "requires_grad" in item:
            row[f"{side} Requires_grad"] = str(bool(item["requires_grad"]))
        for key, col in (("Max", "max"), ("Min", "min"), ("Mean", "mean"), ("Norm", "l2norm")):
            if key in item:
                row[f"{side} {col}"] = "N/A" if item[key] is None else item[key]
    if items:
        row["Requires_grad Consistent"] = str(row["NPU Requires_grad"] == row["Bench Requires_grad"])
    return row


def flavor_rows(rows: list[Mapping], flavor: str) -> list[dict]:
    """The tool's CSV rows (keys: :data:`FLAVOR_HEADERS` ``[flavor]``) from
    report rows carrying ``_flavor`` cells, in the tool's own row set and
    order; rows without data on both sides are left out, as the tools do for
    nodes they cannot pair.

    msprobe lists, per API in ``dump.json`` order, each input row then each
    output row.  For a dump msprobe wrote, the order, the non-tensor
    arguments' rows (``...input.dim``) and ``requires_grad`` are read from the
    two ``dump.json``; for a numlab graph (any layout) each node is API
    ``Numlab.<node>.0.forward`` with its dumped inputs as ``input.<i>`` rows
    (the rows ``msprobe compare`` prints for the dump
    :func:`numlab.compare.layouts.write_msprobe_dump` writes).  msit lists
    module outputs only (its compare never reads ``input_<i>.pth``); its
    order follows Python's string hashing (it changes with
    ``PYTHONHASHSEED``), so numlab keeps the model-tree order."""
    check_flavor(flavor)
    if flavor == "exact":
        raise ValueError("flavor='exact' has no tool rows; valid: ['msit', 'msprobe-8.3', 'msprobe-26']")
    if flavor == "msit":
        out = []
        for r in rows:
            cells = r.get("_flavor")
            if not cells:
                continue
            row = dict(cells, token_id=0, data_id=len(out), golden_data_path=r.get("golden_path", ""),
                       my_data_path=r.get("my_path", ""), golden_op_type=r.get("op", ""),
                       my_op_type=r.get("op", ""))
            # msit writes its DataFrame with fillna(""): a NaN cell is empty
            out.append({k: "" if isinstance(v := row.get(k, ""), float) and math.isnan(v) else v
                        for k in MSIT_HEADER})
        return out
    return [{k: row.get(k, "") for k in FLAVOR_HEADERS[flavor]} for row in _msprobe_rows(rows, flavor)]


def _msprobe83_unmatched(row: dict) -> None:
    """msprobe 8.3.3's row of an NPU tensor with no Bench of the same shape:
    the Bench columns ``N/A``, the metrics ``unsupported``."""
    for k in ("Bench Name", "Bench Dtype", "Bench Tensor Shape", "Bench Requires_grad", "Bench max",
              "Bench min", "Bench mean", "Bench l2norm"):
        row[k] = "N/A"
    row.update(dict.fromkeys(_METRICS, "unsupported"))
    row["Requires_grad Consistent"] = "False"
    row["Accuracy Reached or Not"] = "None"
    row["Err_message"] = "Requires_grad inconsistent. Bench api/module unmatched."
    row["Data_name"] = str([row["NPU Name"] + ".pt", "N/A"])


def _msprobe_rows(rows: list[Mapping], flavor: str) -> list[dict]:
    """msprobe's rows (see :func:`flavor_rows`), with 26.2.0's ``Result`` per API."""
    by_node = {r["node"]: r for r in rows if r.get("_flavor")}
    tool = {n: r for n, r in by_node.items() if _MSPROBE_ROW.match(str(n))}
    first = next(iter(tool.values()), None) or next(iter(by_node.values()), {})
    npu_items = _dump_json_items(first.get("my_path")) or {}
    bench_items = _dump_json_items(first.get("golden_path")) or {}
    out: list[dict] = []
    if tool:  # a dump msprobe wrote: its dump.json order, with the non-tensor arguments
        stacks, stacked = _stacks(first.get("my_path")), set()
        names = [n for n in npu_items if n in tool or n in bench_items]
        names += [n for n in tool if n not in npu_items]
        for n in names:
            m = _MSPROBE_ROW.match(n)
            api = m.group(1) if m else n
            if n in tool:
                out.append(_msprobe_tensor_row(n, tool[n]["_flavor"], (npu_items.get(n), bench_items.get(n))))
            elif "data_name" not in npu_items[n] and "data_name" not in bench_items[n]:
                out.append(_msprobe_scalar_row(n, npu_items[n], bench_items[n], flavor))
            else:  # a tensor on one side only, or unreadable: not a row of the tool's either
                continue
            out[-1]["_api"] = api
            if api in stacks and api not in stacked:
                out[-1]["NPU_Stack_Info"] = stacks[api]
            stacked.add(api)
    else:
        for r in rows:  # a numlab graph: each node an API with its dumped inputs
            if r["node"] not in by_node:
                continue
            api = msprobe_api_name(r["node"])
            ins = [by_node[i]["_flavor"] for i in str(r.get("inputs") or "").split() if i in by_node]
            for name, cells in [*((f"{api}.input.{k}", c) for k, c in enumerate(ins)),
                                (f"{api}.output.0", r["_flavor"])]:
                items = (npu_items.get(name), bench_items.get(name)) if npu_items else None
                out.append(_msprobe_tensor_row(name, cells, items))
                out[-1]["_api"] = api
    if flavor == "msprobe-8.3":  # 8.3.3 pairs tensors by name and shape: another shape is unmatched
        for row in out:
            if row.get("NPU Tensor Shape") != row.get("Bench Tensor Shape"):
                _msprobe83_unmatched(row)
    if flavor == "msprobe-26":
        groups: dict[str, list] = {}
        for row in out:
            groups.setdefault(row["_api"], []).append(row)
        for group in groups.values():
            for row, (res, msg) in zip(group, msprobe26_results(group), strict=True):
                row["Result"], row["Err_message"] = res, msg
    return out
