"""Order revelation (numlab.kernels.orders.reveal, numlab.torch.reveal) and the Tree order.

References independent of the code under test: a scalar recursive evaluation
of a tree (np.float32 scalar additions, ``fractions.Fraction`` for fused
adders), the real functions (numpy's and PyTorch's sums) and, for revealing
numlab's own orders, the tree recorded symbolically from the order's code
(``Tree.from_order``), which shares nothing with the probing.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, round_to_grid

import numlab.cli.reveal as cli_reveal
from numlab.cli import main
from numlab.kernels import Blocked, Lanes, Pairwise, Sequential, parse_order, reduce
from numlab.kernels.orders.cpu import AtenCascade, InductorLanes
from numlab.kernels.orders.reveal import RevealError, check, reveal
from numlab.kernels.orders.tree import Tree, parse_tree
from numlab.torch.reveal import reveal_order

ROWS = 10_000


def _box(order, acc="fp32", out="fp32"):
    return lambda x: reduce(x, "sum", order=order, acc=acc, out=out)


def _nlogn(n):
    return n * max(1, math.ceil(math.log2(n)))


# --------------------------------------------------------------------------------------
# the Tree order against a scalar reference
def _scalar_eval(tree: Tree, row) -> np.float32:
    vals = {i: np.float32(v) for i, v in enumerate(row)}
    for k, ch in enumerate(tree.nodes):
        if tree.n + k in tree.wide:  # double accumulator
            vals[tree.n + k] = np.float64(vals[ch[0]]) + np.float64(vals[ch[1]])
        elif len(ch) == 2:
            vals[tree.n + k] = np.float32(np.float32(vals[ch[0]]) + np.float32(vals[ch[1]]))
        else:  # exact sum (Fraction), one rounding to float32
            exact = sum(Fraction(float(vals[c])) for c in ch)
            vals[tree.n + k] = np.float32(round_to_grid(exact, "fp32"))
    r = np.float32(vals[tree.n + len(tree.nodes) - 1] if tree.nodes else vals[0])
    return np.float32(r + np.float32(0.0)) if tree.zero else r


@pytest.mark.parametrize("text", [
    "tree([0..9])", "tree([[0..3],[4..7],8,9])", "tree({0,1,2,[3,4]})",
    "tree([{0..3},{4..7},{8,9,10}])", "tree(+0:[[0,2],[1,3]])",
    "tree(d[[0..7],8,9])", "tree(d[0..9])", "tree([d[0..4],d[5..9]])", "tree(d[{0..3},[4..7]])",
])
def test_tree_matches_scalar_reference(text):
    t = parse_tree(text)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((200, t.n)) * np.exp2(rng.integers(-20, 20, (200, t.n)))).astype(np.float32)
    got = reduce(x, "sum", order=t, acc="fp32")
    want = np.array([_scalar_eval(t, r) for r in x], dtype=np.float32)
    assert_same_bits(got, want)


def test_fused_adder_is_one_rounding_not_a_chain():
    t = parse_tree("tree({0,1,2})")
    x = np.array([[1.0, 2.0 ** -24, 2.0 ** -24]], dtype=np.float32)  # exact 1 + 2^-23
    assert reduce(x, "sum", order=t, acc="fp32")[0] == np.float32(1 + 2.0 ** -23)
    assert reduce(x, "sum", order="sequential", acc="fp32")[0] == np.float32(1.0)  # two ties to even


def test_tree_string_round_trip_and_canonical_equality():
    for o, n in [(Sequential(), 9), (Pairwise(), 13), (Lanes(4), 18), (AtenCascade(8), 100)]:
        t = Tree.from_order(o, n)
        assert parse_order(str(t)) == t
        assert t.depth(n) == o.depth(n)
    assert Tree(3, ((1, 0), (3, 2))) == Tree(3, ((0, 1), (2, 3)))
    assert Tree(3, ((1, 2), (0, 3))) != Tree(3, ((0, 1), (2, 3)))


@pytest.mark.parametrize("bad", ["tree([0,0])", "tree([0,2])", "tree({0,1})", "tree([0,1]", "tree(x)"])
def test_tree_parse_errors_name_the_text(bad):
    with pytest.raises(ValueError, match="tree"):
        parse_order(bad)


def test_tree_errors():
    with pytest.raises(ValueError, match="used twice"):
        Tree(2, ((0, 0),))
    with pytest.raises(ValueError, match="never used"):
        Tree(3, ((0, 1),))
    with pytest.raises(ValueError, match="n=4"):
        reduce(np.ones((2, 3), np.float32), "sum", order=Tree.from_order(Sequential(), 4))


# --------------------------------------------------------------------------------------
# (a) revealing numlab's own orders gives the order back
OWN = [
    (Sequential(), 100), (Pairwise(), 100), (Lanes(8), 100), (Lanes(8, "sequential"), 100),
    (Lanes(8, "tree", "epilogue"), 101), (Blocked(16, Sequential(), Pairwise()), 100),
    (Blocked(32, Lanes(4), Sequential()), 70), (AtenCascade(8), 1000), (AtenCascade(8), 5),
    (InductorLanes(16, 1, 1, "false"), 1000), (InductorLanes(16, 2, 2, "true"), 600),
]


@pytest.mark.parametrize("order,n", OWN, ids=[f"{o}-{n}" for o, n in OWN])
def test_reveal_own_order_gives_it_back(order, n):
    r = reveal(_box(order), n, "fp32", check_rows=ROWS)
    assert r.order == Tree.from_order(order, n)
    assert r.check.ok and r.check.rows == ROWS
    assert r.probes <= 2 * _nlogn(n)


def test_reveal_widened_cascade_on_fp16_input():
    o = AtenCascade(8, widen=True)
    r = reveal(_box(o, out="fp16"), 200, "fp16", check_rows=ROWS)
    assert r.order == Tree.from_order(o, 200) and r.check.ok


# --------------------------------------------------------------------------------------
# (b) numpy's pairwise sum, bit for bit
@pytest.mark.parametrize("n", [7, 8, 100, 1000, 5000])
def test_numpy_sum_fp32_reproduced(n):
    r = reveal_order("numpy.sum", n, "fp32", check_rows=ROWS)
    assert r.check.ok and r.check.matches == ROWS
    assert r.probes <= _nlogn(n)
    if n >= 16:  # 8 interleaved partials per block of <= 128 (numpy's pairwise_sum)
        assert re.search(r"\[0\.\.\d+:8\]", str(r.order))


@pytest.mark.parametrize("n", [100, 1000])
def test_numpy_sum_fp16_reproduced(n):
    r = reveal_order("numpy.sum", n, "fp16", check_rows=ROWS)
    assert r.check.ok


def test_numpy_sum_bf16_is_sequential_in_bf16():
    # ml_dtypes' bfloat16 add.reduce: one bf16 rounding per element; counts above 256 are
    # probed in windows of 256 units (bf16 holds integers exactly only up to 256)
    r = reveal_order("numpy.sum", 600, "bf16", acc="bf16", check_rows=ROWS)
    assert r.check.ok
    assert r.order.nodes == Tree.from_order(Sequential(), 600).nodes
    assert r.probes <= 3 * _nlogn(600)  # 3 windows of 256 units


def test_check_counts_mismatches_of_a_wrong_order():
    n = 1000
    res = check(lambda x: np.sum(x, axis=-1), Tree.from_order(Sequential(), n), n, "fp32", rows=2000)
    assert 0 < res.matches < res.rows and res.first_mismatch is not None and not res.ok


# --------------------------------------------------------------------------------------
# (c) PyTorch's eager sum (ATen cascade), bit for bit
@pytest.mark.torch
@pytest.mark.parametrize("n,fmt", [(7, "fp32"), (100, "fp32"), (1000, "fp32"), (5000, "fp32"),
                                   (100, "fp16"), (1000, "fp16"), (100, "bf16"), (600, "bf16")])
def test_torch_sum_reproduced(torch, n, fmt):
    r = reveal_order("torch.sum", n, fmt, check_rows=ROWS)
    assert r.check.ok and r.check.matches == ROWS
    windows = -(-n // 256) if fmt == "bf16" else 1  # bf16 counts probed 256 units at a time
    assert r.probes <= windows * _nlogn(n)


@pytest.mark.torch
def test_torch_callable(torch):
    r = reveal_order(lambda t: t.sum(-1), 64, fmt="fp32", check_rows=ROWS)
    assert r.check.ok and r.fmt == "fp32"


# --------------------------------------------------------------------------------------
# (d) probe count
@pytest.mark.parametrize("order,n,bound", [
    (Sequential(), 2048, 4 * 2048),          # a chain: O(n) (+ n precision probes)
    (Pairwise(), 2048, 2048 * 11),           # balanced: <= n log2 n
    (Lanes(16), 2048, 2048 * 11),
])
def test_probe_count_is_n_log_n_not_quadratic(order, n, bound):
    r = reveal(_box(order), n, "fp32", check_rows=0)
    assert r.probes <= bound < n * (n - 1) // 2
    assert r.order == Tree.from_order(order, n)
    assert r.calls <= 4 * math.ceil(math.log2(n)) + r.probes // 512 + 6


# --------------------------------------------------------------------------------------
# (e) trees that are not binary: multi-term (fused) adders
def _fused_lanes_tree(n, k):
    """k-term fused adders over blocks of k elements, their results chained."""
    blocks = [f"{{{i}..{i + k - 1}}}" for i in range(0, n, k)]
    return parse_tree("tree([" + ",".join(blocks) + "])")


@pytest.mark.parametrize("text", [
    None, "tree({[0..3],[4..7],[8..11],[12..15]})", "tree([{0,1,2},{3,4,5},[6..9]])",
    "tree({{0..3},{4..7},{8..11}})",
])
def test_reveal_fused_adders(text):
    t = _fused_lanes_tree(64, 4) if text is None else parse_tree(text)
    r = reveal(_box(t), t.n, "fp32", check_rows=ROWS)
    assert r.order == t and r.check.ok
    assert max(r.order.arities()) > 2


# --------------------------------------------------------------------------------------
# errors
@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_rows(n):
    r = reveal_order("numpy.sum", n, "fp32", check_rows=ROWS)
    assert r.check.ok and r.order.n == n and r.probes <= 2 * n


# --------------------------------------------------------------------------------------
# numpy.dot / numpy.matmul along K (BLAS dot kernels: fp32 vector partials, and on some
# kernels a double accumulator for the scalar loop); whatever this machine's BLAS does,
# the revealed tree, with its fp64 ("wide") nodes, must reproduce it
@pytest.mark.parametrize("func", ["numpy.dot", "numpy.matmul"])
@pytest.mark.parametrize("n", [7, 100, 1000])
def test_numpy_dot_matmul_reproduced(func, n):
    r = reveal_order(func, n, "fp32", check_rows=ROWS)
    assert r.check.ok and r.probes <= _nlogn(n) + n


def test_wide_nodes_are_revealed():
    t = parse_tree("tree(d[[[0..7],[8..15]],16,17,18])")
    r = reveal(_box(t), t.n, "fp32", check_rows=ROWS)
    assert r.order == t and r.check.ok
    narrow = Tree(t.n, t.nodes)
    assert check(_box(t), narrow, t.n, "fp32", rows=2000).matches < 2000  # the knob changes bits


def test_not_a_sum_raises_reveal_error():
    with pytest.raises(RevealError, match="summation tree"):
        reveal(lambda x: np.max(x, axis=-1), 16, "fp32")


def test_bad_arguments():
    with pytest.raises(ValueError, match="fmt='fp64'.*fp32"):
        reveal(_box(Sequential()), 8, "fp64")
    with pytest.raises(ValueError, match="n=0"):
        reveal(_box(Sequential()), 0)
    with pytest.raises(ValueError, match="fn='torch.max'"):
        reveal_order("torch.max", 8)
    with pytest.raises(ValueError, match="shape"):
        reveal(lambda x: x, 8)


# --------------------------------------------------------------------------------------
# CLI
def test_cli_reproduced_exit_0(capsys):
    assert main(["reveal", "numpy.sum", "--n", "300", "--fmt", "fp32", "--check-rows", "10000"]) == 0
    out = capsys.readouterr().out
    assert "10000/10000" in out and "probes" in out and "tree(" in out


def test_cli_not_reproduced_exit_1(monkeypatch, capsys):
    # numpy's sum whose result is rounded to bf16: the probes' small counts are exact in
    # bf16, so they see numpy's tree; random rows do not match the fp32 tree
    monkeypatch.setattr(cli_reveal, "black_box", lambda name: lambda x: np.sum(x, axis=-1).astype(
        ml_dtypes.bfloat16).astype(np.float32))
    assert main(["reveal", "numpy.sum", "--n", "200", "--check-rows", "2000"]) == 1
    assert "NOT reproduced" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["numpy.sum", "--n", "8", "--fmt", "fp8"], "--fmt 'fp8'"),
    (["numpy.prod", "--n", "8"], "FUNC 'numpy.prod'"),
    (["numpy.sum", "--n", "0"], "--n 0"),
    (["numpy.sum", "--n", "8", "--acc", "int8"], "--acc 'int8'"),
])
def test_cli_bad_input_exit_2(argv, needle, capsys):
    assert main(["reveal", *argv]) == 2
    assert needle in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# drawing
def test_draw_tree_draws_every_edge():
    pytest.importorskip("matplotlib")
    from numlab.plots import draw_tree

    t = parse_tree("tree([{0..3},[4..7],8])")
    ax = draw_tree(t)
    (lc,) = ax.collections[:1]
    assert len(lc.get_segments()) == sum(len(ch) for ch in t.nodes)
    with pytest.raises(TypeError, match="Tree"):
        draw_tree("sequential")


@pytest.mark.slow  # ~20 s of Inductor compilation on the 2-core CI machine
@pytest.mark.torch
def test_torch_compile_sum_reproduced(torch):
    # Inductor's lane loop + butterfly (16 fp32 lanes with AVX-512, 8 with AVX2): whatever
    # this machine compiles, the revealed tree must reproduce it
    r = reveal_order("torch.compile(torch.sum)", 200, "fp32", check_rows=ROWS)
    assert r.check.ok and r.probes <= _nlogn(200)
