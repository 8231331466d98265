"""Fusion planner: flag parsing, presets, legality of every plan, live
buffers and tiles (independent recomputation), readable printing."""

from __future__ import annotations

import dataclasses

import pytest
from _fusion_reference import live_bruteforce
from _oracles import assert_same_bits
from hypothesis import given
from hypothesis import strategies as st

from numlab import ops, zoo
from numlab.fusion import (
    AUTOFUSE_DEFAULT,
    FUSION_KINDS,
    INDUCTOR_DEFAULT,
    FusionOptions,
    op_kind,
    parse_autofuse_flags,
    plan,
)
from numlab.graph import Graph, Node, trace
from numlab.kernels.hardware import SMALL, Hardware, tile_elements

# ---------------------------------------------------------------------------
# options and the AUTOFUSE_FLAGS parser
# ---------------------------------------------------------------------------


def test_defaults_are_ascend_autofusion():
    o = FusionOptions()
    assert o.enabled == frozenset({"elementwise", "broadcast", "reshape"})
    for k in ("reduce", "concat", "slice", "gather", "transpose", "matmul"):
        assert not o.fuses(k)
    assert o.fuses("elementwise") and o.fuses("broadcast")
    # composites kept whole, as the autofusion note's GE path runs them (library operators)
    assert o.decompose is False
    assert FusionOptions.autofuse() == o == FusionOptions.autofuse("") == FusionOptions.from_env({})
    # the decomposed variant is a named configuration with the same kinds
    d = FusionOptions.parse("autofuse+decompose")
    assert d == dataclasses.replace(o, decompose=True) and d.spec == "autofuse+decompose"
    assert o.spec == "autofuse"


def test_flag_string_enable_and_disable():
    o = FusionOptions.autofuse("--enable_autofuse=true;--autofuse_enable_pass=concat,reduce")
    assert o.enabled == AUTOFUSE_DEFAULT | {"concat", "reduce"}
    o = parse_autofuse_flags("--autofuse_enable_pass=slice,gather,transpose;--autofuse_disable_pass=broadcast")
    assert o.enabled == (AUTOFUSE_DEFAULT | {"slice", "gather", "transpose"}) - {"broadcast"}
    # items apply left to right
    o = parse_autofuse_flags("--autofuse_disable_pass=reduce;--autofuse_enable_pass=reduce")
    assert "reduce" in o.enabled
    o = parse_autofuse_flags("--enable_autofuse=false")
    assert not o.enable_autofuse and not o.fuses("elementwise")
    # aliases as the real tool spells them
    assert parse_autofuse_flags("--autofuse_disable_pass=elemwise").enabled == AUTOFUSE_DEFAULT - {"elementwise"}


def test_from_env():
    o = FusionOptions.from_env({"AUTOFUSE_FLAGS": "--enable_autofuse=true;--autofuse_enable_pass=concat"})
    assert o.enabled == AUTOFUSE_DEFAULT | {"concat"}
    assert FusionOptions.from_env({}) == FusionOptions()


@pytest.mark.parametrize(
    "flags, needle",
    [
        ("--autofuse_enable_pass=conv", "'conv' is not a fusion kind"),
        ("--enable_autofuse=maybe", "not a boolean"),
        ("--autofuse_enable=concat", "key 'autofuse_enable'"),
        ("--autofuse_enable_pass", "is not --key=value"),
        ("--autofuse_enable_pass=", "lists no pass"),
    ],
)
def test_bad_flags_name_the_item(flags, needle):
    with pytest.raises(ValueError, match="valid|true or false") as ei:
        parse_autofuse_flags(flags)
    assert needle in str(ei.value)
    if "pass" in flags and "=" in flags and "lists no pass" not in needle:
        assert "valid kinds: ['elementwise'" in str(ei.value)  # the valid passes are listed


def test_bad_options():
    with pytest.raises(ValueError, match="valid kinds"):
        FusionOptions(enabled={"elementwise", "fusion_of_everything"})
    with pytest.raises(TypeError, match="decompose"):
        FusionOptions(decompose="yes")
    with pytest.raises(TypeError, match="flags must be a str"):
        parse_autofuse_flags(3)
    g = zoo.softmax()
    with pytest.raises(TypeError, match="FusionOptions"):
        plan(g, {"reduce": True})


