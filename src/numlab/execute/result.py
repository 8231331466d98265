"""What :func:`numlab.execute.run` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._repr import Compact, mapping_summary
from ..formats import Format

__all__ = ["RunResult"]


@dataclass(repr=False)
class RunResult(Compact):
    """What :func:`run` returns.

    Attributes
    ----------
    outputs : dict
        Graph output name -> array in S's container dtype (float64 for the
        reference; a node's stored format's container when its operator
        declares one, see ``values``).
    values : dict
        Dumped values, name -> array: eager, every node (in S, or in the
        format its operator stores, ``OpInfo.stored_fmt``: quantised elements
        in their element format, block scales in float32); fused, every
        block output (likewise) and, with ``keep_internals``, every block-internal
        value in float32 (``internals`` lists those names); reference, every
        node in float64.
    plan : numlab.fusion.Plan
        The plan executed (eager: every node its own block, no
        decomposition).
    fingerprint : str
        sha256 hex of the compile-time inputs (:func:`fingerprint`).
    nonfinite : dict
        Node -> (number of NaN, number of inf) in the node's computed value
        (every executed node, dumped or not; a ``mul`` folded into an FMA by
        contraction is not executed on its own and is absent unless
        ``keep_internals``).
    input_nonfinite : dict
        Graph input -> (number of NaN, number of inf) after rounding to S
        (a finite value beyond S's range becomes inf here, e.g. 70000 in
        fp16); gather indices are not counted.
    mode, fmt, graph, source
        The mode, the storage Format S, the executed graph (decomposed when the
        plan decomposed) and the graph as given.
    kernels, library, fusion, align, seed
        The knobs used.
    """

    outputs: dict
    values: dict
    plan: object
    fingerprint: str
    nonfinite: dict
    mode: str
    fmt: Format
    graph: object
    source: object
    kernels: object = None
    library: object = None
    fusion: object = None
    align: tuple = ()
    seed: int | None = None
    internals: list = field(default_factory=list)
    input_nonfinite: dict = field(default_factory=dict)

    @property
    def output(self) -> np.ndarray:
        """The single output (ValueError when the graph has several)."""
        if len(self.outputs) != 1:
            raise ValueError(f"graph has {len(self.outputs)} outputs {list(self.outputs)}; use .outputs[name]")
        return next(iter(self.outputs.values()))

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.values:
            return self.values[name]
        raise KeyError(f"{name!r} was not dumped in mode {self.mode!r}; dumped: {list(self.values)}")

    def summary(self) -> str:
        bad = {k: v for k, v in self.nonfinite.items() if v[0] or v[1]}
        bad_in = {k: v for k, v in self.input_nonfinite.items() if v[0] or v[1]}
        lines = [f"RunResult(mode={self.mode}, fmt={self.fmt.name}, fingerprint={self.fingerprint[:12]}...)",
                 f"  outputs: {', '.join(f'{k}{tuple(v.shape)}' for k, v in self.outputs.items())}",
                 f"  dumped values: {len(self.values)}",
                 f"  non-finite (nan, inf) in inputs (after rounding to S): {bad_in or 'none'}",
                 f"  non-finite (nan, inf) per node: {bad or 'none'}"]
        return "\n".join(lines)

    def _repr_facts(self):
        bad = {k: v for k, v in self.nonfinite.items() if v[0] or v[1]}
        bad_in = {k: v for k, v in self.input_nonfinite.items() if v[0] or v[1]}
        rows = [("outputs", mapping_summary(self.outputs)),
                ("dumped values", f"{len(self.values)}" + (f" ({len(self.internals)} block-internal)"
                                                          if self.internals else "")),
                ("plan", f"{len(getattr(self.plan, 'blocks', ()))} blocks"),
                ("non-finite in", mapping_summary(bad_in) if bad_in else "none"),
                ("non-finite nodes", f"{len(bad)}: {mapping_summary(bad)}" if bad else "none")]
        return (f"RunResult: mode {self.mode}, fmt {self.fmt.name}, fingerprint {self.fingerprint[:12]}...",
                rows)


