"""Executors: run a graph eager, fused, fused with emulated casts, or in fp64.

The numerics contract is ``docs/design.md`` ("Execution modes", "The four sources of difference");
this package implements it.  Modules: :mod:`~numlab.execute.executor` (the
executor: plan, feed blocks, store to S, dump), :mod:`~numlab.execute.validate`
(argument checks, modes and sources), :mod:`~numlab.execute.fingerprint`
(canonical form and compile fingerprint), :mod:`~numlab.execute.values`
(input rounding, NaN/inf counts), :mod:`~numlab.execute.result`
(:class:`RunResult`).  Every value is computed by the engine
(:mod:`numlab.kernels.engine`) through the operator registry
(``OpInfo.kernel``).

Modes
-----
``eager``
    Every operator is its own hand-written kernel (``kernels``, default
    ``KernelSpec.handwritten()``): it reads its inputs in the storage format
    S, computes as the spec says (promotion, instructions, reduction order
    with the tile of a one-operator kernel, algorithms), and writes its output
    rounded to S (or to the format its operator declares, see "Stored
    formats" below).  Composites (softmax, log_softmax, layer_norm, rms_norm) are
    one kernel with their own internal precision.
``fused``
    The graph is planned by :func:`numlab.fusion.plan` (``fusion``, default
    ``FusionOptions()`` = Ascend autofusion defaults; composites decomposed
    when ``fusion.decompose``).  A block formed by the code generator (its
    kinds are enabled) runs with ``kernels`` (default
    ``KernelSpec.codegen()``): it reads S, computes every intermediate in
    fp32 (each fp32 operation still rounds to fp32) with the block's tile, and
    rounds to S (``vector_rounding``) only at the block's outputs.  A block the code generator does
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

Stored formats
--------------
A node whose operator declares ``OpInfo.stored_fmt`` is written in that
format instead of S wherever it is written (an eager kernel's output, a
fused block's edge, an emulated cast; :func:`numlab.execute.values.stored_formats`):
``quantize`` in its element format (fp8/fp6/fp4), ``block_scale`` in fp32,
as real fp8 pipelines keep them (DeepSeek-V3's ``act_quant`` returns an
fp8 tensor and an fp32 scale tensor).  ``RunResult.values`` holds them in
that format's container, the running bounds start from those values, and
the compile fingerprint names the formats (only for graphs that have such
nodes).

The four sources of difference (``docs/design.md``) can each be set to
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
                  algorithm, matmul algorithm (``rsqrt``, ``reciprocal``,
                  ``divide``, ``exp``, ``variance``, ``matmul_algo``)

With all four aligned and ``FusionOptions(decompose=False)`` fused equals
eager bit for bit (tested on every zoo model).

Knobs that change nothing
-------------------------
A knob given to :func:`run` that changes no node of the plan warns with
:class:`NoEffectWarning` (:mod:`~numlab.execute.liveness`, which also holds
the rule of which spec each node computes with): under the default fusion
every matmul is a library block, so ``kernels="codegen:mma=H100"`` warns
and names ``library=`` as the spec that applies.
"""

from __future__ import annotations

from .executor import run
from .fingerprint import canonical, fingerprint
from .liveness import NoEffectWarning, no_effect, quiet
from .result import RunResult
from .validate import MODES, SOURCE_FIELDS, SOURCES

__all__ = ["MODES", "SOURCES", "SOURCE_FIELDS", "run", "RunResult", "fingerprint", "canonical",
           "NoEffectWarning", "no_effect", "quiet"]
