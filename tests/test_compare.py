"""msit/msprobe-style compare: every column against an independent reference,
streaming == whole-array, fused-block matching, first divergence, robustness,
CSV/CLI, and bounded memory on large memory-mapped dumps."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from _oracles import same_bits_mask
from hypothesis import given
from hypothesis import strategies as st

import numlab
from numlab import metrics, zoo
from numlab.compare import (
    COLUMNS,
    MSIT_COLUMNS,
    MSPROBE_COLUMNS,
    Thresholds,
    compare_arrays,
    compare_dumps,
    write_dump,
)
from numlab.compare.bisect import bisect_run, range_diverges
from numlab.compare.dump import MANIFEST
from numlab.compare.flavors import FLAVOR_HEADERS
from numlab.formats import ulp

EPS64 = 2.0**-52


# --------------------------------------------------------------------------
# independent references: plain scalar Python loops / mpmath (test-only)
# --------------------------------------------------------------------------
def _ulp_scalar(a, fmt):
    """ulp of fmt at the reference value a (Goldberg: 2**(e - p + 1) with
    2**e <= |a| < 2**(e+1), e >= emin; |a| beyond fmt.max uses fmt.max), by
    math.frexp on one Python float -- independent of numlab's ulp code."""
    a = min(abs(a), fmt.max)
    e = math.frexp(a)[1] - 1 if a > 0 else fmt.emin
    return math.ldexp(1.0, max(e, fmt.emin) - fmt.p + 1)


def ref_columns(g, m, fmt):
    gl = [float(v) for v in np.asarray(g, dtype=np.float64).ravel()]
    ml = [float(v) for v in np.asarray(m, dtype=np.float64).ravel()]
    n = len(gl)
    mpmath = pytest.importorskip(
        "mpmath", reason="mpmath (installed with torch's sympy) gives the 40-digit reference")
    mp = mpmath.mp
    mp.dps = 40
    G = [mp.mpf(v) for v in gl]
    M = [mp.mpf(v) for v in ml]
    dot = mp.fsum(a * b for a, b in zip(G, M, strict=True))
    gg = mp.fsum(a * a for a in G)
    mm = mp.fsum(b * b for b in M)
    dd = mp.fsum((b - a) ** 2 for a, b in zip(G, M, strict=True))
    lg = mp.log(mp.fsum(mp.exp(a) for a in G))
    lm = mp.log(mp.fsum(mp.exp(b) for b in M))
    kl = mp.fsum(mp.exp(a - lg) * ((a - lg) - (b - lm)) for a, b in zip(G, M, strict=True))
    rel_msit = [abs(b / a - 1) if abs(a) > EPS64 else 0.0 for a, b in zip(gl, ml, strict=True)]
    abs_msit = [abs(b - a) if abs(a) > EPS64 else 0.0 for a, b in zip(gl, ml, strict=True)]
    rel_mp = []
    for a, b in zip(gl, ml, strict=True):
        if a == 0:
            a, b = a + EPS64, b + EPS64
        rel_mp.append(abs((b - a) / a))
    ulps = [abs(b - a) / _ulp_scalar(a, fmt) for a, b in zip(gl, ml, strict=True)]
    return {
        "cosine_similarity": float(dot / (mp.sqrt(gg) * mp.sqrt(mm))),
        "max_relative_error": max(rel_msit),
        "mean_relative_error": math.fsum(rel_msit) / n,
        "max_absolute_error": max(abs_msit),
        "mean_absolute_error": math.fsum(abs_msit) / n,
        "kl_divergence": max(float(kl), 0.0),
        "relative_euclidean_distance": float(mp.sqrt(dd / gg)),
        "EucDist": float(mp.sqrt(dd)),
        "MaxAbsErr": max(abs(b - a) for a, b in zip(gl, ml, strict=True)),
        "MaxRelativeErr": max(rel_mp),
        "One Thousandth Err Ratio": sum(r < 0.001 for r in rel_mp) / n,
        "Five Thousandths Err Ratio": sum(r < 0.005 for r in rel_mp) / n,
        "max_ulp_error": max(ulps),
        "mean_ulp_error": math.fsum(ulps) / n,
        "golden_max_value": max(gl), "golden_min_value": min(gl), "golden_mean_value": math.fsum(gl) / n,
        "my_max_value": max(ml), "my_min_value": min(ml), "my_mean_value": math.fsum(ml) / n,
    }


def _pair(seed, n=300, dtype=np.float16, rel=2e-3):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal(n) * 3).astype(dtype)
    noise = 1 + rel * rng.standard_normal(n)
    m = (g.astype(np.float64) * noise).astype(dtype)
    g[:5] = 0  # zeros exercise the msit mask and the msprobe eps shift
    m[:2] = 0
    return g, m


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("seed", [0, 1])
def test_columns_match_independent_reference(dtype, seed):
    g, m = _pair(seed, dtype=dtype)
    fmt = numlab.get_format(dtype)
    row = compare_arrays(g, m, chunk_elems=37)
    ref = ref_columns(g, m, fmt)
    for k, v in ref.items():
        assert row[k] == pytest.approx(v, rel=1e-9, abs=1e-300), k
    # bitwise: same dtype -> same bits
    assert row["bitwise_equal_ratio"] == np.count_nonzero(same_bits_mask(g, m)) / g.size
    assert row["ulp_format"] == fmt.name
    assert row["n_elements"] == g.size
    assert row["cmp_fail_reason"] == ""
    assert (row["golden_nan"], row["golden_inf"], row["my_nan"], row["my_inf"]) == (0, 0, 0, 0)


def test_ulp_reference_agrees_with_formats_ulp():
    """The test's scalar ulp is checked once against numlab.formats.ulp on
    every fp16 value and on bf16/fp32 powers of two and their neighbours."""
    f16 = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    assert np.array_equal(np.array([_ulp_scalar(v, numlab.FP16) for v in f16]), ulp(f16, numlab.FP16))
    for fmt in (numlab.BF16, numlab.FP32):
        e = np.arange(fmt.emin - fmt.p, 100)
        v = np.concatenate([np.ldexp(1.0, e), np.ldexp(1.5, e), np.nextafter(np.ldexp(1.0, e), 0)])
        assert np.array_equal(np.array([_ulp_scalar(x, fmt) for x in v]), ulp(v, fmt))


def test_columns_agree_with_numlab_metrics():
    g, m = _pair(3, n=2000)
    row = compare_arrays(g, m, chunk_elems=101)
    assert row["cosine_similarity"] == pytest.approx(metrics.cosine_similarity(g, m), rel=1e-13)
    assert row["kl_divergence"] == pytest.approx(metrics.kl_divergence(g.ravel(), m.ravel()), rel=1e-7)
    assert row["relative_euclidean_distance"] == pytest.approx(metrics.relative_euclidean(g, m), rel=1e-13)
    assert row["EucDist"] == pytest.approx(metrics.euclidean(g, m), rel=1e-13)
    assert row["One Thousandth Err Ratio"] == metrics.error_ratio(g, m, 1e-3)
    assert row["Five Thousandths Err Ratio"] == metrics.error_ratio(g, m, 5e-3)
    assert (row["max_relative_error"], row["mean_relative_error"]) == pytest.approx(
        metrics.msit_relative_error(g, m), rel=1e-13)
    assert (row["max_absolute_error"], row["mean_absolute_error"]) == pytest.approx(
        metrics.msit_absolute_error(g, m), rel=1e-13)
    assert row["bitwise_equal_ratio"] == metrics.bitwise_equal_share(g, m)
    assert row["max_ulp_error"] == float(metrics.ulp_error(g, m, "fp16").max())


def test_msit_formulas_against_torch(torch):
    """msit's own torch expressions (cmp_algorithm.py), evaluated in float64."""
    F = torch.nn.functional
    g, m = _pair(7, n=500)
    row = compare_arrays(g, m, chunk_elems=61)
    tg = torch.from_numpy(g.astype(np.float64))
    tm = torch.from_numpy(m.astype(np.float64))
    kl = F.kl_div(F.log_softmax(tm, dim=-1), F.softmax(tg, dim=-1), reduction="sum").item()
    assert row["kl_divergence"] == pytest.approx(max(kl, 0.0), rel=1e-6)
    assert row["cosine_similarity"] == pytest.approx(torch.cosine_similarity(tg, tm, dim=0).item(),
                                                     rel=1e-14)
    rel = torch.where(tg.abs() > EPS64, (tm / tg - 1).abs(), torch.zeros_like(tg))
    assert (row["max_relative_error"], row["mean_relative_error"]) == pytest.approx(
        (rel.max().item(), rel.mean().item()), rel=1e-14)
    red = (((tm - tg) ** 2).sum() / (tg**2).sum()).sqrt().item()
    assert row["relative_euclidean_distance"] == pytest.approx(red, rel=1e-13)


