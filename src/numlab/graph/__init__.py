"""The graph IR: nodes in topological order, a tracing builder, decomposition.

A :class:`Graph` has named inputs with shapes, a list of :class:`Node` in
topological order (each reads graph inputs or earlier nodes) and named
outputs.  Every node is one operator of :data:`numlab.ops.CATALOGUE` with
canonical attributes and an inferred shape; the constructor validates all of
it, so ``Graph(inputs, nodes, outputs)`` is also the importer's entry point
(``Graph.from_nodes`` is the same with shapes and attributes filled in).

:func:`trace` builds a graph by running an ordinary Python function on
symbolic :class:`Tensor` objects::

    g = trace(lambda x, w: nl.ops.gelu(x @ w) * 0.5, x=(4, 8), w=(8, 16))

numpy works on the symbolic tensors (:data:`UFUNCS` through
``__array_ufunc__``, :data:`FUNCTIONS` through ``__array_function__``), so
an ordinary numpy-written function traces as it is::

    def f(x):
        h = np.maximum(x, 0.0)
        return np.where(h > 1.0, np.sqrt(h), h * np.array([0.5, 2.0]))

Comparisons give truth values (``Node.value_kind == "bool"``, held as
0.0 / 1.0 by the executors); numbers and arrays next to a tensor become
``constant`` nodes whose float64 value (:class:`numlab.ops.ConstValue`) is
part of the graph, its canonical form and every fingerprint (the scalar of
``+ - * /`` stays the exact attribute of a scalar op).
:func:`trace_function` traces a function with the shapes of named arrays
(:func:`read_arrays`: a ``.npz``, a directory of ``NAME.npy`` or a dict),
:func:`load_inputs` checks arrays against a graph and :func:`as_graph`
takes a Graph or a function.

Node names are deterministic: ``<op>_<k>`` with ``k`` counting that op
(``matmul_0``, ``gelu_0``, ``mul_scalar_0``); return a dict to name the
outputs, or call :meth:`Tensor.named`.  Nodes no output depends on are
dropped.  :func:`decompose` rewrites the
composite operators (softmax, log_softmax, layer_norm, rms_norm) into their
primitive subgraphs; the primitives are named ``<composite>.<op>_<k>`` and
carry ``attrs["origin"] = <composite node name>``, the last one keeps the
composite's own name.  :func:`evaluate` runs the float64 references.

The package has three modules: ``_ir`` (nodes, graphs, the tracer, decomposition,
evaluation), ``_tensor`` (the symbolic tensor and its numpy protocol) and
``_inputs`` (arrays from files, tracing a function with their shapes); import
from ``numlab.graph``.
"""


from __future__ import annotations

from ._inputs import as_graph, function_inputs, load_inputs, read_arrays, trace_function
from ._ir import Graph, Node, decompose, evaluate, trace
from ._tensor import FUNCTIONS, UFUNC_REDUCE, UFUNCS, Tensor

__all__ = ["Node", "Graph", "Tensor", "trace", "decompose", "evaluate", "read_arrays", "load_inputs",
           "trace_function", "function_inputs", "as_graph", "UFUNCS", "UFUNC_REDUCE", "FUNCTIONS"]
