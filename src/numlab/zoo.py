"""Ready-made graphs and seeded input generators.

Every model is a function of sizes (small defaults) returning a
:class:`numlab.graph.Graph`; :data:`MODELS` maps names to them.
:func:`make_inputs` draws inputs of a given *kind* with a seeded
``numpy.random.Generator`` (one stream per input, derived from the seed and
the input's name, so adding an input does not change the others).

Input roles (``Graph.role``) decide how an input is drawn; the *kind* applies
to activations (role ``data``):

==============  ============================================================
kind            data inputs
==============  ============================================================
normal          N(0, 1)
uniform         U(-1, 1)
shifted_mean    SHIFT + SPREAD * N(0, 1) (mean 32, std 0.25: |mean|/std = 128),
                the case where one-pass variance and fp16 storage cancel
near_overflow   N(0, 1) scaled so that the largest |value| of any node of the
                *decomposed* graph (float64 reference) is NEAR_OVERFLOW_FRACTION
                (0.5) of the storage format's max (fp16: 65504 -> 32752);
                node values stay finite in S, while running sums inside
                reductions (mean = sum / n) exceed them by up to n, so an
                accumulator kept in S overflows where an fp32 one does not
heavy_tailed    Student-t with HEAVY_TAIL_DF = 3 degrees of freedom
==============  ============================================================

Other roles, whatever the kind: ``weight`` N(0, 1/fan_in) (fan_in = first
axis, as Glorot/He-style initialisers); ``gamma`` 1 + 0.1 N(0, 1); ``beta``
(and 1-D biases) 0.1 N(0, 1); ``index`` uniform integers in range;
``mask`` 0/1 with probability 1/2.
"""

from __future__ import annotations

import importlib
import inspect
import math
import zlib

import numpy as np

from . import ops
from .formats import FP16, get_format
from .graph import Graph, decompose, evaluate, trace
from .graph import load_inputs as _load_inputs
from .rounding import round_to

__all__ = [
    "MODELS",
    "INPUT_KINDS",
    "make_inputs",
    "model_factory",
    "get_model",
    "load_inputs",
    "layernorm",
    "rmsnorm",
    "softmax",
    "log_softmax",
    "gelu_mlp",
    "attention_scores",
    "swiglu",
    "residual_rmsnorm",
    "transformer_block",
    "fp8_mlp",
]

INPUT_KINDS = ("normal", "uniform", "shifted_mean", "near_overflow", "heavy_tailed")
SHIFT = 32.0
SPREAD = 0.25
HEAVY_TAIL_DF = 3
NEAR_OVERFLOW_FRACTION = 0.5


