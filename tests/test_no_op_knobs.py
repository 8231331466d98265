"""Knobs that change nothing warn (``numlab.NoEffectWarning``), and the
warning is right both ways: where it warns the run's bits equal the run
without the knob; where a knob does change bits it does not warn.

Each execution mode has a case of each kind; the matmul example is the one
that motivated the warning: under the default fusion a matmul is a library
block, so ``kernels="codegen:mma=..."`` changes 0 of its 64 elements, while
the same unit in eager (or through ``library=``) changes most of them.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from _oracles import bits, same_bits

import numlab as nl
from numlab import ops, zoo
from numlab.cli import main as cli_main
from numlab.execute import MODES, NoEffectWarning, liveness, run
from numlab.graph import trace

UNIT = "H100/fp8_e4m3/fp32"
H = nl.KernelSpec.handwritten()
C = nl.KernelSpec.codegen()


def _run(g, x, **kw):
    """(RunResult, [NoEffectWarning]) of one run, every warning recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(g, x, fmt=kw.pop("fmt", "fp16"), **kw)
    return r, [w.message for w in caught if issubclass(w.category, NoEffectWarning)]


def _changed(r1, r2) -> int:
    """Elements of the outputs whose bits differ between two runs."""
    return sum(int(np.count_nonzero(bits(r1.outputs[o]) != bits(r2.outputs[o]))) for o in r1.outputs)


def _same_values(r1, r2) -> bool:
    """Every output and every written node value bit for bit equal."""
    return _changed(r1, r2) == 0 and r1.values.keys() == r2.values.keys() and all(
        same_bits(r1.values[k], r2.values[k]) for k in r1.values)


@pytest.fixture(scope="module")
def matmul():
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((8, 32)), rng.standard_normal((32, 8))
    g = trace(lambda x, w: ops.matmul(x, w), x=x.shape, w=w.shape)
    return g, {"x": x, "w": w}


@pytest.fixture(scope="module")
def softmax():
    g = zoo.MODELS["softmax"]()
    return g, zoo.make_inputs(g, seed=3)


@pytest.fixture(scope="module")
def gelu():
    """An elementwise chain the code generator takes whole."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 64)) * 3
    g = trace(lambda x: ops.add(ops.mul(ops.gelu(x), x), x), x=x.shape)
    return g, {"x": x}


@pytest.fixture(scope="module")
def gelu_sum():
    """gelu, a product and a row sum: one generated block under inductor, where
    the library's promotion (emulated casts) reaches the reduction's accumulator."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 256)) * 3
    g = trace(lambda x: ops.sum(ops.mul(ops.gelu(x), x), axis=-1), x=x.shape)
    return g, {"x": x}


def test_modes_are_the_four_this_file_covers():
    assert set(MODES) == {"eager", "fused", "emulated_casts", "reference"}


def test_the_warning_is_public():
    assert issubclass(nl.NoEffectWarning, UserWarning)
    assert "NoEffectWarning" in nl.__all__ and nl.NoEffectWarning is NoEffectWarning


# ---------------------------------------------------------------------------
# fused: the matmul example
# ---------------------------------------------------------------------------
def test_fused_kernels_unit_on_a_library_matmul_warns_and_changes_no_bit(matmul):
    g, x = matmul
    base, none = _run(g, x, mode="fused")
    assert none == [] and base.outputs[g.outputs[0]].size == 64
    r, ws = _run(g, x, mode="fused", kernels=f"codegen:mma={UNIT}")
    assert _changed(r, base) == 0 and _same_values(r, base)
    assert len(ws) == 1
    w = ws[0]
    assert (w.arg, w.fields, w.value, w.applies) == ("kernels", ("mma",), f"mma={UNIT}", "library")
    assert str(w) == (f"kernels: mma={UNIT} changes nothing: every matmul of this plan is a library "
                      f"block; use library='handwritten:mma={UNIT}'")


def test_fused_library_unit_does_not_warn_and_changes_bits(matmul):
    g, x = matmul
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", library=f"handwritten:mma={UNIT}")
    assert ws == []
    assert _changed(r, base) >= 32  # most of the 64 elements
    # the spec the warning names is the one that applies: fused with it is eager on the unit
    e, ews = _run(g, x, mode="eager", kernels=f"handwritten:mma={UNIT}")
    assert ews == [] and _changed(r, e) == 0


