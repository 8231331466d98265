"""Generate tests/data/mma_cport/vectors.npz: inputs and the outputs of the authors' C model.

Usage (from the repository root)::

    python tests/data/mma_cport/generate.py /tmp/cport/cport_driver [out.npz]

The first argument is a compiled driver around the C port of the NVIDIA
tensor-core model of Khattak and Mikaitis
(github.com/north-numerical-computing/MATLAB-tensor-core, ``models/tools/C/``;
how it was built: README.md next to this file).  That repository has no
licence file, so none of its code is in numlab: this script only writes the
driver's input file, runs the binary and stores what it prints.

The driver's input record (all little-endian): int32 m, k, n, fma, neab;
char[4] frmode; char[16] informat; char[16] outformat; float64 A (m*k,
column-major), B (k*n, column-major), C (m*n, column-major).  Its output: D
as float64 (m*n, column-major) per record.

The model parameters per GPU and input format (``fma``, ``neab``, ``frmode``)
are retyped here from the MATLAB model files ``models/<GPU>TC.m`` (V100TC.m,
A100TC.m, B200TC.m, AdaTC.m, L40STC.m @109e412, H100TC.m @07113e7), not read
from numlab, so that a wrong preset parameter shows up as a mismatch.

Randomness: one numpy Generator per (preset, case kind), seeded with
``[SEED, preset index, kind index]``.  No numlab import: inputs are rounded
to their formats with numpy/ml_dtypes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

SEED = 20261201

# (gpu, in_fmt) -> (fma, neab), from models/<GPU>TC.m; frmode: "rz" with fp32
# output, "rne" with fp16 output (every file).
PORT_PARAMS = {
    ("V100", "fp16"): (4, 0),
    ("A100", "fp16"): (8, 1), ("A100", "bf16"): (8, 1), ("A100", "tf32"): (4, 1),
    ("H100", "fp16"): (16, 2), ("H100", "bf16"): (16, 2), ("H100", "tf32"): (8, 2),
    ("H100", "fp8_e4m3"): (32, -10), ("H100", "fp8_e5m2"): (32, -10),
    ("B200", "fp16"): (16, 2), ("B200", "bf16"): (16, 2), ("B200", "tf32"): (4, 2),
    ("Ada", "fp16"): (8, 1), ("Ada", "bf16"): (8, 1), ("Ada", "tf32"): (4, 1),
    ("Ada", "fp8_e4m3"): (16, -10), ("Ada", "fp8_e5m2"): (16, -10),
    ("L40S", "fp16"): (8, 1), ("L40S", "bf16"): (8, 1), ("L40S", "tf32"): (4, 1),
    ("L40S", "fp8_e4m3"): (16, -10), ("L40S", "fp8_e5m2"): (16, -10),
}
"""Not here: B200 fp8 (``inter_pattern = 1``): the C port reads ``inter_pattern``
but never uses it (``gemm_recur.c``, ``block_fma_nv.c``), so it does not model
that unit."""

CPFLOAT_NAME = {"fp16": "binary16", "bf16": "bfloat16", "tf32": "TensorFloat-32",
                "fp8_e4m3": "E4M3", "fp8_e5m2": "E5M2", "fp32": "binary32"}

# name -> (storage dtype of the bit pattern, numpy/ml_dtypes value dtype or None for tf32)
STORE = {"fp16": (np.uint16, np.float16), "bf16": (np.uint16, ml_dtypes.bfloat16),
         "fp8_e4m3": (np.uint8, ml_dtypes.float8_e4m3fn), "fp8_e5m2": (np.uint8, ml_dtypes.float8_e5m2),
         "tf32": (np.uint32, None), "fp32": (np.uint32, np.float32)}

# name -> (emin, emax) of the format (for the exponent ranges drawn)
RANGE = {"fp16": (-14, 15), "bf16": (-126, 127), "tf32": (-126, 127), "fp8_e4m3": (-6, 8),
         "fp8_e5m2": (-14, 15), "fp32": (-126, 127)}
PREC = {"fp16": 11, "bf16": 8, "tf32": 11, "fp8_e4m3": 4, "fp8_e5m2": 3, "fp32": 24}

KINDS = ("normal", "spread", "cancel", "subnormal", "zeros", "multiblock")
BLOCKS = {"normal": 2, "spread": 3, "cancel": 2, "subnormal": 2, "zeros": 2, "multiblock": 8}
M = N = 4


def out_formats(gpu: str, in_fmt: str) -> tuple[str, ...]:
    if in_fmt in ("bf16", "tf32") or (gpu == "L40S" and in_fmt == "fp16"):
        return ("fp32",)
    return ("fp32", "fp16")


def to_fmt(x: np.ndarray, name: str) -> np.ndarray:
    """float64 values of format ``name`` nearest to x (ties to even)."""
    x = np.asarray(x, dtype=np.float64)
    if name == "tf32":
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = (u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    return x.astype(STORE[name][1]).astype(np.float64)


def to_bits(v: np.ndarray, name: str) -> np.ndarray:
    """Bit patterns of float64 values of format ``name`` (checked exact)."""
    st, dt = STORE[name]
    y = v.astype(np.float32 if dt is None else dt)
    if not np.array_equal(y.astype(np.float64), v) or not np.array_equal(np.signbit(y), np.signbit(v)):
        raise ValueError(f"values are not {name} values")
    return y.view(st).copy()


def spread(rng, shape, lo, hi):
    """Values 2**e (1 + f) with e uniform in [lo, hi], random signs."""
    e = rng.integers(lo, hi + 1, size=shape)
    return rng.choice([-1.0, 1.0], size=shape) * (1 + rng.random(shape)) * np.exp2(e)


def make_case(rng, kind: str, in_fmt: str, out_fmt: str, fma: int):
    k = fma * BLOCKS[kind]
    emin_i, emax_i = RANGE[in_fmt]
    emin_o, _ = RANGE[out_fmt]
    # input exponents kept small enough that no partial sum overflows the output
    hi = 2 if out_fmt == "fp16" else min(emax_i - 1, 40)
    lo = max(emin_i, -40)
    if kind == "normal":
        a, b = rng.standard_normal((M, k)), rng.standard_normal((k, N))
        c = rng.standard_normal((M, N))
    elif kind in ("spread", "multiblock"):
        a, b = spread(rng, (M, k), lo, hi), spread(rng, (k, N), lo, hi)
        c = spread(rng, (M, N), lo, hi)
        if kind == "multiblock":
            a, b, c = rng.standard_normal((M, k)), spread(rng, (k, N), -4, 2), 8 * rng.standard_normal((M, N))
    elif kind == "cancel":
        a, b = rng.standard_normal((M, k)), rng.standard_normal((k, N))
        a, b = to_fmt(a, in_fmt), to_fmt(b, in_fmt)
        # pairs (x*y, -x*y') with y' one ulp away from y, and one small term
        a[:, 1::2] = -a[:, 0::2]
        ulp = np.exp2(np.floor(np.log2(np.abs(b[0::2]))) - (PREC[in_fmt] - 1))
        b[1::2] = b[0::2] + rng.choice([-1.0, 0.0, 1.0], size=b[0::2].shape) * ulp
        a[:, -1] *= 2.0 ** -8
        c = -to_fmt(a[:, :1] * b[:1, :], out_fmt)  # cancels the first product (to rounding)
    elif kind == "subnormal":
        tiny = 2.0 ** emin_i
        a = rng.random((M, k)) * tiny * rng.choice([-1.0, 1.0], size=(M, k))
        b = spread(rng, (k, N), emin_i, emin_i + 6)
        sub_b = rng.random((k, N)) < 0.5
        b[sub_b] = rng.random(sub_b.sum()) * tiny
        norm_a = rng.random((M, k)) < 0.25
        a[norm_a] = spread(rng, norm_a.sum(), emin_i, emin_i + 4)
        tiny_o = 2.0 ** emin_o
        c = rng.random((M, N)) * tiny_o * rng.choice([-1.0, 1.0], size=(M, N))
        c[0] = spread(rng, N, emin_o, emin_o + 3)
        if in_fmt in ("fp8_e4m3", "fp8_e5m2", "fp16") and out_fmt == "fp32":
            # products of subnormal inputs are far above fp32's subnormals: scale C to them
            c = spread(rng, (M, N), 2 * emin_i - 6, 2 * emin_i + 6)
    elif kind == "zeros":
        a, b = rng.standard_normal((M, k)), rng.standard_normal((k, N))
        a[rng.random((M, k)) < 0.5] = 0.0
        a[rng.random((M, k)) < 0.2] = -0.0
        b[rng.random((k, N)) < 0.3] = -0.0
        a[1] = 0.0
        b[:, 2] = -0.0
        c = rng.standard_normal((M, N))
        c[rng.random((M, N)) < 0.5] = 0.0
        c[0, :2] = -0.0
    else:
        raise AssertionError(kind)
    return to_fmt(a, in_fmt), to_fmt(b, in_fmt), to_fmt(c, out_fmt)


def build_cases():
    cases = []
    pi = 0
    for (gpu, in_fmt), (fma, neab) in PORT_PARAMS.items():
        for out_fmt in out_formats(gpu, in_fmt):
            key = f"{gpu}/{in_fmt}/{out_fmt}"
            frmode = "rz" if out_fmt == "fp32" else "rne"
            for ki, kind in enumerate(KINDS):
                rng = np.random.default_rng([SEED, pi, ki])
                a, b, c = make_case(rng, kind, in_fmt, out_fmt, fma)
                cases.append(dict(preset=key, kind=kind, gpu=gpu, in_fmt=in_fmt, out_fmt=out_fmt,
                                  fma=fma, neab=neab, frmode=frmode, a=a, b=b, c=c))
            pi += 1
    # the smallest case found where the anchor of a subnormal input decides a bit:
    # products 2**-15 (fp16 subnormal 2**-15 times 1) and 2**-38 (2**-24 times 2**-14)
    a = np.array([[2.0**-15, 2.0**-24, 0.0, 0.0]])
    b = np.array([[1.0], [2.0**-14], [0.0], [0.0]])
    cases.append(dict(preset="V100/fp16/fp32", kind="subnormal_min", gpu="V100", in_fmt="fp16",
                      out_fmt="fp32", fma=4, neab=0, frmode="rz", a=a, b=b, c=np.zeros((1, 1))))
    return cases


def write_records(cases, path: Path) -> None:
    with open(path, "wb") as f:
        for cs in cases:
            m, k = cs["a"].shape
            n = cs["b"].shape[1]
            f.write(np.array([m, k, n, cs["fma"], cs["neab"]], dtype="<i4").tobytes())
            f.write(cs["frmode"].encode().ljust(4, b"\0"))
            f.write(CPFLOAT_NAME[cs["in_fmt"]].encode().ljust(16, b"\0"))
            f.write(CPFLOAT_NAME[cs["out_fmt"]].encode().ljust(16, b"\0"))
            for x in (cs["a"], cs["b"], cs["c"]):
                f.write(np.asarray(x, dtype="<f8").ravel(order="F").tobytes())


def run_port(driver: str, cases) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "cases.bin", Path(tmp) / "d.bin"
        write_records(cases, src)
        subprocess.run([driver, str(src), str(dst)], check=True)
        raw = np.fromfile(dst, dtype="<f8")
    out, pos = [], 0
    for cs in cases:
        m, n = cs["a"].shape[0], cs["b"].shape[1]
        out.append(raw[pos:pos + m * n].reshape((m, n), order="F"))
        pos += m * n
    if pos != raw.size:
        raise RuntimeError(f"driver wrote {raw.size} values, expected {pos}")
    return out


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    driver = argv[1]
    out = Path(argv[2]) if len(argv) == 3 else Path(__file__).with_name("vectors.npz")
    cases = build_cases()
    ds = run_port(driver, cases)
    arrays, meta = {}, []
    for i, (cs, d) in enumerate(zip(cases, ds, strict=True)):
        if not np.isfinite(d).all():
            raise RuntimeError(f"case {i} ({cs['preset']}, {cs['kind']}): the port overflowed")
        arrays[f"a{i}"] = to_bits(cs["a"], cs["in_fmt"])
        arrays[f"b{i}"] = to_bits(cs["b"], cs["in_fmt"])
        arrays[f"c{i}"] = to_bits(cs["c"], cs["out_fmt"])
        arrays[f"d{i}"] = to_bits(d, cs["out_fmt"])
        meta.append({k: cs[k] for k in
                     ("preset", "kind", "gpu", "in_fmt", "out_fmt", "fma", "neab", "frmode")})
    arrays["meta"] = np.array(json.dumps({"seed": SEED, "cases": meta}))
    np.savez_compressed(out, **arrays)
    print(f"{len(cases)} cases, {sum(d.size for d in ds)} output elements -> {out} "
          f"({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv)