def _pos(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{what} must be a positive int, got {v!r}")
    return v


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
def layernorm(batch: int = 8, hidden: int = 64, eps: float = 1e-5) -> Graph:
    """``y = layer_norm(x, gamma, beta)`` over the last axis."""
    _pos(batch, "batch"), _pos(hidden, "hidden")

    def layernorm(x, gamma, beta):
        return {"y": ops.layer_norm(x, gamma, beta, axis=-1, eps=eps)}

    return trace(layernorm, x=(batch, hidden), gamma=(hidden,), beta=(hidden,))


def rmsnorm(batch: int = 8, hidden: int = 64, eps: float = 1e-6) -> Graph:
    """``y = rms_norm(x, weight)`` over the last axis."""
    _pos(batch, "batch"), _pos(hidden, "hidden")

    def rmsnorm(x, weight):
        return {"y": ops.rms_norm(x, weight, axis=-1, eps=eps)}

    return trace(rmsnorm, x=(batch, hidden), weight=(hidden,)).with_roles(weight="gamma")


def softmax(batch: int = 8, n: int = 64) -> Graph:
    """``y = softmax(x, axis=-1)``."""
    _pos(batch, "batch"), _pos(n, "n")

    def softmax(x):
        return {"y": ops.softmax(x, axis=-1)}

    return trace(softmax, x=(batch, n))


def log_softmax(batch: int = 8, n: int = 64) -> Graph:
    """``y = log_softmax(x, axis=-1)``."""
    _pos(batch, "batch"), _pos(n, "n")

    def log_softmax(x):
        return {"y": ops.log_softmax(x, axis=-1)}

    return trace(log_softmax, x=(batch, n))


def gelu_mlp(batch: int = 8, d_in: int = 32, d_hidden: int = 64, approximate: str = "tanh",
             scale: float = 0.5) -> Graph:
    """``y = gelu(x @ w + b) * scale``: matmul -> add bias -> gelu -> mul
    (a scalar multiply, the case where ``muls`` and ``broadcast`` differ)."""
    _pos(batch, "batch"), _pos(d_in, "d_in"), _pos(d_hidden, "d_hidden")

    def gelu_mlp(x, w, b):
        return {"y": ops.gelu(x @ w + b, approximate=approximate) * scale}

    return trace(gelu_mlp, x=(batch, d_in), w=(d_in, d_hidden), b=(d_hidden,))


def attention_scores(batch: int = 1, heads: int = 2, seq: int = 16, head_dim: int = 16,
                     scale: float | None = None) -> Graph:
    """``p = softmax(q @ k^T * scale)`` with ``scale = 1/sqrt(head_dim)``."""
    for v, w in ((batch, "batch"), (heads, "heads"), (seq, "seq"), (head_dim, "head_dim")):
        _pos(v, w)
    s = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)

    def attention_scores(q, k):
        return {"p": ops.softmax((q @ k.mT) * s, axis=-1)}

    shape = (batch, heads, seq, head_dim)
    return trace(attention_scores, q=shape, k=shape)


def swiglu(batch: int = 8, d_model: int = 32, d_ff: int = 64) -> Graph:
    """``y = (silu(x @ w_gate) * (x @ w_up)) @ w_down``."""
    _pos(batch, "batch"), _pos(d_model, "d_model"), _pos(d_ff, "d_ff")

    def swiglu(x, w_gate, w_up, w_down):
        return {"y": (ops.silu(x @ w_gate) * (x @ w_up)) @ w_down}

    return trace(swiglu, x=(batch, d_model), w_gate=(d_model, d_ff), w_up=(d_model, d_ff),
                 w_down=(d_ff, d_model))


def residual_rmsnorm(batch: int = 8, hidden: int = 64, eps: float = 1e-6) -> Graph:
    """``h = x + residual; y = rms_norm(h, weight)``; outputs ``y`` and ``h``."""
    _pos(batch, "batch"), _pos(hidden, "hidden")

    def residual_rmsnorm(x, residual, weight):
        h = x + residual
        return {"y": ops.rms_norm(h, weight, axis=-1, eps=eps), "h": h}

    return trace(residual_rmsnorm, x=(batch, hidden), residual=(batch, hidden),
                 weight=(hidden,)).with_roles(weight="gamma")


