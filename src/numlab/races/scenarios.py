"""Ready-made race scenarios (:data:`SCENARIOS`) and failure-rate curves.

``fused_linear_online_max_sum``: vector cores compute a masked target that
cube cores read, with no full barrier between them (a cross-core RAW race);
``split_softmax``: a vector-vector race on partial sums; ``atomic_rowsum``:
race-free, but accumulated with atomic adds, so its bits follow the schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .batch import Tolerance, batch_run
from .model import Access, Buffer, Flag, Kernel, Latency, Stage, SyncAll, _rng


@dataclass(frozen=True)
class Scenario:
    """A ready-made race scenario.

    ``build(fix, spread)`` gives the kernel (``fix=True`` with the barrier that
    removes the race); ``make_case(rng)`` one input case; ``reference(case)``
    the fp64 outputs; ``dependent`` the outputs a stale read can corrupt;
    ``essential(fix)`` the barriers whose removal creates a race (hand-checked
    from the data flow, verified by tests against the detector and the
    simulator); ``fix_barrier`` the name of the barrier ``fix`` adds.
    """

    name: str
    description: str
    build: Callable
    make_case: Callable
    reference: Callable
    dependent: tuple
    essential: Callable
    fix_barrier: str
    tol: Tolerance = Tolerance()

    def cases(self, n: int, seed=0) -> list[dict]:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"cases: n={n!r} must be an int >= 0")
        rng = _rng(seed)
        return [self.make_case(rng) for _ in range(n)]


# ---- fused_linear_online_max_sum (cross-core RAW race on maskedTarget)

_FL = dict(T=64, H=32, V=48, vocab_start=96, n_vector=8, n_cube=4, vtile=16)


def _fl_build(fix: bool = False, spread: float = 0.5, *, T=_FL["T"], H=_FL["H"], V=_FL["V"],
              vocab_start=_FL["vocab_start"], n_vector=_FL["n_vector"], n_cube=_FL["n_cube"],
              vtile=_FL["vtile"]) -> Kernel:
    nt = -(-V // vtile)

    def init(ctx, inp):
        lo, hi = ctx.rows["predicted_logits_local"]
        return {"predicted_logits_local": np.zeros(hi - lo, np.float32)}

    def target_process(ctx, inp):
        t = inp["target"]
        vs = ctx.params["vocab_start"]
        inside = (t >= vs) & (t < vs + ctx.params["V"])
        return {"masked_target": np.where(inside, t - vs, 0).astype(np.int64),
                "target_mask": inside.astype(np.float32)}

    def matmul(ctx, inp):
        # cube: logits tile = x @ W^T in fp32 (K = H in one tile)
        return {"logits": np.matmul(inp["x"], inp["weight"].T).astype(np.float32)}

    def gather(ctx, inp):
        # cube-side epilogue: predicted logit of each token at its masked target
        lg = inp["logits"]
        mt = np.clip(inp["masked_target"], 0, lg.shape[1] - 1)  # hardware gathers stay in range
        picked = np.take_along_axis(lg, mt[:, None], axis=1)[:, 0]
        return {"predicted_logits_local": (picked * inp["target_mask"]).astype(np.float32)}

    def tile_reduce(ctx, inp):
        lg = inp["logits"]
        pad = nt * vtile - lg.shape[1]
        tiles = np.pad(lg, ((0, 0), (0, pad)), constant_values=-np.inf).reshape(lg.shape[0], nt, vtile)
        m = tiles.max(axis=2)
        s = np.exp(tiles - m[:, :, None]).sum(axis=2, dtype=np.float32)
        return {"tile_max": m.astype(np.float32), "tile_sum": s.astype(np.float32)}

    def online_combine(ctx, inp):
        m, s = inp["tile_max"], inp["tile_sum"]
        run_m = m[:, 0].copy()
        run_s = s[:, 0].copy()
        for j in range(1, m.shape[1]):  # loop over vocab tiles, vectorised over tokens
            new_m = np.maximum(run_m, m[:, j])
            run_s = run_s * np.exp(run_m - new_m) + s[:, j] * np.exp(m[:, j] - new_m)
            run_m = new_m
        return {"logits_max_local": run_m.astype(np.float32), "sum_exp_logits_local": run_s.astype(np.float32)}

    L = Latency  # means: vector phases short, the cube matmul long
    items = [
        Stage("InitOutputAndWorkspace", "vector", writes=("predicted_logits_local",), fn=init,
              latency=L(0.5, spread)),
        SyncAll("sync_init"),
        Stage("TargetProcess", "vector", reads=("target",), writes=("masked_target", "target_mask"),
              fn=target_process, latency=L(1.0, spread), chunks=2),
    ]
    if fix:
        items.append(SyncAll("sync_target"))
    items += [
        Stage("CVProcess.matmul", "cube", reads=("x", Access("weight", "all")), writes=("logits",),
              fn=matmul, latency=L(3.0, spread)),
        Stage("CVProcess.gather", "cube", reads=("logits", "masked_target", "target_mask"),
              writes=("predicted_logits_local",), fn=gather, latency=L(0.3, spread)),
        Flag("CVProcess.matmul", "CVProcess.reduce", name="flag_logits", cores="overlap"),
        Stage("CVProcess.reduce", "vector", reads=("logits",), writes=("tile_max", "tile_sum"),
              fn=tile_reduce, latency=L(0.8, spread)),
        SyncAll("sync_final"),
        Stage("AllReduceProcess", "vector", reads=("tile_max", "tile_sum"),
              writes=("logits_max_local", "sum_exp_logits_local"), fn=online_combine,
              latency=L(0.4, spread)),
    ]
    buffers = {
        "x": Buffer((T, H), "float32", "input"),
        "weight": Buffer((V, H), "float32", "input"),
        "target": Buffer((T,), "int64", "input"),
        "masked_target": Buffer((T,), "int64", "output"),
        "target_mask": Buffer((T,), "float32", "output"),
        "logits": Buffer((T, V), "float32", "workspace"),
        "tile_max": Buffer((T, nt), "float32", "workspace"),
        "tile_sum": Buffer((T, nt), "float32", "workspace"),
        "predicted_logits_local": Buffer((T,), "float32", "output"),
        "logits_max_local": Buffer((T,), "float32", "output"),
        "sum_exp_logits_local": Buffer((T,), "float32", "output"),
    }
    return Kernel("fused_linear_online_max_sum" + ("" if fix else " (no SyncAll after TargetProcess)"),
                  cores={"vector": n_vector, "cube": n_cube}, buffers=buffers, items=tuple(items),
                  params={"vocab_start": vocab_start, "V": V})


def _fl_case(rng: np.random.Generator, *, T=_FL["T"], H=_FL["H"], V=_FL["V"],
             vocab_start=_FL["vocab_start"]) -> dict:
    x = rng.standard_normal((T, H)).astype(np.float32)
    w = (rng.standard_normal((V, H)) / np.sqrt(H)).astype(np.float32)
    # global vocabulary of 4 shards; about a quarter of targets land in this shard
    target = rng.integers(0, 4 * V, size=T).astype(np.int64) + max(0, vocab_start - V)
    return {"x": x, "weight": w, "target": target}


def _fl_reference(case, *, vocab_start=_FL["vocab_start"]) -> dict:
    x = case["x"].astype(np.float64)
    w = case["weight"].astype(np.float64)
    V = w.shape[0]
    t = case["target"]
    inside = (t >= vocab_start) & (t < vocab_start + V)
    mt = np.where(inside, t - vocab_start, 0)
    logits = x @ w.T
    m = logits.max(axis=1)
    return {
        "masked_target": mt.astype(np.float64),
        "target_mask": inside.astype(np.float64),
        "predicted_logits_local": np.where(inside, logits[np.arange(len(t)), mt], 0.0),
        "logits_max_local": m,
        "sum_exp_logits_local": np.exp(logits - m[:, None]).sum(axis=1),
    }


def _fl_essential(fix: bool) -> set:
    # without the fix, sync_init is the only thing ordering Init (vector) before
    # the cube gather's write of predicted_logits_local; with it, sync_target
    # orders both.  flag_logits orders the cube matmul before the vector reduce.
    # sync_final separates two vector stages that touch only their own rows.
    return {"sync_target", "flag_logits"} if fix else {"sync_init", "flag_logits"}


FUSED_LINEAR = Scenario(
    name="fused_linear_online_max_sum",
    description=("Fused linear + online max/sum: vector cores compute maskedTarget (TargetProcess); cube cores run "
                 "the matmul and gather predicted_logits_local at maskedTarget (CVProcess). Without a "
                 "SyncAll between them the cube side can read maskedTarget rows the vector cores have "
                 "not written yet, seeing the previous case's values."),
    build=_fl_build,
    make_case=_fl_case,
    reference=_fl_reference,
    dependent=("predicted_logits_local",),
    essential=_fl_essential,
    fix_barrier="sync_target",
)


# ---- split softmax across vector cores (a pure vector-vector race)

_SM = dict(R=16, C=64, n_vector=8)


def _sm_build(fix: bool = False, spread: float = 0.5, *, R=_SM["R"], C=_SM["C"], n_vector=_SM["n_vector"]) -> Kernel:
    """Softmax over the columns of x (R x C) split column-wise over the vector
    cores: x is stored transposed (C x R) so each core's rows are its columns."""

    def partial_max(ctx, inp):
        return {"pmax": inp["xT"].max(axis=0, keepdims=True)}

    def exp_sum(ctx, inp):
        m = inp["pmax"].max(axis=0)
        e = np.exp(inp["xT"] - m[None, :]).astype(np.float32)
        return {"eT": e, "psum": e.sum(axis=0, keepdims=True, dtype=np.float32)}

    def normalise(ctx, inp):
        s = inp["psum"].sum(axis=0, dtype=np.float32)
        return {"yT": (inp["eT"] / s[None, :]).astype(np.float32)}

    def copy_out(ctx, inp):
        return {"y": inp["yT"].copy()}

    L = Latency
    items = [
        Stage("PartialMax", "vector", reads=("xT",), writes=("pmax",), fn=partial_max, latency=L(1.0, spread)),
        SyncAll("sync_max"),
        Stage("ExpSum", "vector", reads=("xT", Access("pmax", "all")), writes=("eT", "psum"), fn=exp_sum,
              latency=L(1.0, spread)),
    ]
    if fix:
        items.append(SyncAll("sync_sum"))
    items += [
        Stage("Normalise", "vector", reads=("eT", Access("psum", "all")), writes=("yT",), fn=normalise,
              latency=L(0.5, spread)),
        SyncAll("sync_out"),
        Stage("CopyOut", "vector", reads=("yT",), writes=("y",), fn=copy_out, latency=L(0.3, spread)),
    ]
    buffers = {
        "xT": Buffer((C, R), "float32", "input"),
        "pmax": Buffer((n_vector, R), "float32", "workspace"),
        "psum": Buffer((n_vector, R), "float32", "workspace"),
        "eT": Buffer((C, R), "float32", "workspace"),
        "yT": Buffer((C, R), "float32", "workspace"),
        "y": Buffer((C, R), "float32", "output"),
    }
    return Kernel("split_softmax" + ("" if fix else " (no SyncAll after ExpSum)"),
                  cores={"vector": n_vector}, buffers=buffers, items=tuple(items))


