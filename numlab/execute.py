"""Executors: run a graph eager, fused, fused with emulated casts, or in fp64.

The numerics contract is DESIGN.md section 1; this module implements it.

Modes
-----
``eager``
    Every operator is its own hand-written kernel (``kernels``, default
    ``KernelSpec.handwritten()``): it reads its inputs in the storage format
    S, computes as the spec says (promotion, instructions, reduction order
    with the tile of a one-operator kernel, algorithms), and writes its output
    rounded to S.  Composites (softmax, log_softmax, layer_norm, rms_norm) are
    one kernel with their own internal precision.
``fused``
    The graph is planned by :func:`numlab.fusion.plan` (``fusion``, default
    ``FusionOptions()`` = Ascend autofusion defaults; composites decomposed
    when ``fusion.decompose``).  A block formed by the code generator (its
    kinds are enabled) runs with ``kernels`` (default
    ``KernelSpec.codegen()``): it reads S, computes every intermediate in
    fp32 (each fp32 operation still rounds to fp32) with the block's tile, and
    rounds to S only at the block's outputs.  A block the code generator does
    not take (matmul, a composite that is not decomposed, a kind that is not
    enabled) is a call into the hand-written library and runs exactly as in
    eager, with ``library`` (default ``KernelSpec.handwritten()``).
``emulated_casts``
    ``fused`` with every node output rounded to S where eager would round it
    (PyTorch Inductor's ``emulate_precision_casts``): at every node of the
    graph as given, but not at the internal nodes of a decomposed composite
    (eager runs the composite as one kernel); the operators' internal
    promotion is taken from ``library`` (eager's choice).  It is ``fused``
    with ``align=("promotion",)``.
``reference``
    The catalogue's fp64 reference of every operator (numlab.ops) on the same
    S-valued inputs, no rounding anywhere; composites by their own fp64
    reference (not decomposed).

Inputs are first rounded to S (round to nearest even) in every mode, so all
modes see the same values; the reference then works in float64.

The four sources of difference (DESIGN.md section 1) can each be set to
eager's choice in the fused modes with ``align``:

``"promotion"``   node outputs rounded to S as eager does, operators'
                  internal promotion and accumulator format from ``library``
                  (``promotion``, ``acc``)
``"instruction"`` scalar-multiply unit and its rounding modes, FMA use
                  (``scalar_mul``, ``scalar_rounding``, ``vector_rounding``,
                  ``fma``; in a code-generated block ``fma`` also contracts
                  a ``mul`` feeding an add/sub of the same block into one
                  fused multiply-add)
``"tiling"``      reduction orders and tiles: each operator's one-kernel tile
                  instead of the block's tile (``reduce_inner``,
                  ``reduce_outer``, ``reduce_order``, ``live_buffers``,
                  ``hardware``, ``k_tile``)
``"algorithm"``   rsqrt/reciprocal/division/exp algorithms, variance
                  algorithm, matmul mode (``rsqrt``, ``reciprocal``,
                  ``divide``, ``exp``, ``gelu_form``, ``variance``,
                  ``matmul_mode``)

With all four aligned and ``FusionOptions(decompose=False)`` fused equals
eager bit for bit (tested on every zoo model).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .formats import FP32, FP64, Format, get_format
from .rounding import round_to

__all__ = ["MODES", "SOURCES", "run", "RunResult", "fingerprint", "canonical"]

MODES = ("eager", "fused", "emulated_casts", "reference")
SOURCES = ("promotion", "instruction", "tiling", "algorithm")


# ---------------------------------------------------------------------------
# canonical form and fingerprint
# ---------------------------------------------------------------------------
def canonical(obj):
    """A JSON-able canonical form of ``obj`` that does not depend on the
    process, memory addresses or ``PYTHONHASHSEED``: dicts with sorted string
    keys, sets sorted, floats as ``float.hex`` (exact), arrays as dtype, shape
    and the sha256 of their bytes, dataclasses as their type name and fields.

    Raises
    ------
    TypeError
        For an object with no canonical form (its ``repr`` could hold an
        address).
    """
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return {"f": float(obj).hex()}
    if isinstance(obj, Format):
        return {"format": obj.name, "p": obj.p, "emin": obj.emin, "emax": obj.emax,
                "subnormals": obj.subnormals, "inf": obj.inf, "nan": obj.nan}
    if isinstance(obj, enum.Enum):
        return {"enum": type(obj).__name__, "value": canonical(obj.value)}
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        return {"array": str(a.dtype), "shape": list(a.shape),
                "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(obj, np.dtype):
        return {"dtype": str(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"__type__": type(obj).__name__}
        for f in dataclasses.fields(obj):
            if f.name.startswith("_"):
                continue
            out[f.name] = canonical(getattr(obj, f.name))
        return out
    if isinstance(obj, Mapping):
        return {"__map__": sorted([str(k), canonical(v)] for k, v in obj.items())}
    if isinstance(obj, set | frozenset):
        return {"__set__": sorted(json.dumps(canonical(v), sort_keys=True) for v in obj)}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if callable(obj) and hasattr(obj, "__qualname__"):
        return {"callable": f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"}
    raise TypeError(f"no canonical form for {type(obj).__name__} {obj!r}")


def _graph_canonical(graph) -> dict:
    return {
        "inputs": [[k, list(v)] for k, v in graph.inputs.items()],
        "nodes": [
            [n.name, n.op, list(n.inputs), canonical(dict(n.attrs)), list(n.shape)]
            for n in graph.nodes
        ],
        "outputs": list(graph.outputs),
    }


def fingerprint(graph, *, mode, dtype, kernels=None, library=None, fusion=None, align=()) -> str:
    """Compile fingerprint: sha256 (hex) of the canonical JSON of the graph
    (nodes, ops, attributes, shapes), the storage format, the mode, the
    kernel specs, the fusion options, ``align`` and the numlab version.

    Input values and the schedule seed are run-time inputs and are not
    included (seed 000, section 3.3: compile determinism vs execution
    determinism).
    """
    from . import __version__

    doc = {
        "numlab": __version__,
        "graph": _graph_canonical(graph),
        "dtype": canonical(get_format(dtype)),
        "mode": mode,
        "kernels": canonical(kernels),
        "library": canonical(library),
        "fusion": None if fusion is None else fusion.canonical(),
        "align": sorted(align),
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


# ---------------------------------------------------------------------------
# result
# ---------------------------------------------------------------------------
@dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes
    ----------
    outputs : dict
        Graph output name -> array in S's container dtype (float64 for the
        reference).
    values : dict
        Dumped values, name -> array: eager, every node (in S); fused, every
        block output (in S) and, with ``keep_internals``, every block-internal
        value in float32 (``internals`` lists those names); reference, every
        node in float64.
    plan : numlab.fusion.Plan
        The plan executed (eager: every node its own block, no
        decomposition).
    fingerprint : str
        sha256 hex of the compile-time inputs (:func:`fingerprint`).
    nonfinite : dict
        Node -> (number of NaN, number of inf) in the node's computed value
        (every executed node, dumped or not; a ``mul`` folded into an FMA by
        contraction is not executed on its own and is absent unless
        ``keep_internals``).
    input_nonfinite : dict
        Graph input -> (number of NaN, number of inf) after rounding to S
        (a finite value beyond S's range becomes inf here, e.g. 70000 in
        fp16); gather indices are not counted.
    mode, dtype, graph, source
        The mode, the storage Format, the executed graph (decomposed when the
        plan decomposed) and the graph as given.
    kernels, library, fusion, align, seed
        The knobs used.
    """

    outputs: dict
    values: dict
    plan: object
    fingerprint: str
    nonfinite: dict
    mode: str
    dtype: Format
    graph: object
    source: object
    kernels: object = None
    library: object = None
    fusion: object = None
    align: tuple = ()
    seed: int | None = None
    internals: list = field(default_factory=list)
    input_nonfinite: dict = field(default_factory=dict)

    @property
    def output(self) -> np.ndarray:
        """The single output (ValueError when the graph has several)."""
        if len(self.outputs) != 1:
            raise ValueError(f"graph has {len(self.outputs)} outputs {list(self.outputs)}; use .outputs[name]")
        return next(iter(self.outputs.values()))

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.values:
            return self.values[name]
        raise KeyError(f"{name!r} was not dumped in mode {self.mode!r}; dumped: {list(self.values)}")

    def summary(self) -> str:
        bad = {k: v for k, v in self.nonfinite.items() if v[0] or v[1]}
        bad_in = {k: v for k, v in self.input_nonfinite.items() if v[0] or v[1]}
        lines = [f"RunResult(mode={self.mode}, dtype={self.dtype.name}, fingerprint={self.fingerprint[:12]}...)",
                 f"  outputs: {', '.join(f'{k}{tuple(v.shape)}' for k, v in self.outputs.items())}",
                 f"  dumped values: {len(self.values)}",
                 f"  non-finite (nan, inf) in inputs (after rounding to S): {bad_in or 'none'}",
                 f"  non-finite (nan, inf) per node: {bad or 'none'}"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------
# input checking
# ---------------------------------------------------------------------------
def _check_inputs(graph, inputs, S: Format) -> dict:
    if not isinstance(inputs, Mapping):
        raise TypeError(
            f"inputs must be a dict name -> array for graph inputs {list(graph.inputs)}, "
            f"got {type(inputs).__name__}"
        )
    want = list(graph.inputs)
    missing = [k for k in want if k not in inputs]
    extra = [k for k in inputs if k not in graph.inputs]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing inputs {missing}")
        if extra:
            parts.append(f"unexpected inputs {extra}")
        raise ValueError(f"inputs: {'; '.join(parts)}; the graph's inputs are {want}")
    out = {}
    for name in want:
        x = inputs[name]
        a = np.asarray(x)
        if a.dtype.kind in "fV":  # numpy floats; ml_dtypes' bfloat16/fp8 are kind V or f
            pass
        elif a.dtype.kind in "iub" and _is_index_input(graph, name):
            pass
        else:
            raise TypeError(
                f"input {name!r} has dtype {a.dtype}; give a floating-point array "
                "(float16/bfloat16/float32/float64; it is rounded to the storage format)"
            )
        _check_shape(graph, name, a)
        out[name] = a
    return out


def _is_index_input(graph, name: str) -> bool:
    """Whether ``name`` is gather's index input (kept as given, not rounded)."""
    role = getattr(graph, "role", None)
    return role is not None and role(name) == "index"


def _check_shape(graph, name, a) -> None:
    want = tuple(graph.inputs[name])
    if tuple(a.shape) != want:
        raise ValueError(f"input {name!r} has shape {tuple(a.shape)}; the graph expects {want}")


def _to_storage(a: np.ndarray, S: Format) -> np.ndarray:
    """Round an input array to S (RNE), held in float32 (float64 for FP64)."""
    if a.dtype.kind in "iu":
        return a
    if S is FP64 or S.p > 24:
        return a.astype(np.float64)
    if S.dtype is not None and a.dtype == S.dtype:
        return a.astype(np.float32)  # already S values: exact widening
    if a.dtype != np.float64 and a.dtype != np.float32:
        a = a.astype(np.float32)  # fp16/bf16/fp8 widen exactly
    if S == FP32:
        return a.astype(np.float32)  # IEEE RNE (numpy cast)
    with np.errstate(over="ignore", invalid="ignore"):
        return _f32(round_to(a, S))  # round once from the given values; exact in fp32


def _container(v: np.ndarray, S: Format) -> np.ndarray:
    if v.dtype.kind in "iub":
        return v
    return v.astype(S.container)


def _count(v: np.ndarray) -> tuple[int, int]:
    """(number of NaN, number of inf) in ``v``.  Fast path: a finite sum
    (accumulated in at least float32) means there is neither -- any NaN or
    inf makes the sum NaN or inf; a sum that overflows from finite values
    only sends us to the exact count."""
    if v.dtype.kind not in "fV" and str(v.dtype) not in ("bfloat16",):
        return (0, 0)
    if v.size == 0:
        return (0, 0)
    acc = np.float64 if v.dtype == np.float64 else np.float32
    with np.errstate(all="ignore"):
        if np.isfinite(np.sum(v, dtype=acc)):
            return (0, 0)
    return (int(np.count_nonzero(np.isnan(v))), int(np.count_nonzero(np.isinf(v))))


# storage format -> (unsigned view, mask): a value is NaN or inf iff
# (bits & mask) == mask (IEEE: all-ones exponent; e4m3fn: the NaN codes)
_NONFINITE_BITS = {
    "fp16": (np.uint16, 0x7C00),
    "bf16": (np.uint16, 0x7F80),
    "fp8_e5m2": (np.uint8, 0x7C),
    "fp8_e4m3": (np.uint8, 0x7F),
}


def _count_stored(c: np.ndarray, S: Format) -> tuple[int, int]:
    """:func:`_count` for an array in S's container: a bit test on the
    exponent field (two cheap integer passes) before the exact count."""
    hit = _NONFINITE_BITS.get(S.name)
    if hit is None or c.dtype != S.container or c.size == 0:
        return _count(c)
    U, mask = hit
    if (c.view(U) & U(mask)).max() != mask:
        return (0, 0)
    w = c.astype(np.float32)
    return (int(np.count_nonzero(np.isnan(w))), int(np.count_nonzero(np.isinf(w))))


def _store(v: np.ndarray, S: Format) -> np.ndarray:
    """Round fp32 values to S (RNE) and return them in S's container.

    fp16 and bf16 use the storage dtype's own cast from float32 (numpy's
    and ml_dtypes' casts are IEEE round-to-nearest-even, overflow to inf;
    tested bit for bit against :func:`numlab.round_to`), which does the
    rounding and the container conversion in one pass; other formats go
    through ``round_to``."""
    v = _f32(v)
    if S == FP32:
        return v
    with np.errstate(over="ignore", invalid="ignore"):
        if S.name in ("fp16", "bf16"):
            return v.astype(S.dtype)
        return _container(_f32(round_to(v, S)), S)


def _node_seed(seed, name: str):
    """Per-node schedule seed: crc32 of the node name mixed with the run seed
    (independent of PYTHONHASHSEED)."""
    if seed is None:
        return None
    return int(np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))]).integers(2**31))


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------
def _check_spec(spec, arg: str):
    from . import kernels as K

    if spec is not None and not isinstance(spec, K.KernelSpec):
        raise TypeError(
            f"{arg} must be a numlab.kernels.KernelSpec (KernelSpec.handwritten(), "
            f"KernelSpec.codegen()) or None, got {type(spec).__name__}"
        )
    return spec


