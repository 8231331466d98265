"""Argument checks of :func:`numlab.execute.run`, the execution modes and the
sources of difference with their KernelSpec fields.

Graph inputs are checked by :meth:`numlab.graph.Graph.check_inputs` (the one
input checker)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..formats import Format, get_format
from ..fusion import FusionOptions
from ..kernels import KernelSpec

__all__ = ["MODES", "SOURCES", "SOURCE_FIELDS", "check_run_args", "check_spec", "check_fusion", "aligned_spec"]

MODES = ("eager", "fused", "emulated_casts", "reference")
SOURCES = ("promotion", "instruction", "tiling", "algorithm")

SOURCE_FIELDS = {
    "promotion": ("promotion", "acc"),
    "instruction": ("scalar_mul", "storage_scalars", "scalar_rounding", "vector_rounding", "fma", "mma"),
    "tiling": ("reduce_inner", "reduce_outer", "reduce_order", "reduce_order_low", "softmax_order",
               "moments_lanes", "live_buffers", "hardware", "k_tile", "loop_step", "tail_ops", "alpha_step",
               "grain_size", "threads"),
    "algorithm": ("rsqrt", "reciprocal", "divide", "exp", "tanh", "erf", "gelu", "gelu_tanh", "variance",
                  "log1p", "silu", "softmax", "layer_norm", "tail_math", "matmul_algo"),
}
"""KernelSpec fields of each source of difference (``docs/design.md``, "The
four sources of difference").  ``name`` is the only field in none of them (tests check the
partition)."""


def check_spec(spec, arg: str):
    """``spec`` as a KernelSpec (a kernel spec string is parsed by
    :meth:`KernelSpec.parse`, a KernelSpec kept), or None.  Errors name ``arg``."""
    return None if spec is None else KernelSpec.parse(spec, arg=arg)


def check_fusion(fusion, arg: str = "fusion"):
    """``fusion`` as FusionOptions (a fusion spec string is parsed by
    :meth:`FusionOptions.parse`, FusionOptions kept), or None.  Errors name ``arg``."""
    return None if fusion is None else FusionOptions.parse(fusion, arg=arg)


def check_align(align) -> tuple:
    """``align`` as a tuple of sources in :data:`SOURCES` order (``True``: all)."""
    if isinstance(align, str):
        align = (align,)
    if align is True:
        return SOURCES
    try:
        items = tuple(align)
    except TypeError:
        raise TypeError(f"align must be a tuple of sources {list(SOURCES)}, got {align!r}") from None
    for a in items:
        if a not in SOURCES:
            raise ValueError(f"align: {a!r} is not a source of difference; valid sources: {list(SOURCES)}")
    return tuple(s for s in SOURCES if s in items)


def check_run_args(graph, *, mode, fmt, kernels, library, fusion, seed, keep_internals,
                   align) -> tuple[Format, tuple, KernelSpec | None, KernelSpec | None, FusionOptions | None]:
    """Validate :func:`run`'s arguments; return (S, align, kernels, library,
    fusion) with ``align`` normalised (``emulated_casts`` implies
    ``"promotion"``) and the specs coerced to their objects (spec strings
    parsed by :meth:`KernelSpec.parse` / :meth:`FusionOptions.parse`; None
    stays None)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not an execution mode; valid modes: {list(MODES)}")
    S = get_format(fmt, "fmt")
    if S.p > 24 and mode != "reference":
        raise ValueError(
            f"fmt={S.name!r} is not a storage format for mode {mode!r}: kernels compute in "
            "fp32, so S must fit in fp32; valid: fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2 "
            "(mode='reference' is the fp64 run)"
        )
    for attr in ("inputs", "nodes", "outputs", "check_inputs"):
        if not hasattr(graph, attr):
            raise TypeError(f"graph must be a numlab.graph.Graph, got {type(graph).__name__}")
    kernels = check_spec(kernels, "kernels")
    library = check_spec(library, "library")
    fusion = check_fusion(fusion, "fusion")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0):
        raise ValueError(f"seed={seed!r} must be None or a non-negative int")
    if not isinstance(keep_internals, bool):
        raise TypeError(f"keep_internals must be a bool, got {keep_internals!r}")
    align = check_align(align)
    if mode not in ("fused", "emulated_casts"):
        for arg, value in (("fusion", fusion), ("align", align), ("library", library)):
            if value is not None and value != ():
                raise ValueError(f"{arg}= applies to modes 'fused' and 'emulated_casts', not {mode!r}; "
                                 f"got {arg}={_shown(value)!r} ({_what_applies(mode)})")
    if mode == "emulated_casts" and "promotion" not in align:
        align = check_align(("promotion", *align))
    return S, align, kernels, library, fusion


def _shown(value):
    return getattr(value, "spec", value)


def _what_applies(mode: str) -> str:
    if mode == "eager":
        return "mode 'eager' runs every operator as its own library kernel with kernels=, unfused"
    return f"mode {mode!r} computes every node by its fp64 reference, with no kernels"


def aligned_spec(gen, lib, align):
    """``gen`` with the fields of each aligned source taken from ``lib``."""
    if not align or gen is None:
        return gen
    changes = {}
    for src in align:
        for f in SOURCE_FIELDS[src]:
            changes[f] = getattr(lib, f)
    return dataclasses.replace(gen, **changes) if changes else gen
