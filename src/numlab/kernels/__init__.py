"""numlab.kernels: the four sources of eager/fused difference as switches.

``docs/design.md`` ("The four sources of difference") lists four sources of difference;
each is a knob here and a field of :class:`KernelSpec`:

1. precision promotion -- ``KernelSpec.promotion`` (``native``,
   ``fp32_internal``, ``accumulator_only``) and the accumulator ``acc``;
2. instruction choice -- :func:`scalar_mul` (``broadcast`` vs ``muls``, each
   unit with its rounding mode) and :func:`fma` vs :func:`mul_add`;
3. tiling and reduction order -- :class:`Hardware` + :func:`tile_elements`,
   :func:`reduce` with :class:`Sequential`, :class:`Pairwise`, :class:`Lanes`,
   :class:`Blocked`, :class:`Kahan`, :class:`Shuffled`, the CPU orders
   :class:`AtenCascade` and :class:`InductorLanes`, and a revealed :class:`Tree`; :func:`matmul` K tiles;
4. algorithm -- :func:`rsqrt`, :func:`reciprocal`, :func:`divide` (exact,
   two roundings, or a table/bit-trick seed plus :class:`Newton` steps),
   :func:`exp` (exact or :class:`ExpPoly`), :func:`tanh`, :func:`erf`,
   :func:`gelu`; variance two-pass/Welford/textbook; matmul ``algo``.

The engine (:mod:`numlab.kernels.engine`) is the one place a node is
computed under a spec: a :class:`~numlab.kernels.engine.Ctx` and one kernel
function per operator (``engine.layer_norm(ctx, x, gamma, beta, axis=..,
eps=..)``); every operator of :mod:`numlab.ops` names its kernel
(``OpInfo.kernel``) and the executor calls only that.

Rooms (docs/layers.md, "Inside numlab.kernels"; top first)
----------------------------------------------------------
``spec`` (:class:`KernelSpec`) > ``engine`` and ``grammar`` (spec strings) >
the kernels ``reduction`` (:func:`reduce`), ``tiled_matmul`` (:func:`matmul`),
``scalar``, ``algorithms``, ``scaled`` and ``mma/`` (the matrix-unit model) >
``orders/`` (every summation order and :func:`parse_order`), ``libm``,
``hardware`` > ``_common`` and ``_accel``.  A module imports only from rooms
below it.

How an executor calls this package
----------------------------------
Containers.  Every function accepts float containers (float64, float32,
float16, bfloat16, fp8) holding values, and returns values of its result
format ``F`` in ``F.container`` (fp16 -> float16, bf16 -> bfloat16, fp32 and
tf32 -> float32, fp64 -> float64).

The easy way: a :class:`KernelSpec` applied to a storage format ``S``::

    from numlab import kernels as K
    spec = K.KernelSpec.handwritten()           # eager; K.KernelSpec.codegen() for fused
    # eager node: reads S values, returns S (S.container)
    y = spec.reduce(x, "sum", axis=-1, storage="fp16")
    y = spec.reduce(x, "var", axis=-1, storage="fp16", correction=0)
    y = spec.mul_scalar(x, 0.125, storage="fp16")
    y = spec.unary("rsqrt", x, storage="fp16")   # also reciprocal sqrt exp log tanh erf sigmoid gelu
    y = spec.div(a, b, storage="fp16")
    y = spec.multiply_add(a, b, c, storage="fp16")
    y = spec.matmul(a, b, storage="fp16")
    # inside a fused block: fp32 in, fp32 out; the block's live buffers set the tile
    cg = K.KernelSpec.codegen()
    y = cg.reduce(x32, "sum", axis=-1, storage="fp16", fused=True, live_buffers=block.live_buffers)

With ``fused=False`` the result is rounded to ``S`` (eager kernel output);
with ``fused=True`` it stays fp32 (the block rounds to S at its outputs).
``spec.compute_format(S, fused)``, ``spec.acc_format(S, fused)``,
``spec.out_format(S, fused)``, ``spec.tile(S, fused, live_buffers)`` and
``spec.order(S, fused, live_buffers)`` expose the decisions.

The explicit way: call the functions with the formats spelled out::

    K.reduce(x, "sum", -1, order="blocked(4096,lanes(64),sequential)", acc="fp32", out="fp16")
    K.scalar_mul(x, s, fmt="fp16", how="broadcast")
    K.rsqrt(x, fmt="fp32", algo="newton(table12,1,fp32)")
    K.matmul(a, b, k_tile=128, acc="fp32", out="fp16", algo="block_fma")

``S`` is always passed as ``storage=`` (spec methods) or as ``fmt=``/``out=``
(the result format); the accumulator as ``acc=``; the spec as the object whose
method you call.  Errors: bad knobs raise ValueError naming the knob, the
value and the valid choices.
"""

from __future__ import annotations

from . import engine
from .algorithms import (
    DIV_ALGOS,
    ERF_ALGOS,
    EXP_ALGOS,
    GELU_ALGOS,
    GELU_APPROXIMATE,
    RECIP_ALGOS,
    RSQRT_ALGOS,
    TANH_ALGOS,
    ExpPoly,
    Magic,
    Newton,
    Table,
    divide,
    erf,
    exp,
    gelu,
    newton_recurrence,
    parse_algo,
    reciprocal,
    rsqrt,
    seed_error_bound,
    seed_estimate,
    sqrt,
    steps_needed,
    steps_table,
    tanh,
)
from .engine import Ctx
from .hardware import ASCEND_910B, SMALL, Hardware, tile_elements
from .orders import (
    ORDER_NAMES,
    AtenCascade,
    Blocked,
    InductorLanes,
    Kahan,
    Lanes,
    Order,
    Pairwise,
    Sequential,
    Shuffled,
    Tree,
    gamma,
    parse_order,
    parse_tree,
)
from .reduction import OPS, VARIANCE_ALGORITHMS, reduce
from .scalar import SCALAR_MUL_CHOICES, fma, mul_add, multiply_add, scalar_mul
from .spec import (
    CODEGEN,
    DEFAULT_FUSED_LIVE_BUFFERS,
    HANDWRITTEN,
    INDUCTOR_CPU,
    PROMOTIONS,
    UNARY_OPS,
    KernelSpec,
)
from .tiled_matmul import MATMUL_ALGOS, matmul

__all__ = [
    "Hardware", "tile_elements", "ASCEND_910B", "SMALL",
    "Order", "Sequential", "Pairwise", "Lanes", "Blocked", "Kahan", "Shuffled", "parse_order",
    "reduce", "gamma", "OPS", "ORDER_NAMES", "VARIANCE_ALGORITHMS",
    "scalar_mul", "fma", "mul_add", "multiply_add", "SCALAR_MUL_CHOICES",
    "Table", "Magic", "Newton", "ExpPoly", "parse_algo", "rsqrt", "reciprocal", "divide", "sqrt",
    "exp", "tanh", "erf", "gelu", "seed_estimate", "seed_error_bound", "newton_recurrence",
    "steps_needed", "steps_table", "RSQRT_ALGOS", "RECIP_ALGOS", "DIV_ALGOS", "EXP_ALGOS",
    "TANH_ALGOS", "ERF_ALGOS", "GELU_ALGOS", "GELU_APPROXIMATE", "AtenCascade", "InductorLanes", "Tree", "parse_tree",
    "matmul", "MATMUL_ALGOS", "engine", "Ctx",
    "KernelSpec", "HANDWRITTEN", "CODEGEN", "INDUCTOR_CPU", "PROMOTIONS", "UNARY_OPS", "DEFAULT_FUSED_LIVE_BUFFERS",
]