def test_inductor_preset_and_enable_disable():
    o = FusionOptions.inductor()
    assert o.enabled == INDUCTOR_DEFAULT
    assert o.fuses("reduce") and not o.fuses("matmul")
    assert o.disable("reduce").enable("matmul").enabled == (INDUCTOR_DEFAULT - {"reduce"}) | {"matmul"}
    with pytest.raises(AttributeError):
        o.decompose = False  # frozen
    assert set(FUSION_KINDS) >= INDUCTOR_DEFAULT


def test_op_kinds_cover_the_catalogue():
    cat_to_kind = {"elementwise": {"elementwise"}, "reduction": {"reduce"}, "matmul": {"matmul"},
                   "composite": {"composite"},
                   "data_movement": {"reshape", "broadcast", "transpose", "slice", "concat", "gather"}}
    for name, info in ops.CATALOGUE.items():
        assert op_kind(name) in cat_to_kind[info.category], name
    with pytest.raises(ValueError, match="known ops"):
        op_kind("conv2d")


# ---------------------------------------------------------------------------
# legality of plans (checked independently of the planner's own code)
# ---------------------------------------------------------------------------


def _check_legal(p, options):
    g = p.graph
    names = [n.name for n in g.nodes]
    seen = [m for b in p.blocks for m in b.members]
    assert sorted(seen) == sorted(names), "every node in exactly one block"
    where = {m: i for i, b in enumerate(p.blocks) for m in b.members}
    # blocks in topological order: every edge goes to the same or a later block
    for n in g.nodes:
        for i in n.inputs:
            if i in where:
                assert where[i] <= where[n.name], (i, n.name)
    for b in p.blocks:
        kinds = {op_kind(g.node(m).op) for m in b.members}
        if len(b.members) > 1:
            assert all(options.fuses(k) for k in kinds), (b.kind, options.enabled)
            # connected through producer->consumer edges inside the block
            mem = set(b.members)
            adj = {m: set() for m in mem}
            for m in mem:
                for i in g.node(m).inputs:
                    if i in mem:
                        adj[m].add(i)
                        adj[i].add(m)
            stack, reached = [b.members[0]], set()
            while stack:
                v = stack.pop()
                if v not in reached:
                    reached.add(v)
                    stack.extend(adj[v])
            assert reached == mem, b
        assert b.codegen == all(options.fuses(k) for k in kinds)
        assert b.name == f"b{p.blocks.index(b)}"
        assert p.block_of(b.members[0]) is b
        # block inputs/outputs recomputed
        mem = set(b.members)
        ins = {i for m in b.members for i in g.node(m).inputs if i not in mem}
        assert set(b.inputs) == ins
        outs = {m for m in b.members
                if m in g.outputs or any(c.name not in mem for c in g.consumers(m))}
        assert set(b.outputs) == outs
    assert p.block_of("not-a-node") is None


OPTIONS = [
    FusionOptions(),
    FusionOptions.parse("autofuse+decompose"),
    FusionOptions.inductor(),
    FusionOptions.inductor(decompose=False),
    FusionOptions.autofuse("--autofuse_enable_pass=concat,reduce,slice,gather,transpose"),
    FusionOptions.off(),
    FusionOptions.inductor().enable("matmul"),
]


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
@pytest.mark.parametrize("oi", range(len(OPTIONS)))
def test_zoo_plans_are_legal(model, oi):
    g = zoo.MODELS[model]()
    o = OPTIONS[oi]
    p = plan(g, o)
    _check_legal(p, o)
    if o.decompose:
        assert not any(n.category == "composite" for n in p.graph.nodes)
        for k, v in p.decomposed.items():
            assert g.node(v).category == "composite" and k in p.graph
    else:
        assert p.graph is g and p.decomposed == {}
    # outputs keep their names
    assert p.graph.outputs == g.outputs


