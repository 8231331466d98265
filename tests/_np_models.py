"""Independent numpy versions of the zoo's models (test-only), written from the
models' docstrings in float64: ``np_model(name, inputs)`` gives the outputs by
name, with no numlab code in the arithmetic."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _rms(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _silu(x):
    return x / (1 + np.exp(-x))


def _e4m3_rne(v):
    """Nearest e4m3fn value, ties to the even code, saturating at 448: the grid
    from ml_dtypes' codes, searched in float64 (independent of numlab.rounding)."""
    grid = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)  # 0 .. 448
    a = np.minimum(np.abs(v), 448.0)
    k = np.clip(np.searchsorted(grid, a), 1, grid.size - 1)
    lo, hi = grid[k - 1], grid[k]
    up = (a - lo > hi - a) | ((a - lo == hi - a) & (k % 2 == 0))
    return np.copysign(np.where(up, hi, lo), v)


def _deepseek_qdq(x, bm, bn):
    """DeepSeek-V3's fp8 blocks: s = fp32(amax / 448) per bm x bn block, x / s to e4m3, times s."""
    R, C = x.shape
    b = x.reshape(R // bm, bm, C // bn, bn)
    s = (np.abs(b).max(axis=(1, 3), keepdims=True) / 448).astype(np.float32).astype(np.float64)
    s = np.maximum(s, 2.0 ** -126)
    return (_e4m3_rne(b / s) * s).reshape(R, C)


def np_model(name, i, heads=2):
    if name == "layernorm":
        return {"y": _ln(i["x"], i["gamma"], i["beta"], 1e-5)}
    if name == "rmsnorm":
        return {"y": _rms(i["x"], i["weight"], 1e-6)}
    if name == "softmax":
        return {"y": _softmax(i["x"])}
    if name == "log_softmax":
        z = i["x"] - i["x"].max(-1, keepdims=True)  # log(softmax) would be -inf where softmax underflows
        return {"y": z - np.log(np.exp(z).sum(-1, keepdims=True))}
    if name == "gelu_mlp":
        return {"y": _gelu_tanh(i["x"] @ i["w"] + i["b"]) * 0.5}
    if name == "attention_scores":
        d = i["q"].shape[-1]
        return {"p": _softmax(i["q"] @ np.swapaxes(i["k"], -1, -2) / math.sqrt(d))}
    if name == "swiglu":
        return {"y": (_silu(i["x"] @ i["w_gate"]) * (i["x"] @ i["w_up"])) @ i["w_down"]}
    if name == "residual_rmsnorm":
        h = i["x"] + i["residual"]
        return {"y": _rms(h, i["weight"], 1e-6), "h": h}
    if name == "transformer_block":
        x = i["x"]
        seq, dm = x.shape
        dh = dm // heads
        h = _ln(x, i["g1"], i["b1"], 1e-5)
        qkv = h @ i["w_qkv"]
        q, k, v = (qkv[:, j * dm:(j + 1) * dm].reshape(seq, heads, dh).transpose(1, 0, 2) for j in range(3))
        p = _softmax(q @ k.transpose(0, 2, 1) / math.sqrt(dh))
        o = (p @ v).transpose(1, 0, 2).reshape(seq, dm)
        x1 = x + o @ i["w_o"]
        f = _gelu_tanh(_rms(x1, i["g2"], 1e-5) @ i["w1"] + i["c1"])
        return {"y": x1 + f @ i["w2"]}
    if name == "fp8_mlp":
        h = _deepseek_qdq(i["x"], 1, 128) @ _deepseek_qdq(i["w1"], 128, 128) + i["b1"]
        return {"y": i["x"] + _deepseek_qdq(_gelu_tanh(h), 1, 128) @ i["w2"]}
    raise AssertionError(name)
