"""Execution contracts: what every implementation of a graph under a mode may do.

A contract bound (:func:`numlab.bounds.contract_bound`) holds for *every*
implementation that honours the contract, not only for numlab's own run.  The
contract is stated once here, per kind of kernel, as a :class:`KernelClass`:

``promotion``
    ``"fp32_internal"`` (read S, compute in fp32, round the output to S),
    ``"native"`` (every primitive rounds to S, accumulators too) or
    ``"accumulator_only"`` (elementwise work in S, reductions in ``acc``).
    Inside a code-generated (fused) block computation is fp32 whatever this says.
``acc``
    Accumulator of reductions and matmuls.  Reductions may add their terms in
    **any** order (any summation tree), with or without FMA.
``rounding``
    Rounding mode of every result written (to S, or to the working format).
``libm_ulps``
    exp, log, tanh, sigmoid, erf are within this many ulps of the working
    format of the exact function at the (working-format) argument; gelu,
    silu, softplus and hardswish within this many ulps of ``|f(x)| + |x|``
    (they are products ``x g(x)``: a kernel that evaluates
    ``0.5 x (1 + tanh(.))`` loses relative accuracy where ``g`` is small).
``rsqrt``, ``divide``, ``sqrt``
    ``"ieee"`` (correctly rounded; rsqrt as ``1/sqrt`` with two roundings),
    ``"ulps(K)"`` (within K ulps, e.g. CUDA ``div.full.f32``: 2),
    ``"rel(E)"`` (relative error at most E, e.g. ``rsqrt.approx.f32``:
    ``2**-22.9``), or ``"newton(SEED,STEPS)"`` (a seed of relative accuracy
    SEED -- ``table<bits>``, ``magic`` or a number -- refined by STEPS
    Newton-Raphson steps in the working format; the step error recurrence is
    :func:`numlab.kernels.algorithms.newton_recurrence` plus ``8 u`` of
    rounding per step).
``scalar_fmt``
    Format a Python scalar of ``x * s``, ``x + s``, ... is held in: ``"fp32"``
    (a scalar register; PyTorch's opmath) or ``"storage"`` (materialised as a
    tensor of S, as a code generator's broadcast constant).
``variance``
    Variance algorithms allowed: ``"two_pass"`` (mean in any order, then the
    mean of squared deviations about it) and ``"welford"`` (Welford's
    update, elements in any permutation).  Chan's pairwise merge and the
    textbook ``E[x^2] - E[x]^2`` are not in any preset.
``matmul_inputs``
    A format matmul operands are rounded to before their products (``"tf32"``
    when TF32 is enabled), or None.
``mma``
    A matrix unit (:class:`numlab.kernels.mma.MatrixUnit`) every matmul runs on.

A :class:`Contract` has two classes: ``library`` (eager kernels, and the
library blocks a fused plan calls: matmuls, undecomposed composites) and
``codegen`` (the code generator's fused blocks).  Which nodes are rounded to S
comes from the mode and the fusion plan (``numlab.fusion.plan``): eager at
every operator, fused at the outputs of each block only, emulated casts where
eager rounds.

Presets (:data:`CONTRACT_PRESETS`) name real systems, each with its source;
``Contract.derived(kernels, library)`` (the default of ``contract=None``) is
the contract numlab's own KernelSpecs honour.  One parser
(:meth:`Contract.parse`): ``"NAME"`` or ``"NAME:field=value,..."`` where a
field name sets both classes and ``library.field`` / ``codegen.field`` one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace

from .formats import FP32, Format, get_format
from .kernels import algorithms as _alg
from .kernels import grammar as _grammar
from .kernels.spec import PROMOTIONS, KernelSpec, mode_specs

__all__ = ["KernelClass", "Contract", "CONTRACT_PRESETS", "ALGO_FORMS", "VARIANCE_CHOICES", "SCALAR_FORMATS",
           "algo_rel_error", "parse_contract"]

ALGO_FORMS = ("ieee", "ulps(<K>)", "rel(<E>)", "newton(<seed>,<steps>)")
VARIANCE_CHOICES = ("two_pass", "welford")
SCALAR_FORMATS = ("fp32", "storage")
CONTRACT_ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
_NEWTON_STEP_U = 8  # rounding of one Newton step in the working format, in units of u (generous)
#: the libm budget a KernelSpec's ``exp=exp_poly(d)`` needs: its largest error in fp32 ulps over
#: 2e6 arguments in [-87, 88] (d = 1..7: 9.0e5, 1.1e5, 9426, 661, 39.4, 2.94, 1.19), plus 25%
EXP_POLY_ULPS = {1: 1.2e6, 2: 1.4e5, 3: 12000.0, 4: 830.0, 5: 50.0, 6: 4.0, 7: 4.0}


def _check_algo(text, knob: str) -> str:
    t = str(text).strip().replace(" ", "")
    if re.fullmatch(r"ulps\([0-9.]+\)", t) and float(t[5:-1]) < 0.5:
        raise ValueError(f"{knob}={text!r}: K must be >= 0.5 (a correctly rounded result is within half an ulp)")
    if re.fullmatch(r"rel\([0-9.eE+\-*^]+\)", t):
        _number(t[4:-1], knob)
        return t
    if t == "ieee" or re.fullmatch(r"ulps\([0-9.]+\)", t):
        return t
    m = re.fullmatch(r"newton\(([^,]+),([0-9]+)\)", t)
    if m:
        _seed_rel(m.group(1), knob)
        return t
    raise ValueError(f"{knob}={text!r} is not valid; valid forms: {list(ALGO_FORMS)}")


def _number(text: str, knob: str) -> float:
    t = text.replace("^", "**")
    m = re.fullmatch(r"2\*\*(-?[0-9.]+)", t)
    try:
        return 2.0 ** float(m.group(1)) if m else float(t)
    except ValueError:
        raise ValueError(f"{knob}: {text!r} is not a number (write 1e-7 or 2^-22.9)") from None


def _seed_rel(seed: str, knob: str) -> float:
    if re.fullmatch(r"[0-9.eE+\-*^]+", seed):
        return _number(seed, knob)
    try:
        return _alg.seed_error_bound(seed, "rsqrt" if knob.endswith("rsqrt") else "reciprocal")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{knob}: seed {seed!r}: {exc}") from None


def algo_rel_error(text: str, u: float, knob: str = "rsqrt") -> float:
    """Relative error bound of an rsqrt / divide / sqrt class (:data:`ALGO_FORMS`)
    whose result is in a working format of unit roundoff ``u``; the result's
    own rounding is included."""
    t = _check_algo(text, knob)
    if t == "ieee":
        # rsqrt = 1/sqrt(x): two roundings; division and sqrt: one
        return (1 + u) ** 2 - 1 if knob.endswith("rsqrt") else u
    if t.startswith("ulps("):
        return float(t[5:-1]) * 2 * u  # one ulp <= 2u |f| (u = 2**-p)
    if t.startswith("rel("):
        return _number(t[4:-1], knob)
    seed, steps = re.fullmatch(r"newton\(([^,]+),([0-9]+)\)", t).groups()
    e = _seed_rel(seed, knob)
    func = "rsqrt" if knob.endswith("rsqrt") else "reciprocal"
    for _ in range(int(steps)):
        e = abs(_alg.newton_recurrence(e, func)) + 2 * abs(e) ** 3 + _NEWTON_STEP_U * u * (1 + e)
    if not knob.endswith("rsqrt") and knob.endswith("divide"):
        e = (1 + e) * (1 + u) - 1  # a / b = a * recip(b): one more rounding
    return e


@dataclass(frozen=True)
class KernelClass:
    """What one kind of kernel may do (module docstring); frozen, every field a knob."""

    promotion: str = "fp32_internal"
    acc: Format = FP32
    rounding: str = "rne"
    libm_ulps: float = 4.0
    rsqrt: str = "ieee"
    divide: str = "ieee"
    sqrt: str = "ieee"
    scalar_fmt: str = "fp32"
    variance: tuple = VARIANCE_CHOICES
    matmul_inputs: object = None
    mma: object = None

    def __post_init__(self):
        if self.promotion not in PROMOTIONS:
            raise ValueError(f"promotion={self.promotion!r} is not valid; valid choices: {list(PROMOTIONS)}")
        object.__setattr__(self, "acc", get_format(self.acc, "acc"))
        if self.rounding not in CONTRACT_ROUNDINGS:
            raise ValueError(f"rounding={self.rounding!r} is not valid; valid choices: {list(CONTRACT_ROUNDINGS)}")
        if isinstance(self.libm_ulps, bool) or not isinstance(self.libm_ulps, int | float) or not (
                0.5 <= self.libm_ulps < 1e6):
            raise ValueError(f"libm_ulps={self.libm_ulps!r} is not valid; it must be a number >= 0.5 (a correctly "
                             "rounded function is within half an ulp; no implementation meets less)")
        object.__setattr__(self, "libm_ulps", float(self.libm_ulps))
        for k in ("rsqrt", "divide", "sqrt"):
            object.__setattr__(self, k, _check_algo(getattr(self, k), k))
        if self.scalar_fmt not in SCALAR_FORMATS:
            raise ValueError(f"scalar_fmt={self.scalar_fmt!r} is not valid; valid choices: {list(SCALAR_FORMATS)}")
        var = (self.variance,) if isinstance(self.variance, str) else tuple(self.variance)
        bad = [v for v in var if v not in VARIANCE_CHOICES]
        if bad or not var:
            raise ValueError(f"variance={self.variance!r} is not valid; choose one or more of {list(VARIANCE_CHOICES)}")
        object.__setattr__(self, "variance", tuple(v for v in VARIANCE_CHOICES if v in var))
        if self.matmul_inputs is not None:
            object.__setattr__(self, "matmul_inputs", get_format(self.matmul_inputs, "matmul_inputs"))
        object.__setattr__(self, "mma", _grammar.parse_unit(self.mma, "mma"))

    # ------------------------------------------------------------ formats
    def working(self, S: Format, fused: bool) -> Format:
        """Format elementwise results are rounded to (fp32 inside a fused block or with
        fp32_internal, else S)."""
        if fused or self.promotion == "fp32_internal":
            return FP32 if S.p <= 24 else S
        return S

    def accumulator(self, S: Format, fused: bool) -> Format:
        """Accumulator format: S with native promotion outside a fused block, else ``acc``
        (never narrower than S)."""
        if not fused and self.promotion == "native":
            return S
        return self.acc if S.p <= self.acc.p else S

    def describe(self) -> str:
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "mma":
                v = _grammar.unit_string(v) if v is not None else None
            elif isinstance(v, Format):
                v = v.name
            elif isinstance(v, tuple):
                v = "+".join(v)
            if v is None:
                continue
            parts.append(f"{f.name}={v:g}" if isinstance(v, float) else f"{f.name}={v}")
        return ",".join(parts)

    @classmethod
    def of_spec(cls, spec: KernelSpec, **changes) -> "KernelClass":
        """The class a KernelSpec's kernels honour: its promotion, accumulator,
        rounding, rsqrt/division algorithms (a Newton spec's seed and steps),
        scalar unit (``broadcast`` holds the scalar in S) and matrix unit; any
        order, FMA or not, the default libm budget, both variance algorithms."""
        def algo(a, knob):
            if isinstance(a, _alg.Newton):
                return f"newton({a.seed},{a.steps})"
            s = str(a)
            if s == "exact":
                return "ieee"
            if s in ("sqrt_then_div", "recip_mul"):
                return "ulps(2)" if knob == "rsqrt" else "ulps(1.5)"  # two roundings: < 1.5 ulps
            raise ValueError(f"{knob}={s!r}: no contract class for this algorithm")
        ulps = 4.0
        if isinstance(spec.exp, _alg.ExpPoly):
            ulps = max(ulps, EXP_POLY_ULPS.get(spec.exp.degree, 4.0))
        kc = cls(promotion=spec.promotion, acc=spec.acc, rounding=spec.vector_rounding, libm_ulps=ulps,
                 rsqrt=algo(spec.rsqrt, "rsqrt"), divide=algo(spec.divide, "divide"),
                 scalar_fmt="storage" if spec.scalar_mul == "broadcast" else "fp32", mma=spec.mma)
        return replace(kc, **changes) if changes else kc


_CITE_TORCH_CPU = ("PyTorch eager (ATen CPU kernels compute fp16/bf16 ops in fp32 'opmath' and round the "
                   "result; scalars in fp32) and Inductor's C++ backend (fp32 inside a kernel, "
                   "-ffp-contract=off, 1/sqrt for rsqrt): aten/src/ATen/OpMathType.h, "
                   "torch/_inductor/codegen/cpp.py; libm within 4 ulps (Sleef u10, glibc)")
_CITE_TRITON = ("Inductor/Triton on CUDA: FMA contraction, div.full.f32 (2 ulp), rsqrt.approx.f32 "
                "(max relative error 2^-22.9), exp as ex2.approx.f32 (2^-22.5) of x*log2(e): 48 ulps "
                "(NVIDIA PTX ISA, 'Floating-Point Instructions'); eager CUDA kernels IEEE; the _tf32 preset "
                "rounds matmul operands to TF32 (torch.backends.cuda.matmul.allow_tf32)")
_CITE_ASCEND = ("Ascend graph autofusion (the autofusion precision note): fused blocks in fp32, rounded to "
                "fp16/bf16 only at their outputs; library kernels with a 12-bit rsqrt estimate and one "
                "Newton step, scalars in a scalar register (Muls); generated kernels broadcast "
                "constants as tensors of S")


@dataclass(frozen=True)
class Contract:
    """An execution contract: ``library`` and ``codegen`` kernel classes (module docstring)."""

    name: str = "custom"
    library: KernelClass = field(default_factory=KernelClass)
    codegen: KernelClass = field(default_factory=KernelClass)
    source: str = ""

    def __post_init__(self):
        for k in ("library", "codegen"):
            if not isinstance(getattr(self, k), KernelClass):
                raise TypeError(f"{k} must be a KernelClass, got {type(getattr(self, k)).__name__}")

    @classmethod
    def derived(cls, kernels=None, library=None) -> "Contract":
        """The contract numlab's own kernels honour: ``library`` from the library
        spec (default ``KernelSpec.handwritten()``), ``codegen`` from the code
        generator's (default ``KernelSpec.codegen()``)."""
        gen, lib = mode_specs("fused", kernels, library)
        return cls("derived", KernelClass.of_spec(lib), KernelClass.of_spec(gen),
                   f"derived from library={lib.name}, kernels={gen.name}")

    def header(self) -> str:
        """One line per class, for report headers."""
        return (f"contract {self.name}: library[{self.library.describe()}]; "
                f"codegen[{self.codegen.describe()}]" + (f" ({self.source})" if self.source else ""))

    @property
    def spec(self) -> str:
        """A contract string that parses back to this contract."""
        base = CONTRACT_PRESETS.get(self.name)
        items = []
        for part in ("library", "codegen"):
            mine = getattr(self, part)
            ref = getattr(base, part) if base is not None else KernelClass()
            for f in fields(KernelClass):
                a, b = getattr(mine, f.name), getattr(ref, f.name)
                if a != b:
                    v = a.name if isinstance(a, Format) else ("+".join(a) if isinstance(a, tuple) else a)
                    if f.name == "mma":
                        v = _grammar.unit_string(a)
                    items.append(f"{part}.{f.name}={v}")
        head = self.name if base is not None else "custom"
        return head + (":" + ",".join(items) if items else "")

    @classmethod
    def parse(cls, spec=None, *, kernels=None, library=None, arg: str = "contract") -> "Contract":
        """A Contract from a contract string (module docstring), a Contract, or
        None (:meth:`derived` from ``kernels`` / ``library``).  Errors name
        ``arg``, the field, the value and the choices."""
        if spec is None:
            return cls.derived(kernels, library)
        if isinstance(spec, Contract):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"{arg} must be a contract string or a Contract, got {type(spec).__name__}")
        head, _, rest = spec.strip().partition(":")
        head = head.strip()
        if head == "derived":
            base = cls.derived(kernels, library)
        elif head in CONTRACT_PRESETS:
            base = CONTRACT_PRESETS[head]
        elif head == "custom":
            base = cls()
        else:
            raise ValueError(f"{arg}={spec!r}: unknown contract {head!r}; valid: "
                             f"{['derived', 'custom', *sorted(CONTRACT_PRESETS)]}")
        lib, gen = {}, {}
        names = {f.name for f in fields(KernelClass)}
        for item in [s for s in _grammar_split(rest) if s.strip()]:
            key, eq, val = item.partition("=")
            key, val = key.strip(), val.strip()
            if not eq:
                raise ValueError(f"{arg}={spec!r}: {item!r} is not field=value")
            part, dot, fname = key.rpartition(".")
            if fname not in names or (dot and part not in ("library", "codegen")):
                raise ValueError(f"{arg}={spec!r}: unknown field {key!r}; valid: {sorted(names)} "
                                 "(optionally prefixed library. or codegen.)")
            value = _field_value(fname, val, arg)
            for target, p in ((lib, "library"), (gen, "codegen")):
                if not dot or part == p:
                    target[fname] = value
        if not (lib or gen):
            return base
        try:
            return replace(base, library=replace(base.library, **lib), codegen=replace(base.codegen, **gen))
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"{arg}={spec!r}: {exc}") from None


