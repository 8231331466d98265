"""numlab: see, bit for bit, why fused and eager kernels differ, and check claims about it.

The public names are loaded lazily so that ``import numlab`` stays fast and a
module only pulls in the layers below it (docs/design.md, "Layers").
"""

from __future__ import annotations

from ._lazy import lazy_loader
from .formats import (
    BF16,
    FORMATS,
    FP4_E2M1,
    FP6_E2M3,
    FP6_E3M2,
    FP8_E4M3,
    FP8_E4M3FNUZ,
    FP8_E5M2,
    FP8_E5M2FNUZ,
    FP8_E8M0,
    FP16,
    FP32,
    FP64,
    TF32,
    Format,
    decode,
    get_format,
    next_down,
    next_up,
    ulp,
)
from .rounding import ROUNDINGS, encode, round_to

__version__ = "0.1.0"

# name -> module that defines it (imported on first use)
_LAZY = {
    "primitives": "numlab.primitives",
    "kernels": "numlab.kernels",
    "ops": "numlab.ops",
    "graph": "numlab.graph",
    "zoo": "numlab.zoo",
    "fusion": "numlab.fusion",
    "execute": "numlab.execute",
    "metrics": "numlab.metrics",
    "bounds": "numlab.bounds",
    "running_bounds": "numlab.running_bounds",
    "contract": "numlab.contract",
    "testing": "numlab.testing",
    "claims": "numlab.claims",
    "compare": "numlab.compare",
    "races": "numlab.races",
    "determinism": "numlab.determinism",
    "plots": "numlab.plots",
    "widgets": "numlab.widgets",
    "torch": "numlab.torch",
}
# attribute name -> (module, attribute)
_LAZY_ATTRS = {
    "run": ("numlab.execute", "run"),
    "trace": ("numlab.graph", "trace"),
    "trace_function": ("numlab.graph", "trace_function"),
    "KernelSpec": ("numlab.kernels", "KernelSpec"),
    "Hardware": ("numlab.kernels", "Hardware"),
    "FusionOptions": ("numlab.fusion", "FusionOptions"),
    "NoEffectWarning": ("numlab.execute", "NoEffectWarning"),
}

__all__ = [
    "Format", "FP64", "FP32", "TF32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2",
    "FP8_E4M3FNUZ", "FP8_E5M2FNUZ", "FP6_E2M3", "FP6_E3M2", "FP4_E2M1", "FP8_E8M0", "FORMATS",
    "get_format", "ulp", "next_up", "next_down", "encode", "decode", "ROUNDINGS", "round_to",
    *_LAZY, *_LAZY_ATTRS,
]


__getattr__, __dir__ = lazy_loader(globals(), _LAZY, _LAZY_ATTRS)
