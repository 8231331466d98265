"""The faithfulness checks under every ATen capability this machine can run.

PyTorch picks its kernels in the running process: ATen by
``torch.backends.cpu.get_cpu_capability()`` (lowered by ``ATEN_CPU_CAPABILITY``),
Inductor by ``pick_vec_isa()`` (follows it), oneDNN (eager ``F.gelu``) by the CPU
and ``ONEDNN_MAX_CPU_ISA`` (it ignores ``ATEN_CPU_CAPABILITY``; measured).  Each
capability runs in one subprocess with its own ``TORCHINDUCTOR_CACHE_DIR``
(Inductor's FX graph cache key does not include ``ATEN_CPU_CAPABILITY``, so a
shared cache would hand one capability's kernels to another):

* ``avx2``: ``ATEN_CPU_CAPABILITY=avx2`` + ``ONEDNN_MAX_CPU_ISA=AVX2`` -- what an
  AVX2-only CPU (e.g. AMD Zen 3) dispatches; eager and compiled.
* ``default``: ATen's scalar build; eager and compiled (Inductor has no vector ISA
  there and generates scalar C++: sequential fp32 sums from +0, glibc's
  ``expf``/``tanhf``/``erff``, all modelled bit for bit).

The subprocess reports, per case, the path the presets detected and the bitwise
share against real torch, or the ``NotModelled`` message; every case is 100% bitwise
or refused, and the refused ones are exactly those :func:`_unmodelled` lists.  A
capability the CPU cannot run is skipped with the reason printed
(``tests/test_torch_machines.py`` simulates oneDNN's ISAs as well).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

try:  # POSIX: a lock so that pytest-xdist workers share one subprocess per capability
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

import numpy as np
import pytest

from numlab.torch.presets import detect_onednn_isa

pytestmark = pytest.mark.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the script each capability runs: detection, then every case eager (and compiled)
SCRIPT = r'''
import json, sys
import numpy as np, torch, torch.nn.functional as F
from numlab.torch import NotModelled, compile_fn, from_torch, inductor_cpu, predict, run_torch, torch_cpu_eager
from numlab.torch.data import cancelling_rows, normal
from numlab.torch.explain import ulp_gap
from numlab.torch.presets import describe_machine

compiled_wanted = sys.argv[1] == "1"
pe, pi = torch_cpu_eager(), inductor_cpu()
out = {"capability": pe.capability, "onednn_isa": pe.onednn_isa, "gelu": pe.gelu_algo,
       "mkl_vml": pe.unary_algo == "mkl_vml",
       "softmax_lanes": pe.softmax_lanes, "lanes": pi.lanes, "vec_isa": pi.vec_isa,
       "machine": describe_machine().header(), "rows": {}}
TD = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

OPS = {
    "gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sigmoid": torch.sigmoid, "exp": torch.exp, "tanh": torch.tanh, "erf": torch.erf,
    "sum": lambda x: x.sum(-1), "mean": lambda x: x.mean(-1), "softmax": lambda x: F.softmax(x, -1),
    "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
    "alpha": lambda x, y: torch.add(x, y, alpha=0.7),
}
POINTWISE = ("gelu", "gelu_tanh", "sigmoid", "exp", "tanh", "erf")

def pointwise(x):  # one compile for the pointwise ops (one input, several outputs)
    return tuple(OPS[k](x) for k in POINTWISE)

def reductions(a, b, c, d, w, bias):  # one compile; each reduction its own input
    return OPS["sum"](a), OPS["mean"](b), OPS["softmax"](c), OPS["layer_norm"](d, w, bias)

def score(p, t, dt):
    p, t = np.asarray(p, np.float32), np.asarray(t, np.float32)
    same = (p.view(np.uint32) == t.view(np.uint32)) | (np.isnan(p) & np.isnan(t))  # signed zeros too
    return [float(np.mean(same)), float(np.max(ulp_gap(p, t, dt)))]

rng = np.random.default_rng(12)
for dt in ("fp32", "bf16", "fp16"):
    t = lambda a: torch.from_numpy(a).to(TD[dt])
    x = t(normal(rng, (8, 100), dt, 3.0))
    a, b = (t(cancelling_rows(rng, (8, 100), dt)) for _ in range(2))
    c, d = (t(normal(rng, (8, 100), dt, 3.0)) for _ in range(2))
    w, bias = (t(normal(rng, (100,), dt)) for _ in range(2))
    args = {k: (x,) for k in POINTWISE}
    args.update(sum=(a,), mean=(b,), softmax=(c,), layer_norm=(d, w, bias), alpha=(x, c))
    for name, fn in OPS.items():
        tr = from_torch(fn, args[name])
        want = fn(*args[name]).float().numpy()
        row = {}
        try:
            row["eager"] = score(predict(tr, args[name], mode="eager").outputs[0], want, dt)
        except NotModelled as e:
            row["eager"] = str(e)
        out["rows"][f"{name}/{dt}"] = row
    for fn, gargs, names in ((pointwise, (x,), POINTWISE), (reductions, (a, b, c, d, w, bias),
                                                              ("sum", "mean", "softmax", "layer_norm"))):
        tr = from_torch(fn, gargs)
        if not compiled_wanted:
            try:
                predict(tr, gargs, mode="compiled")
                out["compiled_not_modelled"] = ""
            except NotModelled as e:
                out["compiled_not_modelled"] = str(e)
            continue
        if fn is pointwise and dt != "fp32":
            continue  # compile time: the 16-bit pointwise kernels are the fp32 math plus one rounding
        got = run_torch(tr, gargs, mode="compiled", compiled=compile_fn(fn))
        pred = predict(tr, gargs, mode="compiled").outputs
        for i, name in enumerate(names):
            out["rows"][f"{name}/{dt}"]["compiled"] = score(pred[i], got[i], dt)
print("RESULT " + json.dumps(out))
'''

CAPS = {
    # name: (environment, compile?, the capability torch must report)
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, True, "AVX2"),
    "default": ({"ATEN_CPU_CAPABILITY": "default"}, True, "DEFAULT"),
}
OPS = ("gelu", "gelu_tanh", "sigmoid", "exp", "tanh", "erf", "sum", "mean", "softmax", "layer_norm", "alpha")
DTYPES = ("fp32", "bf16", "fp16")
# eager unary exp/tanh/erf: fp32 goes through MKL VML in a build with MKL (refused)
VML = ("exp", "tanh", "erf")
_RUNS: dict = {}


def _cpu_can_run(cap: str) -> str | None:
    """None if the CPU can run ``cap``, else the reason it cannot."""
    if cap == "avx2" and detect_onednn_isa(limit="ALL") not in ("avx2", "avx512_core"):
        return "this CPU has no AVX2+FMA (from /proc/cpuinfo): ATen cannot dispatch avx2"
    return None


def _measure(cap: str, tmp_path_factory) -> dict:
    """Run the capability's subprocess: its result dict, or {"skip": reason}."""
    why = _cpu_can_run(cap)
    if why is not None:
        return {"skip": why}
    env_add, comp, want = CAPS[cap]
    cache = tmp_path_factory.mktemp(f"inductor_{cap}")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), **env_add)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", SCRIPT, "1" if comp else "0"], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ", 1)[1])
    if res["capability"] != want:
        return {"skip": f"torch reports capability {res['capability']} under {env_add} "
                        f"(the CPU cannot run {want})"}
    print(f"[{cap}] {res['machine']}")
    return res


