"""The matrix unit in the lab: matmuls of a graph on a modelled unit, and the
experiments on it (the DeepSeek-V3 K sweep, presets side by side, one
block drawn bit by bit).

* :func:`unit_matmul` is what the engine's matmul kernel calls when
  ``KernelSpec.mma`` names a unit (numpy matmul shapes, operands rounded to
  the unit's input format, result rounded to the kernel's format);
* :func:`k_sweep` reproduces DeepSeek-V3 technical report section 3.3.2
  (FP8 e4m3 GEMM accumulated in a limited-precision unit, error vs K, with
  and without promotion to fp32 every ``N_C`` products);
* :func:`preset_errors` runs the same matrices on several presets;
* :func:`block_bits` lays out the alignment of one block FMA bit by bit
  (what the notebook draws).

Everything computes with :func:`numlab.kernels.mma.unit.mma` (the one model);
errors are measured against the exact product, computed in float64 where it
is exact (:func:`exact_matmul`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...formats import get_format
from .._common import round_to
from .presets import UNIT_PRESETS, preset
from .unit import MatrixUnit, mma

__all__ = ["unit_matmul", "exact_matmul", "e4m3_inputs", "k_sweep", "preset_errors", "block_bits",
           "SWEEP_KS", "DEEPSEEK_NC"]

SWEEP_KS = (256, 512, 1024, 2048, 4096, 8192, 16384)
"""K values of the default sweep (DeepSeek-V3 quote K = 4096; the sweep goes on to 16384)."""
DEEPSEEK_NC = 128
"""N_C, the promotion interval of DeepSeek-V3 section 3.3.2 (four WGMMAs of 32)."""


def unit_matmul(a, b, unit: MatrixUnit, out) -> np.ndarray:
    """``a @ b`` on ``unit`` with numpy's matmul shapes (``a`` (..., M, K),
    ``b`` (K, N) or (..., K, N), 2-D at least), as float32 values of ``out``.

    Operands are rounded to ``unit.in_fmt`` (nearest even: the conversion a
    kernel does before feeding the unit; no-op for values already in it);
    each (M, K) x (K, N) product is :func:`numlab.kernels.mma.unit.mma` (one
    call for a 2-D ``b``, one per batch entry otherwise), and the unit's
    ``out_fmt`` result is rounded to ``out`` (nearest even).
    """
    fin = get_format(unit.in_fmt)
    out = get_format(out, "out")
    a = np.asarray(a)
    b = np.asarray(b)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.asarray(round_to(a.astype(np.float32), fin, "rne"), dtype=np.float32)
        b = np.asarray(round_to(b.astype(np.float32), fin, "rne"), dtype=np.float32)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if b.ndim == 2:
        flat = a.reshape(-1, K)
        d = _mma_2d(flat, b, unit).reshape(a.shape[:-1] + (N,))
    else:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        ab = np.broadcast_to(a, batch + (M, K)).reshape(-1, M, K)
        bb = np.broadcast_to(b, batch + (K, N)).reshape(-1, K, N)
        d = np.empty((ab.shape[0], M, N), dtype=np.float64)
        for i in range(ab.shape[0]):  # one unit call per batch entry (a loop over blocks)
            d[i] = _mma_2d(ab[i], bb[i], unit)
        d = d.reshape(batch + (M, N))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(round_to(d, out, "rne"), dtype=np.float32)


def _mma_2d(a: np.ndarray, b: np.ndarray, unit: MatrixUnit) -> np.ndarray:
    if a.shape[0] == 0 or b.shape[1] == 0:
        return np.zeros((a.shape[0], b.shape[1]))
    if a.shape[1] == 0:
        return np.zeros((a.shape[0], b.shape[1]))
    return mma(a, b, unit).astype(np.float64)


def exact_matmul(a, b) -> np.ndarray:
    """``a @ b`` exactly, as float64, for inputs of at most 12 significand bits
    within a narrow exponent range (the sweep's e4m3 data): every product and
    every partial sum is then an integer multiple of the smallest product's
    lowest bit below ``2**53``, so float64 BLAS is exact.  The condition is
    checked; ValueError when it does not hold."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nz_a, nz_b = np.abs(a[a != 0]), np.abs(b[b != 0])
    if nz_a.size == 0 or nz_b.size == 0:
        return a @ b
    lsb = _min_lsb(nz_a) + _min_lsb(nz_b)
    top = math.log2(float(np.abs(a).sum(axis=1).max()) * float(np.abs(b).max()))
    if top - lsb >= 52:
        raise ValueError(f"exact_matmul: the sums need {top - lsb:.1f} bits; float64 holds 53 "
                         "(use smaller K or fewer exponents)")
    return a @ b


def _min_lsb(x: np.ndarray) -> int:
    m, e = np.frexp(x)
    # x = m 2^e with m in [0.5, 1): the lowest set bit of m * 2^53 (an integer)
    ki = (m * 2.0**53).astype(np.uint64)
    low = ki & (~ki + np.uint64(1))
    return int(np.min(e.astype(np.int64) - 53 + np.log2(low.astype(np.float64)).astype(np.int64)))


def e4m3_inputs(M: int, K: int, N: int, seed: int = 0, kind: str = "uniform"):
    """Random e4m3 matrices (float32 containers) for the sweep.

    ``kind="uniform"``: values uniform in [0, 1) rounded to e4m3 (all products
    >= 0: the truncation errors of the unit add up, the setting where
    DeepSeek-V3 quote their maximum relative error); ``"normal"``: standard
    normal entries (signs cancel)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        a, b = rng.uniform(0, 1, (M, K)), rng.uniform(0, 1, (K, N))
    elif kind == "normal":
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    else:
        raise ValueError(f"kind={kind!r} is not valid; choose one of ['uniform', 'normal']")
    f = get_format("fp8_e4m3")
    return (np.asarray(round_to(a, f, "rne"), dtype=np.float32),
            np.asarray(round_to(b, f, "rne"), dtype=np.float32))


def _errors(d: np.ndarray, exact: np.ndarray) -> dict:
    """max relative error per element and normwise relative error (inf-norm)."""
    d = d.astype(np.float64)
    err = np.abs(d - exact)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(exact != 0, err / np.abs(exact), np.where(err == 0, 0.0, np.inf))
    den = float(np.max(np.abs(exact))) if exact.size else 0.0
    return {"rel_max": float(np.max(rel)) if rel.size else 0.0,
            "rel_mean": float(np.mean(rel)) if rel.size else 0.0,
            "normwise": float(np.max(err)) / den if den > 0 else (0.0 if not err.any() else math.inf)}


def k_sweep(unit: MatrixUnit | str = "H100/fp8_e4m3/fp32", *, ks=SWEEP_KS, M: int = 16, N: int = 16,
            promote_every: int | None = DEEPSEEK_NC, seed: int = 0, kind: str = "uniform") -> list[dict]:
    """DeepSeek-V3 section 3.3.2's experiment on ``unit``: for each K, random
    e4m3 ``(M, K) x (K, N)`` matrices (:func:`e4m3_inputs`, the same seed for
    every K) multiplied by the unit alone and by the unit with promotion to an
    fp32 accumulator every ``promote_every`` products (skipped when None).

    Returns one row per K: ``{"K", "rel_max", "rel_mean", "normwise",
    "rel_max_promoted", ...}`` (errors against the exact product)."""
    unit = preset(unit) if isinstance(unit, str) else unit
    if unit.in_fmt != "fp8_e4m3":
        raise ValueError(f"unit: the sweep multiplies e4m3 data; {unit.name!r} takes {unit.in_fmt}")
    rows = []
    for K in ks:
        a, b = e4m3_inputs(M, K, N, seed, kind)
        exact = exact_matmul(a, b)
        row = {"K": int(K), **_errors(mma(a, b, replace(unit, promote_every=None)), exact)}
        if promote_every is not None:
            pu = replace(unit, promote_every=promote_every)
            row.update({k + "_promoted": v for k, v in _errors(mma(a, b, pu), exact).items()})
        rows.append(row)
    return rows


def preset_errors(a, b, names=None, *, promote_every: int | None = None) -> list[dict]:
    """The same e4m3 (or fp16 ...) matrices on several presets: one row per
    preset whose ``in_fmt`` holds the inputs, with its errors against the
    exact product, its parameters and its evidence."""
    exact = exact_matmul(a, b)
    names = list(UNIT_PRESETS) if names is None else list(names)
    rows = []
    for n in names:
        u = UNIT_PRESETS[n] if n in UNIT_PRESETS else preset(n)
        f = get_format(u.in_fmt)
        if not (np.array_equal(round_to(np.asarray(a, np.float32), f, "rne"), a)
                and np.array_equal(round_to(np.asarray(b, np.float32), f, "rne"), b)):
            continue
        if promote_every is not None:
            u = replace(u, promote_every=-(-promote_every // u.block) * u.block)
        d = mma(a, b, u)
        rows.append({"preset": u.name, "fma_size": u.fma_size, "interleave": u.interleave,
                     "align_bits": u.align_bits, "result_bits": u.result_format.p,
                     "final_rounding": u.final_rounding, **_errors(d, exact), "evidence": u.evidence})
    return rows


def block_bits(a, b, unit: MatrixUnit, c: float = 0.0) -> dict:
    """One block FMA of ``unit`` laid out bit by bit (for drawing).

    ``a``, ``b``: 1-D, ``unit.block`` values of ``unit.in_fmt``; ``c``: the
    accumulator.  Returns ``{"E", "ulp", "terms": [...], "sum", "result",
    "exact"}`` where each term is ``{"value", "anchor", "bits", "kept",
    "dropped"}``: ``bits`` maps bit positions (exponents, ``2**pos``) of the
    exact term's binary expansion to 0/1, ``kept`` is the term after
    alignment (:data:`numlab.kernels.mma.unit.ALIGN_ROUNDINGS`) and ``dropped``
    the part lost.  ``result`` is :func:`mma` of the block (the model itself),
    ``sum`` the exact sum of the kept terms (before the final rounding).
    Only for blocks without interleaving (``unit.interleave == 1``)."""
    if unit.interleave != 1:
        raise ValueError("block_bits draws one block without interleaving (unit.interleave must be 1)")
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size != unit.fma_size or b.size != unit.fma_size:
        raise ValueError(f"a and b must hold fma_size={unit.fma_size} values each, got {a.size} and {b.size}")
    terms = []
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if x == 0 or y == 0:
            terms.append({"value": 0.0, "anchor": None})
            continue
        ea = max(math.frexp(x)[1] - 1, unit.anchor_emin)
        eb = max(math.frexp(y)[1] - 1, unit.anchor_emin)
        terms.append({"value": x * y, "anchor": ea + eb})
    if c != 0:
        terms.append({"value": float(c), "anchor": max(math.frexp(c)[1] - 1, -126), "accumulator": True})
    anchors = [t["anchor"] for t in terms if t["anchor"] is not None]
    E = max(anchors) if anchors else 0
    lsb = E - 23 - unit.align_bits
    total = 0.0
    for t in terms:
        v = t["value"]
        q = math.ldexp(v, -lsb)
        kept_units = {"rtz": math.trunc, "down": math.floor, "rne": round, "sticky": math.trunc}[
            unit.align_rounding](q)
        t["kept"] = math.ldexp(kept_units, lsb)
        t["dropped"] = v - t["kept"]
        t["bits"] = _bit_positions(v)
        total += t["kept"]
    d = mma(a[None, :], b[:, None], unit, np.array([[c]], dtype=get_format(unit.out_fmt).dtype))
    exact = float(np.dot(a, b) + c)
    return {"E": E, "ulp": lsb, "terms": terms, "sum": total, "result": float(d[0, 0]), "exact": exact}


def _bit_positions(v: float) -> dict:
    """``{position: bit}`` of |v| from its leading to its lowest set bit
    (exact binary expansion of a float64; ``v = sum bit * 2**position``)."""
    if v == 0:
        return {}
    m, e = math.frexp(abs(v))
    n = int(m * 2**53)
    tz = (n & -n).bit_length() - 1
    return {e - 53 + i: (n >> i) & 1 for i in range(tz, 53)}
