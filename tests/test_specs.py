"""One table of good and bad fusion and kernel specs, run against every entry
point that takes them: ``FusionOptions.parse``, ``KernelSpec.parse``, the
Python APIs that take a spec (``numlab.execute.run``, ``run_with_bounds``,
``plan_bounds``, ``bisect_run``, ``precision_workflow``, ``demo_rows``,
``claims.make_case``, ``numlab.determinism``) and every CLI subcommand's
``--fusion``/``--kernels``.  Good specs give the object ``parse`` gives (the
runs keep it, with the fingerprint of passing the object); bad ones raise
(Python) or exit 2 (CLI) with a message naming the argument or CLI option,
the value and the valid choices."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numlab import cli, zoo
from numlab import determinism as D
from numlab.bounds import plan_bounds
from numlab.claims import Runs, make_case
from numlab.cli.options import coerce, join_spec_values
from numlab.compare.bisect import bisect_run, precision_workflow
from numlab.execute import executor, run
from numlab.experiments import demo_rows
from numlab.formats import get_format
from numlab.fusion import FUSION_KINDS, FusionOptions
from numlab.kernels import KernelSpec
from numlab.kernels.algorithms import ExpPoly, Newton
from numlab.kernels.grammar import split_top_level
from numlab.kernels.orders import Blocked, Lanes, Pairwise, Sequential, Shuffled
from numlab.running_bounds import run_with_bounds

# (spec, expected options)
GOOD_FUSION = [
    (None, FusionOptions()),
    ("autofuse", FusionOptions()),
    ("inductor", FusionOptions.inductor()),
    ("off", FusionOptions.off()),
    ("inductor+nodecompose", FusionOptions.inductor(decompose=False)),
    ("off+decompose", FusionOptions.off(decompose=True)),
    ("autofuse+nodecompose", FusionOptions()),  # the default keeps composites whole
    ("autofuse+decompose", dataclasses.replace(FusionOptions(), decompose=True)),
    ("autofuse:--autofuse_enable_pass=reduce", FusionOptions().enable("reduce")),
    ("--autofuse_enable_pass=reduce", FusionOptions().enable("reduce")),
    ("--enable_autofuse=true;--autofuse_enable_pass=concat,reduce", FusionOptions().enable("concat", "reduce")),
    ("--autofuse_disable_pass=broadcast+decompose",
     dataclasses.replace(FusionOptions().disable("broadcast"), decompose=True)),
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
    ("inductor_cpu", KernelSpec.inductor_cpu()),
    ("inductor_cpu:fma=true", KernelSpec.inductor_cpu(fma=True)),
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
    ("fast", ["handwritten", "codegen", "inductor_cpu"]),
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
@given(preset=st.sampled_from(["handwritten", "codegen", "inductor_cpu"]),
       changes=st.fixed_dictionaries({}, optional={k: v for k, v in _CHANGES.items()
                                                   if k in {f.name for f in dataclasses.fields(KernelSpec)}}),
       ub=st.one_of(st.none(), st.sampled_from([16384, 65536])))
def test_kernel_spec_round_trip(preset, changes, ub):
    k = getattr(KernelSpec, preset)(**changes)
    if ub is not None:
        k = dataclasses.replace(k, hardware=dataclasses.replace(k.hardware, ub_bytes=ub))
    assert KernelSpec.parse(k.spec) == k


@settings(max_examples=60, deadline=None)
@given(kinds=st.frozensets(st.sampled_from(FUSION_KINDS)), decompose=st.booleans(), switch=st.booleans())
def test_fusion_spec_round_trip(kinds, decompose, switch):
    o = FusionOptions(enabled=kinds, decompose=decompose, enable_autofuse=switch)
    assert FusionOptions.parse(o.spec) == o


# ---------------------------------------------------------------------------
# numlab.determinism
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("spec, expected", [g for g in GOOD_FUSION if g[0] is not None])
def test_determinism_fusion_good(spec, expected):
    cfg = D._config("softmax", "fp16", "fused", fusion=spec)
    assert cfg["fusion"] == expected.spec
    assert FusionOptions.parse(cfg["fusion"]) == expected


@pytest.mark.parametrize("spec, words", BAD_FUSION)
def test_determinism_fusion_bad(spec, words):
    with pytest.raises(ValueError) as e:
        D.check_determinism("softmax", runs=2, fusion=spec)
    _check_message(str(e.value), "fusion=", repr(spec), words)


@pytest.mark.parametrize("spec, expected", GOOD_KERNELS)
def test_determinism_kernels_good(spec, expected):
    cfg = D._config("softmax", "fp16", "fused", kernels=spec)
    assert KernelSpec.parse(cfg["kernels"]) == expected


@pytest.mark.parametrize("spec, words", BAD_KERNELS)
def test_determinism_kernels_bad(spec, words):
    with pytest.raises(ValueError) as e:
        D.check_determinism("softmax", runs=2, kernels=spec)
    _check_message(str(e.value), "kernels=", repr(spec), words)


# ---------------------------------------------------------------------------
# the Python APIs that take a spec: each coerces through the parser and
# keeps the object
# ---------------------------------------------------------------------------
_G = zoo.softmax()
_X = zoo.make_inputs(_G, seed=0)

# entry point -> call(argument name, value); every one runs numlab.execute.run
API_ENTRIES = {
    "execute.run": lambda a, v: run(_G, _X, mode="fused", fmt="fp16", **{a: v}),
    "run_with_bounds": lambda a, v: run_with_bounds(_G, _X, mode="fused", fmt="fp16", **{a: v}),
    "plan_bounds": lambda a, v: plan_bounds(_G, _X, mode="fused", fmt="fp16", **{a: v}),
    "bisect_run": lambda a, v: bisect_run(_G, _X, fmt="fp16", log=None, **{a: v}),
    "precision_workflow": lambda a, v: precision_workflow(_G, _X, fmt="fp16", **{a: v}),
    "demo_rows": lambda a, v: demo_rows(models=["softmax"], fmts=("fp16",), **{a: v}),
    "claims.make_case": lambda a, v: Runs(make_case("softmax", fmt="fp16", **{a: v})).run("fused"),
}
# entry point -> the spec arguments it takes
API_ARGS = {
    "execute.run": ("fusion", "kernels", "library"),
    "run_with_bounds": ("fusion", "kernels", "library"),
    "plan_bounds": ("fusion", "kernels", "library"),
    "bisect_run": ("fusion", "kernels", "library"),
    "precision_workflow": ("fusion", "kernels", "library"),
    "demo_rows": ("fusion",),
    "claims.make_case": ("fusion",),
}
FUSION_APIS = [e for e in API_ENTRIES if "fusion" in API_ARGS[e]]
KERNEL_APIS = [(e, a) for e in API_ENTRIES for a in API_ARGS[e] if a != "fusion"]


def _runs(monkeypatch, call) -> list:
    """(mode, fingerprint, kernels, library, fusion) of every run ``call``
    makes, taken from the RunResult numlab.execute.run builds."""
    seen = []

    def spy(**kw):
        seen.append((kw["mode"], kw["fingerprint"], kw["kernels"], kw["library"], kw["fusion"]))
        return real(**kw)

    real = executor.RunResult
    monkeypatch.setattr(executor, "RunResult", spy)
    call()
    monkeypatch.setattr(executor, "RunResult", real)
    return seen


@pytest.mark.parametrize("entry", FUSION_APIS)
@pytest.mark.parametrize("spec, expected", GOOD_FUSION)
def test_api_fusion_good(entry, spec, expected, monkeypatch):
    by_spec = _runs(monkeypatch, lambda: API_ENTRIES[entry]("fusion", spec))
    by_object = _runs(monkeypatch, lambda: API_ENTRIES[entry]("fusion", expected))
    fused = [r for r in by_spec if r[0] == "fused"]
    assert fused, entry
    # the first fused run is the configuration asked for (bisect's later
    # trials switch kinds off); it holds the parsed object
    assert isinstance(fused[0][4], FusionOptions) and fused[0][4] == expected, (entry, fused[0][4])
    assert by_spec == by_object  # same runs, same fingerprints as passing the object


@pytest.mark.parametrize("entry, arg", KERNEL_APIS)
@pytest.mark.parametrize("spec, expected", GOOD_KERNELS)
def test_api_kernels_good(entry, arg, spec, expected, monkeypatch):
    by_spec = _runs(monkeypatch, lambda: API_ENTRIES[entry](arg, spec))
    by_object = _runs(monkeypatch, lambda: API_ENTRIES[entry](arg, expected))
    fused = [r for r in by_spec if r[0] == "fused"]
    assert fused, entry
    kept = fused[0][2] if arg == "kernels" else fused[0][3]
    assert isinstance(kept, KernelSpec) and kept == expected, (entry, arg, kept)
    assert by_spec == by_object


@pytest.mark.parametrize("entry", FUSION_APIS)
@pytest.mark.parametrize("spec, words", BAD_FUSION)
def test_api_fusion_bad(entry, spec, words):
    with pytest.raises(ValueError) as e:
        API_ENTRIES[entry]("fusion", spec)
    _check_message(str(e.value), "fusion=", repr(spec), words)


@pytest.mark.parametrize("entry, arg", KERNEL_APIS)
@pytest.mark.parametrize("spec, words", BAD_KERNELS)
def test_api_kernels_bad(entry, arg, spec, words):
    with pytest.raises(ValueError) as e:
        API_ENTRIES[entry](arg, spec)
    _check_message(str(e.value), f"{arg}=", repr(spec), words)


@pytest.mark.parametrize("entry, arg", [(e, a) for e in API_ENTRIES for a in API_ARGS[e]])
@pytest.mark.parametrize("value", [3, {"fma": False}])
def test_api_spec_wrong_type(entry, arg, value):
    with pytest.raises(TypeError, match=rf"^{arg} must be a .*spec string.*got {type(value).__name__}"):
        API_ENTRIES[entry](arg, value)


def test_run_eager_kernels_string_and_fusion_refused():
    r = run(_G, _X, mode="eager", fmt="fp16", kernels="codegen:fma=false")
    assert r.kernels == KernelSpec.codegen(fma=False)
    assert r.fingerprint == run(_G, _X, mode="eager", fmt="fp16", kernels=KernelSpec.codegen(fma=False)).fingerprint
    assert r.fingerprint != run(_G, _X, mode="eager", fmt="fp16", kernels="codegen").fingerprint
    with pytest.raises(ValueError, match="fusion= applies to modes 'fused' and 'emulated_casts', not 'eager'"):
        run(_G, _X, mode="eager", fmt="fp16", fusion="inductor")


# ---------------------------------------------------------------------------
# the CLI: every subcommand that takes --fusion / --kernels
# ---------------------------------------------------------------------------
FUSION_COMMANDS = {
    "run": ["run", "layernorm", "--mode", "fused"],
    "bisect": ["bisect", "layernorm"],
    "demo": ["demo", "--quick"],
    "check CLAIM": ["check", "no_worse_tensor", "layernorm"],
    "check plan": ["check", "plan"],
    "check determinism": ["check", "determinism", "softmax"],
}
KERNEL_COMMANDS = {
    "run --kernels": (["run", "layernorm"], "--kernels"),
    "bisect --kernels": (["bisect", "layernorm"], "--kernels"),
    "bisect --library": (["bisect", "layernorm"], "--library"),
    "check determinism --kernels": (["check", "determinism", "softmax"], "--kernels"),
}


def _parse(argv):
    """What a subcommand receives: argv parsed and coerced exactly as
    numlab.cli.main does, without running the command."""
    args = cli.build_parser().parse_args(join_spec_values(argv))
    return coerce(args)


@pytest.mark.parametrize("cmd", FUSION_COMMANDS)
@pytest.mark.parametrize("spec, expected", [g for g in GOOD_FUSION if g[0] is not None])
def test_cli_fusion_good(cmd, spec, expected):
    for argv in ([*FUSION_COMMANDS[cmd], "--fusion", spec], [*FUSION_COMMANDS[cmd], f"--fusion={spec}"]):
        got = _parse(argv).fusion
        assert (got == [expected]) if cmd == "check plan" else (got == expected), (argv, got)


@pytest.mark.parametrize("cmd", FUSION_COMMANDS)
@pytest.mark.parametrize("spec, words", BAD_FUSION)
def test_cli_fusion_bad(cmd, spec, words, capsys):
    assert cli.main([*FUSION_COMMANDS[cmd], "--fusion", spec]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before anything ran
    _check_message(err, "--fusion=", repr(spec), words)


@pytest.mark.parametrize("cmd", KERNEL_COMMANDS)
@pytest.mark.parametrize("spec, expected", GOOD_KERNELS)
def test_cli_kernels_good(cmd, spec, expected):
    base, opt = KERNEL_COMMANDS[cmd]
    assert getattr(_parse([*base, opt, spec]), opt[2:]) == expected


@pytest.mark.parametrize("cmd", KERNEL_COMMANDS)
@pytest.mark.parametrize("spec, words", BAD_KERNELS)
def test_cli_kernels_bad(cmd, spec, words, capsys):
    base, opt = KERNEL_COMMANDS[cmd]
    assert cli.main([*base, opt, spec]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _check_message(err, f"{opt}=", repr(spec), words)


def test_cli_check_plan_fusion_lists():
    # repeatable and comma-separated; a comma inside a pass list stays in its spec
    got = _parse(["check", "plan", "--fusion", "off,autofuse:--autofuse_enable_pass=concat,reduce",
                  "--fusion", "--autofuse_enable_pass=gather"]).fusion
    assert got == [FusionOptions.off(), FusionOptions().enable("concat", "reduce"), FusionOptions().enable("gather")]


def test_join_spec_values():
    assert join_spec_values(["run", "m", "--fusion", "--x=1", "--kernels", "codegen"]) == [
        "run", "m", "--fusion=--x=1", "--kernels=codegen"]
    assert join_spec_values(["--fusion=--x=1"]) == ["--fusion=--x=1"]
    assert join_spec_values(["--", "--fusion", "--x"]) == ["--", "--fusion", "--x"]


def test_cli_run_fusion_with_a_space_runs_the_flags(capsys):
    """End to end: ``--fusion --autofuse_enable_pass=reduce`` (a space, a
    value starting with --) runs reduce fusion, and the header prints the
    canonical spec; the default is autofuse."""
    assert cli.main(["run", "layernorm", "--mode", "fused", "--fusion", "--autofuse_enable_pass=reduce"]) == 0
    out = capsys.readouterr().out
    assert "fusion=autofuse:--autofuse_enable_pass=reduce " in out
    g = zoo.layernorm()
    r = run(g, zoo.make_inputs(g, seed=0), mode="fused", fmt="fp16", fusion=FusionOptions().enable("reduce"))
    assert f"fingerprint={r.fingerprint[:16]}" in out
    assert cli.main(["run", "layernorm", "--mode", "fused"]) == 0
    assert "fusion=autofuse kernels=codegen " in capsys.readouterr().out


def test_cli_help_shows_the_grammars_once(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert out.count('preset   := "autofuse" | "inductor" | "off"') == 1
    assert out.count('preset   := "handwritten" | "codegen" | "inductor_cpu"') == 1
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "default 'autofuse'" in out and "numlab --help" in out