def transformer_block(seq: int = 8, d_model: int = 32, heads: int = 2, d_ff: int = 64,
                      eps: float = 1e-5) -> Graph:
    """A small pre-norm block on ``x`` of shape (seq, d_model)::

        h = layer_norm(x, g1, b1); q, k, v = split(h @ w_qkv, 3)
        per head: p = softmax(q k^T / sqrt(d_head)); o = p v
        x1 = x + concat_heads(o) @ w_o
        y = x1 + gelu(rms_norm(x1, g2) @ w1 + c1) @ w2
    """
    for v, w in ((seq, "seq"), (d_model, "d_model"), (heads, "heads"), (d_ff, "d_ff")):
        _pos(v, w)
    if d_model % heads:
        raise ValueError(f"d_model={d_model} must be a multiple of heads={heads}")
    dh = d_model // heads
    s = 1.0 / math.sqrt(dh)

    def transformer_block(x, g1, b1, w_qkv, w_o, g2, w1, c1, w2):
        h = ops.layer_norm(x, g1, b1, axis=-1, eps=eps)
        q, k, v = ops.split(h @ w_qkv, 3, axis=-1)

        def heads_first(t):
            return t.reshape(seq, heads, dh).transpose(1, 0, 2)

        q, k, v = heads_first(q), heads_first(k), heads_first(v)
        p = ops.softmax((q @ k.mT) * s, axis=-1)
        o = (p @ v).transpose(1, 0, 2).reshape(seq, d_model)
        x1 = x + o @ w_o
        f = ops.gelu(ops.rms_norm(x1, g2, axis=-1, eps=eps) @ w1 + c1, approximate="tanh")
        return {"y": x1 + f @ w2}

    return trace(
        transformer_block, x=(seq, d_model), g1=(d_model,), b1=(d_model,),
        w_qkv=(d_model, 3 * d_model), w_o=(d_model, d_model), g2=(d_model,),
        w1=(d_model, d_ff), c1=(d_ff,), w2=(d_ff, d_model),
    )


def fp8_mlp(batch: int = 8, d_model: int = 128, d_ff: int = 256, act_fmt: str = "deepseek_1x128",
            w_fmt: str = "deepseek_128x128") -> Graph:
    """An MLP block in DeepSeek-V3's fine-grained fp8 (e4m3 elements, fp32
    scales on 1x128 activation tiles and 128x128 weight blocks), with a
    residual::

        h  = scaled_matmul(quantize(x), block_scale(x), quantize(w1), block_scale(w1)) + b1
        a  = gelu(h)                                   # fused: a stays fp32 into the next cast
        ad = dequantize(quantize(a), block_scale(a))   # fp8 activations, dequantised
        y  = x + ad @ w2

    Eager writes every node to S (h, a, ad rounded to S), except the
    elements, written in e4m3, and the scales, kept in fp32 (``OpInfo.stored_fmt``,
    as DeepSeek-V3's ``act_quant`` returns them); fused keeps
    ``h + b1 -> gelu -> quantize/block_scale -> dequantize`` in fp32 up to
    the block edge (the matmuls are library calls).
    ``d_model`` and ``d_ff`` must be multiples of 128 (the blocks).
    """
    for v, w in ((batch, "batch"), (d_model, "d_model"), (d_ff, "d_ff")):
        _pos(v, w)

    def fp8_mlp(x, w1, b1, w2):
        h = ops.scaled_matmul(ops.quantize(x, act_fmt), ops.block_scale(x, act_fmt),
                              ops.quantize(w1, w_fmt), ops.block_scale(w1, w_fmt), act_fmt, w_fmt) + b1
        a = ops.gelu(h, approximate="tanh")
        ad = ops.fake_quantize(a, act_fmt)
        return {"y": x + ad @ w2}

    return trace(fp8_mlp, x=(batch, d_model), w1=(d_model, d_ff), b1=(d_ff,), w2=(d_ff, d_model))


MODELS = {
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "softmax": softmax,
    "log_softmax": log_softmax,
    "gelu_mlp": gelu_mlp,
    "attention_scores": attention_scores,
    "swiglu": swiglu,
    "residual_rmsnorm": residual_rmsnorm,
    "transformer_block": transformer_block,
    "fp8_mlp": fp8_mlp,
}