def test_fused_kernels_no_node_computes_with_warns_as_a_whole(matmul):
    g, x = matmul
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", kernels="handwritten:acc=fp64")
    assert _same_values(r, base)
    assert [(w.arg, w.fields, w.applies) for w in ws] == [("kernels", ("acc",), "library")]
    assert "every node of this plan is a library block; use library='handwritten:acc=fp64'" in str(ws[0])
    # a bare preset no node computes with: one warning naming the spec
    r, ws = _run(g, x, mode="fused", kernels="handwritten:fma=true", library="handwritten:fma=true")
    assert ws == []  # what was asked for (fma in every matmul) is what runs, through library=
    r, ws = _run(g, x, mode="fused", kernels="handwritten", library="handwritten:k_tile=64")
    assert _same_values(r, _run(g, x, mode="fused", library="handwritten:k_tile=64")[0])
    assert [str(w) for w in ws] == ["kernels='handwritten' changes nothing: every node of this plan is a "
                                    "library block; library= applies"]


def test_fused_promotion_of_the_code_generator_is_never_read():
    """Inside a generated block every value is fp32 whatever promotion says;
    the library blocks (the matmuls) read the library's."""
    g = zoo.MODELS["gelu_mlp"]()
    x = zoo.make_inputs(g, seed=2)
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", kernels="codegen:promotion=native")
    assert _same_values(r, base)
    assert [str(w) for w in ws] == ["kernels: promotion=native changes nothing: every node of this plan "
                                    "that reads it is a library block; use library='handwritten:promotion=native'"]
    # the library's promotion does reach the matmuls (a sequential sum rounds every step to S there)
    seq, _ = _run(g, x, mode="fused", library="handwritten:matmul_algo=sequential")
    r, ws = _run(g, x, mode="fused", library="handwritten:matmul_algo=sequential,promotion=native")
    assert ws == [] and _changed(r, seq) > 0


def test_the_same_unit_on_both_sides_never_warns(matmul):
    """kernels= and library= given the same unit put every matmul on it
    whatever the plan: nothing to warn about, under any fusion."""
    g, x = matmul
    both = {"kernels": f"codegen:mma={UNIT}", "library": f"handwritten:mma={UNIT}"}
    for fusion in ("autofuse", "autofuse:--autofuse_enable_pass=elementwise,matmul"):
        assert _run(g, x, mode="fused", fusion=fusion, **both)[1] == []


def test_fusion_options_never_warn(matmul):
    """A plan is what the fusion options ask for even where it is the default's."""
    g, x = matmul
    for fusion in ("inductor", "off", "autofuse+decompose"):
        assert _run(g, x, mode="fused", fusion=fusion)[1] == []


def test_fused_algorithm_on_a_graph_without_it_warns_with_it_does_not(softmax, gelu):
    g, x = gelu  # no exp anywhere
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", kernels="codegen:exp=exact")
    assert _same_values(r, base)
    assert [(w.arg, w.fields) for w in ws] == [("kernels", ("exp",))]
    assert "no node of this plan reads it" in str(ws[0])
    g, x = softmax  # autofuse keeps softmax whole: a library block, its exp from library=
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", library="handwritten:exp=exp_poly(3,fp32)")
    assert ws == [] and _changed(r, base) > 0
    r, ws = _run(g, x, mode="fused", kernels="codegen:exp=exp_poly(3,fp32)")
    assert _same_values(r, base) and [w.fields for w in ws] == [("exp",)]
    assert str(ws[0]).endswith("every softmax of this plan is a library block; "
                               "use library='handwritten:exp=exp_poly(3,fp32)'")
    # exp=exact is what the library runs already: asked for, and run, so no warning
    assert _run(g, x, mode="fused", kernels="codegen:exp=exact")[1] == []


def test_fused_align_without_a_generated_block_warns(matmul, gelu):
    g, x = matmul
    base, _ = _run(g, x, mode="fused")
    r, ws = _run(g, x, mode="fused", align=("algorithm",), keep_internals=True)
    assert _same_values(r, base) and r.internals == []
    assert [(w.arg, w.value) for w in ws] == [("align", "algorithm")]
    assert "this plan has no code-generated block" in str(ws[0])
    g, x = gelu  # a generated block with internal values and a gelu whose algorithm differs
    base, _ = _run(g, x, mode="fused", fmt="fp32", library="handwritten:gelu=aten_vec")
    r, ws = _run(g, x, mode="fused", fmt="fp32", library="handwritten:gelu=aten_vec", align=("algorithm",),
                 keep_internals=True)
    assert ws == [] and r.internals == ["gelu_0", "mul_0"] and _changed(r, base) > 0


# ---------------------------------------------------------------------------
# eager
# ---------------------------------------------------------------------------
def test_eager_unit_changes_the_matmul_and_does_not_warn(matmul):
    g, x = matmul
    base, _ = _run(g, x, mode="eager")
    r, ws = _run(g, x, mode="eager", kernels=f"handwritten:mma={UNIT}")
    assert ws == [] and _changed(r, base) >= 32