def test_streaming_with_matched_nonfinite():
    rng = np.random.default_rng(11)
    g = rng.standard_normal(5000).astype(np.float32)
    m = (g * (1 + 1e-3 * rng.standard_normal(5000))).astype(np.float32)
    pos = rng.choice(5000, 40, replace=False)
    vals = np.array([np.nan, np.inf, -np.inf, np.nan] * 10, np.float32)
    g[pos] = vals
    m[pos] = vals
    a = compare_arrays(g, m, chunk_elems=97)
    b = compare_arrays(g, m, chunk_elems=10**6)
    z = compare_arrays(np.where(np.isfinite(g), g, 0), np.where(np.isfinite(m), m, 0), chunk_elems=97)
    assert a["golden_nan"] == 20 and a["golden_inf"] == 20 and a["nonfinite_mismatch"] == 0
    for k in MSIT_COLUMNS + MSPROBE_COLUMNS[:-1] + ["max_ulp_error", "mean_ulp_error"]:
        assert a[k] == pytest.approx(b[k], rel=1e-12), k
        assert a[k] == pytest.approx(z[k], rel=1e-12), k
    assert a["bitwise_equal_ratio"] == b["bitwise_equal_ratio"] >= 40 / 5000


def test_kl_when_softmaxes_are_far_apart():
    # E_p[exp(m - g)] under- or overflows: the two-log-sum-exp fallback
    g = np.random.default_rng(1).standard_normal(1000)
    half = np.arange(1000) < 500
    for m in (g - 2000, g * 50, np.where(half, g - 2000, g), g + 800 * half):
        got = compare_arrays(g, m, chunk_elems=64)["kl_divergence"]
        want = metrics.kl_divergence(g, m)
        assert math.isfinite(got) and got == pytest.approx(want, rel=1e-12, abs=1e-9)


@given(
    st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=60),
    st.lists(st.floats(-1e-2, 1e-2), min_size=60, max_size=60),
    st.integers(1, 70),
)
def test_streaming_equals_single_chunk(vals, noise, chunk):
    g = np.array(vals, np.float32)
    m = (g * (1 + np.array(noise[: g.size]))).astype(np.float32)
    a = compare_arrays(g, m, chunk_elems=chunk)
    b = compare_arrays(g, m, chunk_elems=10**6)
    for k in MSIT_COLUMNS + MSPROBE_COLUMNS[:-1] + ["max_ulp_error", "mean_ulp_error",
                                                     "bitwise_equal_ratio"]:
        if isinstance(b[k], float) and math.isnan(b[k]):
            assert math.isnan(a[k]), k
        else:
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), k
    assert a["Accuracy Reached or Not"] == b["Accuracy Reached or Not"]


@pytest.mark.parametrize("cos,max_abs,want", [
    (1.0, 0.0, "Yes"),
    (0.99, 1e-3, "Yes"),          # both limits are strict inequalities
    (0.98, 1e-3, "Yes"),          # cosine < 0.99 alone is not enough ...
    (0.98, 0.0011, "No"),         # ... with MaxAbsErr > 0.001 it fails
    (0.995, 0.5, "Yes"),          # large abs error with a good cosine passes
    (0.9, 0.0, "Yes"),
    (0.8999, 0.0, "No"),          # cosine < 0.9 fails on its own
    (1.0, 1.0, "Yes"),
    (1.0, 1.0001, "No"),          # MaxAbsErr > 1 fails on its own
    (float("nan"), 0.0, "No"),
    (1.0, float("nan"), "No"),
])
def test_accuracy_rule_table(cos, max_abs, want):
    """msprobe check_accuracy: No if (cos < 0.99 and abs > 0.001) or cos < 0.9
    or abs > 1 (CompareConst thresholds), written out case by case."""
    assert Thresholds().accuracy(cos, max_abs) == want


def test_thresholds_reject_bad_values():
    for kw, name in (({"cosine": 2.0}, "cosine"), ({"cosine_min": -1.5}, "cosine_min"),
                     ({"max_abs_err": -1e-3}, "max_abs_err"), ({"max_abs_err_max": -1}, "max_abs_err_max"),
                     ({"max_rel_err": -1}, "max_rel_err")):
        with pytest.raises(ValueError, match=name):
            Thresholds(**kw)
    with pytest.raises(TypeError, match="cosine"):
        Thresholds(cosine=float("nan"))


def test_compare_dumps_rejects_bad_options_up_front():
    a = {"a": np.ones(3)}
    with pytest.raises(ValueError, match="fp17"):
        compare_dumps(a, a, fmt="fp17")
    with pytest.raises(ValueError, match="chunk_elems"):
        compare_dumps(a, a, chunk_elems=0)
    with pytest.raises(TypeError, match="thresholds"):
        compare_dumps(a, a, thresholds=0.99)


@given(st.floats(allow_nan=True, allow_infinity=False), st.floats(0, 10))
def test_accuracy_rule_is_msprobes(cos, max_abs):
    yes = Thresholds().accuracy(cos, max_abs) == "Yes"
    assert yes == metrics.msprobe_accuracy_reached(cos, max_abs)


def test_exact_match_and_correct_rounding():
    rng = np.random.default_rng(5)
    ref = rng.standard_normal(4000) * 10
    f16 = ref.astype(np.float16)
    row = compare_arrays(f16, f16.copy())
    assert row["bitwise_equal_ratio"] == 1.0 and row["max_ulp_error"] == 0.0
    assert row["cosine_similarity"] == 1.0 and row["kl_divergence"] == 0.0
    assert row["Accuracy Reached or Not"] == "Yes"
    # fp64 golden vs its correctly rounded fp16: at most half an ulp, dtype noted
    row = compare_arrays(ref, f16, fmt="fp16")
    assert 0.4 < row["max_ulp_error"] <= 0.5
    assert "dtype mismatch" in row["cmp_fail_reason"] and row["golden_dtype"] == "fp64"


# --------------------------------------------------------------------------
# robustness: a row with a reason, never a crash
# --------------------------------------------------------------------------
def test_shape_mismatch():
    row = compare_arrays(np.ones((2, 3)), np.ones((3, 2)))
    assert row["Accuracy Reached or Not"] == "Unmatched"
    assert "shape mismatch" in row["cmp_fail_reason"] and "same number" in row["cmp_fail_reason"]
    assert "cosine_similarity" not in row


def test_nan_on_one_side_only():
    g = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    m = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    row = compare_arrays(g, m)
    assert row["nonfinite_mismatch"] == 2 and row["my_nan"] == 1 and row["my_inf"] == 1
    assert row["golden_nan"] == 0
    for k in MSIT_COLUMNS + MSPROBE_COLUMNS[:-1]:
        assert math.isnan(row[k]), k
    assert row["Accuracy Reached or Not"] == "No"
    assert "inf or nan" in row["cmp_fail_reason"]
    assert math.isnan(row["my_max_value"])  # IEEE: the NaN propagates into the statistics


def test_nan_at_same_positions_counted_and_zeroed():
    g = np.array([1.0, np.nan, 3.0, -np.inf, 5.0], np.float32)
    m = np.array([1.5, np.nan, 3.0, -np.inf, 5.0], np.float32)
    row = compare_arrays(g, m)
    z = compare_arrays(np.where(np.isfinite(g), g, 0), np.where(np.isfinite(m), m, 0))
    assert row["nonfinite_mismatch"] == 0 and row["golden_nan"] == 1 and row["golden_inf"] == 1
    for k in ("cosine_similarity", "EucDist", "MaxAbsErr", "max_relative_error"):
        assert row[k] == z[k], k
    assert "set to 0" in row["cmp_fail_reason"]
    # +inf vs -inf is a mismatch
    row = compare_arrays(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]))
    assert row["nonfinite_mismatch"] == 1


