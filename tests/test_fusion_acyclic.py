"""The planner's fusion decisions (module docstring of numlab.fusion, rule 2)
against a brute-force transcription of the rule, the incremental block graph
against brute-force reachability, and the planner's work on long graphs."""

from __future__ import annotations

import numpy as np
import pytest
from _fusion_reference import live_bruteforce
from hypothesis import given
from hypothesis import strategies as st

from numlab import fusion
from numlab.fusion import FUSION_KINDS, FusionOptions, live_buffers, op_kind, plan
from numlab.graph import Graph, Node

# ---------------------------------------------------------------------------
# brute force: quotient graphs, reachability, the rule transcribed
# ---------------------------------------------------------------------------


def _edges(producers: dict, assign: dict) -> set:
    """Block edges of the quotient: producers maps node -> its producer nodes."""
    return {(assign[p], assign[n]) for n, ps in producers.items() for p in ps
            if p in assign and n in assign and assign[p] != assign[n]}


def _cyclic(edges: set) -> bool:
    """Whether some block reaches itself (a search from every block)."""
    succ: dict = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    for start in succ:
        seen, stack = set(), list(succ[start])
        while stack:
            x = stack.pop()
            if x == start:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(succ.get(x, ()))
    return False


def _reference_blocks(g: Graph, options: FusionOptions) -> list:
    """Rule 2 as the docstring states it, every move checked on the whole
    quotient graph; then the blocks listed in the topological order whose ties
    go to the block with the earliest first member."""
    producers = {n.name: [p for p in n.inputs if p not in g.inputs] for n in g.nodes}
    assign: dict = {}
    fusible: dict = {}
    for i, n in enumerate(g.nodes):
        if not options.fuses(op_kind(n.op)):
            assign[n.name], fusible[i] = i, False
            continue
        cands = list(dict.fromkeys(assign[p] for p in producers[n.name] if fusible[assign[p]]))
        target = next((b for b in cands if not _cyclic(_edges(producers, {**assign, n.name: b}))), None)
        if target is None:
            assign[n.name], fusible[i] = i, True
            continue
        assign[n.name] = target
        for c in cands:
            trial = {m: (target if b == c else b) for m, b in assign.items()}
            if c != target and not _cyclic(_edges(producers, trial)):
                assign = trial
    members: dict = {}
    for n in g.nodes:
        members.setdefault(assign[n.name], []).append(n.name)
    edges = _edges(producers, assign)
    order: list = []
    while len(order) < len(members):
        ready = [b for b in members if b not in order
                 and all(a in order for a, c in edges if c == b)]
        order.append(min(ready, key=lambda b: g.nodes.index(g.node(members[b][0]))))
    return [members[b] for b in order]


_UNARY = ["exp", "neg", "tanh", "relu"]
_BINARY = ["add", "mul", "sub", "maximum"]


@st.composite
def dags(draw):
    """Small random graphs mixing pointwise, reduce, view, matmul nodes, with
    inputs drawn near (chains) or far (long edges) back."""
    avail = ["x0", "x1"]
    nodes = []
    for i in range(draw(st.integers(1, 16))):
        name = f"n{i}"
        pick = st.sampled_from(avail)
        kind = draw(st.sampled_from(["u", "b", "b", "red", "t", "mm", "r"]))
        if kind == "u":
            nodes.append(Node(name, draw(st.sampled_from(_UNARY)), (draw(pick),)))
        elif kind == "b":
            nodes.append(Node(name, draw(st.sampled_from(_BINARY)), (draw(pick), draw(pick))))
        elif kind == "red":
            nodes.append(Node(name, "sum", (draw(pick),), {"axis": -1, "keepdims": True}))
            nodes.append(Node(name + "b", "broadcast_to", (name,), {"shape": (4, 4)}))
            name += "b"
        elif kind == "t":
            nodes.append(Node(name, "transpose", (draw(pick),), {"perm": (1, 0)}))
        elif kind == "mm":
            nodes.append(Node(name, "matmul", (draw(pick), draw(pick))))
        else:
            nodes.append(Node(name, "reshape", (draw(pick),), {"shape": (4, 4)}))
        avail.append(name)
    outs = sorted({nodes[-1].name, draw(st.sampled_from(nodes)).name})
    return Graph({"x0": (4, 4), "x1": (4, 4)}, nodes, outs)


@given(dags(), st.sets(st.sampled_from(FUSION_KINDS)))
def test_plan_makes_the_moves_of_the_rule(g, kinds):
    o = FusionOptions(enabled=frozenset(kinds))
    p = plan(g, o)
    assert [b.members for b in p.blocks] == _reference_blocks(g, o)
    where = {m: b.name for b in p.blocks for m in b.members}
    producers = {n.name: list(n.inputs) for n in g.nodes}
    assert not _cyclic(_edges(producers, where))
    for b in p.blocks:
        if b.codegen:
            assert b.live_buffers == live_bruteforce(g, b.members, b.outputs)


@given(dags(), st.data())
def test_live_buffers_of_any_member_list(g, data):
    names = [n.name for n in g.nodes]
    members = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    members.sort(key=names.index)
    outputs = data.draw(st.lists(st.sampled_from(members), unique=True)) if members else []
    assert live_buffers(g, members, outputs) == live_bruteforce(g, members, outputs)