def _grammar_split(text: str) -> list:
    """Split on commas outside parentheses (``rsqrt=newton(table12,1)``)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def _field_value(name: str, val: str, arg: str):
    if name == "libm_ulps":
        try:
            return float(val)
        except ValueError:
            raise ValueError(f"{arg}: libm_ulps={val!r} is not a number") from None
    if name == "variance":
        return tuple(v for v in val.split("+") if v)
    if name in ("matmul_inputs", "mma"):
        return None if val in ("none", "None", "") else val
    return val


def parse_contract(spec=None, *, kernels=None, library=None, arg: str = "contract") -> Contract:
    """:meth:`Contract.parse` (the one parser of contract strings)."""
    return Contract.parse(spec, kernels=kernels, library=library, arg=arg)


_TORCH_CPU = KernelClass(promotion="fp32_internal", acc=FP32, libm_ulps=4.0, rsqrt="ieee", divide="ieee",
                         scalar_fmt="fp32")
# Triton's exp is ex2.approx.f32(x * log2(e)): the product's rounding moves 2**t by up to
# ln2 |x log2 e| 2**-24 relative, 44 ulps at |x| = 88 (where exp leaves fp32's range), plus
# ex2.approx's 2**-22.5: a 48-ulp libm budget covers every finite fp32 result
_TRITON_GEN = KernelClass(promotion="fp32_internal", acc=FP32, libm_ulps=48.0, rsqrt="rel(2^-22.9)",
                          divide="ulps(2)", scalar_fmt="fp32")
_ASCEND_LIB = KernelClass(promotion="fp32_internal", acc=FP32, libm_ulps=4.0, rsqrt="newton(table12,1)",
                          divide="ieee", scalar_fmt="fp32")
_ASCEND_GEN = KernelClass(promotion="fp32_internal", acc=FP32, libm_ulps=4.0, rsqrt="newton(table8,2)",
                          divide="ieee", scalar_fmt="storage")

#: named contracts of real systems (each with its source)
CONTRACT_PRESETS: dict[str, Contract] = {
    "torch_cpu": Contract("torch_cpu", _TORCH_CPU, _TORCH_CPU, _CITE_TORCH_CPU),
    "triton_cuda": Contract("triton_cuda", _TORCH_CPU, _TRITON_GEN, _CITE_TRITON),
    "triton_cuda_tf32": Contract("triton_cuda_tf32", replace(_TORCH_CPU, matmul_inputs="tf32"),
                                 replace(_TRITON_GEN, matmul_inputs="tf32"), _CITE_TRITON),
    "ascend_autofusion": Contract("ascend_autofusion", _ASCEND_LIB, _ASCEND_GEN, _CITE_ASCEND),
}
