"""The symbolic :class:`Tensor` a traced function computes with: Python operators and
numpy's ufuncs (:data:`UFUNCS`, :data:`UFUNC_REDUCE`) and functions (:data:`FUNCTIONS`)
become operators of :mod:`numlab.ops`, recorded by the tensor's tracer."""

import math
import numbers

import numpy as np

from .. import ops as _ops


# ---------------------------------------------------------------------------
# tracing
# ---------------------------------------------------------------------------
def _is_bool(t) -> bool:
    return isinstance(t, Tensor) and t._tracer.kinds.get(t.name) == "bool"


def _add(a, b):
    """``a + b``; two truth values add as numpy's bools do (logical or):
    ``maximum`` of 0.0 / 1.0, exact."""
    if _is_bool(a) and _is_bool(b):
        return _mark_bool(_ops.maximum(a, b))
    return _ops.add(a, b)


def _mul(a, b):
    """``a * b``; of two truth values a logical and (0.0 / 1.0, still a truth value)."""
    r = _ops.mul(a, b)
    return _mark_bool(r) if _is_bool(a) and _is_bool(b) else r


def _mark_bool(t):
    t._tracer.kinds[t.name] = "bool"
    return t


def _sub(a, b):
    if _is_bool(a) and _is_bool(b):
        raise TypeError("subtracting two boolean tensors is not supported (numpy refuses it too); "
                        "use np.not_equal(a, b) or np.where")
    return _ops.sub(a, b)


def _square(x):
    return _ops.mul(x, x)


def _power(x, p):
    if isinstance(p, Tensor) or not isinstance(x, Tensor):
        raise TypeError("np.power on traced tensors takes a tensor base and a number exponent "
                        "(2, 1, 0.5, -0.5, -1)")
    return x.__pow__(p)


def _positive(x):
    return x


#: numpy ufunc name -> the catalogue function it traces to (method "__call__")
UFUNCS = {
    "add": _add, "subtract": _sub, "multiply": _mul, "divide": _ops.div,
    "negative": _ops.neg, "positive": _positive, "absolute": _ops.abs_, "fabs": _ops.abs_,
    "exp": _ops.exp, "log": _ops.log, "sqrt": _ops.sqrt, "tanh": _ops.tanh,
    "reciprocal": _ops.reciprocal, "square": _square, "power": _power,
    "maximum": _ops.maximum, "minimum": _ops.minimum, "matmul": _ops.matmul,
    "greater": _ops.gt, "greater_equal": _ops.ge, "less": _ops.lt, "less_equal": _ops.le,
    "equal": _ops.eq, "not_equal": _ops.ne,
}
#: ufunc name -> reduction for ``np.<ufunc>.reduce(x, axis, keepdims=...)``
UFUNC_REDUCE = {"add": _ops.sum_, "maximum": _ops.max_, "minimum": _ops.min_}


def _no_kwargs(fname, kwargs, allowed=()):
    bad = sorted(k for k, v in kwargs.items() if k not in allowed and v is not None
                 and not (k == "keepdims" and v is np._NoValue))
    if bad:
        raise TypeError(f"np.{fname} on traced tensors: argument(s) {bad} are not supported"
                        + (f"; supported: {list(allowed)}" if allowed else ""))


def _kw(kwargs, key, default):
    v = kwargs.get(key, default)
    return default if v is np._NoValue else v


