"""Kernel specs for the claims: every entry point coerces ``kernels=`` (the
fused side's kernels: the code generator, default ``codegen``) and
``library=`` (eager's hand-written library, also what the fused plan calls
for blocks it does not generate; default ``handwritten``) through
:meth:`numlab.kernels.KernelSpec.parse`, and a case stores the canonical
spec strings (``KernelSpec.spec``), so a saved counterexample names the
kernels it ran and :func:`numlab.claims.reproduce` re-runs them."""

from __future__ import annotations

from ..kernels import KernelSpec
from ..kernels.spec import mode_specs

__all__ = ["DEFAULT_KERNELS", "DEFAULT_LIBRARY", "kernel_spec", "kernel_args"]

DEFAULT_KERNELS = mode_specs("fused")[0].spec
"""Spec of the fused side's kernels when none is given (``"codegen"``)."""
DEFAULT_LIBRARY = mode_specs("fused")[1].spec
"""Spec of eager's library kernels when none is given (``"handwritten"``)."""


def kernel_spec(spec, arg: str, default: str) -> str:
    """The canonical spec string of ``spec`` (a str, a KernelSpec, or None:
    ``default``); errors name ``arg``."""
    if spec is None:
        return default
    return KernelSpec.parse(spec, arg=arg).spec


def kernel_args(mode: str, kernels: KernelSpec, library: KernelSpec) -> dict:
    """Keyword arguments of :func:`numlab.execute.run` (and
    :func:`numlab.running_bounds.run_with_bounds`) for ``mode``: eager runs
    the library; fused modes run ``kernels`` with ``library`` for library
    blocks; the fp64 reference takes none."""
    if mode == "eager":
        return {"kernels": library}
    if mode in ("fused", "emulated_casts"):
        return {"kernels": kernels, "library": library}
    return {}