def _run(cap: str, tmp_path_factory) -> dict:
    """The capability's result, measured once per test session: a JSON file in the
    session's shared temp root, under a lock, so pytest-xdist workers share one run."""
    if cap in _RUNS:
        return _RUNS[cap]
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    path = root / f"numlab_capability_{cap}.json"
    with open(root / f"numlab_capability_{cap}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            res = json.loads(path.read_text())
        else:
            res = _measure(cap, tmp_path_factory)
            path.write_text(json.dumps(res))
    _RUNS[cap] = res
    return res


def _get(cap, tmp_path_factory):
    res = _run(cap, tmp_path_factory)
    if "skip" in res:
        print(f"skipping capability {cap}: {res['skip']}")
        pytest.skip(res["skip"])
    return res


def _unmodelled(cap: str, op: str, dt: str, mkl_vml: bool) -> str | None:
    """The words the ``NotModelled`` message of a knowingly refused (capability, op,
    dtype) eager path contains, or None when the path is modelled: fp32 exp/tanh/erf in
    a build with MKL (MKL VML), and fp32 exp/tanh/erf on ATen's scalar build without it."""
    if op in VML and dt == "fp32" and mkl_vml:
        return "MKL VML"
    if cap == "default" and op in VML and dt == "fp32":
        return "DEFAULT"
    return None


def _cases():
    for cap in CAPS:
        for op in OPS:
            for dt in DTYPES:
                yield pytest.param(cap, op, dt, id=f"{cap}-{op}-{dt}")


def test_capability_detection(torch, tmp_path_factory):
    """The presets detect what the subprocess really dispatches."""
    res = _get("avx2", tmp_path_factory)
    assert (res["capability"], res["onednn_isa"], res["gelu"], res["softmax_lanes"]) == ("AVX2", "avx2",
                                                                                        "onednn_avx2", 8)
    assert (res["vec_isa"], res["lanes"]) == ("avx2", 8)
    res = _get("default", tmp_path_factory)
    assert res["capability"] == "DEFAULT" and res["vec_isa"] == "none" and res["lanes"] == 1


@pytest.mark.parametrize("cap, op, dt", list(_cases()))
def test_capability_case(torch, tmp_path_factory, cap, op, dt):
    res = _get(cap, tmp_path_factory)
    row = res["rows"][f"{op}/{dt}"]
    words = _unmodelled(cap, op, dt, res["mkl_vml"])
    if words:
        assert isinstance(row["eager"], str) and words in row["eager"], row  # NotModelled raised
        print(f"{cap} {op} {dt}: NotModelled ({row['eager']})")
    else:
        assert not isinstance(row["eager"], str), row["eager"]  # modelled: not refused
        assert row["eager"][0] == 1.0, (cap, op, dt, row)
    if "compiled" in row:
        assert row["compiled"][0] == 1.0, (cap, op, dt, row)


def test_onednn_isa_detection_matches_oneDNN(torch):
    """detect_onednn_isa (CPU flags + ONEDNN_MAX_CPU_ISA) agrees with the ISA oneDNN itself
    reports (ONEDNN_VERBOSE), natively and capped at AVX2."""
    from numlab.torch.presets import measure_onednn_isa

    assert measure_onednn_isa()[0] == detect_onednn_isa()
    if detect_onednn_isa(limit="ALL") in ("avx2", "avx512_core"):
        assert measure_onednn_isa({"ONEDNN_MAX_CPU_ISA": "AVX2"})[0] == detect_onednn_isa(limit="AVX2") == "avx2"
    else:
        print("skipping the AVX2 cap: this CPU has no AVX2+FMA")


def test_detect_onednn_isa_rule():
    """oneDNN's rule on given flags and caps (no torch needed)."""
    avx512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert detect_onednn_isa(avx512, "ALL") == "avx512_core"
    assert detect_onednn_isa(avx512, "AVX512_CORE_BF16") == "avx512_core"
    assert detect_onednn_isa(avx512, "AVX2") == "avx2"
    assert detect_onednn_isa(avx512, "SSE41") == "other"
    assert detect_onednn_isa({"avx2", "fma"}, "ALL") == "avx2"  # e.g. AMD Zen 3
    assert detect_onednn_isa({"avx2", "fma", "avx512f"}, "ALL") == "avx2"  # no avx512bw/vl/dq
    assert detect_onednn_isa({"avx", "sse4_1"}, "ALL") == "other"
    assert detect_onednn_isa(set(), "ALL") == "other"  # unknown CPU: not modelled


def test_onednn_avx2_gelu_accuracy_and_exp():
    """Independent checks of the oneDNN avx2 models: its exp within 8 ulp of fp64 on
    [-87, 88] and 0 below ln FLT_MIN; gelu_erf = x/2 (1 + erf~(x/sqrt 2)) with the A&S
    bound |erf~ - erf| < 1.5e-7 plus a few fp32 roundings."""
    from numlab.formats import ulp
    from numlab.kernels.libm import onednn_expf, onednn_gelu_erf_avx2
    from numlab.ops import erf_ref

    rng = np.random.default_rng(4)
    x = rng.uniform(-87, 88, 200000).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    u = np.asarray(ulp(np.asarray(np.float32(ref), np.float64), "fp32"), np.float64)
    assert np.max(np.abs(onednn_expf(x) - ref) / u) <= 8.0  # measured 5.5 ulp: a fast polynomial
    assert onednn_expf(np.array([-88.0, -100.0], np.float32)).tolist() == [0.0, 0.0]
    g = np.concatenate([rng.standard_normal(200000) * 3, [0.0, -0.0, 10.0, -10.0]]).astype(np.float32)
    got = onednn_gelu_erf_avx2(g).astype(np.float64)
    g64 = g.astype(np.float64)
    want = 0.5 * g64 * (1 + erf_ref(g64 / np.sqrt(2)))
    assert np.all(np.abs(got - want) <= np.abs(g64) * 0.5 * (1.5e-7 + 8 * 2.0**-23) + 1e-45)
    assert onednn_gelu_erf_avx2(np.array([10.0, -10.0], np.float32)).tolist() == [10.0, -0.0]


def test_detect_onednn_dtypes_rule():
    """Which dtypes ATen hands to oneDNN for F.gelu, on given flags and caps (measured on
    Sapphire Rapids under ONEDNN_MAX_CPU_ISA: fp16 from AVX512_CORE_FP16, bf16 from
    AVX512_CORE; tests/test_torch_machines.py checks the predictions under each)."""
    from numlab.torch.presets import detect_onednn_dtypes

    spr = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16"}
    zen5 = spr - {"avx512_fp16"}
    assert detect_onednn_dtypes(spr, "ALL", mkldnn=True) == ("fp32", "bf16", "fp16")
    assert detect_onednn_dtypes(spr, "AVX512_CORE_FP16", mkldnn=True) == ("fp32", "bf16", "fp16")
    assert detect_onednn_dtypes(spr, "AVX512_CORE_BF16", mkldnn=True) == ("fp32", "bf16")
    assert detect_onednn_dtypes(spr, "AVX512_CORE", mkldnn=True) == ("fp32", "bf16")
    assert detect_onednn_dtypes(spr, "AVX2", mkldnn=True) == ("fp32",)
    assert detect_onednn_dtypes(zen5, "ALL", mkldnn=True) == ("fp32", "bf16")  # AMD Zen 5
    assert detect_onednn_dtypes({"avx2", "fma"}, "ALL", mkldnn=True) == ("fp32",)  # AMD Zen 3
    assert detect_onednn_dtypes(spr, "ALL", mkldnn=False) == ()


def test_describe_machine_names_every_deciding_path(torch):
    """The header printed by reports names ATen's capability, Inductor's ISA and lanes,
    oneDNN's ISA and the kernel per dtype, the BLAS and the unary math library."""
    from numlab.torch.presets import describe_machine, detect_blas, detect_onednn_dtypes

    m = describe_machine()
    h = m.header()
    assert f"ATen capability {m.capability}" in h and f"Inductor {m.inductor_isa} ({m.inductor_lanes}" in h
    assert m.onednn_dtypes == detect_onednn_dtypes()
    if m.mkldnn:
        for d in ("fp32", "bf16", "fp16"):
            assert f"{d} {'oneDNN' if d in m.onednn_dtypes else 'ATen'}" in h
    assert f"BLAS {detect_blas()['detail']}" in h and "fp32 unary exp/tanh/erf: " in h
    assert detect_blas()["library"] in torch.__config__.show().lower() or detect_blas()["library"] == "openblas"
