"""The operators' float64 references (plain numpy, no loop over elements), the
float64 special functions they use, and :class:`ConstValue`, a constant node's value."""

from __future__ import annotations

import base64
import math

import numpy as np

from .. import bound_rules as R
from .._digest import sha256_hex
from ..kernels import libm as _libm


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def erfc_ref(x):
    """float64 erfc, vectorised: :func:`numlab.kernels.libm.erfc64` (relative error below ~1e-13)."""
    return _libm.erfc64(x)


def erf_ref(x):
    """float64 erf, vectorised: :func:`numlab.kernels.libm.erf64` (relative error below 5e-16
    measured, 2^-44 bound)."""
    return _libm.erf64(x)


def _sigmoid(x):
    """Overflow-free logistic: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_GELU_C = math.sqrt(2.0 / math.pi)


def _gelu(x, approximate):
    if approximate == "tanh":
        # 0.5 x (1 + tanh(u)) = x * sigmoid(2u): no cancellation for x < 0
        u = _GELU_C * (x + 0.044715 * x * x * x)
        return x * _sigmoid(2.0 * u)
    # 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2): no cancellation for x < 0
    return 0.5 * x * erfc_ref(-x / math.sqrt(2.0))


class ConstValue:
    """The value of a ``constant`` node: an immutable float64 array.

    Built from a Python number, a nested list or a numpy array of any real
    dtype (bool becomes 0.0 / 1.0; integers must be exact in float64;
    float16/bfloat16/fp8/float32 widen exactly).  Equality and hashing are
    bitwise (``-0.0`` differs from ``0.0``, a NaN equals the same NaN), so
    graphs and fingerprints tell constants apart by their bytes;
    :meth:`canonical` (what ``Graph.to_dict`` writes) holds every byte.
    """

    __slots__ = ("array", "_digest")

    def __init__(self, value):
        if isinstance(value, ConstValue):
            value = value.array
        a = np.asarray(value)
        if a.dtype.kind not in "biuf" and a.dtype.name != "bfloat16" and not a.dtype.name.startswith("float8"):
            raise TypeError(f"a constant must be a real number or array, got {type(value).__name__} "
                            f"of dtype {a.dtype}")
        f = a.astype(np.float64)
        if a.dtype.kind in "iu" and a.size and np.any(f.astype(a.dtype) != a):
            raise ValueError(f"integer constant values beyond 2**53 are not exact in float64 (max |v| {np.abs(a).max()})")
        f = np.array(f, dtype=np.float64, order="C", copy=True)  # keeps a 0-d shape
        f.flags.writeable = False
        self.array = f
        self._digest = sha256_hex(f)

    @property
    def shape(self) -> tuple:
        return self.array.shape

    def __eq__(self, other) -> bool:
        return isinstance(other, ConstValue) and self.shape == other.shape and self._digest == other._digest

    def __hash__(self) -> int:
        return hash((self.shape, self._digest))

    def __repr__(self) -> str:
        if self.array.size <= 4:
            return f"ConstValue({self.array.tolist()!r})"
        return f"ConstValue(shape={self.shape}, sha256={self._digest[:12]})"

    def canonical(self) -> dict:
        """``{"const": {"shape": [...], "float64_le": base64 of the bytes}}``."""
        data = self.array.astype("<f8").tobytes()
        return {"const": {"shape": list(self.shape), "float64_le": base64.b64encode(data).decode("ascii")}}

    @classmethod
    def from_canonical(cls, d: dict) -> "ConstValue":
        c = d["const"]
        a = np.frombuffer(base64.b64decode(c["float64_le"]), dtype="<f8").reshape(tuple(c["shape"]))
        return cls(a.astype(np.float64))


def _softplus_ref(x, beta=1.0, threshold=R.SOFTPLUS_THRESHOLD):
    """torch's softplus in float64: ``x`` for ``beta x > threshold``, else
    ``log1p(exp(beta x)) / beta`` (exp of at most ``threshold``: no overflow; NaN
    propagates); torch's defaults beta 1, threshold 20."""
    x = _f64(x)
    xb = x * beta
    with np.errstate(all="ignore"):
        return np.where(xb > threshold, x, np.log1p(np.exp(np.minimum(xb, threshold))) / beta)


def _mish_ref(x):
    """mish ``x * tanh(softplus(x))`` in float64 (softplus with torch's
    threshold 20: above it ``tanh`` of either form is 1.0 in float64, so this
    is torch's ``x * tanh(log1p(exp(x)))`` without overflow); NaN at ``-inf``
    (``-inf * 0``), as torch."""
    x = _f64(x)
    return x * np.tanh(_softplus_ref(x))


def _hardswish_ref(x):
    """``x * min(max(x + 3, 0), 6) / 6`` in float64; exactly ``x`` for
    ``x >= 3`` and ``x * 0 = -0.0`` for ``x <= -3`` (NaN at ``-inf``, as torch)."""
    x = _f64(x)
    return np.where(x >= 3.0, x, x * np.clip(x + 3.0, 0.0, 6.0) / 6.0)


def _var_ref(x, axis, keepdims, correction):
    x = _f64(x)
    m = np.mean(x, axis=axis, keepdims=True)
    d = x - m
    n = math.prod(x.shape[a] for a in axis)
    return np.sum(d * d, axis=axis, keepdims=keepdims) / (n - correction)


def _slice_ref(x, begin, end, step):
    x = np.asarray(x)
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, step, strict=True))]


def _split_ref(x, axis, sizes, index):
    x = np.asarray(x)
    start = sum(sizes[:index])
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(start, start + sizes[index])
    return x[tuple(sl)]


def _gather_ref(x, idx=None, *, axis, indices=None):
    x = np.asarray(x)
    if idx is None:
        idx = np.asarray(indices, dtype=np.int64)
    else:
        f = np.asarray(idx)
        idx = f.astype(np.int64)
        n = x.shape[axis]
        if np.any(idx != f) or (idx.size and (idx.min() < -n or idx.max() >= n)):
            raise ValueError(f"gather: index values must be integers in {-n}..{n - 1}")
    return np.take(x, idx, axis=axis)


def _reshape_ref(x, shape):
    return np.reshape(np.asarray(x), shape)


def _transpose_ref(x, perm):
    return np.transpose(np.asarray(x), perm)


def _concat_ref(*xs, axis):
    return np.concatenate([np.asarray(x) for x in xs], axis=axis)


def _broadcast_ref(x, shape):
    return np.broadcast_to(np.asarray(x), shape).copy()


def _softmax_ref(x, axis):
    x = _f64(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_ref(x, axis):
    x = _f64(x)
    d = x - np.max(x, axis=axis, keepdims=True)
    return d - np.log(np.sum(np.exp(d), axis=axis, keepdims=True))


def _layer_norm_ref(x, gamma=None, beta=None, *, axis, eps):
    x = _f64(x)
    mu = np.mean(x, axis=axis, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=axis, keepdims=True)
    y = d / np.sqrt(var + eps)
    if gamma is not None:
        y = y * _f64(gamma)
    if beta is not None:
        y = y + _f64(beta)
    return y


def _rms_norm_ref(x, weight=None, *, axis, eps):
    x = _f64(x)
    ms = np.mean(x * x, axis=axis, keepdims=True)
    y = x / np.sqrt(ms + eps)
    if weight is not None:
        y = y * _f64(weight)
    return y