def test_empty_zero_and_odd_dtypes():
    row = compare_arrays(np.zeros((0, 3)), np.zeros((0, 3)))
    assert "empty" in row["cmp_fail_reason"]
    row = compare_arrays(np.zeros(4), np.zeros(4))
    assert row["cosine_similarity"] == 1.0 and row["relative_euclidean_distance"] == 0.0
    row = compare_arrays(np.zeros(4), np.ones(4))
    assert math.isnan(row["cosine_similarity"]) and "all the data is zero in golden" in row["cmp_fail_reason"]
    row = compare_arrays(np.ones(3, np.complex64), np.ones(3, np.complex64))
    assert "unsupported dtype" in row["cmp_fail_reason"]
    row = compare_arrays(np.array(["a"]), np.array([1.0]))
    assert "unsupported dtype" in row["cmp_fail_reason"]
    row = compare_arrays(np.array(2.0), np.array(2.5))  # 0-d
    assert row["MaxAbsErr"] == 0.5
    row = compare_arrays(np.array([True, False]), np.array([True, True]))
    assert row["bitwise_equal_ratio"] == 0.5
    row = compare_arrays(np.arange(5, dtype=np.int32), np.arange(5, dtype=np.int64))
    assert row["MaxAbsErr"] == 0.0 and "dtype mismatch" in row["cmp_fail_reason"]
    # integer data has no ULP in any format: blank, not ulps of fp32 subnormals
    row = compare_arrays(np.arange(5), np.arange(5) + 1)
    assert row["MaxAbsErr"] == 1.0 and row["max_ulp_error"] == row["ulp_format"] == ""
    assert "no ULP" in row["cmp_fail_reason"]
    row = compare_arrays(np.arange(5), np.arange(5, dtype=np.float16) + 1)  # mine's format
    assert row["ulp_format"] == "fp16" and row["max_ulp_error"] == 2.0**24  # 1 / 2**-24
    with pytest.raises(ValueError, match="chunk_elems"):
        compare_arrays(np.ones(2), np.ones(2), chunk_elems=0)