def _sm_case(rng, *, R=_SM["R"], C=_SM["C"]):
    return {"xT": (rng.standard_normal((C, R)) * 3).astype(np.float32)}


def _sm_reference(case):
    x = case["xT"].astype(np.float64)
    e = np.exp(x - x.max(axis=0))
    return {"y": e / e.sum(axis=0)}


SPLIT_SOFTMAX = Scenario(
    name="split_softmax",
    description=("Softmax split column-wise over 8 vector cores: partial maxima and partial sums go "
                 "through GM and every core reads all of them. Without a SyncAll after ExpSum a core "
                 "normalises with partial sums other cores have not written yet."),
    build=_sm_build,
    make_case=_sm_case,
    reference=_sm_reference,
    dependent=("y",),
    essential=lambda fix: {"sync_max", "sync_sum"} if fix else {"sync_max"},
    fix_barrier="sync_sum",
)

# ---- row sums by atomic adds (race-free, yet schedule-dependent bits)

_AT = dict(R=16, C=256, n_vector=8)


def _core0_all(core, ncores, nrows):
    return (0, nrows) if core == 0 else (0, 0)


def _at_build(fix: bool = False, spread: float = 0.5, *, R=_AT["R"], C=_AT["C"], n_vector=_AT["n_vector"]) -> Kernel:
    """Column sums of x (R x C, stored transposed as xT, C x R) over 8 vector
    cores.  As shipped: each core adds its partial sums into ``out`` with
    atomic adds.  ``fix=True``: the deterministic two-phase form -- partials to
    a workspace, SyncAll, core 0 adds them in core order."""

    def zero(ctx, inp):
        lo, hi = ctx.rows["out"]
        return {"out": np.zeros(hi - lo, np.float32)}

    def partial(ctx, inp):
        p = inp["xT"].sum(axis=0, dtype=np.float32)
        return {"partials": p[None, :]} if "partials" in ctx.rows else {"out": p}

    def combine(ctx, inp):
        p = inp["partials"]
        if p.shape[0] == 0:
            return {"out": np.zeros(0, np.float32)}
        acc = p[0].copy()
        for k in range(1, p.shape[0]):  # fixed order over cores, vectorised over rows
            acc = (acc + p[k]).astype(np.float32)
        return {"out": acc}

    L = Latency
    if not fix:
        items = [
            Stage("InitOutput", "vector", writes=("out",), fn=zero, latency=L(0.5, spread)),
            SyncAll("sync_zero"),
            Stage("PartialSum", "vector", reads=("xT",), writes=(Access("out", "all"),), fn=partial,
                  latency=L(1.0, spread), atomic=("out",)),
        ]
        bufs = {"xT": Buffer((C, R), "float32", "input"), "out": Buffer((R,), "float32", "output")}
    else:
        items = [
            Stage("PartialSum", "vector", reads=("xT",), writes=("partials",), fn=partial, latency=L(1.0, spread)),
            SyncAll("sync_partials"),
            Stage("Combine", "vector", reads=(Access("partials", _core0_all),), writes=(Access("out", _core0_all),),
                  fn=combine, latency=L(0.5, spread)),
        ]
        bufs = {"xT": Buffer((C, R), "float32", "input"), "partials": Buffer((n_vector, R), "float32", "workspace"),
                "out": Buffer((R,), "float32", "output")}
    return Kernel("atomic_rowsum" + (" (two-phase, deterministic)" if fix else " (atomic adds)"),
                  cores={"vector": n_vector}, buffers=bufs, items=tuple(items))


