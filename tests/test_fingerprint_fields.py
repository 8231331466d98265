"""Every field of the specs a run is compiled from enters its fingerprint:
changing any one field changes the fingerprint, equal specs give equal
fingerprints.  The fields are read from the dataclasses, so a field added
without a line here fails."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

from numlab import zoo
from numlab.execute.fingerprint import SCHEMA, canonical, fingerprint
from numlab.formats import Format
from numlab.fusion import FusionOptions
from numlab.kernels import KernelSpec
from numlab.kernels.hardware import Hardware

_G = zoo.gelu_mlp()

_FMT = Format("tst", p=4, emax=7, emin=-6)
_NO_NEGZERO = {"negzero": False}
_E8M0_LIKE = {"negzero": False, "signed": False, "subnormals": False}

# field -> (fields set on the base first, a different value for the field)
_FORMAT = {
    "name": ({}, "tst2"), "p": ({}, 5), "emax": ({}, 8), "emin": ({}, -5),
    "subnormals": ({}, False), "inf": ({}, False), "nan": ({}, "none"),
    "dtype": ({}, np.float32), "bits": ({}, 9), "negzero": ({}, False),
    "signed": (_NO_NEGZERO, False), "zero": (_E8M0_LIKE, False),
}
_KERNELS = {
    "name": ({}, "other"), "promotion": ({}, "native"), "acc": ({}, "fp64"),
    "reduce_inner": ({}, "sequential"), "reduce_outer": ({}, "pairwise"), "reduce_order": ({}, "pairwise"),
    "live_buffers": ({}, 3), "hardware": ({}, Hardware(ub_bytes=64 * 1024)), "scalar_mul": ({}, "muls"),
    "scalar_rounding": ({}, "rtz"), "vector_rounding": ({}, "rtz"), "fma": ({}, False),
    "rsqrt": ({}, "exact"), "reciprocal": ({}, "newton(table8,1)"), "divide": ({}, "recip_mul"), "exp": ({}, "exact"),
    "tanh": ({}, "sleef"), "erf": ({}, "aten_vec"), "gelu": ({}, "onednn"), "gelu_tanh": ({}, "aten_vec"),
    "variance": ({}, "welford"), "matmul_algo": ({}, "sequential"), "k_tile": ({}, 64), "mma": ({}, "H100"),
    "log1p": ({}, "sleef_u10"), "silu": ({}, "divide"), "softmax": ({}, "reciprocal"),
    "softmax_order": ({}, "pairwise"), "reduce_order_low": ({}, "pairwise"), "layer_norm": ({}, "aten"),
    "moments_lanes": ({}, 4), "storage_scalars": ({}, ("add_scalar",)), "loop_step": ({}, 32),
    "tail_ops": ({}, ("exp",)), "alpha_step": ({}, 32), "tail_math": ({}, "exact"), "grain_size": ({}, 1024),
    "threads": ({}, 2),
}
_HARDWARE = {
    "ub_bytes": ({}, 64 * 1024), "align_bytes": ({}, 64), "double_buffer": ({}, False), "name": ({}, "other"),
}
_FUSION = {
    "enabled": ({}, frozenset({"elementwise"})), "decompose": ({}, True), "enable_autofuse": ({}, False),
    "name": ({}, "inductor"),
}


def _fp(fmt="fp16", kernels=None, fusion=None):
    return fingerprint(_G, mode="fused", fmt=fmt, kernels=kernels, library=KernelSpec.handwritten(),
                       fusion=fusion or FusionOptions())


def _cases():
    hw_spec = KernelSpec.codegen()
    for cls, base, table, call in [
        (Format, _FMT, _FORMAT, lambda v: _fp(fmt=v)),
        (KernelSpec, KernelSpec.codegen(), _KERNELS, lambda v: _fp(kernels=v)),
        (Hardware, Hardware(), _HARDWARE, lambda v: _fp(kernels=dataclasses.replace(hw_spec, hardware=v))),
        (FusionOptions, FusionOptions(), _FUSION, lambda v: _fp(fusion=v)),
    ]:
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_"):
                yield pytest.param(cls, base, table, call, f.name, id=f"{cls.__name__}.{f.name}")


@pytest.mark.parametrize("cls, base, table, call, name", list(_cases()))
def test_every_field_enters_the_fingerprint(cls, base, table, call, name):
    assert name in table, f"{cls.__name__}.{name} is new: give it a different value here"
    preset, value = table[name]
    a = dataclasses.replace(base, **preset)
    b = dataclasses.replace(a, **{name: value})
    assert getattr(a, name) != getattr(b, name)
    assert call(a) != call(b)
    assert call(dataclasses.replace(a)) == call(a)  # an equal spec built anew: the same fingerprint
    if cls is not FusionOptions:  # FusionOptions enter by their own canonical()
        assert name in canonical(b) or (cls is Format and name == "name")


def test_every_table_line_names_a_field():
    for cls, table in [(Format, _FORMAT), (KernelSpec, _KERNELS), (Hardware, _HARDWARE), (FusionOptions, _FUSION)]:
        assert set(table) <= {f.name for f in dataclasses.fields(cls)}


def test_the_schema_enters_the_fingerprint(monkeypatch):
    module = importlib.import_module("numlab.execute.fingerprint")
    before = _fp()
    monkeypatch.setattr(module, "SCHEMA", SCHEMA + 1)
    assert _fp() != before
