"""Matrix-unit presets: the published parameters of NVIDIA tensor cores as :class:`MatrixUnit`.

Every preset cites the file it comes from.  The source is the public MATLAB
toolbox of Khattak and Mikaitis, github.com/north-numerical-computing/MATLAB-tensor-core
(no licence file is published; only parameter values are taken, no code),
which accompanies "Accurate Models of NVIDIA Tensor Cores"
(arXiv:2512.07004): ``models/<GPU>TC.m`` sets ``fma`` (-> ``fma_size``),
``neab`` (-> ``align_bits``), ``frmode`` (-> ``final_rounding``),
``inter_pattern`` (-> ``interleave``) per input/output format, and
``models/tools/GEMM.m`` + ``models/tools/Generic_BFMA_TC.m`` (commit
109e412) define the algorithm :func:`numlab.kernels.mma.unit.mma` follows.  For
V100 and A100 the parameters agree with Fasi, Higham, Mikaitis and Pranesh,
"Numerical behavior of NVIDIA tensor cores", PeerJ CS 7:e330 (2021),
section 5 (no extra alignment bit on V100, one on A100; truncation;
round-to-nearest for binary16 output) and with the HPEC 2025 feature tests
(github.com/faiziktk/IEEE_HPEC2025_block_FMA_tests, README: A30 fp16 one
extra bit, FMA size 8, tf32 FMA size 4).

Evidence.  The repository's ``model_validation/`` holds GPU outputs (``d_*``)
and accumulators (``c_*``) but not the A and B inputs they came from (the
loader ``Validate_TC_models.m`` reads ``a_*``/``b_*`` files that are not
published), so no preset can be checked bit for bit against measured GPU
outputs from that repository.  Every preset therefore says ``evidence="parameters only"``;
tests/test_mma_model.py reproduces the published test vectors (Fasi et al.'s
suites for V100 and A100, the HPEC feature tests and the repository's
exceptional-case tests) with their documented outcomes.

Measured outputs do carry one input-free check: every H100 fp8 -> fp32
output of the preset has at most 14 significant bits (``result_bits``), while
the outputs the authors measured on the H100 (``model_validation/H100/E4M3``
and ``E5M2``, ``d_H100_fp32.txt``, K = 32, one block) have 18 to 24.  Those two
presets say so in their ``evidence`` (tests/test_mma_vectors.py).  The
``H100TC.m`` read (@07113e7) sets ``neab = -10`` for fp8; how the authors'
newer ``GEMM.m`` turns that into output bits is not in the published files.

The authors' own C model (``models/tools/C/``: ``block_fma_nv.c``,
``gemm_recur.c`` @96ad236; built outside numlab, it has no licence) is a
second, independent implementation of the NVIDIA models: on 199 generated
cases (tests/data/mma_cport/, tests/test_mma_cport.py) every preset it covers
(all but the interleaved B200 fp8 ones) gives its bits on all 80 outputs per
preset without subnormal inputs.  Where the C model leaves out steps of its
MATLAB model (fp32 block results for fp16 output and for fp8 with
``result_bits``), the match is for the preset with fp32 block results; each
preset's ``evidence`` says which.  On subnormal inputs the C model takes the
true exponent where these presets take ``max(e, emin)`` (as MATLAB's
``fpbits_IEEE2`` does): 9 of 529 outputs differ, and
``preset.replace(subnormal_anchor="true")`` reproduces all 9.  That agreement
is with a model, not with a GPU.

Measured words with inputs exist for B200 only: github.com/sf-tensor/tcgen05
(MIT) freezes 35 result words of ``tcgen05.mma`` on a B200 for inputs drawn
from seeded Python generators (``tcgen05_model/validation.py`` @6f19f22).
The five B200 presets with fp32 output reproduce all 35 bit for bit (10 are
NaN, 0x7FFFFFFF, which they set as ``nan_bits``).  Only 6 of them are nontrivial
sums, and those 6 also rule out the V100, A100/Ada/L40S tf32 and
H100/Ada/L40S fp8 presets.  That is far too little to call a preset
bit-accurate, and the evidence labels say so.

Not covered: AMD CDNA1-3 (``models/CDNA*.m``, ``MI*MC.m``) and the newer
NVIDIA parameters ``global_alignment``, ``late_partial_sum``, ``armode``,
``odd_even_grouping``, ``correct_rounding``: the code that interprets them
(a newer ``GEMM.m``) is not in the published snapshot read for this module,
so a preset would be a guess.
"""

from __future__ import annotations

from ...formats import get_format
from .unit import MatrixUnit

__all__ = ["UNIT_PRESETS", "GPUS", "preset", "preset_names"]

