"""Hold a kernel to a contract bound in a test suite.

``assert_within_bound(fn_or_graph, inputs, actual, *, mode="fused", fmt, ...)``
raises an AssertionError in numpy.testing's report style when an element of
``actual`` (a kernel's outputs on ``inputs``) is farther from the exact value
than the contract bound (:func:`numlab.bounds.contract_bound`) of the stated
mode and plan allows; ``tolerance(...)`` returns that per-element bound, so a
pytest suite for a numpy or torch kernel uses a derived tolerance instead of
hand-picked ``rtol``/``atol``.  The bound holds for every implementation of
the contract, so a correct kernel never fails and a failure proves the
kernel breaks the contract.  An element whose bound is infinite (overflow
possible, an interval leaving a domain) is never a pass: the assertion says
the check is undecided there and names the operators responsible.

:mod:`numlab.testing.kernels` holds independently written correct and
contract-breaking kernels for the zoo graphs (the library the contract bounds
are tested against).
"""

from __future__ import annotations

import numpy as np

from ..contract_bounds import contract_bound
from ..execute import run
from ..formats import get_format
from ..graph import Graph, trace

__all__ = ["assert_within_bound", "tolerance"]


def _array(a) -> np.ndarray:
    """A numpy array from an array or a torch tensor (bf16 through ``.float()``)."""
    if hasattr(a, "detach"):
        a = a.detach()
        if hasattr(a, "cpu"):
            a = a.cpu()
        if str(getattr(a, "dtype", "")) == "torch.bfloat16":
            a = a.float()
        return a.numpy()
    return np.asarray(a)


def _graph(fn_or_graph, inputs: dict) -> Graph:
    if isinstance(fn_or_graph, Graph):
        return fn_or_graph
    if not callable(fn_or_graph):
        raise TypeError(f"fn_or_graph must be a numlab Graph or a traceable function, got "
                        f"{type(fn_or_graph).__name__}")
    return trace(fn_or_graph, **{k: tuple(np.shape(v)) for k, v in inputs.items()})


def _prepare(fn_or_graph, inputs, fmt):
    if not isinstance(inputs, dict):
        raise TypeError(f"inputs must be a dict name -> array, got {type(inputs).__name__}")
    xs = {k: _array(v) for k, v in inputs.items()}
    g = _graph(fn_or_graph, xs)
    S = get_format(fmt, "fmt")
    return g, xs, S


def tolerance(fn_or_graph, inputs, *, mode: str = "fused", fmt, fusion=None, contract=None, kernels=None,
              library=None, prob=None):
    """The per-element tolerance: the contract bound of ``mode`` (an array for
    a graph with one output, else a dict output -> array).  With ``prob`` the
    probabilistic estimate instead (not a bound)."""
    g, xs, S = _prepare(fn_or_graph, inputs, fmt)
    B = contract_bound(g, xs, mode=mode, fmt=S, fusion=fusion, contract=contract, kernels=kernels,
                       library=library, prob=prob)
    return B[g.outputs[0]] if len(g.outputs) == 1 else dict(B)


def _actuals(g, actual) -> dict:
    if isinstance(actual, dict):
        missing = [o for o in g.outputs if o not in actual]
        if missing:
            raise ValueError(f"actual: missing outputs {missing}; the graph's outputs are {list(g.outputs)}")
        return {o: _array(actual[o]) for o in g.outputs}
    if len(g.outputs) != 1:
        raise TypeError(f"actual must be a dict output -> array for a graph with outputs {list(g.outputs)}")
    return {g.outputs[0]: _array(actual)}


def _index(i) -> tuple:
    return tuple(int(k) for k in i)


def assert_within_bound(fn_or_graph, inputs, actual, *, mode: str = "fused", fmt, fusion=None, contract=None,
                        kernels=None, library=None) -> None:
    """Raise AssertionError unless ``|actual - exact| <= B`` at every element,
    ``B`` the contract bound (:func:`numlab.bounds.contract_bound`) of ``mode``
    on ``inputs`` (rounded to ``fmt`` first, as every mode does); ``exact`` is
    the fp64 reference.  ``actual``: an array (one output) or a dict output ->
    array; numpy arrays or torch tensors.  NaN where the exact value is not
    NaN is a mismatch; an infinite bound fails as undecided."""
    g, xs, S = _prepare(fn_or_graph, inputs, fmt)
    acts = _actuals(g, actual)
    B = contract_bound(g, xs, mode=mode, fmt=S, fusion=fusion, contract=contract, kernels=kernels, library=library)
    with np.errstate(all="ignore"):
        ref = run(g, xs, mode="reference", fmt=S).outputs
    head = f"mode {mode}, fmt {S.name}, {B.contract.header()}"
    per, worst, n_bad, n_all, unknown = [], None, 0, 0, []
    for o in g.outputs:
        a = np.asarray(acts[o])
        if a.shape != np.shape(ref[o]):
            raise AssertionError(f"Not within the contract bound ({head})\noutput {o!r}: actual has shape "
                                 f"{a.shape}, the graph's output has shape {np.shape(ref[o])}")
        av = np.asarray(a, dtype=np.float64)  # as given: a kernel that forgot to round to S is judged as it is
        ex, b = np.asarray(ref[o], dtype=np.float64), np.asarray(B[o], dtype=np.float64)
        with np.errstate(all="ignore"):
            err = np.abs(av - ex)
            both_nan = np.isnan(av) & np.isnan(ex)
            bad = np.isfinite(b) & ~both_nan & (np.isnan(err) | (err > b))
            inf = np.isinf(b)
        n_bad += int(np.count_nonzero(bad))
        n_all += int(b.size)
        per.append(f"{o} {int(np.count_nonzero(bad))} / {b.size}")
        if inf.any():
            unknown.append((o, int(np.count_nonzero(inf)), int(b.size), _index(np.argwhere(inf)[0])))
        if bad.any():
            with np.errstate(all="ignore"):
                ratio = np.where(bad, np.where(np.isnan(err), np.inf, err / np.maximum(b, 1e-300)), -np.inf)
            i = _index(np.unravel_index(int(np.argmax(ratio)), ratio.shape)) if ratio.ndim else ()
            r = float(ratio[i])
            if worst is None or r > worst[0]:
                worst = (r, o, i, float(err[i]), float(b[i]), float(av[i]), float(ex[i]))
    if worst is not None:
        _, o, i, e, bb, av, ex = worst
        lines = [f"Not within the contract bound ({head})",
                 f"Mismatched elements: {n_bad} / {n_all} ({100 * n_bad / n_all:.3g}%)",
                 f"Worst index: {i}   output {o!r}",
                 f"Error: {e:.6g}   Bound: {bb:.6g}   Actual: {av:.6g}   Exact: {ex:.6g}"]
        top = B.budget(o, i)[:3]
        lines.append("Largest contributions to the bound there: "
                     + (", ".join(f"{n} ({op}) {100 * s:.0f}%" for n, op, s in top) or "n/a"))
        if len(g.outputs) > 1:
            lines.append("Per output: " + ", ".join(per))
        raise AssertionError("\n".join(lines))
    if unknown:
        o, k, n, i = unknown[0]
        why = "; ".join(f"{s['node']} ({s['op']}): " + ", ".join(f"{c} {v}" for c, v in s["causes"].items())
                        for s in B.inf_sources()) or "inherited from an input"
        raise AssertionError(f"Contract bound unknown (infinite) at {k} / {n} elements of output {o!r} ({head}): "
                             f"the check is undecided there, not a pass\nFirst such index: {i}\nWhy: {why}")
