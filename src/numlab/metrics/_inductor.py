"""PyTorch Inductor's acceptance rule (``torch._dynamo.utils.same``), in numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ._errors import _EXTRA_FLOATS, as_f64


# --------------------------------------------------------------------------
# PyTorch Inductor's acceptance rule
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class InductorResult:
    """Outcome of :func:`inductor_check`.

    ``passed``; ``reason`` (which branch decided: "dtype", "allclose",
    "cosine", "nan_corner", "rmse", "nan_both", "no_fp64"); ``res_error`` =
    rmse(fp64, compiled); ``ref_error`` = rmse(fp64, eager); ``multiplier``;
    ``threshold`` = multiplier * ref_error + tol / 10; ``cosine``.
    """

    passed: bool
    reason: str
    res_error: float = math.nan
    ref_error: float = math.nan
    multiplier: float = math.nan
    threshold: float = math.nan
    cosine: float = math.nan

    def __bool__(self) -> bool:
        return self.passed


def inductor_multiplier(
    numel: int,
    low_precision: bool,
    *,
    ndim4_1x1: bool = False,
    tol: float = 1e-4,
    use_larger_multiplier_for_smaller_tensor: bool = False,
    force_max_multiplier: bool = False,
) -> float:
    """The multiplier of ``get_multiplier`` in ``torch._dynamo.utils.same``
    (torch 2.13.0): 10 when forced; else 3 for fp16/bf16 results, 2 otherwise;
    with ``use_larger_multiplier_for_smaller_tensor`` 10 for ``numel <= 10``
    and 8 for ``numel <= 500``; else 3 when ``numel < 1000``, for a 4-d
    ``[..., 1, 1]`` tensor, or when ``tol >= 2e-2``."""
    if force_max_multiplier:
        return 10.0
    m = 3.0 if low_precision else 2.0
    if use_larger_multiplier_for_smaller_tensor and numel <= 10:
        m = 10.0
    elif use_larger_multiplier_for_smaller_tensor and numel <= 500:
        m = 8.0
    elif numel < 1000 or ndim4_1x1 or tol >= 2 * 1e-2:
        m = 3.0
    return m


def _allclose(a: np.ndarray, b: np.ndarray, tol: float, equal_nan: bool) -> bool:
    # torch.allclose(a, b, rtol, atol): |a - b| <= atol + rtol * |b|, infinities equal when same
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan))


def _to_dtype_like_torch(x64: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``torch.from_numpy(x64).to(dtype)`` as float64: what ``same`` compares.

    torch converts float64 to float16, bfloat16 and fp8 through float32 (the
    c10 types are built from a float), so the value is rounded twice: to
    float32, then to ``dtype``, both round-to-nearest-even.  numpy's float64
    -> float16 rounds once and differs from torch on the ties that the first
    rounding creates (``1 + 2**-11 + 2**-40``: numpy ``1 + 2**-10``, torch
    ``1``); ml_dtypes' bfloat16/fp8 casts already go through float32.
    :func:`numlab.round_to` rounds once, so it is not what torch does here.
    """
    if dtype.itemsize < 4:
        x64 = x64.astype(np.float32)
    return x64.astype(dtype).astype(np.float64)