def test_eager_unit_on_a_graph_without_matmul_warns_and_changes_nothing(softmax):
    g, x = softmax
    base, _ = _run(g, x, mode="eager")
    r, ws = _run(g, x, mode="eager", kernels=f"handwritten:mma={UNIT},k_tile=64")
    assert _same_values(r, base)
    assert [w.fields for w in ws] == [("k_tile", "mma")]
    assert "no node of this plan reads it (it applies to matmul, scaled_matmul)" in str(ws[0])
    assert ws[0].applies is None


def test_eager_k_tile_under_a_unit_warns(matmul):
    g, x = matmul
    unit, _ = _run(g, x, mode="eager", fmt="fp32", kernels=f"handwritten:mma={UNIT}")
    r, ws = _run(g, x, mode="eager", fmt="fp32", kernels=f"handwritten:mma={UNIT},k_tile=8")
    assert _same_values(r, unit)
    assert [w.fields for w in ws] == [("k_tile",)] and "runs on a matrix unit" in str(ws[0])
    # no unit: the K tile matters (fp32 storage shows the accumulator's roundings)
    r, ws = _run(g, x, mode="eager", fmt="fp32", kernels="handwritten:k_tile=8")
    assert ws == [] and _changed(r, _run(g, x, mode="eager", fmt="fp32")[0]) > 0


def test_eager_keep_internals_warns(matmul):
    g, x = matmul
    base, _ = _run(g, x, mode="eager")
    r, ws = _run(g, x, mode="eager", keep_internals=True)
    assert _same_values(r, base) and r.internals == []
    assert [w.arg for w in ws] == ["keep_internals"] and "internals are a fused mode's" in str(ws[0])


def test_eager_rejects_fusion_and_library_naming_what_applies(matmul):
    g, x = matmul
    with pytest.raises(ValueError, match=r"fusion= applies to modes 'fused' and 'emulated_casts', not "
                                         r"'eager'; got fusion='inductor'"):
        run(g, x, mode="eager", fmt="fp16", fusion="inductor")
    with pytest.raises(ValueError, match=r"library=.*mode 'eager' runs every operator as its own "
                                         r"library kernel with kernels="):
        run(g, x, mode="eager", fmt="fp16", library=f"handwritten:mma={UNIT}")


# ---------------------------------------------------------------------------
# emulated_casts
# ---------------------------------------------------------------------------
def test_emulated_casts_promotion_comes_from_the_library(gelu_sum):
    g, x = gelu_sum
    base, _ = _run(g, x, mode="emulated_casts", fusion="inductor")
    r, ws = _run(g, x, mode="emulated_casts", fusion="inductor", kernels="codegen:promotion=native")
    assert _same_values(r, base)
    assert [(w.arg, w.fields, w.applies) for w in ws] == [("kernels", ("promotion",), "library")]
    assert "library='handwritten:promotion=native'" in str(ws[0])
    r, ws = _run(g, x, mode="emulated_casts", fusion="inductor", library="handwritten:promotion=native")
    assert ws == [] and _changed(r, base) > 0


def test_emulated_casts_promotion_named_again_warns_a_real_knob_does_not(gelu):
    g, x = gelu
    base, _ = _run(g, x, mode="emulated_casts", fmt="fp32")
    r, ws = _run(g, x, mode="emulated_casts", fmt="fp32", align=("promotion",))
    assert _same_values(r, base) and [w.value for w in ws] == ["promotion"]
    r, ws = _run(g, x, mode="emulated_casts", fmt="fp32", kernels="codegen:gelu=aten_vec")
    assert ws == [] and _changed(r, base) > 0


# ---------------------------------------------------------------------------
# reference
# ---------------------------------------------------------------------------
def test_reference_ignores_kernels_and_says_so(matmul):
    g, x = matmul
    base, none = _run(g, x, mode="reference")
    assert none == []
    r, ws = _run(g, x, mode="reference", kernels=f"codegen:mma={UNIT}")
    assert _same_values(r, base)
    assert len(ws) == 1 and "mode 'reference' computes every node by its fp64 reference" in str(ws[0])


def test_reference_storage_format_changes_bits_without_warning(matmul):
    g, x = matmul
    a, wa = _run(g, x, mode="reference", fmt="fp16")
    b, wb = _run(g, x, mode="reference", fmt="bf16")
    assert wa == wb == [] and _changed(a, b) > 0