def test_folders_with_problems_give_rows(tmp_path):
    gp, mp = tmp_path / "g", tmp_path / "m"
    gp.mkdir()
    mp.mkdir()
    np.save(gp / "ok.npy", np.ones(4, np.float32))
    np.save(mp / "ok.npy", np.ones(4, np.float32))
    np.save(gp / "shape.npy", np.ones(4, np.float32))
    np.save(mp / "shape.npy", np.ones(5, np.float32))
    np.save(gp / "dt.npy", np.ones(4, np.float64))
    np.save(mp / "dt.npy", np.ones(4, np.float16))
    np.save(gp / "trunc.npy", np.ones(1000, np.float32))
    np.save(mp / "trunc.npy", np.ones(1000, np.float32))
    (mp / "trunc.npy").write_bytes((mp / "trunc.npy").read_bytes()[:500])
    (gp / "garbage.npy").write_bytes(b"\x00\x01garbage")
    np.save(mp / "garbage.npy", np.ones(2))
    np.save(gp / "only_golden.npy", np.ones(2))
    np.save(mp / "only_mine.npy", np.ones(2))
    rep = compare_dumps(gp, mp)
    by = {r["node"]: r for r in rep.rows}
    assert by["ok"]["Accuracy Reached or Not"] == "Yes"
    assert "shape mismatch" in by["shape"]["cmp_fail_reason"]
    assert "dtype mismatch" in by["dt"]["cmp_fail_reason"] and by["dt"]["MaxAbsErr"] == 0.0
    assert "unreadable" in by["trunc"]["cmp_fail_reason"] and "trunc.npy" in by["trunc"]["cmp_fail_reason"]
    assert "unreadable" in by["garbage"]["cmp_fail_reason"]
    assert by["only_golden"]["match"] == "missing_mine"
    assert by["only_mine"]["match"] == "missing_golden"
    # empty folders
    (tmp_path / "e1").mkdir()
    (tmp_path / "e2").mkdir()
    rep = compare_dumps(tmp_path / "e1", tmp_path / "e2")
    assert [r["match"] for r in rep.rows] == ["empty_golden", "empty_my"]
    assert all("no dumped arrays" in r["cmp_fail_reason"] for r in rep.rows)
    # a corrupt manifest dump: the bad file is a row with its reason
    write_dump(tmp_path / "md", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    man = json.loads((tmp_path / "md" / MANIFEST).read_text())
    (tmp_path / "md" / man["nodes"]["b"]["file"]).write_bytes(b"x" * man["nodes"]["b"]["bytes"])
    os.remove(tmp_path / "md" / man["nodes"]["a"]["file"])
    rep = compare_dumps(tmp_path / "md", tmp_path / "md")
    by = {r["node"]: r for r in rep.rows}
    assert "missing file" in by["a"]["cmp_fail_reason"]
    assert "sha256" in by["b"]["cmp_fail_reason"]
    # a single file against a single file, also under different names (msit -gp FILE -mp FILE)
    rep = compare_dumps(gp / "ok.npy", mp / "ok.npy")
    assert len(rep.rows) == 1 and rep.rows[0]["Accuracy Reached or Not"] == "Yes"
    rep = compare_dumps(gp / "ok.npy", mp / "dt.npy")
    (row,) = rep.rows
    assert row["node"] == "dt" and row["match"] == "matched" and row["golden_path"].endswith("ok.npy")
    assert row["MaxAbsErr"] == 0.0 and "dtype mismatch" in row["cmp_fail_reason"]


# --------------------------------------------------------------------------
# fused-block matching and the first divergence
# --------------------------------------------------------------------------
def _graph_meta():
    # x -> a -> b -> c -> d -> e ; fused block f1 = [b, c], f2 = [d, e]
    nodes = {"a": ["x"], "b": ["a"], "c": ["b", "x"], "d": ["c"], "e": ["d"]}
    node_meta = {k: {"op": f"op_{k}", "inputs": v} for k, v in nodes.items()}
    return node_meta, list(nodes)


def _dumps(tmp_path, bad_at=None, scale=1e-1):
    """golden: eager (every node); mine: fused (block outputs c and e) with an
    error introduced at ``bad_at`` and carried downstream."""
    node_meta, order = _graph_meta()
    rng = np.random.default_rng(0)
    base = {k: rng.standard_normal(64).astype(np.float32) for k in order}
    gold = dict(base)
    mine = {}
    off = False
    for k in order:
        off = off or k == bad_at
        v = base[k] * (1 + scale) + 0.5 if off else base[k]
        mine[k] = v.astype(np.float32)
    mine = {k: mine[k] for k in ("a", "c", "e")}
    write_dump(tmp_path / "eager", gold, node_meta=node_meta,
               run_meta={"mode": "eager", "dtype": "fp32", "order": order})
    blocks = {"f0": {"members": ["a"], "outputs": ["a"]},
              "f1": {"members": ["b", "c"], "outputs": ["c"]},
              "f2": {"members": ["d", "e"], "outputs": ["e"]}}
    write_dump(tmp_path / "fused", mine, node_meta={k: dict(v, block=None) for k, v in node_meta.items()},
               run_meta={"mode": "fused", "dtype": "fp32", "order": order, "blocks": blocks})
    return tmp_path / "eager", tmp_path / "fused"


def test_fused_block_matching(tmp_path):
    g, m = _dumps(tmp_path)
    rep = compare_dumps(g, m)
    assert [r["node"] for r in rep.rows] == ["a", "b", "c", "d", "e"]
    by = {r["node"]: r for r in rep.rows}
    assert by["b"]["match"] == by["d"]["match"] == "inside_block"
    assert by["b"]["block"] == "f1" and "compared at node c" in by["b"]["cmp_fail_reason"]
    assert by["c"]["match"] == "matched" and by["c"]["block"] == "f1"
    assert by["a"]["block"] == ""  # singleton blocks are not "fused"
    assert by["c"]["inputs"] == "a x"  # the block's external inputs
    assert rep.first_divergence is None and not rep.failing


def test_plain_folders_report_first_failing(tmp_path):
    for side, bad in (("g", 1.0), ("m", 2.0)):
        (tmp_path / side).mkdir()
        for i, name in enumerate(["n1", "n2", "n10"]):  # natural order n1, n2, n10
            v = np.full(8, i + 1.0, np.float32)
            if name != "n1":
                v = v * bad
            np.save(tmp_path / side / f"{name}.npy", v)
    rep = compare_dumps(tmp_path / "g", tmp_path / "m")
    assert [r["node"] for r in rep.rows] == ["n1", "n2", "n10"]
    assert rep.first_divergence["node"] == "n2"
    assert [r["error_origin"] for r in rep.rows] == ["", "first_failing", ""]
    assert "no graph information" in rep.summary()


def test_block_named_dump_matches_last_member(tmp_path):
    node_meta, order = _graph_meta()
    v = {k: np.full(4, i, np.float32) for i, k in enumerate(order)}
    write_dump(tmp_path / "g", v, node_meta=node_meta, run_meta={"order": order})
    # another tool names the fused output after the block
    write_dump(tmp_path / "m", {"a": v["a"], "f1": v["c"]},
               run_meta={"blocks": {"f1": {"members": ["b", "c"]}}})
    rep = compare_dumps(tmp_path / "g", tmp_path / "m")
    c = rep.row("c")
    assert c["match"] == "matched" and c["bitwise_equal_ratio"] == 1.0
    assert "matched to its last member c" in c["cmp_fail_reason"]
    # a graph node that happens to share a block's name is matched as itself
    meta = {"f1": {"op": "neg", "inputs": ["x"]}, "y": {"op": "add", "inputs": ["f1", "x"]}}
    run = {"order": ["f1", "y"], "blocks": {"f1": {"members": ["q", "y"]}}}
    v2 = {"f1": np.ones(4, np.float32), "y": np.full(4, 2.0, np.float32)}
    write_dump(tmp_path / "g2", v2, node_meta=meta, run_meta=run)
    write_dump(tmp_path / "m2", v2, node_meta=meta, run_meta=run)
    rep = compare_dumps(tmp_path / "g2", tmp_path / "m2")
    assert [(r["node"], r["match"]) for r in rep.rows] == [("f1", "matched"), ("y", "matched")]


@pytest.mark.parametrize("bad_at,first", [("a", "a"), ("b", "c"), ("c", "c"), ("d", "e")])
def test_first_divergence_introduced_vs_carried(tmp_path, bad_at, first):
    g, m = _dumps(tmp_path, bad_at=bad_at)
    rep = compare_dumps(g, m)
    assert rep.first_divergence is not None and rep.first_divergence["node"] == first
    origins = {r["node"]: r["error_origin"] for r in rep.rows}
    assert origins[first] == "introduced"
    later = {"a": ["c", "e"], "c": ["e"], "e": []}[first]
    for n in later:
        assert origins[n] == "carried", (n, origins)
    assert list(origins.values()).count("introduced") == 1
    assert f"first divergence: {first}" in rep.summary()
    assert "not bit-identical" not in rep.first_divergence["cmp_fail_reason"]  # upstream is bit-equal


def test_introduced_after_inputs_that_differ_slightly_is_flagged(tmp_path):
    node_meta, order = _graph_meta()
    rng = np.random.default_rng(2)
    gold = {k: rng.uniform(1.0, 2.0, 64).astype(np.float32) for k in order}
    mine = dict(gold)
    a = gold["a"].copy()
    a[:16] = np.nextafter(a[:16], np.float32(3))  # a differs by one ulp in a quarter: passes
    mine["a"] = a
    mine["b"] = gold["b"] + np.float32(1.5)  # b fails (MaxAbsErr > 1): introduced after a passing, differing input
    write_dump(tmp_path / "g", gold, node_meta=node_meta, run_meta={"order": order})
    write_dump(tmp_path / "m", mine, node_meta=node_meta, run_meta={"order": order})
    rep = compare_dumps(tmp_path / "g", tmp_path / "m")
    assert rep.row("a")["bitwise_equal_ratio"] == 0.75 and not Thresholds().fails(rep.row("a"))
    fd = rep.first_divergence
    assert fd["node"] == "b" and fd["error_origin"] == "introduced"
    assert "not bit-identical (bitwise-equal share 0.75 at a)" in fd["cmp_fail_reason"]


def test_first_divergence_with_stricter_thresholds(tmp_path):
    # a relative error of 1e-5 introduced at c (output of block f1) and
    # carried to e: msprobe's rule passes it, the extra criteria catch it
    node_meta, order = _graph_meta()
    rng = np.random.default_rng(4)
    gold = {k: rng.uniform(1.0, 2.0, 64).astype(np.float32) for k in order}
    mine = {k: gold[k] * np.float32(1 + 1e-5) if k in ("c", "e") else gold[k] for k in ("a", "c", "e")}
    blocks = {"f1": {"members": ["b", "c"]}, "f2": {"members": ["d", "e"]}}
    write_dump(tmp_path / "g", gold, node_meta=node_meta, run_meta={"order": order, "dtype": "fp32"})
    write_dump(tmp_path / "m", mine, node_meta=node_meta,
               run_meta={"order": order, "dtype": "fp32", "blocks": blocks})
    assert compare_dumps(tmp_path / "g", tmp_path / "m").first_divergence is None
    for th in (Thresholds(max_rel_err=1e-6), Thresholds(max_ulp=4)):
        rep = compare_dumps(tmp_path / "g", tmp_path / "m", thresholds=th)
        assert rep.first_divergence["node"] == "c"
        assert {r["node"]: r["error_origin"] for r in rep.failing} == {"c": "introduced", "e": "carried"}
    # a bound just above the error passes again (1e-5 relative is at most 168 fp32 ulps)
    assert not compare_dumps(tmp_path / "g", tmp_path / "m", thresholds=Thresholds(max_rel_err=2e-5)).failing
    assert not compare_dumps(tmp_path / "g", tmp_path / "m", thresholds=Thresholds(max_ulp=200)).failing
    with pytest.raises(ValueError, match="max_ulp"):
        Thresholds(max_ulp=-1)


def test_run_result_objects_compare_in_memory():
    node = lambda name, op, ins: SimpleNamespace(name=name, op=op, inputs=tuple(ins))  # noqa: E731
    graph = SimpleNamespace(inputs={"x": (3,)}, outputs=["b"],
                            nodes=[node("a", "exp", ["x"]), node("b", "neg", ["a"])])
    eager = SimpleNamespace(values={"a": np.ones(3, np.float16), "b": -np.ones(3, np.float16)},
                            graph=graph, plan=None, mode="eager", fmt=numlab.FP16)
    fused = SimpleNamespace(values={"a": np.ones(3, np.float16), "b": -np.full(3, 3, np.float16)},
                            graph=graph, plan=None, mode="fused", fmt=numlab.FP16)
    rep = compare_dumps(eager, fused)
    assert rep.first_divergence["node"] == "b" and rep.first_divergence["op"] == "neg"
    assert rep.row("a")["ulp_format"] == "fp16"
    rep = compare_dumps({"a": np.ones(2)}, {"a": np.ones(2)})
    assert rep.rows[0]["Accuracy Reached or Not"] == "Yes"
    with pytest.raises(TypeError, match="cannot compare"):
        compare_dumps(3, {"a": np.ones(2)})


def test_real_executors_eager_vs_fused():
    zoo = pytest.importorskip("numlab.zoo", reason="needs numlab.zoo")
    g = zoo.MODELS["transformer_block"]()
    x = zoo.make_inputs(g, seed=0)
    e = numlab.run(g, x, mode="eager", fmt="fp16")
    # composites decomposed (the autofuse preset keeps them whole: no "decomposed" rows there)
    f = numlab.run(g, x, mode="fused", fmt="fp16", fusion="autofuse+decompose")
    rep = compare_dumps(e, f)
    kinds = {r["match"] for r in rep.rows}
    assert {"matched", "inside_block", "decomposed"} <= kinds
    assert "decomposed" not in {r["match"] for r in compare_dumps(e, numlab.run(g, x, mode="fused", fmt="fp16")).rows}
    # every value the fused run dumped under a source-graph name is compared
    for name in e.values:
        if name in f.values:
            assert rep.row(name)["match"] == "matched"
    # data movement never changes a value: a reshape/transpose row has exactly
    # the bitwise-equal share of its input (the same elements, permuted)
    moves = [nd for nd in g.nodes if nd.op in ("reshape", "transpose")]
    assert len(moves) >= 6
    for nd in moves:
        r, src = rep.row(nd.name), rep.row(nd.inputs[0])
        assert r["match"] == src["match"] == "matched"
        assert r["bitwise_equal_ratio"] == src["bitwise_equal_ratio"] < 1.0, nd.name
        assert r["MaxAbsErr"] == src["MaxAbsErr"] and r["max_ulp_error"] == src["max_ulp_error"]
    assert rep.row("y")["ulp_format"] == "fp16"


# --------------------------------------------------------------------------
# CSV and CLI
# --------------------------------------------------------------------------
def test_csv_roundtrip_and_no_overwrite(tmp_path):
    g, m = _dumps(tmp_path, bad_at="c")
    rep = compare_dumps(g, m)
    out = rep.to_csv(tmp_path / "r.csv")
    with open(out, newline="") as f:
        assert next(csv.reader(f)) == COLUMNS  # the header is the first line: no comment above it
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS and len(rows) == len(rep.rows)
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["file"] == "r.csv" and side["flavor"] == "exact" and side["columns"] == COLUMNS
    assert side["flavor_note"].startswith("flavor=exact: every metric is computed exactly in float64")
    assert side["row_count"] == len(rows) and side["thresholds"]["cosine"] == rep.thresholds.cosine
    for k in ("cosine_similarity", "kl_divergence", "One Thousandth Err Ratio",
              "Accuracy Reached or Not", "cmp_fail_reason", "EucDist"):
        assert k in rows[0]
    for r, orig in zip(rows, rep.rows, strict=True):
        for k in ("cosine_similarity", "MaxAbsErr", "max_ulp_error"):
            if orig[k] != "":
                assert float(r[k]) == orig[k]  # repr round-trips exactly
    with pytest.raises(FileExistsError, match="force"):
        rep.to_csv(out)
    out.unlink()  # the sidecar alone is a result too: not overwritten without force
    with pytest.raises(FileExistsError, match=r"r\.json.*force"):
        rep.to_csv(out)
    rep.to_csv(out, force=True)
    p = rep.to_csv(tmp_path / "outdir")
    assert p.parent.name == "outdir" and p.name.startswith("numlab_cmp_report_")


def test_cli_compare(tmp_path, capsys):
    from numlab.cli import main

    g, m = _dumps(tmp_path, bad_at="b")
    rc = main(["compare", "-gp", str(g), "-mp", str(m), "-o", str(tmp_path / "o.csv")])
    out = capsys.readouterr().out
    assert rc == 1 and "first divergence: c" in out and "Saved comparing results" in out
    assert (tmp_path / "o.csv").exists()
    rc = main(["compare", "--golden-path", str(g), "--my-path", str(m), "--output",
               str(tmp_path / "o.csv")])
    assert rc == 2  # exists, no --force
    assert "already exists" in capsys.readouterr().err
    rc = main(["compare", "--golden-path", str(g), "--my-path", str(m), "--output",
               str(tmp_path / "o.csv"), "--force", "--allow-failures"])
    assert rc == 0
    g_ok, m_ok = _dumps(tmp_path / "ok")
    assert main(["compare", "-gp", str(g_ok), "-mp", str(m_ok)]) == 0
    rc = main(["compare", "-gp", str(tmp_path / "nope"), "-mp", str(m)])
    assert rc == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_compare_refuses_existing_report_before_comparing(tmp_path, capsys, monkeypatch):
    from numlab.cli import compare as cli_compare
    from numlab.cli import main

    g, m = _dumps(tmp_path)
    (tmp_path / "o.csv").write_text("my earlier report")

    def boom(*a, **k):
        raise AssertionError("compare ran although the report cannot be written")

    monkeypatch.setattr(cli_compare, "compare_dumps", boom)
    assert main(["compare", "-gp", str(g), "-mp", str(m), "-o", str(tmp_path / "o.csv")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "o.csv").read_text() == "my earlier report"
    (tmp_path / "afile").write_text("x")
    assert main(["compare", "-gp", str(g), "-mp", str(m), "-o", str(tmp_path / "afile")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_uncompared_rows_are_counted_and_fail_the_cli(tmp_path, capsys):
    from numlab.cli import main

    g, m = _dumps(tmp_path)
    man = json.loads((m / MANIFEST).read_text())
    f = m / man["nodes"]["c"]["file"]
    f.write_bytes(f.read_bytes()[:-8])  # truncated
    rep = compare_dumps(g, m)
    assert [r["node"] for r in rep.uncompared] == ["c"] and not rep.failing
    assert "1 matched node(s) could not be compared" in rep.summary()
    assert main(["compare", "-gp", str(g), "-mp", str(m)]) == 2
    assert main(["compare", "-gp", str(g), "-mp", str(m), "--allow-failures"]) == 0
    # an error downstream of the unreadable node is flagged as possibly coming from it
    g2, m2 = _dumps(tmp_path / "second", bad_at="b")
    f2 = m2 / json.loads((m2 / MANIFEST).read_text())["nodes"]["c"]["file"]
    f2.write_bytes(f2.read_bytes()[:-8])
    rep2 = compare_dumps(g2, m2)
    assert rep2.first_divergence["node"] == "e" and rep2.row("e")["error_origin"] == "introduced"
    assert "Input(s) c could not be compared" in rep2.row("e")["cmp_fail_reason"]
    out = " ".join(capsys.readouterr().out.split())  # the CLI wraps its prose to the terminal
    assert "could not be compared (unreadable, corrupt or empty data; see cmp_fail_reason): c" in out
    assert "truncated" in rep.row("c")["cmp_fail_reason"]
    for bad in (["--fmt", "fp17"], ["--cosine", "1.5"], ["--chunk", "0"]):
        assert main(["compare", "-gp", str(g), "-mp", str(m), *bad]) == 2
        assert bad[1] in capsys.readouterr().err


def test_cli_exit_codes_cannot_hide_a_failure(tmp_path, capsys):
    """0 only when something was compared and every row passes; 2 when nothing
    was compared (even with --allow-failures), or a file is missing, corrupt or
    fails its SHA-256 check; 1 when a row fails; --allow-failures gives 0 for
    the last two."""
    from numlab.cli import main

    def run(g, m, *extra):
        rc = main(["compare", "-gp", str(g), "-mp", str(m), *extra])
        return rc, capsys.readouterr()

    # nothing compared: two empty folders, and two dumps with no common node
    (tmp_path / "e1").mkdir()
    (tmp_path / "e2").mkdir()
    for extra in ((), ("--allow-failures",)):
        rc, cap = run(tmp_path / "e1", tmp_path / "e2", *extra)
        assert rc == 2 and "nothing was compared" in cap.err and "NOTHING WAS COMPARED" in cap.out
    write_dump(tmp_path / "x", {"p": np.ones(3, np.float32)})
    write_dump(tmp_path / "y", {"q": np.ones(3, np.float32)})
    assert run(tmp_path / "x", tmp_path / "y")[0] == 2
    # a flipped byte of the same size: only the SHA-256 check sees it
    g, m = _dumps(tmp_path / "sha")
    man = json.loads((m / MANIFEST).read_text())
    f = m / man["nodes"]["e"]["file"]
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 1
    f.write_bytes(bytes(raw))
    rc, cap = run(g, m)
    assert rc == 2 and "sha256" in cap.out and "bad file" in cap.err
    assert run(g, m, "--allow-failures")[0] == 0
    assert run(g, m, "--no-verify")[0] == 0  # the flip is below every threshold
    # a file listed in the manifest is missing
    g, m = _dumps(tmp_path / "missing")
    (m / json.loads((m / MANIFEST).read_text())["nodes"]["a"]["file"]).unlink()
    rc, cap = run(g, m)
    assert rc == 2 and "missing file" in cap.out
    # an unreadable manifest (corrupt JSON): read without it, still exit 2
    g, m = _dumps(tmp_path / "json")
    (m / MANIFEST).write_text("{not json")
    rc, cap = run(g, m)
    assert rc == 2 and "manifest" in cap.out
    # a failing row
    g, m = _dumps(tmp_path / "fail", bad_at="d")
    rc, cap = run(g, m)
    assert rc == 1 and "fail the thresholds" in cap.err
    assert run(g, m, "--allow-failures")[0] == 0


def test_cli_says_when_thresholds_pass_an_error_ulps_flag(tmp_path, capsys):
    """A planted error of 2**20 ULPs on values ~1e-6 passes msprobe's
    absolute rule (MaxAbsErr ~1e-7 < 0.001, cosine ~1): exit 0, but the CLI
    names the row; --max-ulp makes it fail."""
    from numlab.cli import main

    rng = np.random.default_rng(3)
    g = (rng.standard_normal(256) * 1e-6).astype(np.float32)
    m = g.copy()
    m[7] = np.float32(g[7] * 1.125)  # a 12.5% error: ~2**20 ULPs of fp32
    write_dump(tmp_path / "g", {"y": g})
    write_dump(tmp_path / "m", {"y": m})
    row = compare_dumps(tmp_path / "g", tmp_path / "m").row("y")
    assert row["Accuracy Reached or Not"] == "Yes" and row["max_ulp_error"] > 1e5
    rc = main(["compare", "-gp", str(tmp_path / "g"), "-mp", str(tmp_path / "m")])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "WARNING: 1 row(s) pass the thresholds but have a max ULP error above 16: y" in out
    assert main(["compare", "-gp", str(tmp_path / "g"), "-mp", str(tmp_path / "m"), "--max-ulp", "16"]) == 1
    # no warning for a clean compare
    main(["compare", "-gp", str(tmp_path / "g"), "-mp", str(tmp_path / "g")])
    assert "WARNING" not in capsys.readouterr().out


# --------------------------------------------------------------------------
# large dumps: memory-mapped, chunked, bounded memory
# --------------------------------------------------------------------------
N_BIG = 50_000_000  # 200 MB of float32 per file


def _write_big(path, scale, n=N_BIG):
    """Write an n-element float32 .npy chunk by chunk (never all in memory)."""
    from numpy.lib.format import open_memmap

    step = 1 << 22
    block = np.random.default_rng(0).standard_normal(step).astype(np.float32) * np.float32(scale)
    a = open_memmap(path, mode="w+", dtype=np.float32, shape=(n,))
    for s in range(0, n, step):
        e = min(n, s + step)
        a[s:e] = block[: e - s]
    a.flush()
    del a


_CHILD = """
import json, sys, tracemalloc

def hwm_kib():
    # peak resident set of this process (VmHWM is reset by exec, unlike ru_maxrss)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1

from numlab.compare import compare_dumps
base = hwm_kib()
tracemalloc.start()
rep = compare_dumps(sys.argv[1], sys.argv[2])
_, peak = tracemalloc.get_traced_memory()
r = rep.rows[0]
print(json.dumps({"base_kib": base, "hwm_kib": hwm_kib(), "traced_peak": peak,
                  "n": r["n_elements"], "acc": r["Accuracy Reached or Not"],
                  "maxrel": r["max_relative_error"], "bits": r["bitwise_equal_ratio"]}))
"""


def test_large_dump_compared_with_bounded_memory(tmp_path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) to read the child's peak resident set")
    gp, mp = tmp_path / "g", tmp_path / "m"
    gp.mkdir()
    mp.mkdir()
    _write_big(gp / "big.npy", 1.0)
    _write_big(mp / "big.npy", 1.0 + 2.0**-20)
    dump_bytes = os.path.getsize(gp / "big.npy") + os.path.getsize(mp / "big.npy")
    assert dump_bytes > 399e6
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(gp), str(mp)],
                             capture_output=True, text=True, check=True)
    finally:  # 400 MB: do not leave them in pytest's kept temporary directories
        os.remove(gp / "big.npy")
        os.remove(mp / "big.npy")
    res = json.loads(out.stdout)
    print(f"compare of {dump_bytes / 2**20:.0f} MiB of dumps: numpy peak (tracemalloc) "
          f"{res['traced_peak'] / 2**20:.1f} MiB, resident set {res['base_kib'] / 1024:.0f} -> "
          f"{res['hwm_kib'] / 1024:.0f} MiB")
    assert res["n"] == N_BIG and res["acc"] == "Yes"
    assert res["maxrel"] == pytest.approx(2.0**-20, rel=0.5) and res["bits"] < 0.9
    # numpy allocations stay O(chunk); the resident set does not grow with the dump
    assert res["traced_peak"] < dump_bytes / 10
    assert (res["hwm_kib"] - res["base_kib"]) * 1024 < dump_bytes / 4


# --------------------------------------------------------------------------
# bisect: the storage format is fmt=, as in run()
# --------------------------------------------------------------------------
def test_bisect_fmt_keyword():
    g = zoo.MODELS["layernorm"]()
    x = zoo.make_inputs(g, seed=0)
    rep = bisect_run(g, x, fmt="fp16", stages=("fusion",), log=None)
    assert rep.fmt == "fp16" and "(storage fp16)" in rep.text()
    with pytest.raises(TypeError, match=r"fmt= \(the storage format S, e.g. 'fp16'\) is required"):
        bisect_run(g, x, log=None)
    with pytest.raises(ValueError, match="fmt='fp7' is not a known format"):
        range_diverges(g, x, 0, 1, fmt="fp7", fused_kw={})


# --------------------------------------------------------------------------
# flavours: the tools' own columns, against their recorded outputs
# --------------------------------------------------------------------------
TOOLS = __import__("pathlib").Path(__file__).parent / "data" / "compare_tools"
_FLAVOR_FILES = {"msprobe-8.3": ("msprobe", "msprobe83"), "msprobe-26": ("msprobe", "msprobe26"),
                 "msit": ("msit", "msit")}
_MSPROBE_CELLS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio"]
_MSIT_CELLS = ["cosine_similarity", "max_relative_error", "mean_relative_error", "max_absolute_error",
               "mean_absolute_error", "kl_divergence", "relative_euclidean_distance", "cmp_fail_reason",
               "golden_max_value", "golden_min_value", "golden_mean_value", "my_max_value", "my_min_value",
               "my_mean_value", "golden_dtype", "my_dtype", "golden_shape", "my_shape"]


def _same_cell(a: str, b: str) -> bool:
    """Cells equal as the tools print them: the same number (CSV/xlsx
    round-trip exact to 15 digits) or the same text."""
    try:
        fa, fb = float(a), float(b)
    except ValueError:
        return a.strip() == b.strip()
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb) and a.lower() == b.lower()
    return fa == fb or abs(fa - fb) <= 1e-15 * max(abs(fa), abs(fb))


def _read_csv(text_or_path):
    import io

    text = text_or_path.read_text() if hasattr(text_or_path, "read_text") else text_or_path
    return list(csv.DictReader(io.StringIO(text)))


def _flavor_key(flavor, row):
    if flavor == "msit":
        return row["my_data_path"].replace("\\", "/").split("/")[-2]  # module folder
    return row["NPU Name"]


_U32 = 2.0 ** -24
_MSIT_SUM_CELLS = ("mean_relative_error", "mean_absolute_error", "relative_euclidean_distance",
                   "golden_mean_value", "my_mean_value")


def _gamma32(n: int) -> float:
    return n * _U32 / (1 - n * _U32)


def _msit_digits(cell: str, row: dict) -> float:
    """The largest difference two CPUs can show in one msit float32 cell
    (the tool's own result is machine-dependent there, docs/compare.md):
    * a float32 sum of n terms in two orders: each is within gamma_{n-1}
      sum|x_i| of the exact sum (Higham (3.4)), so they differ by at most
      2 gamma_n sum|x_i| -- relative 2 gamma_n for the sums of |.| and squares,
      2 gamma_n max|x| absolute for a mean of signed values (plus the division's u);
    * KL = sum t (log t - ls) from float32 softmaxes: every term is within
      (8 + n) u (|log t| + |ls|) t, sum t|log t| <= ln n and |ls_i| <= range + ln n,
      so two machines differ by at most 2 (n + 8) u (2 ln n + range + 1)."""
    n = max(1, math.prod(int(v) for v in row["golden_shape"].strip("[]").split(",") if v.strip()))
    y = abs(float(row[cell]))
    if cell == "kl_divergence":
        rng = float(row["my_max_value"]) - float(row["my_min_value"])
        return 2 * (n + 8) * _U32 * (2 * math.log(n) + rng + 1)
    if cell.endswith("_mean_value"):
        side = cell.split("_")[0]
        big = max(abs(float(row[f"{side}_max_value"])), abs(float(row[f"{side}_min_value"])))
        return 2 * _gamma32(n) * big + _U32 * y
    return (2 * _gamma32(n) + 2 * _U32) * y  # a sqrt of a quotient of two such sums: + u each


def _machine_dependent_cells(flavor: str, recorded: bool) -> dict:
    """{msit cell: why its last digits differ on this machine from the
    recording's (or the installed tool's)}: empty where they cannot."""
    if flavor != "msit":
        return {}
    import torch

    from numlab.torch.presets import measure_aten_sum_lanes

    why = {}
    cap = torch.backends.cpu.get_cpu_capability()
    if recorded and cap not in ("AVX2", "AVX512"):
        why["kl_divergence"] = (f"ATen capability {cap}: softmax/log_softmax take the scalar libm here, "
                                "the recording SLEEF's vector exp")
    lanes = measure_aten_sum_lanes()
    if not recorded and lanes != 8:
        why.update({c: f"torch.sum runs {lanes} lanes here; numlab's msit sums use the fixed 8-lane "
                       "cascade (the recording machine's)" for c in _MSIT_SUM_CELLS})
    for c, r in why.items():
        print(f"msit {c}: compared to its machine-independent digits only: {r}")
    return why


def _check_flavor_against(flavor, report_text, tool_csv, kind, loose=()):
    """Every row and every cell of ``--flavor``'s CSV equals the tool's.
    msprobe: the same rows in the same order (each API's input rows, its
    non-tensor arguments, its outputs), all columns including the stack.
    msit: the same rows (its order changes with PYTHONHASHSEED: docs/compare.md), all columns but ``data_id`` and the
    file paths' folder above the dump (the tool printed absolute paths).  The
    cells in ``loose`` (machine-dependent, :func:`_machine_dependent_cells`)
    agree to :func:`_msit_digits`."""
    ours, theirs = _read_csv(report_text), _read_csv(tool_csv)
    if flavor == "msit":
        key = {r["my_data_path"]: _flavor_key(flavor, r) for r in ours + theirs}
        ours = sorted(ours, key=lambda r: key[r["my_data_path"]])
        theirs = sorted(theirs, key=lambda r: key[r["my_data_path"]])
    names = [_flavor_key(flavor, r) for r in ours]
    assert names == [_flavor_key(flavor, r) for r in theirs], kind
    assert len(names) >= 5
    cells = [c for c in FLAVOR_HEADERS[flavor] if c != "data_id"]
    bad, noise = [], []
    for a, b in zip(ours, theirs, strict=True):
        for c in cells:
            x, y = a[c], b[c]
            if c.endswith("_data_path"):  # the dump's own part of the path
                x, y = (v.replace("\\", "/").split("compare_tools/")[-1] for v in (x, y))
            if c in loose and x and y and not _same_cell(x, y):
                tol = _msit_digits(c, b)
                if tol >= abs(float(y)):  # the whole cell is rounding noise: no digit is machine-independent
                    noise.append((_flavor_key(flavor, a), c))
                if c == "kl_divergence" and tol >= abs(float(y)) and 0 <= float(x) <= tol:
                    continue  # KL is clamped at 0: any value in [0, tol] is one a correct float32 run can print
                if abs(float(x) - float(y)) <= tol:
                    continue
            if not _same_cell(x, y):
                bad.append((_flavor_key(flavor, a), c, x[:60], y[:60]))
    assert not bad, bad
    if noise:
        print(f"{len(noise)} machine-dependent cells below their own rounding noise (only their range "
              f"checked): {noise}")
    return names


@pytest.mark.parametrize("flavor,kind", [(f, k) for f in _FLAVOR_FILES for k in ("numlab", "tool", "rules")
                                         if not (f == "msit" and k == "rules")])
def test_flavor_reproduces_recorded_tool_output(flavor, kind):
    """``compare_dumps(flavor=...)`` on the recorded dumps (numlab's dumps in
    the tool's layout, dumps the tool wrote itself, and for msprobe a graph
    tripping each of 26.2.0's ``Result`` rules) gives, row for row and cell
    for cell, what the real tool printed for them
    (tests/data/compare_tools/*.csv, recorded by make_fixtures.py)."""
    pytest.importorskip("torch", reason="the tools' dumps hold torch tensors; msit computes with torch")
    layout, tool = _FLAVOR_FILES[flavor]
    index = json.loads((TOOLS / "index.json").read_text())
    key = layout if kind != "tool" else tool
    g, m = (TOOLS / index[kind][f"{key}/{side}"] for side in ("golden", "mine"))
    rep = compare_dumps(g, m, flavor=flavor)
    csv_name = f"numlab_rules_{tool}.csv" if kind == "rules" else f"{kind}_{tool}.csv"
    common = _check_flavor_against(flavor, rep.to_csv_text(), TOOLS / csv_name, kind,
                                   loose=_machine_dependent_cells(flavor, recorded=True))
    if kind == "rules" and flavor == "msprobe-26":  # every rule fired at least once
        results = {r["NPU Name"].split(".")[1]: (r["Result"], r["Err_message"])
                   for r in _read_csv(rep.to_csv_text()) if ".output." in r["NPU Name"]}
        assert results["warn"] == ("warning", '["warning: The input/parameters of Cosine > 0.9, and '
                                              'input/parameters - output > 0.1"]')
        assert results["both"][0] == "error" and "One Thousandth" in results["both"][1] \
            and "Cosine" in results["both"][1]
        assert "dtype" in results["dtype"][1] and "shape" in results["shape"][1]
        assert "nan/inf" in results["inf"][1] and "nan/inf" in results["after_inf"][1]
        assert results["src"][0] == "error"  # no inputs: their minimum is 1.0
        assert results["to"] == ("pass", "[]")  # an ignored API name
    if kind == "numlab" and flavor != "msit":
        # the rows of numlab's own layout are those msprobe prints for the same graph in its layout
        import importlib.util
        import tempfile

        spec = importlib.util.spec_from_file_location("mkfix", TOOLS / "make_fixtures.py")
        mk = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mk)
        gv, mv, meta = mk.graph()

        with tempfile.TemporaryDirectory() as t:
            order = {"order": list(gv)}
            native = compare_dumps(write_dump(f"{t}/g", gv, node_meta=meta, run_meta=order),
                                   write_dump(f"{t}/m", mv, node_meta=meta, run_meta=order), flavor=flavor)
            _check_flavor_against(flavor, native.to_csv_text(), TOOLS / f"{kind}_{tool}.csv", kind)
    if kind == "numlab" and flavor != "msit":
        # the planted cases show the documented differences between the versions
        key = "Numlab.{}.0.forward.output.0"
        ours = {r["NPU Name"]: r for r in _read_csv(rep.to_csv_text())}
        assert ours[key.format("zeroed")]["Cosine"] == "Nan"
        if flavor == "msprobe-8.3":  # NaN cosine: msprobe's verdict is Yes
            assert ours[key.format("zeroed")]["Accuracy Reached or Not"] == "Yes"
            assert ours[key.format("half")]["MaxRelativeErr"] == "Nan"  # fp16 zeros: eps64 rounds away
        else:
            assert float(ours[key.format("half")]["MaxRelativeErr"]) == 7072.0  # float32 eps 1.19e-7
        assert rep.row("zeroed")["Accuracy Reached or Not"] == "No"  # numlab's exact rule: NaN fails
    if kind == "numlab" and flavor == "msit":
        ours = {_flavor_key(flavor, r): r for r in _read_csv(rep.to_csv_text())}
        # msit masks |golden| <= float32 eps: 1e-9-scale data has relative error 0
        assert float(ours["root.tiny"]["max_relative_error"]) == 0.0
        assert rep.row("tiny")["max_relative_error"] == pytest.approx(0.003, rel=1e-3)
    assert common