def _np_reduce(op):
    def f(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
        _no_kwargs(op.__name__.rstrip("_"), {"dtype": dtype, "out": out, **kw})
        return op(a, axis, _kw({"k": keepdims}, "k", False))
    return f


def _np_var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    _no_kwargs("var", {"dtype": dtype, "out": out, **{k: v for k, v in kw.items() if k != "correction"}})
    corr = kw.get("correction", ddof)
    return _ops.var(a, axis, _kw({"k": keepdims}, "k", False), 0 if corr is np._NoValue else corr)


def _np_where(condition, *xy):
    if len(xy) != 2:
        raise TypeError("np.where on traced tensors needs three arguments where(cond, a, b) "
                        "(the one-argument form gives data-dependent shapes)")
    return _ops.where(condition, *xy)


def _np_reshape(a, shape=None, order="C", **kw):
    shape = kw.pop("newshape", shape)
    _no_kwargs("reshape", {"order": None if order == "C" else order, **kw})
    return _ops.reshape(a, shape)


def _np_transpose(a, axes=None):
    return _ops.transpose(a, axes)


def _np_concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_kwargs("concatenate", {"out": out, "dtype": dtype, "casting": casting})
    return _ops.concat(list(arrays), axis)


def _np_split(ary, indices_or_sections, axis=0):
    return _ops.split(ary, indices_or_sections, axis)


def _np_take(a, indices, axis=None, out=None, mode=None):
    _no_kwargs("take", {"out": out, "mode": mode})
    if axis is None:
        raise TypeError("np.take on traced tensors needs axis= (no flattening take)")
    return _ops.gather(a, indices, axis)


def _np_clip(a, a_min=None, a_max=None, out=None, **kw):
    _no_kwargs("clip", {"out": out, **{k: v for k, v in kw.items() if k not in ("min", "max")}})
    lo = kw.get("min", a_min)
    hi = kw.get("max", a_max)
    y = a if lo is None or lo is np._NoValue else _ops.maximum(a, lo)
    return y if hi is None or hi is np._NoValue else _ops.minimum(y, hi)


def _np_expand_dims(a, axis):
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    nd = a.ndim + len(axes)
    axes = sorted(int(x) % nd for x in axes)
    shape = list(a.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return _ops.reshape(a, tuple(shape))


def _np_squeeze(a, axis=None):
    if axis is None:
        axes = [i for i, d in enumerate(a.shape) if d == 1]
    else:
        axes = [int(x) % a.ndim for x in ((axis,) if isinstance(axis, numbers.Integral) else axis)]
        bad = [x for x in axes if a.shape[x] != 1]
        if bad:
            raise ValueError(f"np.squeeze: axis {bad} of {a.name!r} {a.shape} does not have size 1")
    return _ops.reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def _np_matmul(a, b, **kw):
    _no_kwargs("matmul", kw)
    return _ops.matmul(a, b)


#: numpy function name -> its tracing (``Tensor.__array_function__``)
FUNCTIONS = {
    "where": _np_where, "sum": _np_reduce(_ops.sum_), "mean": _np_reduce(_ops.mean),
    "max": _np_reduce(_ops.max_), "amax": _np_reduce(_ops.max_), "min": _np_reduce(_ops.min_),
    "amin": _np_reduce(_ops.min_), "var": _np_var, "reshape": _np_reshape, "transpose": _np_transpose,
    "concatenate": _np_concatenate, "split": _np_split, "broadcast_to": lambda a, shape, subok=False:
    _ops.broadcast_to(a, shape), "take": _np_take, "clip": _np_clip, "expand_dims": _np_expand_dims,
    "squeeze": _np_squeeze, "matmul": _np_matmul,
    "shape": lambda a: a.shape, "ndim": lambda a: a.ndim, "size": lambda a, axis=None:
    a.size if axis is None else a.shape[axis],
}


class Tensor:
    """A symbolic tensor while tracing: a name and a shape.

    Supports ``+ - * / @``, unary ``-``, ``abs``, ``x ** 2`` (as ``x * x``),
    Python numbers on either side (scalar ops, the float kept exactly),
    comparisons ``> >= < <= == !=`` (truth values, ``value_kind`` "bool";
    two of them add as numpy's bools do, as a logical or: ``maximum``),
    ``.sum/.mean/.max/.min/.var(axis, keepdims)``, ``.reshape``, ``.T``,
    ``.mT``, ``.transpose``, ``.broadcast_to``, ``.astype`` (cast), basic
    slicing ``x[..., :4]``, ``x[0]`` and :meth:`named`.

    numpy works on it: the ufuncs of :data:`UFUNCS` (``np.exp(x)``,
    ``np.maximum(x, 0.0)``, ``np.greater(x, 0)``, ``np.add.reduce``, ...)
    through ``__array_ufunc__`` and the functions of :data:`FUNCTIONS`
    (``np.where``, ``np.sum/mean/max/min/var`` with ``axis`` and
    ``keepdims``, ``np.reshape``, ``np.concatenate``, ``np.clip``, ...)
    through ``__array_function__``.  Numbers and numpy arrays next to a
    tensor become ``constant`` nodes (float64 values stored in the graph),
    except the scalar of ``+ - * /``, which stays the exact attribute of a
    scalar op.  Anything else raises TypeError naming the ufunc or function
    and the supported list.
    """

    __slots__ = ("name", "shape", "_tracer")
    __hash__ = object.__hash__  # identity: == builds a comparison node

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if method == "reduce" and name in UFUNC_REDUCE:
            (x,) = inputs
            _no_kwargs(f"{name}.reduce", kwargs, ("axis", "keepdims"))
            return UFUNC_REDUCE[name](x, kwargs.get("axis", 0), bool(kwargs.get("keepdims", False)))
        if method != "__call__" or name not in UFUNCS:
            what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
            raise TypeError(
                f"numpy ufunc {what} is not supported on traced tensors; supported ufuncs: "
                f"{sorted(UFUNCS)} (and np.{{{','.join(sorted(UFUNC_REDUCE))}}}.reduce); "
                "numlab.ops has the rest of the catalogue (sigmoid, erf, gelu, softmax, ...)")
        _no_kwargs(name, kwargs)
        return UFUNCS[name](*inputs)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"symbolic tensor {self.name!r} has no values while tracing: np.asarray/np.array "
                        "of it is not supported (use the tensor itself, numpy ufuncs and functions work on it)")

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        f = FUNCTIONS.get(name)
        if f is None:
            raise TypeError(f"numpy function np.{name} is not supported on traced tensors; supported "
                            f"functions: {sorted(FUNCTIONS)} and the ufuncs {sorted(UFUNCS)}")
        return f(*args, **kwargs)

    def __init__(self, name, shape, tracer):
        self.name = name
        self.shape = shape
        self._tracer = tracer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self.shape})"

    def named(self, name: str) -> "Tensor":
        """Give this node a user name (applied when tracing ends)."""
        self._tracer.rename(self, name)
        return self

    def __bool__(self):
        raise TypeError(f"symbolic tensor {self.name!r} has no truth value while tracing (data-dependent control flow)")

    # arithmetic
    def __add__(self, o):
        return _add(self, o)

    def __radd__(self, o):
        return _add(o, self)

    def __sub__(self, o):
        return _sub(self, o)

    def __rsub__(self, o):
        return _sub(o, self)

    def __mul__(self, o):
        return _mul(self, o)

    def __rmul__(self, o):
        return _mul(o, self)

    def __truediv__(self, o):
        return _ops.div(self, o)

    def __rtruediv__(self, o):
        return _ops.div(o, self)

    def __matmul__(self, o):
        return _ops.matmul(self, o)

    def __rmatmul__(self, o):
        return _ops.matmul(o, self)

    def __neg__(self):
        return _ops.neg(self)

    # comparisons: truth values (0.0 / 1.0 in the executors)
    def __gt__(self, o):
        return _ops.gt(self, o)

    def __ge__(self, o):
        return _ops.ge(self, o)

    def __lt__(self, o):
        return _ops.lt(self, o)

    def __le__(self, o):
        return _ops.le(self, o)

    def __eq__(self, o):
        return _ops.eq(self, o)

    def __ne__(self, o):
        return _ops.ne(self, o)

    def __abs__(self):
        return _ops.abs_(self)

    def __pow__(self, p):
        if p == 2:
            return _ops.mul(self, self)
        if p == 1:
            return self
        if p == 0.5:
            return _ops.sqrt(self)
        if p == -0.5:
            return _ops.rsqrt(self)
        if p == -1:
            return _ops.reciprocal(self)
        raise ValueError(f"x ** {p!r} is not supported; valid exponents: 2, 1, 0.5, -0.5, -1")

    # reductions
    def sum(self, axis=None, keepdims=False):
        return _ops.sum_(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops.max_(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops.min_(self, axis, keepdims)

    def var(self, axis=None, keepdims=False, correction=0):
        return _ops.var(self, axis, keepdims, correction)

    # data movement
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _ops.reshape(self, tuple(shape))

    def transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = perm[0]
        return _ops.transpose(self, tuple(perm) if perm else None)

    @property
    def T(self):
        return _ops.transpose(self, None)

    @property
    def mT(self):
        if self.ndim < 2:
            raise ValueError(f"{self.name!r}: .mT needs rank >= 2, shape is {self.shape}")
        perm = tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2)
        return _ops.transpose(self, perm)

    def broadcast_to(self, shape):
        return _ops.broadcast_to(self, shape)

    def astype(self, fmt):
        return _ops.cast(self, fmt)

    def __getitem__(self, key):
        """Basic indexing: ints, slices (positive steps), ``...`` and ``None``
        (a new axis); numpy's result shape.  A ``slice`` node, then a
        ``reshape`` node when axes are dropped or added."""
        if not isinstance(key, tuple):
            key = (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError(f"{self.name!r}: at most one ... in an index, got {key!r}")
        n_real = sum(k is not Ellipsis and k is not None for k in key)
        if n_real > self.ndim:
            raise IndexError(f"{self.name!r}: too many indices {key!r} for shape {self.shape}")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - n_real) + key[i + 1:]
        key = key + (slice(None),) * (self.ndim - sum(k is not None for k in key))
        begin, end, step, layout = [], [], [], []  # layout: ("keep", ax) | ("new",)
        ax = 0
        for k in key:
            if k is None:
                layout.append(("new",))
                continue
            d = self.shape[ax]
            if isinstance(k, slice):
                begin.append(k.start)
                end.append(k.stop)
                step.append(k.step)
                layout.append(("keep", ax))
            elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
                if not -d <= k < d:
                    raise IndexError(f"{self.name!r}: index {k} is out of range for axis {ax} of size {d}")
                k = int(k) % d
                begin.append(k)
                end.append(k + 1)
                step.append(1)
            else:
                raise TypeError(
                    f"{self.name!r}: index {k!r} is not supported; use ints, slices, ... and None "
                    "(use nl.ops.gather for integer arrays)"
                )
            ax += 1
        out = self
        if any(b not in (None, 0) for b in begin) or any(e is not None for e in end) or any(s not in (None, 1) for s in step):
            out = _ops._apply("slice", [self], {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)})
        shape = tuple(1 if e[0] == "new" else out.shape[e[1]] for e in layout)
        if shape != out.shape:
            out = _ops.reshape(out, shape)
        return out