_REPO = "north-numerical-computing/MATLAB-tensor-core"
_EVIDENCE = ("parameters only: no published GPU outputs with their inputs; "
             "reproduces the published test vectors (tests/test_mma_model.py)")
_EVIDENCE_FEW = ("parameters only (and a few measured words, below): no GPU output sets with "
                 "their inputs beyond those; reproduces the published test vectors "
                 "(tests/test_mma_model.py)")


_CONTRADICTED = {
    f"H100/{f}/fp32": (
        "parameters only; contradicted by measured outputs: model_validation/H100/"
        f"{'E4M3' if f == 'fp8_e4m3' else 'E5M2'}/d_H100_fp32.txt @109e412 (mma.sync "
        "m16n8k32, K = 32) has 18-24 significant bits per output, this preset gives at "
        "most 14 (result_bits), so it matches none of them (tests/test_mma_vectors.py)")
    for f in ("fp8_e4m3", "fp8_e5m2")
}
"""Presets that published measurements rule out, with the evidence."""


_CPORT = ("the authors' C model (MATLAB-tensor-core models/tools/C, block_fma_nv.c + "
          "gemm_recur.c @96ad236) ")


def _cport_evidence(out_fmt: str, interleave: int, rbits: int | None) -> str:
    """What the cross-check against the authors' C model found for a preset."""
    if interleave != 1:
        return "; not checked against the authors' C model (it ignores inter_pattern)"
    if out_fmt == "fp32" and rbits is None:
        return ("; " + _CPORT + "gives the same bits on 80/80 outputs without subnormal inputs "
                "(tests/test_mma_cport.py; subnormal inputs: it anchors at true exponents)")
    return ("; " + _CPORT + "keeps block results in fp32 (unlike GEMM.m); this preset with fp32 block "
            "results (result_bits=None, one rounding to out_fmt at the end) gives its bits on "
            "80/80 outputs without subnormal inputs, as published 53-73/80 "
            "(tests/test_mma_cport.py)")


_MEASURED = {  # preset -> (words, NaN words, nontrivial finite sums), tests/test_mma_cport.py
    "B200/tf32/fp32": (8, 2, 1), "B200/bf16/fp32": (8, 2, 0), "B200/fp16/fp32": (7, 3, 1),
    "B200/fp8_e4m3/fp32": (5, 1, 2), "B200/fp8_e5m2/fp32": (7, 2, 2),
}
"""Presets checked against measured GPU words that come with their inputs."""


def _measured_evidence(key: str) -> str:
    if key not in _MEASURED:
        return ""
    n, nan, nontrivial = _MEASURED[key]
    return (f"; plus measured words: reproduces {n}/{n} measured B200 result words with their "
            "inputs (github.com/sf-tensor/tcgen05 tcgen05_model/validation.py @6f19f22, MIT, "
            f"tcgen05.mma on B200; {nontrivial} nontrivial sums, the rest edge cases (zeros, a "
            f"subnormal, infinities) and {nan} NaN, 0x7FFFFFFF, the preset's nan_bits; bit for "
            "bit; tests/test_mma_cport.py); far too few words to vouch for the model")


def _src(gpu_file: str, commit: str, note: str = "") -> str:
    s = f"{_REPO} models/{gpu_file} @{commit} (algorithm: models/tools/GEMM.m @109e412)"
    return s + (f"; {note}" if note else "")


# (gpu, in_fmt) -> (fma_size, align_bits, interleave, result_bits for fp32 output, source)
# final rounding: "rtz" with fp32 output, "rne" with fp16 output (every file: frmode).
_TABLE: dict[tuple[str, str], tuple[int, int, int, int | None, str]] = {}


def _add(gpu, ins, fma, neab, inter, rbits, src):
    for i in ins:
        _TABLE[(gpu, i)] = (fma, neab, inter, rbits, src)


_V100 = _src("V100TC.m", "109e412", "fma 4, neab 0, frmode rz (rne for fp16 output); "
             "Fasi et al. 2021 section 5")
_add("V100", ("fp16",), 4, 0, 1, None, _V100)
_A100 = _src("A100TC.m", "109e412", "fma 8 (tf32: 4), neab 1, frmode rz (rne for fp16 output)")
_add("A100", ("fp16", "bf16"), 8, 1, 1, None, _A100)
_add("A100", ("tf32",), 4, 1, 1, None, _A100)
_H100 = _src("H100TC.m", "07113e7", "fma 16 (tf32: 8; fp8: 32), neab 2 (fp8: -10), "
             "frmode rz (rne for fp16 output); fp8 with fp32 output keeps 23-10 fraction "
             "bits in block results (GEMM.m special case 2)")