def test_flavor_csv_headers_are_the_tools():
    from numlab.compare.flavors import FLAVOR_HEADERS

    for flavor, (_, tool) in _FLAVOR_FILES.items():
        with open(TOOLS / f"numlab_{tool}.csv", newline="") as f:
            assert next(csv.reader(f)) == FLAVOR_HEADERS[flavor], flavor


def test_cli_flavor_writes_the_tool_header(tmp_path, capsys):
    pytest.importorskip("torch", reason="the tools' dumps hold torch tensors")
    from numlab.cli import main
    from numlab.compare.flavors import FLAVOR_HEADERS

    index = json.loads((TOOLS / "index.json").read_text())
    g, m = (TOOLS / index["numlab"][f"msprobe/{s}"] for s in ("golden", "mine"))
    out = tmp_path / "r.csv"
    rc = main(["compare", "-gp", str(g), "-mp", str(m), "--flavor", "msprobe-8.3", "-o", str(out),
               "--allow-failures"])
    assert rc == 0
    with open(out, newline="") as f:
        assert next(csv.reader(f)) == FLAVOR_HEADERS["msprobe-8.3"]
    # without --allow-failures the planted errors fail (numlab's exact rule)
    assert main(["compare", "-gp", str(g), "-mp", str(m), "--flavor", "msit"]) == 1
    assert main(["compare", "-gp", str(g), "-mp", str(m), "--flavor", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


_TOOL_ENV = {"msprobe-8.3": ("NUMLAB_MSPROBE83", "mindstudio-probe", "8.3.3", "msprobe"),
             "msprobe-26": ("NUMLAB_MSPROBE26", "mindstudio-probe", "26.2.0", "msprobe"),
             "msit": ("NUMLAB_MSIT", "msit", "8.2.0", "msit")}


# what decides the tools' last bits on a CPU: ATen's kernel build and numpy's OpenBLAS kernels
_SIMULATED_MACHINES = [{"ATEN_CPU_CAPABILITY": "default"}, {"ATEN_CPU_CAPABILITY": "avx2"},
                       {"ATEN_CPU_CAPABILITY": "avx512"}, {"OPENBLAS_CORETYPE": "Haswell"},
                       {"OPENBLAS_CORETYPE": "Zen"}, {"OPENBLAS_CORETYPE": "Prescott"}]


def test_flavors_reproduce_the_recordings_under_simulated_machines():
    """The recorded-output tests pass with every simulated ATen capability
    and OpenBLAS core type (each in its own process: both are read at
    start-up), so an Intel developer runs the paths a Zen or AVX2-only
    machine takes.  msit's sums are numlab's fixed order there, so only the
    KL cell of the ``default`` build is compared to its
    machine-independent digits (the subprocess prints why)."""
    pytest.importorskip("torch", reason="the tools' dumps hold torch tensors; msit computes with torch")
    failed = []
    for sim in _SIMULATED_MACHINES:
        env = {**os.environ, **sim}
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist",
                            __file__, "-k", "test_flavor_reproduces_recorded_tool_output"],
                           env=env, capture_output=True, text=True, timeout=300)
        tail = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
        print(sim, tail, *sorted({ln for ln in r.stdout.splitlines() if "machine-independent" in ln}), sep="\n  ")
        if r.returncode != 0 or " passed" not in tail:
            failed.append((sim, r.stdout[-2000:]))
    assert not failed, failed