def model_factory(name: str, arg: str = "model"):
    """The graph factory named by ``name``: a :data:`MODELS` name, or
    ``"module:function"``, a function importable as ``module.function``
    (``module`` may be dotted) that takes the model's sizes as keyword
    arguments and returns a :class:`~numlab.graph.Graph`, exactly like the
    zoo's own factories.  ``arg`` is the name the errors use (the CLI passes
    ``"MODEL"``).  ValueError lists the valid models."""
    if not isinstance(name, str):
        raise TypeError(f"{arg} must be a model name or 'module:function', got {type(name).__name__}")
    if name in MODELS:
        return MODELS[name]
    mod_name, sep, fn_name = name.partition(":")
    if not sep:
        raise ValueError(f"unknown {arg} {name!r}; valid models: {sorted(MODELS)}, "
                         "or 'module:function' (a function of sizes returning a Graph)")
    if not mod_name or not fn_name:
        raise ValueError(f"{arg} {name!r} is not 'module:function' (both parts are needed)")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"{arg} {name!r}: cannot import module {mod_name!r} ({exc})") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ValueError(f"{arg} {name!r}: module {mod_name!r} has no function {fn_name!r}")
    return fn


def get_model(name: str, *, arg: str = "model", **sizes) -> Graph:
    """``model_factory(name)(**sizes)``: a zoo model or a ``module:function``
    (see :func:`model_factory`).  ValueError listing the models, or the
    model's size arguments and their defaults when one is unknown; TypeError
    when a ``module:function`` does not return a Graph."""
    factory = model_factory(name, arg)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    bad = [k for k in sizes if k not in params]
    if bad and not takes_any:
        valid = ", ".join(f"{k}={p.default!r}" if p.default is not inspect.Parameter.empty else k
                          for k, p in params.items())
        raise ValueError(f"model {name!r} has no size argument {bad}; valid (with defaults): {valid}")
    g = factory(**sizes)
    if not isinstance(g, Graph):
        raise TypeError(f"{arg} {name!r} returned {type(g).__name__}, not a numlab Graph "
                        "(build it with numlab.graph.trace)")
    return g


def load_inputs(graph: Graph, path, arg: str = "inputs") -> dict:
    """Inputs of ``graph`` read from ``path`` (a ``.npz`` file, a directory of
    ``NAME.npy``, or a mapping): :func:`numlab.graph.load_inputs`, the one
    reader, with the zoo's argument order.  Names and shapes are checked
    against ``graph.inputs`` (ValueError naming ``arg``, the input and what
    was expected); arrays come back in the graph's input order with their
    dtypes unchanged (the run rounds them to its storage format)."""
    return _load_inputs(path, graph, option=arg)