# ---------------------------------------------------------------------------
# the incremental block graph: every answer and the order it keeps
# ---------------------------------------------------------------------------


def _check_state(bg, producers: dict, assign: dict) -> None:
    """bg's edges are the quotient's and its positions a topological order."""
    current = {n: bg.find(b) for n, b in assign.items()}
    edges = _edges(producers, current)
    assert {(a, s) for a, ss in bg.succ.items() for s in ss} == edges
    assert {(p, a) for a, ps in bg.pred.items() for p in ps} == edges
    assert all(bg.pos[a] < bg.pos[b] for a, b in edges)
    assert len(set(bg.pos.values())) == len(bg.pos) == len(set(current.values()))


@given(st.integers(0, 2**32 - 1))
def test_block_graph_answers_as_brute_force(seed):
    rng = np.random.default_rng(seed)
    bg = fusion._BlockGraph()
    producers: dict = {}
    assign: dict = {}  # node -> block id given (bg.find: current block)
    for i in range(int(rng.integers(2, 40))):
        ps = sorted({int(x) for x in rng.integers(0, i, size=int(rng.integers(0, 4)))}) if i else []
        producers[i] = ps
        blocks = list(dict.fromkeys(bg.find(assign[p]) for p in ps))
        joined = False
        if blocks and rng.random() < 0.7:
            b = blocks[int(rng.integers(len(blocks)))]
            trial = {n: bg.find(x) for n, x in assign.items()} | {i: b}
            expect = not _cyclic(_edges(producers, trial))
            joined = bg.join(b, [q for q in blocks if q != b])
            assert joined == expect
            if joined:
                assign[i] = b
        if not joined:
            assign[i] = i
            bg.new_block(i, blocks)
        _check_state(bg, producers, assign)
        roots = sorted({bg.find(x) for x in assign.values()})
        if len(roots) > 1 and rng.random() < 0.6:
            t, c = (roots[int(k)] for k in rng.choice(len(roots), 2, replace=False))
            trial = {n: (t if bg.find(x) == c else bg.find(x)) for n, x in assign.items()}
            expect = not _cyclic(_edges(producers, trial))
            merged = bg.merge(t, c)
            assert (merged is not None) == expect
            if merged is not None:
                assert merged in (t, c)
            _check_state(bg, producers, assign)


# ---------------------------------------------------------------------------
# work: linear in the graph on long chains and stacked layers
# ---------------------------------------------------------------------------

_S = {"x": (4, 4), "w": (4, 4)}


def _chain(n):
    return Graph(_S, [Node(f"n{i}", "exp" if i % 2 else "neg", (f"n{i - 1}" if i else "x",))
                      for i in range(n)], [f"n{n - 1}"])


def _residual(layers):
    """h = h + h @ w per layer: the add cannot join h's block (the matmul sits between)."""
    nodes, h = [], "x"
    for i in range(layers):
        nodes += [Node(f"m{i}", "matmul", (h, "w")), Node(f"h{i}", "add", (h, f"m{i}"))]
        h = f"h{i}"
    return Graph(_S, nodes, [h])


def _diamonds(layers):
    """h = h * broadcast(sum(h)) per layer (a reduce between two pointwise nodes)."""
    nodes, h = [], "x"
    for i in range(layers):
        nodes += [Node(f"s{i}", "sum", (h,), {"axis": -1, "keepdims": True}),
                  Node(f"b{i}", "broadcast_to", (f"s{i}",), {"shape": (4, 4)}),
                  Node(f"h{i}", "mul", (h, f"b{i}"))]
        h = f"h{i}"
    return Graph(_S, nodes, [h])


def _shared_mask(layers):
    """One early pointwise block read by every layer (its successors grow with depth)."""
    nodes, h = [Node("mask", "exp", ("w",))], "x"
    for i in range(layers):
        nodes += [Node(f"m{i}", "matmul", (h, "w")), Node(f"a{i}", "add", (f"m{i}", "mask")),
                  Node(f"h{i}", "tanh", (f"a{i}",))]
        h = f"h{i}"
    return Graph(_S, nodes, [h])


@pytest.mark.parametrize("graph", [_chain(3000), _residual(1500), _diamonds(1000), _shared_mask(1000)],
                         ids=["chain", "residual", "diamonds", "shared_mask"])
@pytest.mark.parametrize("options", [FusionOptions(), FusionOptions.inductor(),
                                     FusionOptions.inductor().enable("matmul")],
                         ids=["autofuse", "inductor", "inductor+matmul"])
def test_planning_work_is_linear(graph, options, monkeypatch):
    made = []

    class Counted(fusion._BlockGraph):
        def __init__(self):
            super().__init__()
            made.append(self)

    quotients = []
    whole = fusion._quotient_graph
    monkeypatch.setattr(fusion, "_BlockGraph", Counted)
    monkeypatch.setattr(fusion, "_quotient_graph", lambda nodes, assign: quotients.append(1) or whole(nodes, assign))
    p = plan(graph, options)
    n = len(graph.nodes)
    assert sum(len(b.members) for b in p.blocks) == n
    (bg,) = made
    # a check that rebuilt or searched the whole block graph would take ~n**2 / 2 steps
    assert bg.steps <= 4 * n
    assert len(quotients) == 1  # the quotient graph is built once, to list the blocks
