"""numlab.torch is a frontend of the one engine: the modules that predict (tracing,
lowering, presets, refusals, the predictor) compute no value of a node themselves.

Read in their source (no torch needed): no numpy math function is called on values,
no numerics of numlab.kernels (libm routines, algorithms, the engine, reductions) is
imported, and the predictor runs every prediction through ``numlab.execute.run``.
The measuring modules (explain's error metrics, calibrate's and reveal's probes, data's
input generators, the ``libm`` re-export) are outside this rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TORCH = Path(__file__).resolve().parents[1] / "src" / "numlab" / "torch"
FRONTEND = ("bridge.py", "lowering.py", "predictor.py", "_aten.py", "presets.py")

# numpy functions that compute values (a node's semantics) rather than shape or read them
NUMPY_MATH = {
    "exp", "expm1", "log", "log1p", "log2", "log10", "tanh", "sinh", "cosh", "sqrt", "reciprocal",
    "add", "subtract", "multiply", "divide", "true_divide", "power", "square", "maximum", "minimum",
    "fmax", "fmin", "clip", "where", "negative", "fma", "sum", "mean", "var", "cumsum", "dot", "matmul",
    "tensordot", "einsum",
}
# numlab.kernels modules that hold numerics (their functions compute values)
KERNEL_NUMERICS = ("kernels.libm", "kernels.engine", "kernels.scalar", "kernels.tiled_matmul")


def _tree(name):
    return ast.parse((TORCH / name).read_text(), filename=name)


@pytest.mark.parametrize("name", FRONTEND)
def test_frontend_calls_no_numpy_math(name):
    bad = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "np" \
                and node.func.attr in NUMPY_MATH:
            bad.append(f"{name}:{node.lineno}: np.{node.func.attr}")
    # presets measures the machine (measure_aten_sum_lanes compares torch.sum with numlab's orders)
    allowed = {"presets.py": {"sum", "mean", "where"}}.get(name, set())
    bad = [b for b in bad if b.rsplit(".", 1)[1] not in allowed]
    assert not bad, f"numlab.torch computes node values itself (the engine's job): {bad}"


@pytest.mark.parametrize("name", FRONTEND)
def test_frontend_imports_no_kernel_numerics(name):
    bad = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if any(mod.endswith(k) for k in KERNEL_NUMERICS):
                bad.append(f"{name}:{node.lineno}: from {'.' * node.level}{mod}")
            if mod.endswith("kernels.algorithms"):
                # the algorithm names (the presets validate their fields against them), no routine
                names = {a.name for a in node.names}
                if not all(n.endswith("_ALGOS") or n == "parse_algo" for n in names):
                    bad.append(f"{name}:{node.lineno}: from kernels.algorithms import {sorted(names)}")
    assert not bad, bad


def test_the_predictor_runs_every_prediction_through_execute():
    tree = _tree("predictor.py")
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "execute_run" in calls
    # no interpreter: no class of its own that evaluates nodes
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    assert classes == {"Prediction", "Switches"}, classes
    lines = len((TORCH / "predictor.py").read_text().splitlines())
    assert lines < 600, f"predictor.py has {lines} lines: the lowering and preset choice only"
