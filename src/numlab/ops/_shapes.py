"""Shape rules of the operators: numpy broadcasting, axis and attribute
normalisation, and each operator's ``infer(shapes, attrs) -> (attrs, shape)``."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..formats import get_format
from ..kernels import engine as E
from ._refs import ConstValue


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """numpy broadcasting of shapes; ValueError naming every shape."""
    shapes = [tuple(s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        dims = {s[i] for s in shapes if len(s) >= -i}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(
                f"shapes {' and '.join(map(str, shapes))} do not broadcast "
                f"(axis {i}: sizes {sorted(dims)})"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {v!r} ({type(v).__name__})")
    return int(v)


def _axis1(axis, ndim, what="axis"):
    a = _int(axis, what)
    if not -ndim <= a < ndim:
        raise ValueError(f"{what}={a} is out of range for rank {ndim} (valid: {-ndim}..{ndim - 1})")
    return a % ndim


def _axes(axis, ndim, what="axis"):
    """None -> all axes; int or sequence -> sorted tuple of distinct axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, numbers.Integral) and not isinstance(axis, bool):
        return (_axis1(axis, ndim, what),)
    if not isinstance(axis, (tuple, list)):
        raise TypeError(f"{what} must be None, an int or a tuple of ints, got {axis!r}")
    out = tuple(sorted(_axis1(a, ndim, what) for a in axis))
    if len(set(out)) != len(out):
        raise ValueError(f"{what}={tuple(axis)} repeats an axis (rank {ndim})")
    return out


def _shape_tuple(shape, what="shape"):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{what} must be a tuple of ints, got {shape!r}")
    return tuple(_int(d, f"{what} entry") for d in shape)