def _blocks_acyclic(p) -> bool:
    g = p.graph
    where = {m: b.name for b in p.blocks for m in b.members}
    edges = {(where[i], where[n.name]) for n in g.nodes for i in n.inputs
             if i in where and where[i] != where[n.name]}
    # Floyd-Warshall style reachability on the small block graph
    names = [b.name for b in p.blocks]
    reach = {(a, b) for a, b in edges}
    for k in names:
        for i in names:
            if (i, k) in reach:
                for j in names:
                    if (k, j) in reach:
                        reach.add((i, j))
    return not any((a, a) in reach for a in names)


def test_diamond_with_blocked_middle_is_not_merged_into_a_cycle():
    # x -> a (elementwise) -> r (reduce, not fused) -> c (elementwise, reads a and r)
    # merging a and c would put r both after and before the block: a cycle.
    def f(x):
        a = ops.exp(x)
        r = a.sum(axis=-1, keepdims=True)
        return {"y": a / r}

    g = trace(f, x=(4, 8))
    p = plan(g, FusionOptions())
    assert _blocks_acyclic(p)
    assert p.block_of("exp_0") is not p.block_of("y")
    # with reduce enabled all three are one block
    p2 = plan(g, FusionOptions().enable("reduce"))
    assert len(p2.blocks) == 1 and p2.blocks[0].members == ["exp_0", "sum_0", "y"]


def test_pointwise_chain_is_one_block():
    def f(x, y):
        return {"z": ops.tanh((x + y) * 0.5 - 1.0).__neg__()}

    g = trace(f, x=(4, 8), y=(4, 8))
    p = plan(g, FusionOptions())
    assert len(p.blocks) == 1 and p.blocks[0].codegen
    assert p.blocks[0].inputs == ["x", "y"] and p.blocks[0].outputs == ["z"]


# random DAGs ---------------------------------------------------------------

_UNARY = ["exp", "neg", "tanh", "relu"]
_BINARY = ["add", "mul", "sub", "maximum"]


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 14))
    nodes = []
    avail = ["x0", "x1"]
    for i in range(n):
        kind = draw(st.sampled_from(["u", "b", "red", "t", "r"]))
        name = f"n{i}"
        if kind == "u":
            nodes.append(Node(name, draw(st.sampled_from(_UNARY)), (draw(st.sampled_from(avail)),)))
        elif kind == "b":
            a, b = draw(st.sampled_from(avail)), draw(st.sampled_from(avail))
            nodes.append(Node(name, draw(st.sampled_from(_BINARY)), (a, b)))
        elif kind == "red":
            nodes.append(Node(name, "sum", (draw(st.sampled_from(avail)),), {"axis": -1, "keepdims": True}))
            # bring it back to full shape so later ops can mix it
            nodes.append(Node(name + "b", "broadcast_to", (name,), {"shape": (4, 4)}))
            avail.append(name + "b")
            continue
        elif kind == "t":
            nodes.append(Node(name, "transpose", (draw(st.sampled_from(avail)),), {"perm": (1, 0)}))
        else:
            nodes.append(Node(name, "reshape", (draw(st.sampled_from(avail)),), {"shape": (4, 4)}))
        avail.append(name)
    outs = [nodes[-1].name]
    return Graph({"x0": (4, 4), "x1": (4, 4)}, nodes, outs)


@given(random_graphs(), st.sets(st.sampled_from(FUSION_KINDS)), st.booleans())
def test_random_plans_are_legal_and_acyclic(g, kinds, on):
    o = FusionOptions(enabled=frozenset(kinds), enable_autofuse=on)
    p = plan(g, o, SMALL)
    _check_legal(p, o)
    assert _blocks_acyclic(p)
    # nothing enabled -> singletons
    if not on or not kinds:
        assert all(len(b.members) == 1 for b in p.blocks)


