"""The executor: plan a graph, feed its blocks, store to S, dump.

Every value is computed by the engine (:mod:`numlab.kernels.engine`) through
the operator registry: ``get_op(node.op).kernel(ctx, *inputs, **attrs)``.
This module only decides which spec, tile and precision each node runs with
and where values are written out (rounded to S by the spec's
``vector_rounding``).
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import fusion as F
from ..kernels import KernelSpec
from ..kernels import engine as E
from ..kernels.spec import mode_specs
from ..ops import get_op
from .fingerprint import fingerprint
from .liveness import FUSED_MODES, NoEffectWarning, no_effect, runs_codegen
from .result import RunResult
from .validate import SOURCE_FIELDS, aligned_spec, check_align, check_run_args
from .values import (
    container,
    count,
    count_stored,
    node_format,
    node_seed,
    stored_formats,
    to_storage,
)

__all__ = ["run"]


def run(graph, inputs, *, mode, fmt=None, kernels=None, fusion=None, seed=None,
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
        See :mod:`numlab.execute`.
    fmt : Format or str
        Storage format S (``"fp16"``, ``"bf16"``, ``nl.FP32``, ...).
    kernels : KernelSpec or str, optional
        A KernelSpec or a kernel spec string (``"codegen:fma=false"``,
        :meth:`KernelSpec.parse`; the result keeps the parsed object).
        The kernels of this mode: eager, the hand-written library (default
        ``KernelSpec.handwritten()``); fused modes, the code generator's
        (default ``KernelSpec.codegen()``).  Ignored by ``reference``.
    fusion : FusionOptions or str, optional
        FusionOptions or a fusion spec string (``"inductor+nodecompose"``,
        :meth:`FusionOptions.parse`; the result keeps the parsed object).
        Fused modes only (default ``FusionOptions()``, Ascend autofusion
        defaults).  Passing it with ``eager`` or ``reference`` is an error.
    seed : int, optional
        Schedule seed for nondeterministic reduction orders (each node gets
        ``default_rng([seed, crc32(node name)])``).  Not part of the compile
        fingerprint (a run-time input).
    keep_internals : bool
        Fused modes: also dump every block-internal value, in float32.
    library : KernelSpec or str, optional
        A KernelSpec or kernel spec string, as ``kernels``.  Fused modes:
        the hand-written library used for blocks the code generator does
        not take, and "eager's choice" for ``align`` (default
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
        Unknown mode, format, source or option type; a bad kernel or fusion
        spec string (ValueError) or a spec of the wrong type (TypeError);
        missing or unexpected inputs; wrong shapes or dtypes (each message names the argument or
        input and the valid choices).

    Warns
    -----
    numlab.NoEffectWarning
        For each knob given that changes no node of the plan
        (:func:`numlab.execute.liveness.no_effect`): a ``kernels`` or
        ``library`` field set that no node reading it computes with
        (``kernels="codegen:mma=H100"`` when every matmul is a library
        block: the message names ``library=`` and the spec to pass), a
        source of ``align`` that changes nothing, ``kernels`` in the
        reference, ``keep_internals=True`` outside the fused modes.
    """
    if fmt is None:
        raise TypeError("run() needs the storage format: fmt='fp16' (or 'bf16', 'fp32', ...)")
    align_arg = align
    S, align, kernels, library, fusion = check_run_args(
        graph, mode=mode, fmt=fmt, kernels=kernels, library=library, fusion=fusion, seed=seed,
        keep_internals=keep_internals, align=align)
    fused_mode = mode in FUSED_MODES
    vals, input_nonfinite = _feed_inputs(graph, inputs, S, mode)
    spec, lib, opts = _choose_specs(mode, kernels, library, fusion)
    hw = (spec if spec is not None else KernelSpec.handwritten()).hardware
    plan = F.plan(graph, opts, hw, fmt=S, codegen=spec if fused_mode else None, library=lib)
    g = plan.graph
    if mode == "reference":
        values, nonfinite, internals = _run_reference(g, vals)
        outputs = {o: vals[o] for o in g.outputs}
    else:
        gen = aligned_spec(spec, lib, align) if fused_mode else spec
        values, nonfinite, internals = _run_blocks(plan, vals, S, gen, lib, mode=mode,
                                                   align=align, seed=seed, keep_internals=keep_internals)
        outputs = {o: values[o] if o in values else container(vals[o], S) for o in g.outputs}
    _warn_no_effect(plan, mode, spec, lib, given=(kernels, library), align=(check_align(align_arg), align),
                    keep_internals=keep_internals)
    fp = fingerprint(graph, mode=mode, fmt=S, kernels=spec, library=lib if fused_mode else None,
                     fusion=opts if fused_mode else None, align=align)
    return RunResult(outputs=outputs, values=values, plan=plan, fingerprint=fp,
                     nonfinite=nonfinite, mode=mode, fmt=S, graph=g, source=graph,
                     kernels=spec, library=lib if fused_mode else None,
                     fusion=opts if fused_mode else None, align=align, seed=seed,
                     internals=internals, input_nonfinite=input_nonfinite)