def _check_align(align) -> tuple:
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


def run(graph, inputs, *, mode, dtype, kernels=None, fusion=None, seed=None,
        keep_internals=False, library=None, align=()):
    """Run ``graph`` on ``inputs`` in one execution mode.

    Parameters
    ----------
    graph : numlab.graph.Graph
    inputs : dict
        Graph input name -> floating-point array of the declared shape
        (integer arrays only for gather indices).  Every input is rounded to
        the storage format first (round to nearest even), in every mode.
    mode : {"eager", "fused", "emulated_casts", "reference"}
        See the module docstring.
    dtype : Format or str
        Storage format S (``"fp16"``, ``"bf16"``, ``nl.FP32``, ...).
    kernels : KernelSpec, optional
        The kernels of this mode: eager, the hand-written library (default
        ``KernelSpec.handwritten()``); fused modes, the code generator's
        (default ``KernelSpec.codegen()``).  Ignored by ``reference``.
    fusion : FusionOptions, optional
        Fused modes only (default ``FusionOptions()``, Ascend autofusion
        defaults).  Passing it with ``eager`` or ``reference`` is an error.
    seed : int, optional
        Schedule seed for nondeterministic reduction orders (each node gets
        ``default_rng([seed, crc32(node name)])``).  Not part of the compile
        fingerprint (a run-time input).
    keep_internals : bool
        Fused modes: also dump every block-internal value, in float32.
    library : KernelSpec, optional
        Fused modes: the hand-written library used for blocks the code
        generator does not take, and "eager's choice" for ``align`` (default
        ``KernelSpec.handwritten()``).
    align : tuple of str
        Fused modes: sources of difference set to eager's choice, any of
        ``("promotion", "instruction", "tiling", "algorithm")`` (``True``: all).

    Returns
    -------
    RunResult

    Raises
    ------
    ValueError, TypeError
        Unknown mode, format, source or option type; missing or unexpected
        inputs; wrong shapes or dtypes (each message names the argument or
        input and the valid choices).
    """
    from . import fusion as F
    from . import kernels as K

    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not an execution mode; valid modes: {list(MODES)}")
    S = get_format(dtype)
    if S.p > 24 and mode != "reference":
        raise ValueError(
            f"dtype={S.name!r} is not a storage format for mode {mode!r}: kernels compute in "
            "fp32, so S must fit in fp32; valid: fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2 "
            "(mode='reference' is the fp64 run)"
        )
    for attr in ("inputs", "nodes", "outputs"):
        if not hasattr(graph, attr):
            raise TypeError(f"graph must be a numlab.graph.Graph, got {type(graph).__name__}")
    _check_spec(kernels, "kernels")
    _check_spec(library, "library")
    if fusion is not None and not isinstance(fusion, F.FusionOptions):
        raise TypeError(
            f"fusion must be a numlab.fusion.FusionOptions (FusionOptions(), "
            f"FusionOptions.inductor(), FusionOptions.autofuse(flags)), got {type(fusion).__name__}"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0):
        raise ValueError(f"seed={seed!r} must be None or a non-negative int")
    if not isinstance(keep_internals, bool):
        raise TypeError(f"keep_internals must be a bool, got {keep_internals!r}")
    align = _check_align(align)
    fused_mode = mode in ("fused", "emulated_casts")
    if not fused_mode:
        if fusion is not None:
            raise ValueError(f"fusion= applies to modes 'fused' and 'emulated_casts', not {mode!r}")
        if align:
            raise ValueError(f"align= applies to modes 'fused' and 'emulated_casts', not {mode!r}")
        if library is not None:
            raise ValueError(f"library= applies to modes 'fused' and 'emulated_casts', not {mode!r}")
    if mode == "emulated_casts" and "promotion" not in align:
        align = _check_align(("promotion", *align))

    xs = _check_inputs(graph, inputs, S)
    vals = {}
    for k, v in xs.items():
        if _is_index_input(graph, k):
            vals[k] = v  # indices are not values: never rounded
        elif mode == "reference":
            vals[k] = _to_storage(v, S).astype(np.float64)
        else:
            vals[k] = _to_storage(v, S)

    input_nonfinite = {k: _count(v) for k, v in vals.items() if not _is_index_input(graph, k)}
    if mode == "eager":
        spec = kernels if kernels is not None else K.KernelSpec.handwritten()
        lib = spec
        opts = F.FusionOptions.off(decompose=False)
    elif mode == "reference":
        spec = lib = None
        opts = F.FusionOptions.off(decompose=False)
    else:
        spec = kernels if kernels is not None else K.KernelSpec.codegen()
        lib = library if library is not None else K.KernelSpec.handwritten()
        opts = fusion if fusion is not None else F.FusionOptions()
    hw = getattr(spec if spec is not None else K.KernelSpec.handwritten(), "hardware", None)
    plan = F.plan(graph, opts, hw if hw is not None else K.Hardware(), dtype=S,
                  codegen=spec if fused_mode else None, library=lib)
    g = plan.graph

    values: dict = {}
    nonfinite: dict = {}
    internals: list = []
    if mode == "reference":
        for node in g.nodes:
            v = _reference_node(node, [vals[p] for p in node.inputs])
            vals[node.name] = v
            values[node.name] = v
            nonfinite[node.name] = _count(v)
    else:
        gen = _aligned_spec(spec, lib, align) if fused_mode else spec
        emulate = "promotion" in align
        used = {}
        for node in g.nodes:
            for p in node.inputs:
                used[p] = True
        for block in plan.blocks:
            codegen = fused_mode and block.codegen
            bspec = gen if codegen else lib
            outs = set(block.outputs)
            # a multiply that an FMA will absorb is not computed on its own
            # (its value would be thrown away) unless internals are dumped
            folded = (_folded_muls(g, block) if codegen and not emulate and bspec.fma
                      and not keep_internals else set())
            for m in block.members:
                if m in folded:
                    continue
                node = g.node(m)
                if codegen:
                    tile = plan.op_tile(m) if "tiling" in align else block.tile
                    # eager rounds at every node of the graph as written, not
                    # inside a composite it runs as one kernel
                    inner_node = m in plan.decomposed and plan.decomposed[m] != m
                    in_kernel = m not in outs and (not emulate or inner_node)
                    fused_ctx = not emulate
                else:
                    tile = plan.op_tile(m)
                    in_kernel = fused_ctx = False
                ctx = _Ctx(S, bspec, fused=fused_ctx, tile=tile, seed=_node_seed(seed, m), name=m)
                v = None
                if codegen and fused_ctx and bspec.fma:
                    v = _contract(node, g, block, vals, ctx)
                if v is None:
                    v = _compute(node, [vals[p] for p in node.inputs], ctx)
                if in_kernel:
                    vals[m] = v
                    nonfinite[m] = _count(v)
                    if keep_internals:
                        values[m] = np.asarray(v, dtype=np.float32)
                        internals.append(m)
                else:
                    c = _store(v, S)  # written to memory in S
                    values[m] = c
                    nonfinite[m] = _count_stored(c, S)
                    # consumers read it back, exactly, as fp32 values of S
                    vals[m] = c.astype(np.float32) if used.get(m) else None
    if mode == "reference":
        outputs = {o: vals[o] for o in g.outputs}
    else:
        outputs = {o: values[o] if o in values else _container(vals[o], S) for o in g.outputs}
    fp = fingerprint(
        graph, mode=mode, dtype=S, kernels=spec,
        library=lib if fused_mode else None, fusion=opts if fused_mode else None, align=align,
    )
    return RunResult(outputs=outputs, values=values, plan=plan, fingerprint=fp,
                     nonfinite=nonfinite, mode=mode, dtype=S, graph=g, source=graph,
                     kernels=spec, library=lib if fused_mode else None,
                     fusion=opts if fused_mode else None, align=align, seed=seed,
                     internals=internals, input_nonfinite=input_nonfinite)


