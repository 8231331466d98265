"""One table of good and bad fusion and kernel specs, run against every entry
point that takes them: ``FusionOptions.parse``, ``KernelSpec.parse``,
``numlab.determinism`` and every CLI subcommand's ``--fusion``/``--kernels``.
Good specs give the object ``parse`` gives; bad ones raise (Python) or exit 2
(CLI) with a message naming the argument or CLI option, the value and the
valid choices."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numlab.formats import get_format
from numlab.fusion import KINDS, FusionOptions
from numlab.kernels import KernelSpec
from numlab.kernels.algorithms import ExpPoly, Newton
from numlab.kernels.grammar import split_top_level
from numlab.kernels.reduce import Blocked, Lanes, Pairwise, Sequential, Shuffled

# (spec, expected options)
GOOD_FUSION = [
    (None, FusionOptions()),
    ("autofuse", FusionOptions()),
    ("inductor", FusionOptions.inductor()),
    ("off", FusionOptions.off()),
    ("inductor+nodecompose", FusionOptions.inductor(decompose=False)),
    ("off+decompose", FusionOptions.off(decompose=True)),
    ("autofuse+nodecompose", dataclasses.replace(FusionOptions(), decompose=False)),
    ("autofuse:--autofuse_enable_pass=reduce", FusionOptions().enable("reduce")),
    ("--autofuse_enable_pass=reduce", FusionOptions().enable("reduce")),
    ("--enable_autofuse=true;--autofuse_enable_pass=concat,reduce", FusionOptions().enable("concat", "reduce")),
    ("--autofuse_disable_pass=broadcast+nodecompose",
     dataclasses.replace(FusionOptions().disable("broadcast"), decompose=False)),
]
# (spec, words the message must hold besides the option name and the value)
BAD_FUSION = [
    ("xla", ["autofuse", "inductor", "off"]),
    ("default", ["autofuse", "inductor", "off"]),
    ("autofuse_enable_pass=reduce", ["autofuse", "inductor", "off"]),
    ("inductor:--autofuse_enable_pass=reduce", ["autofuse:FLAGS"]),
    ("autofuse+fancy", ["+decompose", "+nodecompose"]),
    ("--autofuse_enable_pass=bogus", ["reduce", "transpose"]),
    ("--foo=1", ["autofuse_enable_pass", "enable_autofuse"]),
]

GOOD_KERNELS = [
    ("handwritten", KernelSpec.handwritten()),
    ("codegen", KernelSpec.codegen()),
    ("codegen:fma=false", KernelSpec.codegen(fma=False)),
    ("handwritten:reduce_inner=blocked(512,lanes(64),sequential),k_tile=64",
     KernelSpec.handwritten(reduce_inner=Blocked(512, Lanes(64), Sequential()), k_tile=64)),
    ("codegen:rsqrt=newton(table8,2,fp32),acc=fp64,live_buffers=none",
     KernelSpec.codegen(rsqrt=Newton("table8", 2, get_format("fp32")), acc=get_format("fp64"), live_buffers=None)),
    ("handwritten:hardware.ub_bytes=16384,hardware.double_buffer=false",
     KernelSpec.handwritten(hardware=dataclasses.replace(KernelSpec.handwritten().hardware, ub_bytes=16384,
                                                        double_buffer=False))),
]
BAD_KERNELS = [
    ("fast", ["handwritten", "codegen"]),
    ("codegen:warp=1", ["'warp'", "fma", "hardware.ub_bytes"]),
    ("codegen:fma=maybe", ["fma", "true", "false"]),
    ("codegen:k_tile=big", ["k_tile", "int"]),
    ("codegen:promotion=weird", ["promotion", "native", "fp32_internal"]),
    ("codegen:reduce_inner=bogus(1)", ["reduce_inner", "pairwise", "blocked"]),
    ("codegen:acc=fp17", ["acc", "fp32", "bf16"]),
    ("codegen:fma", ["field=value", "fma"]),
]


def _check_message(msg: str, name: str, spec: str, words) -> None:
    assert name in msg, (name, msg)
    assert spec in msg, (spec, msg)
    for w in words:
        assert w in msg, (w, msg)


# ---------------------------------------------------------------------------
# Python entry points
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("spec, expected", GOOD_FUSION)
def test_fusion_parse_good(spec, expected):
    o = FusionOptions.parse(spec)
    assert o == expected
    assert FusionOptions.parse(o.spec) == o
    assert FusionOptions.parse(o) is o


@pytest.mark.parametrize("spec, words", BAD_FUSION)
def test_fusion_parse_bad(spec, words):
    with pytest.raises(ValueError) as e:
        FusionOptions.parse(spec)
    _check_message(str(e.value), "fusion=", repr(spec), words)


@pytest.mark.parametrize("spec, expected", GOOD_KERNELS)
def test_kernels_parse_good(spec, expected):
    k = KernelSpec.parse(spec)
    assert k == expected
    assert KernelSpec.parse(k.spec) == k
    assert KernelSpec.parse(k) is k


@pytest.mark.parametrize("spec, words", BAD_KERNELS)
def test_kernels_parse_bad(spec, words):
    with pytest.raises(ValueError) as e:
        KernelSpec.parse(spec)
    _check_message(str(e.value), "kernels=", repr(spec), words)


def test_kernels_parse_type_error():
    with pytest.raises(TypeError, match="kernels must be a kernel spec string.*int"):
        KernelSpec.parse(3)


def test_split_top_level():
    assert split_top_level("a=blocked(512,lanes(64),sequential),b=1") == ["a=blocked(512,lanes(64),sequential)", "b=1"]
    with pytest.raises(ValueError, match="unclosed"):
        split_top_level("a=lanes(64")
    with pytest.raises(ValueError, match="unmatched"):
        split_top_level("a=64)")


def test_kernel_spec_strings_are_canonical():
    assert KernelSpec.handwritten().spec == "handwritten"
    assert KernelSpec.codegen().spec == "codegen"
    # fields in declaration order, whatever order they were written in
    a = KernelSpec.parse("codegen:k_tile=64,fma=false")
    assert a.spec == "codegen:fma=false,k_tile=64" == KernelSpec.parse("codegen:fma=false,k_tile=64").spec


# random field changes: one strategy per kind of value
_ORDERS = st.sampled_from([Sequential(), Pairwise(), Lanes(64), Lanes(8, "sequential", "epilogue"),
                           Blocked(512, Lanes(64), Sequential()), Blocked(128), Shuffled(3),
                           Shuffled(7, 64, Pairwise())])
_CHANGES = {
    "promotion": st.sampled_from(["native", "fp32_internal", "accumulator_only"]),
    "acc": st.sampled_from(["fp32", "fp64", "bf16"]).map(get_format),
    "reduce_inner": _ORDERS,
    "reduce_outer": _ORDERS,
    "reduce_order": st.one_of(st.none(), _ORDERS),
    "live_buffers": st.one_of(st.none(), st.integers(1, 8)),
    "scalar_mul": st.sampled_from(["muls", "broadcast"]),
    "scalar_rounding": st.sampled_from(["rne", "rtz", "up", "down"]),
    "vector_rounding": st.sampled_from(["rne", "rtz", "up", "down"]),
    "fma": st.booleans(),
    "rsqrt": st.sampled_from(["exact", "sqrt_then_div", Newton("table12", 1, get_format("fp32")),
                              Newton("magic", 3, get_format("fp16"))]),
    "exp": st.sampled_from(["exact", ExpPoly(6, get_format("fp32")), ExpPoly(3, get_format("fp64"))]),
    "k_tile": st.integers(1, 4096),
    "name": st.sampled_from(["handwritten", "codegen", "custom", "my spec"]),
}


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from(["handwritten", "codegen"]),
       changes=st.fixed_dictionaries({}, optional={k: v for k, v in _CHANGES.items()
                                                   if k in {f.name for f in dataclasses.fields(KernelSpec)}}),
       ub=st.one_of(st.none(), st.sampled_from([16384, 65536])))
def test_kernel_spec_round_trip(preset, changes, ub):
    k = getattr(KernelSpec, preset)(**changes)
    if ub is not None:
        k = dataclasses.replace(k, hardware=dataclasses.replace(k.hardware, ub_bytes=ub))
    assert KernelSpec.parse(k.spec) == k


@settings(max_examples=60, deadline=None)
@given(kinds=st.frozensets(st.sampled_from(KINDS)), decompose=st.booleans(), switch=st.booleans())
def test_fusion_spec_round_trip(kinds, decompose, switch):
    o = FusionOptions(enabled=kinds, decompose=decompose, enable_autofuse=switch)
    assert FusionOptions.parse(o.spec) == o