# ---------------------------------------------------------------------------
# live buffers and tiles
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_live_buffers_and_tiles(model):
    g = zoo.MODELS[model]()
    hw = Hardware()
    for o in (FusionOptions(), FusionOptions.parse("autofuse+decompose"), FusionOptions.inductor()):
        p = plan(g, o, hw, fmt="fp16")
        for b in p.blocks:
            assert b.live_buffers == live_bruteforce(p.graph, b.members, b.outputs)
            if b.codegen:
                assert b.tile == tile_elements(hw, b.live_buffers, 4)
            else:
                assert b.tile == tile_elements(hw, b.live_buffers, 2)
        for n in p.graph.nodes:
            assert p.op_tile(n.name) == tile_elements(hw, len(set(n.inputs)) + 1, 2)


def test_single_op_buffers_and_fused_tiles_are_smaller():
    g = zoo.layernorm(batch=4, hidden=64)
    p = plan(g, FusionOptions.inductor(), Hardware(), fmt="fp16")
    (b,) = p.blocks
    assert b.fused and b.live_buffers >= 4
    # the one-operator tile of an add_scalar (x -> z: 2 buffers of 2 bytes, double-buffered)
    add = next(n for n in p.graph.nodes if n.op == "add_scalar")
    assert p.op_tile(add.name) == (192 * 1024 // (2 * 2 * 2)) // 16 * 16
    assert b.tile < min(p.op_tile(m) for m in b.members)
    with pytest.raises(ValueError, match="not in the planned graph"):
        p.op_tile("nope")


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_fusion_off_is_eager(model):
    """--enable_autofuse=false: every node a library kernel, so fused == eager."""

    from numlab.execute import run

    g = zoo.MODELS[model]()
    x = zoo.make_inputs(g, seed=2)
    e = run(g, x, mode="eager", fmt="fp16")
    for o in (FusionOptions.off(), parse_autofuse_flags("--enable_autofuse=false")):
        o = FusionOptions(enabled=o.enabled, decompose=False, enable_autofuse=False)
        f = run(g, x, mode="fused", fmt="fp16", fusion=o)
        assert not any(b.codegen or b.fused for b in f.plan.blocks)
        for k in e.outputs:
            assert_same_bits(f.outputs[k], e.outputs[k], what=k)


def test_decompose_off_keeps_composites_as_library_kernels():
    g = zoo.layernorm()
    p = plan(g, FusionOptions.inductor(decompose=False))
    (b,) = p.blocks
    assert b.members == ["y"] and b.kind == "composite" and not b.codegen


def test_str_plan_is_readable():
    g = zoo.gelu_mlp()
    p = plan(g, FusionOptions())
    s = str(p)
    assert s.startswith("Plan: ")
    assert "autofuse[elementwise,broadcast,reshape] decompose=off" in s
    assert "; autofuse[elementwise,broadcast,reshape] decompose=on;" in str(
        plan(g, FusionOptions.parse("autofuse+decompose")))
    for b in p.blocks:
        assert b.name in s and f"tile={b.tile}" in s
        for m in b.members:
            assert m in s
    assert "library" in s and "codegen" in s  # matmul is a library call
    # one header line, then two lines per block (members; reads/writes)
    lines = s.splitlines()
    assert len(lines) == 1 + 2 * len(p.blocks) + bool(p.decomposed)
    for b in p.blocks:
        assert f"reads {', '.join(b.inputs)}; writes {', '.join(b.outputs)}" in s
    d = p.to_dict()
    assert [x["members"] for x in d["blocks"]] == [b.members for b in p.blocks]


# ---------------------------------------------------------------------------
# the spec grammar: FusionOptions.parse / FusionOptions.spec
# ---------------------------------------------------------------------------


def test_parse_presets_default_and_passthrough():
    assert FusionOptions.parse(None) == FusionOptions() == FusionOptions.parse("autofuse")
    assert FusionOptions.parse("inductor") == FusionOptions.inductor()
    assert FusionOptions.parse("off") == FusionOptions.off()
    o = FusionOptions.inductor().enable("matmul")
    assert FusionOptions.parse(o) is o
    # a spec starting with "--" means "autofuse:" + spec
    assert FusionOptions.parse("--autofuse_enable_pass=reduce") == FusionOptions.parse(
        "autofuse:--autofuse_enable_pass=reduce") == FusionOptions().enable("reduce")
    # a modifier sets decompose; one at most (a second, even the same, is an error naming both)
    assert FusionOptions.parse("inductor+nodecompose") == FusionOptions.inductor(decompose=False)
    assert FusionOptions.parse("off+decompose") == FusionOptions.off(decompose=True)
    for bad in ("autofuse+decompose+nodecompose", "autofuse+nodecompose+decompose", "inductor+decompose+decompose"):
        with pytest.raises(ValueError, match=r"modifier '\+\w+' after '\+\w+'; give one of"):
            FusionOptions.parse(bad)
    # the default's own modifier is accepted and canonicalised away
    assert FusionOptions.parse("autofuse+nodecompose").spec == "autofuse"
    assert FusionOptions.parse(" inductor ") == FusionOptions.inductor()


@pytest.mark.parametrize("spec", [
    "autofuse", "inductor", "off", "autofuse+decompose", "inductor+nodecompose", "off+decompose",
    "autofuse:--autofuse_enable_pass=reduce", "autofuse:--autofuse_enable_pass=reduce+decompose",
    "autofuse:--enable_autofuse=false",
    "autofuse:--autofuse_enable_pass=concat,reduce;--autofuse_disable_pass=broadcast+decompose",
])
def test_canonical_specs_are_fixed_points(spec):
    o = FusionOptions.parse(spec)
    assert o.spec == spec
    assert FusionOptions.parse(o.spec) == o


def test_spec_is_canonical_for_equivalent_spellings():
    a = FusionOptions.parse("--autofuse_enable_pass=reduce,concat;--enable_autofuse=true")
    b = FusionOptions.parse("autofuse:--autofuse_enable_pass=concat;--autofuse_enable_pass=reduction")
    assert a == b and a.spec == b.spec == "autofuse:--autofuse_enable_pass=concat,reduce"


@given(kinds=st.frozensets(st.sampled_from(FUSION_KINDS)), decompose=st.booleans(), switch=st.booleans(),
       preset=st.sampled_from(["autofuse", "inductor", "off"]))
def test_spec_round_trip_over_kind_subsets(kinds, decompose, switch, preset):
    # options named autofuse: any kind subset, switch and decompose round-trip exactly
    o = FusionOptions(enabled=kinds, decompose=decompose, enable_autofuse=switch, name="autofuse")
    assert FusionOptions.parse(o.spec) == o
    # enable/disable variants of every preset: exact when the grammar can name
    # them, otherwise the same kinds, switch and decompose (same bits) under autofuse
    base = FusionOptions.parse(preset)
    v = dataclasses.replace(base.disable(*FUSION_KINDS).enable(*kinds), decompose=decompose)
    back = FusionOptions.parse(v.spec)
    assert (back.enabled, back.decompose, back.enable_autofuse) == (v.enabled, v.decompose, v.enable_autofuse)
    if v.enabled == base.enabled or v.name == "autofuse":
        assert back == v


@pytest.mark.parametrize("spec, words", [
    ("xla", ["'xla'", "autofuse", "inductor", "off"]),
    ("default", ["'default'", "autofuse", "inductor", "off"]),
    ("autofuse_enable_pass=reduce", ["'autofuse_enable_pass=reduce'", "autofuse", "inductor"]),
    ("inductor:--autofuse_enable_pass=reduce", ["inductor", "autofuse:FLAGS"]),
    ("autofuse+fancy", ["'+fancy'", "+nodecompose", "+decompose"]),
    ("autofuse:--autofuse_enable_pass=bogus", ["'bogus'", "reduce", "transpose"]),
    ("--foo=1", ["'foo'", "autofuse_enable_pass", "enable_autofuse"]),
    ("--enable_autofuse=maybe", ["'maybe'", "true", "false"]),
    ("", ["empty", "autofuse"]),
])
def test_parse_errors_name_value_and_choices(spec, words):
    with pytest.raises(ValueError) as e:
        FusionOptions.parse(spec, arg="--fusion")
    msg = str(e.value)
    assert msg.startswith("--fusion=")
    for w in words:
        assert w in msg, (w, msg)


def test_parse_type_error():
    with pytest.raises(TypeError, match="fusion must be a fusion spec string.*int"):
        FusionOptions.parse(3)