def parse_sizes(items, option: str = "--size") -> dict:
    """Model sizes from command-line ``NAME=VALUE`` strings.

    ``items`` is one string or a list of them, each holding one or more
    comma-separated pairs (``["hidden=256", "batch=4,eps=1e-3"]``).  A value
    is an int if it parses as one, else a float, else the string
    (``approximate=erf``); the model factory validates it
    (:func:`get_model`).  ValueError names ``option`` and the bad item.
    """
    if items is None:
        return {}
    if isinstance(items, str):
        items = [items]
    out = {}
    for item in items:
        for part in str(item).split(","):
            k, sep, v = part.partition("=")
            if not sep or not k.strip():
                raise ValueError(
                    f"{option} {part!r} is not NAME=VALUE (e.g. {option} batch=4,hidden=64)"
                )
            v = v.strip()
            for conv in (int, float):
                try:
                    out[k.strip()] = conv(v)
                    break
                except ValueError:
                    continue
            else:
                out[k.strip()] = v
    return out


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------
def _rng(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _draw_data(rng, shape, kind):
    if kind == "uniform":
        return rng.uniform(-1.0, 1.0, shape)
    if kind == "shifted_mean":
        return SHIFT + SPREAD * rng.standard_normal(shape)
    if kind == "heavy_tailed":
        return rng.standard_t(HEAVY_TAIL_DF, shape)
    return rng.standard_normal(shape)  # normal, and near_overflow before scaling


def _index_range(graph: Graph, name: str) -> int:
    for n in graph.consumers(name):
        if n.op == "gather" and n.inputs.index(name) == 1:
            return graph.shape(n.inputs[0])[n.attrs["axis"]]
    return 1


def make_inputs(graph, kind: str = "normal", seed: int = 0, fmt=None) -> dict:
    """Seeded inputs for ``graph`` (a Graph or a name of :data:`MODELS`).

    Parameters
    ----------
    kind : {"normal", "uniform", "shifted_mean", "near_overflow", "heavy_tailed"}
        Distribution of the data inputs (see the module docstring).
    seed : int
        Non-negative; the same seed gives the same arrays in any process.
    fmt : Format or str, optional
        Round the values to this format (RNE) before returning; for
        ``near_overflow`` also the format whose max is approached
        (default fp16).

    Returns
    -------
    dict[str, float64 ndarray]
        One array per graph input, in the graph's input order.
    """
    if isinstance(graph, str):
        graph = get_model(graph)
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a Graph or a model name, got {type(graph).__name__}")
    if kind not in INPUT_KINDS:
        raise ValueError(f"kind={kind!r} is not valid; choose one of {INPUT_KINDS}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative int")
    fmt = None if fmt is None else get_format(fmt, "fmt")
    out = {}
    for name, shape in graph.inputs.items():
        rng = _rng(int(seed), name)
        role = graph.role(name)
        if role == "weight":
            fan_in = shape[0] if shape else 1
            a = rng.standard_normal(shape) / math.sqrt(max(fan_in, 1))
        elif role == "gamma":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif role == "beta":
            a = 0.1 * rng.standard_normal(shape)
        elif role == "index":
            a = rng.integers(0, _index_range(graph, name), shape).astype(np.float64)
        elif role == "mask":
            a = (rng.random(shape) < 0.5).astype(np.float64)
        else:
            a = _draw_data(rng, shape, kind)
        out[name] = np.asarray(a, dtype=np.float64)
    if kind == "near_overflow":
        _scale_near_overflow(graph, out, fmt or FP16)
    if fmt is not None:
        out = {k: np.asarray(round_to(v, fmt), dtype=np.float64) for k, v in out.items()}
    return out


def _scale_near_overflow(graph: Graph, inputs: dict, fmt) -> None:
    """Scale the data inputs by one factor c so that the largest |value| over
    all inputs and nodes of the decomposed graph (float64 reference) is at
    most NEAR_OVERFLOW_FRACTION * fmt.max, with c within a factor 2**(2**-24)
    of the largest such c.  Bisection on log2 c (a non-finite node value
    counts as too large), assuming the peak grows with c."""
    data = [k for k in graph.inputs if graph.role(k) == "data"]
    if not data:
        return
    target = NEAR_OVERFLOW_FRACTION * fmt.max
    g = decompose(graph)

    def peak(c):
        scaled = {k: (v * c if k in data else v) for k, v in inputs.items()}
        with np.errstate(all="ignore"):
            vals = evaluate(g, scaled, all_values=True)
        m = 0.0
        for v in vals.values():
            if v.size:
                m = max(m, float(np.max(np.abs(v))))  # NaN/inf -> not <= target
        return m if math.isfinite(m) else math.inf

    # peaks that grow like c**k, 1 <= k <= 3, put log2 c between L/3 and L;
    # widen that bracket in steps of 4 (a peak with a floor grows later)
    p1 = peak(1.0)
    L = math.log2(target / p1) if 0 < p1 < math.inf else 0.0
    lo, hi = min(L, L / 3) - 1.0, max(L, L / 3) + 1.0
    while hi < 200 and peak(2.0**hi) <= target:
        lo, hi = hi, hi + 4.0
    while lo > -200 and peak(2.0**lo) > target:
        lo, hi = lo - 4.0, lo
    if peak(2.0**lo) > target:  # even c = 2**-200 is too large: no admissible c
        hi = lo
    while hi - lo > 2.0**-24:  # c within a factor 2**(2**-24) of the largest admissible
        mid = 0.5 * (lo + hi)
        if peak(2.0**mid) <= target:
            lo = mid
        else:
            hi = mid
    c = 2.0**lo
    for k in data:
        inputs[k] = inputs[k] * c