def inductor_check(
    fp64_ref,
    eager,
    compiled,
    *,
    tol: float = 1e-4,
    cos_similarity: bool = False,
    equal_nan: bool = False,
    low_precision: bool | None = None,
    use_larger_multiplier_for_smaller_tensor: bool = False,
    force_max_multiplier: bool = False,
) -> InductorResult:
    """PyTorch Inductor's accuracy check of a compiled result.

    Transcribes the tensor branch of ``same(ref, res, fp64_ref, ...)`` in
    ``torch/_dynamo/utils.py`` of torch 2.13.0, with ``ref = eager`` and
    ``res = compiled``:

    1. dtypes of eager and compiled must match (``exact_dtype=True``);
    2. cosine mode: pass when ``allclose(eager, compiled, tol, tol,
       equal_nan=True)`` on float32 copies, else when the cosine similarity
       (torch's ``cosine_similarity(dim=0, eps=1e-6)``) is ``>= 0.99``;
    3. otherwise pass when ``allclose(eager, compiled, atol=tol, rtol=tol)``;
    4. else, with an fp64 reference: pass when the reference and compiled
       have no NaN, eager does, and ``allclose(fp64_ref.to(dtype), compiled,
       0.04, 0.04)`` ("nan_corner"; ``.to(dtype)`` rounds through float32
       like torch, see :func:`_to_dtype_like_torch`); otherwise pass when
       ``rmse(fp64, compiled) <= multiplier * rmse(fp64, eager) + tol / 10``
       (:func:`inductor_multiplier`), or both rmse are NaN with
       ``equal_nan``.

    ``rmse`` here is torch's plain ``sqrt(mean((ref - res)**2))`` in float64.
    ``low_precision`` (fp16/bf16 result; default: from ``compiled.dtype``)
    lets float32 containers holding fp16 values use the fp16 multiplier.
    Arithmetic is float64 numpy, so allclose decisions within one rounding of
    the tolerance may differ from torch's in-dtype arithmetic.
    """
    e_arr, c_arr = np.asarray(eager), np.asarray(compiled)
    if e_arr.dtype != c_arr.dtype:
        return InductorResult(False, "dtype")
    ref64 = as_f64(fp64_ref, "fp64_ref")
    e, c = as_f64(e_arr, "eager"), as_f64(c_arr, "compiled")
    if not (ref64.shape == e.shape == c.shape):
        raise ValueError(
            f"fp64_ref, eager and compiled must have the same shape, got {ref64.shape}, {e.shape}, {c.shape}"
        )
    if low_precision is None:
        low_precision = c_arr.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    if cos_similarity:
        e32 = e.ravel().astype(np.float32).astype(np.float64)
        c32 = c.ravel().astype(np.float32).astype(np.float64)
        if _allclose(e32, c32, tol, True):
            return InductorResult(True, "allclose")
        with np.errstate(invalid="ignore", over="ignore"):
            num = float(np.dot(e32, c32))
            den = max(float(np.linalg.norm(e32)), 1e-6) * max(float(np.linalg.norm(c32)), 1e-6)
        score = num / den
        return InductorResult(bool(score >= 0.99), "cosine", cosine=score)
    if _allclose(e, c, tol, equal_nan):
        return InductorResult(True, "allclose")
    if np.asarray(fp64_ref).dtype != np.float64:
        return InductorResult(False, "no_fp64")
    if (not np.isnan(ref64).any() and not np.isnan(c).any() and np.isnan(e).any()):
        ref_in = _to_dtype_like_torch(ref64, c_arr.dtype) if c_arr.dtype.kind == "f" or c_arr.dtype in _EXTRA_FLOATS else ref64
        if _allclose(ref_in, c, 4e-2, equal_nan):
            return InductorResult(True, "nan_corner")

    def _rmse(a, b):
        with np.errstate(invalid="ignore", over="ignore"):
            return float(np.sqrt(np.mean(np.square(a - b))))

    ref_error = _rmse(ref64, e)
    res_error = _rmse(ref64, c)
    ndim4 = e.ndim == 4 and e.shape[-1] == e.shape[-2] == 1
    mult = inductor_multiplier(
        ref64.size, low_precision, ndim4_1x1=ndim4, tol=tol,
        use_larger_multiplier_for_smaller_tensor=use_larger_multiplier_for_smaller_tensor,
        force_max_multiplier=force_max_multiplier,
    )
    thr = mult * ref_error + tol / 10.0
    passed = res_error <= thr
    reason = "rmse"
    if not passed and equal_nan and math.isnan(ref_error) and math.isnan(res_error):
        passed, reason = True, "nan_both"
    return InductorResult(bool(passed), reason, res_error, ref_error, mult, thr)