def _tool_exe(flavor):
    """The tool's executable: $NUMLAB_MSPROBE83 / $NUMLAB_MSPROBE26 /
    $NUMLAB_MSIT (the ``msprobe``/``msit`` of a venv holding that version;
    msit pins numpy<2, so it lives in its own venv), else this environment's
    own when its version is the one the flavour reproduces."""
    import importlib.metadata as md
    import shutil
    from pathlib import Path

    env, dist, version, exe = _TOOL_ENV[flavor]
    if os.environ.get(env):
        return Path(os.environ[env])
    try:
        if md.version(dist) != version:
            return None
    except md.PackageNotFoundError:
        return None
    found = shutil.which(exe, path=str(Path(sys.executable).parent))
    return Path(found) if found else None


@pytest.mark.parametrize("flavor,graph", [(f, g) for f in _TOOL_ENV for g in ("graph", "rules_graph")
                                          if not (f == "msit" and g == "rules_graph")])
def test_flavor_against_the_installed_tool(flavor, graph, tmp_path):
    """Optional: the real tool runs unchanged on dumps numlab writes now, and
    its CSV equals ``--flavor``'s row for row and cell for cell (for msprobe
    also on the graph that trips each 26.2.0 ``Result`` rule)."""
    import importlib.util

    env, dist, version, _ = _TOOL_ENV[flavor]
    exe = _tool_exe(flavor)
    if exe is None or not exe.exists():
        if os.environ.get("NUMLAB_REQUIRE_TOOLS"):  # CI's tools step: absent means its install failed
            pytest.fail(f"NUMLAB_REQUIRE_TOOLS is set but {dist}=={version} is not found (${env})")
        pytest.skip(f"{dist}=={version} is not installed here: set ${env} to its executable "
                    f"(docs/compare.md: a venv per tool) to run this test")
    pytest.importorskip("torch", reason="numlab writes the tools' layouts with torch")
    spec = importlib.util.spec_from_file_location("make_fixtures", TOOLS / "make_fixtures.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    from numlab.compare.layouts import write_msit_dump, write_msprobe_dump

    g, m, meta = getattr(mk, graph)()
    writer = write_msit_dump if flavor == "msit" else write_msprobe_dump
    gp = writer(tmp_path / "golden", g, node_meta=meta)
    mp = writer(tmp_path / "mine", m, node_meta=meta)
    out = tmp_path / "tool.csv"
    {"msprobe-8.3": mk.msprobe83, "msprobe-26": mk.msprobe26, "msit": mk.msit}[flavor](exe, gp, mp, out)
    rep = compare_dumps(gp, mp, flavor=flavor)
    loose = _machine_dependent_cells(flavor, recorded=False)
    assert len(_check_flavor_against(flavor, rep.to_csv_text(), out, "numlab", loose=loose)) >= 8


def test_cli_compare_your_function_against_your_kernel_dump(tmp_path, capsys, monkeypatch):
    """``numlab compare --graph module:function --inputs FILE -mp DUMP``: numlab
    computes the golden side (fp64 reference, or eager) of the user's function
    on the user's inputs and compares the kernel's dump with it.  A kernel that
    rounds through fp16 passes msprobe's absolute thresholds; the ULP warning
    says so."""
    from numlab.cli import main

    (tmp_path / "vendor_mod_h3.py").write_text(
        "import numpy as np\n\ndef layer(x, w):\n    h = x * w\n    return np.exp(h) / (1.0 + np.exp(h))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, w=w)
    h = x.astype(np.float64) * w
    (tmp_path / "kern").mkdir()
    np.save(tmp_path / "kern" / "y.npy", (np.exp(h) / (1 + np.exp(h))).astype(np.float16).astype(np.float32))
    argv = ["compare", "--graph", "vendor_mod_h3:layer", "--inputs", str(tmp_path / "in.npz"),
            "-mp", str(tmp_path / "kern")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "output 'div_0' compared with 'y'" in out
    assert "WARNING: 1 row(s) pass the thresholds but have a max ULP error above 16: y" in out
    assert main([*argv, "--max-ulp", "16"]) == 1
    assert main([*argv, "--golden-mode", "eager", "--fmt", "fp32", "--max-ulp", "16"]) == 1
    # a kernel rounding once to fp32 passes against the fp64 reference, no warning
    np.save(tmp_path / "kern" / "y.npy", (np.exp(h) / (1 + np.exp(h))).astype(np.float32))
    capsys.readouterr()
    assert main([*argv, "--max-ulp", "16"]) == 0
    assert "WARNING" not in capsys.readouterr().out
    # bad uses name the options
    assert main([*argv, "-gp", str(tmp_path / "kern")]) == 2
    assert "give -gp/--golden-path or --graph, not both" in capsys.readouterr().err
    assert main(["compare", "-mp", str(tmp_path / "kern")]) == 2
    assert "give -gp/--golden-path GOLDEN, or --graph" in capsys.readouterr().err
    np.save(tmp_path / "kern" / "other.npy", np.zeros(32, np.float32))
    assert main(argv) == 2
    assert "none of its arrays" in capsys.readouterr().err


def test_msprobe26_requires_grad_rule_follows_the_tools_truthiness():
    """RequiresGradErrChecker (26.2.0) is not tripped by any recorded dump:
    the tool holds dump.json's bools and skips a row when either side is
    falsy, so True/False never errs; a truthy mismatch (True vs 'N/A') does,
    and an ignored API (``Tensor.to``) is never marked."""
    from numlab.compare.flavors import msprobe26_results

    def row(name, npu, bench):
        return {"NPU Name": name, "Bench Name": name, "NPU Requires_grad": npu, "Bench Requires_grad": bench,
                "NPU Dtype": "torch.float32", "Bench Dtype": "torch.float32", "Cosine": 1.0,
                "One Thousandth Err Ratio": 1.0, "NPU Tensor Shape": "[2]", "Bench Tensor Shape": "[2]"}

    api = "Torch.mul.0.forward"
    assert msprobe26_results([row(f"{api}.input.0", "True", "False"), row(f"{api}.output.0", "False", "False")]) \
        == [("pass", "[]"), ("pass", "[]")]
    got = msprobe26_results([row(f"{api}.input.0", "True", "N/A"), row(f"{api}.output.0", "False", "False")])
    assert got[0] == ("error", '["error: The Required_Grad of NPU and Bench are inconsistent"]')
    assert msprobe26_results([row("Tensor.to.0.forward.input.0", "True", "N/A")]) == [("pass", "[]")]