def _warn_no_effect(plan, mode, spec, lib, *, given, align, keep_internals):
    """Warn (:class:`~numlab.execute.liveness.NoEffectWarning`) for every
    knob of this run that changes no node of ``plan``; ``given`` is
    (kernels, library) as passed (None: not given), ``align`` (sources
    named, sources aligned)."""
    kernels, library = given
    fused_mode = mode in FUSED_MODES
    found = no_effect(plan, mode, kernels=spec, library=lib, given_kernels=kernels, given_library=library,
                      default_kernels=mode_specs(mode)[0], default_library=mode_specs(mode)[1], given_align=align[0], align=align[1],
                      source_fields=SOURCE_FIELDS)
    if keep_internals and not fused_mode:
        why = f"mode {mode!r} keeps no value inside a kernel (internals are a fused mode's)"
        found.append(NoEffectWarning(f"keep_internals=True changes nothing: {why}", arg="keep_internals",
                                     value="True", cli=f"--keep-internals changes nothing: {why}"))
    for w in found:
        warnings.warn(w, stacklevel=3)


def _feed_inputs(graph, inputs, S, mode):
    """Checked inputs rounded to S (float64 in the reference; gather indices
    as given) and their (NaN, inf) counts after rounding."""
    xs = graph.check_inputs(inputs)
    vals = {}
    for k, v in xs.items():
        if graph.role(k) == "index":
            vals[k] = v  # indices are not values: never rounded
        elif mode == "reference":
            vals[k] = to_storage(v, S).astype(np.float64)
        else:
            vals[k] = to_storage(v, S)
    input_nonfinite = {k: count(v) for k, v in vals.items() if graph.role(k) != "index"}
    return vals, input_nonfinite


def _choose_specs(mode, kernels, library, fusion):
    """(spec of the mode's kernels, library spec, fusion options)."""
    spec, lib = mode_specs(mode, kernels, library)
    if mode in ("eager", "reference"):
        return spec, lib, F.FusionOptions.off(decompose=False)
    return spec, lib, fusion if fusion is not None else F.FusionOptions()


def _run_reference(g, vals):
    """Every node by its fp64 reference (no rounding)."""
    values, nonfinite = {}, {}
    for node in g.nodes:
        with np.errstate(all="ignore"):
            v = np.asarray(get_op(node.op).ref(*[vals[p] for p in node.inputs], **node.op_attrs))
        v = v if v.dtype == np.float64 else v.astype(np.float64)
        vals[node.name] = values[node.name] = v
        nonfinite[node.name] = count(v)
    return values, nonfinite, []


def compute(node, ins, ctx) -> np.ndarray:
    """The value of ``node`` under ``ctx``: its operator's engine kernel
    (:func:`numlab.kernels.engine.compute`, with the operator's scalar tail)."""
    info = get_op(node.op)
    if info.kernel is None:
        raise ValueError(f"node {node.name!r}: op {node.op!r} has no kernel in the operator registry")
    v = E.compute(info.kernel, ctx, ins, node.op_attrs, info.scalar_tail, node.op)
    return v if v.dtype.kind in "iu" or v.dtype == np.float32 else v.astype(np.float32)