def _float(v, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {v!r} ({type(v).__name__})")
    return float(v)


def _reduced(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_same(shapes, attrs):
    return attrs, shapes[0]


def _infer_bcast(shapes, attrs):
    return attrs, broadcast_shapes(*shapes)


#: values of gelu's ``approximate`` (torch's vocabulary)
GELU_APPROXIMATE = E.GELU_APPROXIMATE


def _infer_gelu(shapes, attrs):
    if attrs["approximate"] not in GELU_APPROXIMATE:
        raise ValueError(f"approximate={attrs['approximate']!r} is not valid; valid choices: "
                         f"{list(GELU_APPROXIMATE)}")
    return attrs, shapes[0]


def _infer_cast(shapes, attrs):
    to = attrs["to"]
    try:
        attrs["to"] = get_format(to).name
    except (ValueError, TypeError) as exc:
        raise ValueError(f"to={to!r}: {exc}") from None
    return attrs, shapes[0]


def _infer_scalar(shapes, attrs):
    attrs["scalar"] = _float(attrs["scalar"], "scalar")
    return attrs, shapes[0]


def _infer_alpha(shapes, attrs):
    attrs["alpha"] = _float(attrs["alpha"], "alpha")
    return attrs, broadcast_shapes(*shapes)


def _infer_softplus(shapes, attrs):
    attrs["beta"] = _float(attrs["beta"], "beta")
    attrs["threshold"] = _float(attrs["threshold"], "threshold")
    if not attrs["beta"] > 0:
        raise ValueError(f"beta={attrs['beta']!r} is not valid; it must be > 0")
    return attrs, shapes[0]


def _infer_constant(shapes, attrs):
    v = attrs["value"]
    attrs["value"] = v if isinstance(v, ConstValue) else ConstValue(v)
    return attrs, attrs["value"].shape


def _infer_reduce(shapes, attrs):
    (shape,) = shapes
    axes = _axes(attrs["axis"], len(shape))
    keep = attrs["keepdims"]
    if not isinstance(keep, (bool, np.bool_)):
        raise TypeError(f"keepdims must be a bool, got {keep!r}")
    attrs["axis"], attrs["keepdims"] = axes, bool(keep)
    if "correction" in attrs:
        attrs["correction"] = _int(attrs["correction"], "correction")
        if attrs["correction"] < 0:
            raise ValueError(f"correction={attrs['correction']} must be >= 0")
    return attrs, _reduced(shape, axes, keep)


def _infer_reshape(shapes, attrs):
    (shape,) = shapes
    new = list(_shape_tuple(attrs["shape"]))
    size = math.prod(shape)
    if new.count(-1) > 1:
        raise ValueError(f"shape={tuple(new)} has more than one -1")
    if any(d < -1 for d in new):
        raise ValueError(f"shape={tuple(new)} has a negative size")
    if -1 in new:
        rest = math.prod(d for d in new if d != -1)
        if rest == 0 or size % rest:
            raise ValueError(f"cannot reshape {shape} (size {size}) to {tuple(new)}")
        new[new.index(-1)] = size // rest
    if math.prod(new) != size:
        raise ValueError(f"cannot reshape {shape} (size {size}) to {tuple(new)} (size {math.prod(new)})")
    attrs["shape"] = tuple(new)
    return attrs, tuple(new)


def _infer_transpose(shapes, attrs):
    (shape,) = shapes
    perm = attrs["perm"]
    perm = tuple(reversed(range(len(shape)))) if perm is None else _shape_tuple(perm, "perm")
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"perm={perm} is not a permutation of {tuple(range(len(shape)))} (input shape {shape})")
    attrs["perm"] = perm
    return attrs, tuple(shape[p] for p in perm)


def _infer_slice(shapes, attrs):
    (shape,) = shapes
    n = len(shape)
    parts = {}
    for k, default in (("begin", 0), ("end", None), ("step", 1)):
        v = attrs[k]
        v = (default,) * n if v is None else v
        if not isinstance(v, (tuple, list)) or len(v) != n:
            raise ValueError(f"{k}={v!r} needs a tuple of {n} entries for input shape {shape}")
        parts[k] = [None if e is None else _int(e, f"{k} entry") for e in v]
    nb, ne, ns, out = [], [], [], []
    for i, d in enumerate(shape):
        b, e, s = parts["begin"][i], parts["end"][i], parts["step"][i]
        s = 1 if s is None else s
        if s <= 0:
            raise ValueError(f"step={s} on axis {i} is not valid; slices need a positive step")
        b2, e2, _ = slice(b, e, s).indices(d)
        e2 = max(e2, b2)
        nb.append(b2)
        ne.append(e2)
        ns.append(s)
        out.append(len(range(b2, e2, s)))
    attrs.update(begin=tuple(nb), end=tuple(ne), step=tuple(ns))
    return attrs, tuple(out)


def _infer_concat(shapes, attrs):
    first = shapes[0]
    ax = _axis1(attrs["axis"], len(first))
    for i, s in enumerate(shapes):
        if len(s) != len(first) or any(a != b for k, (a, b) in enumerate(zip(s, first, strict=True)) if k != ax):
            raise ValueError(f"input {i} has shape {s}, which does not match {first} outside axis {ax} (all shapes {list(shapes)})")
    attrs["axis"] = ax
    return attrs, tuple(sum(s[ax] for s in shapes) if k == ax else d for k, d in enumerate(first))


def _infer_split(shapes, attrs):
    (shape,) = shapes
    ax = _axis1(attrs["axis"], len(shape))
    sizes = _shape_tuple(attrs["sizes"], "sizes")
    if any(s < 0 for s in sizes) or sum(sizes) != shape[ax]:
        raise ValueError(f"sizes={sizes} must be non-negative and sum to {shape[ax]} (axis {ax} of {shape})")
    idx = _int(attrs["index"], "index")
    if not 0 <= idx < len(sizes):
        raise ValueError(f"index={idx} is out of range for {len(sizes)} pieces (valid: 0..{len(sizes) - 1})")
    attrs.update(axis=ax, sizes=sizes, index=idx)
    return attrs, tuple(sizes[idx] if k == ax else d for k, d in enumerate(shape))


def _infer_broadcast(shapes, attrs):
    (shape,) = shapes
    target = _shape_tuple(attrs["shape"])
    try:
        ok = broadcast_shapes(shape, target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"cannot broadcast shape {shape} to {target}")
    attrs["shape"] = target
    return attrs, target


def _infer_gather(shapes, attrs):
    shape = shapes[0]
    ax = _axis1(attrs["axis"], len(shape))
    idx = attrs["indices"]
    if len(shapes) == 2:
        if idx is not None:
            raise ValueError("give the indices either as the second input or as attribute 'indices', not both")
        ishape = shapes[1]
    else:
        if idx is None:
            raise ValueError("gather needs indices: a second input or attribute 'indices'")
        arr = np.asarray(idx)
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        n = shape[ax]
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise ValueError(f"indices out of range for axis {ax} of size {n} (valid: {-n}..{n - 1}); got min {arr.min()}, max {arr.max()}")
        arr = arr % max(n, 1)
        attrs["indices"] = arr.tolist() if arr.ndim else int(arr)
        ishape = arr.shape
    attrs["axis"] = ax
    return attrs, tuple(shape[:ax]) + tuple(ishape) + tuple(shape[ax + 1:])


def _infer_matmul(shapes, attrs):
    a, b = shapes
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"matmul needs inputs of rank >= 1, got shapes {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {a} @ {b} ({a2[-1]} != {b2[-2]})")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return attrs, out


def _infer_softmax(shapes, attrs):
    (shape,) = shapes
    attrs["axis"] = _axis1(attrs["axis"], len(shape))
    if shape[attrs["axis"]] == 0:
        raise ValueError(f"softmax over an empty axis (shape {shape})")
    return attrs, shape


def _infer_norm(shapes, attrs):
    x = shapes[0]
    axes = _axes(attrs["axis"], len(x))
    attrs["axis"] = axes
    attrs["eps"] = _float(attrs["eps"], "eps")
    if attrs["eps"] < 0:
        raise ValueError(f"eps={attrs['eps']} must be >= 0")
    for name, s in zip(("weight/gamma", "beta"), shapes[1:], strict=False):
        try:
            ok = broadcast_shapes(x, s) == x
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} of shape {s} does not broadcast to the input shape {x}")
    return attrs, x