# ---------------------------------------------------------------------------
# never spurious: defaults given explicitly, and every warning proved on the zoo
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_defaults_given_explicitly_never_warn(name):
    g = zoo.MODELS[name]()
    x = zoo.make_inputs(g, seed=0)
    for mode, kw in (("eager", {"kernels": H}),
                     ("fused", {"kernels": C, "library": H, "fusion": nl.FusionOptions()}),
                     ("fused", {"kernels": C, "library": H, "fusion": "inductor"}),
                     ("emulated_casts", {"kernels": C.spec, "library": H.spec, "fusion": "autofuse"})):
        assert _run(g, x, mode=mode, **kw)[1] == []


VARIANTS = {
    "kernels": ("mma=H100/fp8_e4m3/fp32", "exp=exact", "exp=exp_poly(3,fp32)", "rsqrt=exact",
                "variance=textbook", "gelu=aten_vec", "gelu_tanh=aten_vec", "k_tile=32",
                "matmul_algo=sequential", "promotion=native", "fma=false", "tanh=sleef"),
    "library": ("mma=H100/fp8_e4m3/fp32", "exp=exp_poly(3,fp32)", "rsqrt=exact", "variance=two_pass",
                "promotion=native", "k_tile=32", "fma=true"),
}


RUNS = (("eager", {}), ("fused", {}), ("fused", {"fusion": "inductor"}),
        ("fused", {"fusion": "inductor", "align": ("algorithm", "instruction")}),
        ("emulated_casts", {}), ("emulated_casts", {"fusion": "inductor"}))


@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_warning_on_the_zoo_is_right(name, fmt):
    """For each zoo model, run configuration and one-field variant of
    kernels= or library=: where the run warns about the argument, its
    outputs and written values are bit for bit those of the run without it
    (fp32 storage shows the algorithms' and orders' differences, fp16 the
    promotion's)."""
    g = zoo.MODELS[name]()
    x = zoo.make_inputs(g, seed=1)
    warned = 0
    for mode, cfg in RUNS:
        base, _ = _run(g, x, mode=mode, fmt=fmt, **cfg)
        for arg, items in VARIANTS.items():
            if arg == "library" and mode == "eager":
                continue
            preset = "handwritten" if arg == "library" or mode == "eager" else "codegen"
            for item in items:
                r, ws = _run(g, x, mode=mode, fmt=fmt, **cfg, **{arg: f"{preset}:{item}"})
                if any(w.arg == arg for w in ws):
                    warned += 1
                    assert _same_values(r, base), (mode, cfg, arg, item, [str(w) for w in ws])
    assert warned > 0  # every zoo model has some knob that changes nothing


def test_known_ops_are_the_catalogue():
    """A new operator must be checked against FIELD_READERS (until then it is
    taken as reading every field, which never warns wrongly)."""
    assert liveness.KNOWN_OPS == frozenset(ops.CATALOGUE)
    assert all(set(v) <= liveness.KNOWN_OPS for v in liveness.FIELD_READERS.values())
    spec_fields = {f.name for f in dataclasses.fields(nl.KernelSpec)}
    assert set(liveness.FIELD_READERS) <= spec_fields


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------
def test_cli_prints_the_warning_once_in_option_names(capsys):
    rc = cli_main(["run", "attention_scores", "--mode", "fused", "--kernels", f"codegen:mma={UNIT}"])
    err = capsys.readouterr().err
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ln.startswith("numlab: warning:")]
    assert lines == [f"numlab: warning: --kernels mma={UNIT} changes nothing: every matmul of this "
                     f"plan is a library block; use --library handwritten:mma={UNIT}"]
    assert err.count("changes nothing") == 1


def test_cli_the_suggested_library_runs_without_warning(capsys, tmp_path):
    dumps = {}
    for name, extra in (("plain", []), ("kernels", ["--kernels", f"codegen:mma={UNIT}"]),
                        ("library", ["--library", f"handwritten:mma={UNIT}"])):
        rc = cli_main(["run", "attention_scores", "--mode", "fused", *extra, "--dump", str(tmp_path / name)])
        assert rc == 0
        dumps[name] = capsys.readouterr().err
    assert "changes nothing" in dumps["kernels"] and "warning" not in dumps["library"]
    out = {k: {p.name: np.load(p) for p in (tmp_path / k).glob("*.npy")} for k in ("plain", "kernels", "library")}
    assert out["plain"].keys() == out["kernels"].keys() == out["library"].keys()
    assert all(same_bits(out["plain"][k], out["kernels"][k]) for k in out["plain"])
    assert any(not same_bits(out["plain"][k], out["library"][k]) for k in out["plain"])


def test_cli_library_in_eager_is_an_error_naming_kernels(capsys):
    rc = cli_main(["run", "attention_scores", "--library", f"handwritten:mma={UNIT}"])
    err = capsys.readouterr().err
    assert rc == 2 and f"use --kernels handwritten:mma={UNIT}" in err