def _run_blocks(plan, vals, S, gen, lib, *, mode, align, seed, keep_internals):
    """Eager and fused modes: every block of the plan, node by node.

    A code-generated block (fused modes) computes with ``gen`` in fp32 and
    writes only its outputs (rounded to S with ``gen.vector_rounding``); every
    other block is a library kernel (``lib``) written to S.  With
    ``"promotion"`` aligned (emulated casts) every node of the graph as given
    is written to S as eager would.  Wherever a node is written, a node whose
    operator declares a stored format (:func:`stored_formats`) is written in
    that format instead of S."""
    g = plan.graph
    values, nonfinite, internals = {}, {}, []
    used = {p for node in g.nodes for p in node.inputs}
    emulate = "promotion" in align
    stored = stored_formats(g)
    for block in plan.blocks:
        codegen = runs_codegen(block, mode)
        bspec = gen if codegen else lib
        # a multiply that an FMA will absorb is not computed on its own
        # (its value would be thrown away) unless internals are dumped
        folded = (E.folded_muls(g, block) if codegen and not emulate and bspec.fma
                  and not keep_internals else set())
        for m in block.members:
            if m in folded:
                continue
            node = g.node(m)
            ctx, in_kernel = _node_ctx(plan, block, m, S, bspec, codegen=codegen, align=align, seed=seed)
            v = E.contract(node, g, block, vals, ctx) if codegen and ctx.fused and bspec.fma else None
            if v is None:
                v = compute(node, [vals[p] for p in node.inputs], ctx)
            if in_kernel:
                vals[m] = v
                nonfinite[m] = count(v)
                if keep_internals:
                    values[m] = np.asarray(v, dtype=np.float32)
                    internals.append(m)
            else:
                out = stored.get(m, S)  # S, the operator's stored format or the node's storage
                c = E.store(v, out, bspec.vector_rounding)  # written to memory in S (or its stored format)
                values[m] = c
                # consumers read it back, exactly, as fp32 values of S (or of its stored format)
                vals[m] = _read_back(v, c, node, vals) if m in used else None
                # NaN/inf counts: on the exact fp32 read-back when there is one
                # (a cheap finite-sum test), else on the stored codes
                nonfinite[m] = count(vals[m]) if m in used else count_stored(c, out)
    return values, nonfinite, internals


def _read_back(v, c, node, vals):
    """``c.astype(np.float32)``: the stored values ``c`` as consumers read them
    (an exact widening).  Written into the kernel's own result ``v`` when
    that buffer is fresh (float32, owns its data, writeable, shares no memory
    with an input or any value still held), which saves a full-size
    allocation and its page faults; otherwise a new array."""
    if (c is v or c.dtype == np.float32 or v.dtype != np.float32 or not v.flags.owndata
            or not v.flags.writeable or v.shape != c.shape
            or any(a is not None and np.may_share_memory(v, a) for a in vals.values())
            or any(isinstance(a, np.ndarray) and np.may_share_memory(v, a)
                   for a in node.op_attrs.values())):
        return c.astype(np.float32)
    np.copyto(v, c)
    return v


def _node_ctx(plan, block, m, S, bspec, *, codegen, align, seed):
    """(engine Ctx of node ``m``, whether its value stays inside the kernel)."""
    if codegen:
        emulate = "promotion" in align
        tile = plan.op_tile(m) if "tiling" in align else block.tile
        # eager rounds at every node of the graph as written, not inside a
        # composite it runs as one kernel
        inner_node = m in plan.decomposed and plan.decomposed[m] != m
        in_kernel = m not in block.outputs and (not emulate or inner_node)
        fused_ctx = not emulate
    else:
        tile = plan.op_tile(m)
        in_kernel = fused_ctx = False
    # a node's own format (its storage attribute) is its kernel's S; the tile is the plan's
    node = plan.graph.node(m)
    ctx = E.Ctx(node_format(node, S), bspec, fused=fused_ctx, tile=tile, seed=node_seed(seed, m), name=m,
                loads=node.attrs.get("loads"))
    return ctx, in_kernel