_add("H100", ("fp16", "bf16"), 16, 2, 1, None, _H100)
_add("H100", ("tf32",), 8, 2, 1, None, _H100)
_add("H100", ("fp8_e4m3", "fp8_e5m2"), 32, -10, 1, 14, _H100)
_B200 = _src("B200TC.m", "109e412", "fma 16 (tf32: 4), neab 2, frmode rz (rne for fp16 "
             "output); fp8: two interleaved 16-element vectors (inter_pattern 1)")
_add("B200", ("fp16", "bf16"), 16, 2, 1, None, _B200)
_add("B200", ("tf32",), 4, 2, 1, None, _B200)
_add("B200", ("fp8_e4m3", "fp8_e5m2"), 16, 2, 2, None, _B200)
for _gpu, _file in (("Ada", "AdaTC.m"), ("L40S", "L40STC.m")):
    _s = _src(_file, "109e412", "fma 8 (tf32: 4; fp8: 16), neab 1 (fp8: -10), frmode rz "
              "(rne for fp16 output); fp8 with fp32 output keeps 13 fraction bits")
    _add(_gpu, ("fp16", "bf16"), 8, 1, 1, None, _s)
    _add(_gpu, ("tf32",), 4, 1, 1, None, _s)
    _add(_gpu, ("fp8_e4m3", "fp8_e5m2"), 16, -10, 1, 14, _s)

GPUS = ("V100", "A100", "H100", "B200", "Ada", "L40S")
"""GPUs with presets (Ada = the Ada RTX 1000 of the source)."""


def _out_formats(gpu: str, in_fmt: str) -> tuple[str, ...]:
    """Output formats the source allows for an input format."""
    if in_fmt in ("bf16", "tf32"):
        return ("fp32",)  # bf16/tf32 MMA accumulates in fp32 only
    if gpu == "L40S" and in_fmt == "fp16":
        return ("fp32",)  # L40STC.m: fp16 -> fp16 "not supported"
    return ("fp32", "fp16")


def _build() -> dict[str, MatrixUnit]:
    out = {}
    for gpu in GPUS:
        for (g, fin), (fma, neab, inter, rbits, src) in _TABLE.items():
            if g != gpu:
                continue
            for fout in _out_formats(gpu, fin):
                key = f"{gpu}/{fin}/{fout}"
                out[key] = MatrixUnit(
                    in_fmt=fin, out_fmt=fout, fma_size=fma, align_bits=neab,
                    final_rounding="rtz" if fout == "fp32" else "rne",
                    interleave=inter, result_bits=rbits if fout == "fp32" else None,
                    nan_bits=0x7FFFFFFF if key in _MEASURED else None,
                    name=key, source=src,
                    evidence=_CONTRADICTED.get(key, _EVIDENCE_FEW if key in _MEASURED else _EVIDENCE)
                    + _cport_evidence(fout, inter, rbits if fout == "fp32" else None)
                    + _measured_evidence(key))
    return out


UNIT_PRESETS: dict[str, MatrixUnit] = _build()
"""Every preset, keyed ``"GPU/in_fmt/out_fmt"`` (e.g. ``"H100/fp8_e4m3/fp32"``)."""


def preset_names() -> list[str]:
    """The keys of :data:`UNIT_PRESETS`."""
    return list(UNIT_PRESETS)


def preset(gpu: str, in_fmt: str = "fp16", out_fmt: str = "fp32") -> MatrixUnit:
    """The :class:`MatrixUnit` of ``gpu`` for one input/output format pair.

    ``gpu`` may also be a full key ``"GPU/in_fmt/out_fmt"``.  Format names
    accept numlab's aliases (``"e4m3"``, ``"float16"``...).  ValueError names
    the argument and lists the valid choices.
    """
    if isinstance(gpu, str) and "/" in gpu:
        parts = gpu.split("/")
        if len(parts) != 3:
            raise ValueError(f"gpu={gpu!r} is not a preset key; valid keys: {preset_names()}")
        gpu, in_fmt, out_fmt = parts
    match = {g.lower(): g for g in GPUS}
    if not isinstance(gpu, str) or gpu.lower() not in match:
        raise ValueError(f"gpu={gpu!r} is not a known GPU; valid choices: {list(GPUS)}")
    g = match[gpu.lower()]
    fin = get_format(in_fmt, "in_fmt").name
    fout = get_format(out_fmt, "out_fmt").name
    key = f"{g}/{fin}/{fout}"
    if key not in UNIT_PRESETS:
        valid = [k.split("/", 1)[1] for k in UNIT_PRESETS if k.startswith(g + "/")]
        raise ValueError(f"{g} has no preset for in_fmt={fin!r}, out_fmt={fout!r}; "
                         f"valid in_fmt/out_fmt pairs for {g}: {valid}")
    return UNIT_PRESETS[key]