def _at_case(rng, *, R=_AT["R"], C=_AT["C"]):
    return {"xT": (rng.standard_normal((C, R)) * 3 + 1).astype(np.float32)}


def _at_reference(case):
    return {"out": case["xT"].astype(np.float64).sum(axis=0)}


ATOMIC_ROWSUM = Scenario(
    name="atomic_rowsum",
    description=("Column sums over 8 vector cores accumulated with atomic adds into one output: no race "
                 "and always within tolerance, but the sum is formed in the order the adds land, so the "
                 "bits change from run to run. --fix uses the deterministic two-phase reduction."),
    build=_at_build,
    make_case=_at_case,
    reference=_at_reference,
    dependent=(),
    essential=lambda fix: {"sync_partials"} if fix else {"sync_zero"},
    fix_barrier="sync_partials",
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (FUSED_LINEAR, SPLIT_SOFTMAX, ATOMIC_ROWSUM)}


def get_scenario(name) -> Scenario:
    if isinstance(name, Scenario):
        return name
    if name not in SCENARIOS:
        raise ValueError(f"unknown race scenario {name!r}; choices: {sorted(SCENARIOS)}")
    return SCENARIOS[name]


def failure_rate_curve(scenario, spreads, *, n_cases: int = 200, fix: bool = False, seed=0) -> np.ndarray:
    """Failure rate of a batch of ``n_cases`` for each latency spread (same
    cases and schedule seeds at every spread)."""
    if isinstance(n_cases, bool) or not isinstance(n_cases, (int, np.integer)) or n_cases < 1:
        raise ValueError(f"failure_rate_curve: n_cases={n_cases!r} must be an int >= 1")
    sc = get_scenario(scenario)
    cases = sc.cases(n_cases, seed)
    out = []
    for sp in spreads:
        k = sc.build(fix=fix, spread=float(sp))
        out.append(batch_run(k, cases, sc.reference, seed=seed, tol=sc.tol).failure_rate)
    return np.array(out)