# ---------------------------------------------------------------------------
# the numerics of one node under a KernelSpec
# ---------------------------------------------------------------------------
def _f32(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


class _Ctx:
    """How one node computes: the storage format S, the spec, the precision
    of its intermediate primitives (``inner``), its accumulator (``acc``),
    its reduction tile and schedule seed.

    ``fused`` is True inside a code-generated block that keeps fp32
    intermediates: then ``inner`` is fp32 whatever ``spec.promotion`` says
    (``KernelSpec.compute_format(S, fused=True)``).  Otherwise the node is a
    one-operator kernel and ``spec.promotion`` decides (``fp32_internal``:
    fp32 inside, ``accumulator_only``: S with fp32 accumulators, ``native``:
    S everywhere).
    """

    def __init__(self, S: Format, spec, *, fused: bool, tile: int, seed, name: str):
        from .kernels._common import Arith

        self.S = S
        self.spec = spec
        self.name = name
        self.tile = int(tile)
        self.seed = seed
        self.fused = fused
        self.inner = spec.compute_format(S, fused)
        self.acc = spec.acc_format(S, fused)
        self.ar = Arith(self.inner)

    # -- rounding ----------------------------------------------------------
    def r(self, x) -> np.ndarray:
        """Round to the inner precision (float32 container)."""
        return _f32(self.ar.round(x))

    # -- scalars (instruction choice) ----------------------------------------
    def scalar(self, s: float) -> np.float32:
        """The scalar operand as the instruction holds it: ``broadcast``
        materialises it in S, ``muls`` (a scalar register) keeps it in fp32."""
        if self.spec.scalar_mul == "broadcast":
            return np.float32(round_to(float(s), self.S))
        return np.float32(round_to(float(s), FP32, self.spec.scalar_rounding))

    def mul_scalar(self, x, s) -> np.ndarray:
        from .kernels import scalar_mul

        return _f32(scalar_mul(
            x, float(s), fmt=self.inner, how=self.spec.scalar_mul, storage=self.S,
            rounding=self.spec.vector_rounding, scalar_rounding=self.spec.scalar_rounding,
        ))

    # -- arithmetic ------------------------------------------------------------
    def add(self, a, b):
        return self.r(self.ar.add(_f32(a), _f32(b)))

    def sub(self, a, b):
        return self.r(self.ar.sub(_f32(a), _f32(b)))

    def mul(self, a, b):
        return self.r(self.ar.mul(_f32(a), _f32(b)))

    def _inplace_ok(self, a, b) -> bool:
        return (self.ar.native and isinstance(a, np.ndarray) and a.dtype == np.float32
                and np.asarray(b).dtype == np.float32 and a.flags.writeable
                and np.broadcast_shapes(a.shape, np.shape(b)) == a.shape)

    def mul_(self, a, b):
        """``mul`` writing into ``a`` (a temporary of this kernel) when the
        arithmetic is native fp32: the same IEEE operation, one allocation
        fewer; otherwise ``mul``."""
        b = _f32(b)
        if self._inplace_ok(a, b):
            with np.errstate(all="ignore"):
                return np.multiply(a, b, out=a)
        return self.mul(a, b)

    def add_(self, a, b):
        """``add`` into ``a`` (see :meth:`mul_`)."""
        b = _f32(b)
        if self._inplace_ok(a, b):
            with np.errstate(all="ignore"):
                return np.add(a, b, out=a)
        return self.add(a, b)

    def div(self, a, b):
        from .kernels import divide

        return _f32(divide(a, b, fmt=self.inner, algo=self.spec.divide))

    def muladd(self, a, b, c):
        """``a*b + c``: one rounding with ``spec.fma``, else two."""
        from .kernels import multiply_add

        if self.inner == FP32 and not self.spec.fma:
            return self.add(self.mul(a, b), c)  # native fp32: two roundings
        if self.inner == FP32:
            return _fma_f32(_f32(a), _f32(b), _f32(c))
        a, b, c = np.broadcast_arrays(_f32(a), _f32(b), _f32(c))
        return _f32(multiply_add(a, b, c, fmt=self.inner, fused=self.spec.fma))

    def rsqrt(self, x):
        from .kernels import rsqrt

        return _f32(rsqrt(x, fmt=self.inner, algo=self.spec.rsqrt))

    def reciprocal(self, x):
        from .kernels import reciprocal

        return _f32(reciprocal(x, fmt=self.inner, algo=self.spec.reciprocal))

    def sqrt(self, x):
        from .kernels import sqrt

        return _f32(sqrt(x, fmt=self.inner))

    def exp(self, x):
        from .kernels import exp

        return _f32(exp(x, fmt=self.inner, algo=self.spec.exp))

    def log(self, x):
        """float64 log rounded once to inner (correctly rounded model)."""
        with np.errstate(all="ignore"):
            return self.r(np.log(np.asarray(x, dtype=np.float64)))

    def tanh(self, x):
        from .kernels import tanh

        return _f32(tanh(x, fmt=self.inner))

    def erf(self, x):
        from .kernels import erf

        return _f32(erf(x, fmt=self.inner))

    def sigmoid(self, x):
        """``1 / (1 + exp(-x))``: exp (spec.exp), add, reciprocal
        (spec.reciprocal), each rounded to inner."""
        e = self.exp(-_f32(x))
        return self.reciprocal(self.add(np.float32(1.0), e))

    def gelu(self, x, approximate):
        """GELU in the op's form, float64 then one rounding to inner
        (``kernels.gelu``, algo exact)."""
        from .kernels import gelu

        form = "tanh" if approximate == "tanh" else "erf"
        return _f32(gelu(x, fmt=self.inner, form=form))

    # -- reductions ------------------------------------------------------------
    def order(self):
        """``spec.reduce_order`` if set, else ``Blocked(tile, reduce_inner,
        reduce_outer)``; a Shuffled (atomic-add-like) order takes the run's
        schedule seed when one was given."""
        from .kernels import Blocked

        o = self.spec.reduce_order
        if o is None:
            o = Blocked(self.tile, self.spec.reduce_inner, self.spec.reduce_outer)
        if self.seed is not None:
            o = _reseed(o, self.seed)
        return o

    def reduce(self, x, op, axes, keepdims, correction=0):
        from .kernels import reduce as kreduce

        x = _f32(x)
        axes = tuple(axes)
        flat = _axes_last(x, axes)
        n = flat.shape[-1]
        if n == 0:  # empty sum is -0.0 + nothing: IEEE 0; mean/var 0/0 = NaN
            with np.errstate(all="ignore"):
                fn = {"sum": np.sum, "mean": np.mean, "var": np.var}[op]
                r = fn(flat.astype(np.float64), axis=-1).astype(np.float32)
        elif (op == "var" and self.spec.variance == "welford" and self.acc == FP32
              and self.inner == FP32):
            r = _welford(flat, self.ar, int(correction))[1]
        else:
            r = kreduce(flat, op, -1, order=self.order(), acc=self.acc, out=self.inner,
                         variance=self.spec.variance, ddof=int(correction))
        r = _f32(r)
        if keepdims:
            r = r.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return r

    def welford(self, x, axes):
        """(mean, var) by Welford in the accumulator format, keepdims."""
        from .kernels._common import Arith

        x = _f32(x)
        axes = tuple(axes)
        m, v = _welford(_axes_last(x, axes), Arith(self.acc), 0)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        return self.r(m).reshape(shape), self.r(v).reshape(shape)

    def matmul(self, a, b):
        from .kernels import matmul

        a, b = _f32(a), _f32(b)
        va, vb = a.ndim == 1, b.ndim == 1  # numpy matmul's vector rules
        r = _f32(matmul(a[None, :] if va else a, b[:, None] if vb else b, k_tile=self.spec.k_tile,
                        acc=self.acc, out=self.inner, mode=self.spec.matmul_mode, fma=self.spec.fma))
        if vb:
            r = r[..., 0]
        if va:
            r = r[..., 0, :] if not vb else r[..., 0]
        return r


def _axes_last(x: np.ndarray, axes: tuple) -> np.ndarray:
    """``x`` with the reduced ``axes`` moved last and merged into one axis of
    their total length (the other axes keep their order)."""
    rest = [i for i in range(x.ndim) if i not in axes]
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return np.transpose(x, rest + list(axes)).reshape(tuple(x.shape[i] for i in rest) + (n,))


def _welford(x: np.ndarray, ar, ddof: int):
    """Welford's mean and variance along the last axis with every operation
    rounded by ``ar`` (a ``kernels._common.Arith``): the same operations in
    the same order as ``kernels.reduce(op="var", variance="welford")``
    (``d = x_k - m; m = m + d/fl(k+1); M2 = M2 + d*(x_k - m)``; var
    ``M2/fl(n - ddof)``), so the variance is bitwise the kernel's (tested).
    Runs on a transposed contiguous copy (each step reads one contiguous
    row) with preallocated buffers when ``ar`` is native fp32.

    Returns (mean, var) in ``ar``'s working dtype, shape ``x.shape[:-1]``.
    """
    n = x.shape[-1]
    lead = x.shape[:-1]
    xt = _transpose2d(np.asarray(ar.round(x)).reshape(-1, n))  # (n, rows)
    m = np.zeros(xt.shape[1:], dtype=ar.dtype)
    m2 = np.zeros_like(m)
    with np.errstate(all="ignore"):
        if ar.native and ar.dtype == np.float32:
            d = np.empty_like(m)
            t = np.empty_like(m)
            for k in range(n):
                xk = xt[k]
                np.subtract(xk, m, out=d)
                np.divide(d, np.float32(k + 1), out=t)
                np.add(m, t, out=m)
                np.subtract(xk, m, out=t)
                np.multiply(d, t, out=t)
                np.add(m2, t, out=m2)
        else:
            for k in range(n):
                xk = xt[k]
                d = ar.sub(xk, m)
                m = ar.add(m, ar.div(d, ar.round(np.float64(k + 1))))
                m2 = ar.add(m2, ar.mul(d, ar.sub(xk, m)))
        var = ar.div(m2, ar.round(np.float64(n - ddof)))
    return np.asarray(m).reshape(lead), np.asarray(var).reshape(lead)


def _transpose2d(a: np.ndarray, block: int = 128) -> np.ndarray:
    """A contiguous copy of ``a.T`` made tile by tile (``block`` x ``block``),
    so reads and writes stay in cache (a plain strided transpose of a large
    array is several times slower)."""
    r, n = a.shape
    out = np.empty((n, r), dtype=a.dtype)
    if r * n <= block * block * 4:
        out[...] = a.T
        return out
    for i in range(0, r, block):
        for j in range(0, n, block):
            out[j:j + block, i:i + block] = a[i:i + block, j:j + block].T
    return out


def _fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a*b + c`` rounded once to fp32.

    The product of two fp32 values is exact in float64; ``s = fl64(p + c)``
    is then rounded to fp32.  That double rounding can be wrong only when
    ``s`` lies exactly halfway between two fp32 numbers (its 29 low
    significand bits are ``1 0...0``): there the exact error of ``s``
    (Knuth's TwoSum) says on which side the exact value lies (zero: a true
    tie, round to even).  Results in fp32's subnormal range are redone by
    the kernels' exact path (:func:`numlab.kernels.fma`).  Works on chunks
    of rows so the float64 temporaries stay in cache."""
    from .kernels import fma

    a, b, c = np.broadcast_arrays(_f32(a), _f32(b), _f32(c))
    out = np.empty(a.shape, dtype=np.float32)
    if a.size == 0:
        return out
    if a.ndim == 0:
        return _f32(fma(a, b, c, fmt=FP32)).reshape(())
    per_row = max(1, a.size // a.shape[0])
    step = max(1, 65536 // per_row)
    low = np.uint64(0x1FFFFFFF)
    half = np.uint64(0x10000000)
    tiny = 2.0**-126
    # chunk buffers, reused: no fresh allocation per chunk
    shape = (min(step, a.shape[0]),) + a.shape[1:]
    p_buf = np.empty(shape, dtype=np.float64)
    q_buf = np.empty(shape, dtype=np.float64)
    t_buf = np.empty(shape, dtype=np.uint64)
    m_buf = np.empty(shape, dtype=bool)
    with np.errstate(all="ignore"):
        for i in range(0, a.shape[0], step):
            sl = slice(i, i + step)
            k = min(step, a.shape[0] - i)
            p, q, t, mid = p_buf[:k], q_buf[:k], t_buf[:k], m_buf[:k]
            np.multiply(a[sl], b[sl], out=p, dtype=np.float64)  # exact
            np.add(p, c[sl], out=p)
            o = out[sl]
            o[...] = p  # numpy's float64 -> float32 cast: RNE
            np.bitwise_and(p.view(np.uint64), low, out=t)
            np.equal(t, half, out=mid)
            if mid.any():  # an fp32 midpoint: which side was the exact value on?
                av = a[sl][mid].astype(np.float64)
                prod = av * b[sl][mid]  # exact
                cv = c[sl][mid].astype(np.float64)
                sm = p[mid]
                bb = sm - prod  # TwoSum (Knuth): e is the exact error of sm
                e = (prod - (sm - bb)) + (cv - bb)
                r0 = o[mid]
                other = np.nextafter(r0, np.where(sm > r0, np.float32(np.inf), np.float32(-np.inf)))
                up, dn = np.maximum(r0, other), np.minimum(r0, other)
                o[mid] = np.where(e > 0, up, np.where(e < 0, dn, r0))
            np.abs(p, out=q)
            if q.min() < tiny:  # zeros or fp32 subnormal results
                sub = (q < tiny) & (p != 0)
                if sub.any():  # fp32 subnormal results: exact kernel
                    o[sub] = _f32(fma(a[sl][sub], b[sl][sub], c[sl][sub], fmt=FP32))
    return out


def _reseed(o, seed):
    from .kernels import Blocked, Shuffled

    if isinstance(o, Shuffled):
        return dataclasses.replace(o, seed=int(seed))
    if isinstance(o, Blocked):
        return dataclasses.replace(o, inner=_reseed(o.inner, seed), outer=_reseed(o.outer, seed))
    return o


def _reference_node(node, ins):
    from .ops import CATALOGUE

    with np.errstate(all="ignore"):
        v = CATALOGUE[node.op].ref(*ins, **node.op_attrs)
    v = np.asarray(v)
    return v if v.dtype == np.float64 else v.astype(np.float64)


_MOVES = ("reshape", "transpose", "slice", "concat", "split", "broadcast_to", "gather")


def _compute(node, ins, ctx: _Ctx) -> np.ndarray:
    """Value of ``node`` under ``ctx`` (float32; S-valued or inner-valued)."""
    from .ops import CATALOGUE

    op = node.op
    at = node.op_attrs
    with np.errstate(all="ignore"):
        if op in _MOVES:  # never changes a value
            return np.ascontiguousarray(CATALOGUE[op].ref(*ins, **at))
        fn = _IMPL.get(op)
        if fn is None:
            raise ValueError(f"node {node.name!r}: op {op!r} has no executor implementation; "
                             f"implemented: {sorted(_IMPL) + list(_MOVES)}")
        return _f32(fn(ctx, *ins, **at))


_CONTRACTIBLE = ("add", "sub", "add_scalar", "sub_scalar", "rsub_scalar")


def _folded_mul(node, g, block):
    """The ``mul`` input of ``node`` that :func:`_contract` folds into an
    FMA (the same rule, in the same order), or None."""
    if node.op not in _CONTRACTIBLE:
        return None
    for p in node.inputs:
        if p not in block.members or p in block.outputs:
            continue
        pn = g.node(p)
        if pn.op != "mul" or len(g.consumers(p)) != 1:
            continue
        return p
    return None


def _folded_muls(g, block) -> set:
    """Multiplies of a code-generated block absorbed by FMA contraction."""
    out = set()
    for m in block.members:
        p = _folded_mul(g.node(m), g, block)
        if p is not None:
            out.add(p)
    return out


def _contract(node, g, block, vals, ctx: _Ctx):
    """FMA contraction in a code-generated block (``spec.fma``): an add or
    subtract whose operand is a ``mul`` of the same block, used only there
    and never written out, is computed as one fused multiply-add (one
    rounding), as compilers contract ``a*b + c`` (LLVM/NVPTX ``fmuladd``,
    Ascend ``vmla``).  Returns None when the pattern does not apply."""
    p = _folded_mul(node, g, block)
    if p is None:
        return None
    i = node.inputs.index(p)
    pn = g.node(p)
    a, b = _f32(vals[pn.inputs[0]]), _f32(vals[pn.inputs[1]])
    op = node.op
    if op == "add":
        return ctx.muladd(a, b, vals[node.inputs[1 - i]])
    if op == "sub":
        c = _f32(vals[node.inputs[1 - i]])
        return ctx.muladd(a, b, -c) if i == 0 else ctx.muladd(-a, b, c)
    s = ctx.scalar(node.op_attrs["scalar"])
    if op == "add_scalar":
        return ctx.muladd(a, b, np.float32(s))
    if op == "sub_scalar":
        return ctx.muladd(a, b, np.float32(-s))
    return ctx.muladd(-a, b, np.float32(s))  # rsub_scalar: s - a*b


def _layer_norm(ctx: _Ctx, x, gamma=None, beta=None, *, axis, eps):
    """One kernel: mean and variance by ``spec.variance`` (welford: one
    pass giving both, as hand-written kernels do; two_pass: mean, then the
    mean of squared deviations; textbook: kernels.reduce "var"), centre,
    rsqrt by ``spec.rsqrt``, scale, then ``y*gamma + beta`` (FMA per spec)."""
    if ctx.spec.variance == "welford":
        mu, var = ctx.welford(x, axis)
        d = ctx.sub(x, mu)
    else:
        mu = ctx.reduce(x, "mean", axis, True)
        d = ctx.sub(x, mu)
        if ctx.spec.variance == "two_pass":
            var = ctx.reduce(ctx.mul(d, d), "mean", axis, True)
        else:
            var = ctx.reduce(x, "var", axis, True)
    r = ctx.rsqrt(ctx.add(var, np.float32(ctx.scalar(eps))))
    y = ctx.mul_(d, r)  # d is this kernel's own temporary
    if gamma is not None and beta is not None:
        if ctx.spec.fma or not ctx.ar.native:
            return ctx.muladd(y, gamma, beta)
        return ctx.add_(ctx.mul_(y, gamma), beta)  # two roundings, as muladd
    if gamma is not None:
        return ctx.mul_(y, gamma)
    return y


def _rms_norm(ctx: _Ctx, x, weight=None, *, axis, eps):
    ms = ctx.reduce(ctx.mul(x, x), "mean", axis, True)
    r = ctx.rsqrt(ctx.add(ms, np.float32(ctx.scalar(eps))))
    y = ctx.mul(x, r)
    return ctx.mul_(y, weight) if weight is not None else y


def _softmax(ctx: _Ctx, x, *, axis):
    m = ctx.reduce(x, "max", (axis,), True)
    e = ctx.exp(ctx.sub(x, m))
    s = ctx.reduce(e, "sum", (axis,), True)
    return ctx.div(e, s)


def _log_softmax(ctx: _Ctx, x, *, axis):
    d = ctx.sub(x, ctx.reduce(x, "max", (axis,), True))
    s = ctx.reduce(ctx.exp(d), "sum", (axis,), True)
    return ctx.sub(d, ctx.log(s))


def _relu(ctx, x):
    """0 where x < 0, else x: NaN and -0.0 pass through (as torch.relu and
    the catalogue's reference)."""
    x = _f32(x)
    return np.where(x < 0, np.float32(0.0), x)


def _silu(ctx, x):
    return ctx.mul(x, ctx.sigmoid(x))


def _cast(ctx, x, *, to):
    return _f32(round_to(_f32(x), to))


_IMPL = {
    "add": lambda c, a, b: c.add(a, b),
    "sub": lambda c, a, b: c.sub(a, b),
    "mul": lambda c, a, b: c.mul(a, b),
    "div": lambda c, a, b: c.div(a, b),
    "maximum": lambda c, a, b: np.maximum(_f32(a), _f32(b)),
    "minimum": lambda c, a, b: np.minimum(_f32(a), _f32(b)),
    "add_scalar": lambda c, x, scalar: c.add(x, np.float32(c.scalar(scalar))),
    "sub_scalar": lambda c, x, scalar: c.sub(x, np.float32(c.scalar(scalar))),
    "rsub_scalar": lambda c, x, scalar: c.sub(np.float32(c.scalar(scalar)), x),
    "mul_scalar": lambda c, x, scalar: c.mul_scalar(x, scalar),
    "div_scalar": lambda c, x, scalar: c.div(x, np.full_like(_f32(x), c.scalar(scalar))),
    "rdiv_scalar": lambda c, x, scalar: c.div(np.full_like(_f32(x), c.scalar(scalar)), x),
    "neg": lambda c, x: -_f32(x),
    "abs": lambda c, x: np.abs(_f32(x)),
    "relu": _relu,
    "exp": lambda c, x: c.exp(x),
    "log": lambda c, x: c.log(x),
    "sqrt": lambda c, x: c.sqrt(x),
    "rsqrt": lambda c, x: c.rsqrt(x),
    "reciprocal": lambda c, x: c.reciprocal(x),
    "tanh": lambda c, x: c.tanh(x),
    "sigmoid": lambda c, x: c.sigmoid(x),
    "erf": lambda c, x: c.erf(x),
    "silu": _silu,
    "gelu": lambda c, x, approximate: c.gelu(x, approximate),
    "where": lambda c, m, a, b: np.where(np.asarray(m) != 0, _f32(a), _f32(b)),
    "cast": _cast,
    "sum": lambda c, x, axis, keepdims: c.reduce(x, "sum", axis, keepdims),
    "mean": lambda c, x, axis, keepdims: c.reduce(x, "mean", axis, keepdims),
    "max": lambda c, x, axis, keepdims: c.reduce(x, "max", axis, keepdims),
    "min": lambda c, x, axis, keepdims: c.reduce(x, "min", axis, keepdims),
    "var": lambda c, x, axis, keepdims, correction: c.reduce(x, "var", axis, keepdims, correction),
    "matmul": lambda c, a, b: c.matmul(a, b),
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
}


def _aligned_spec(gen, lib, align):
    """``gen`` with the fields of each aligned source taken from ``lib``."""
    if not align or gen is None:
        return gen
    changes = {}
    for src in align:
        for f in SOURCE_FIELDS[src]:
            if hasattr(lib, f):
                changes[f] = getattr(lib, f)
    return dataclasses.replace(gen, **changes) if changes else gen


SOURCE_FIELDS = {
    "promotion": ("promotion", "acc"),
    "instruction": ("scalar_mul", "scalar_rounding", "vector_rounding", "fma"),
    "tiling": ("reduce_inner", "reduce_outer", "reduce_order", "live_buffers", "hardware", "k_tile"),
    "algorithm": ("rsqrt", "reciprocal", "divide", "exp", "gelu_form", "variance", "matmul_mode"),
}
"""KernelSpec fields of each source of difference (DESIGN.md section 1).
``name`` is the only field in none of them (tests check the partition)."""
