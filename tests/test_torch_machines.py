"""The torch faithfulness checks under simulated other machines.

What decides torch's CPU bits is chosen in the running process: ATen's kernels by
``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``), oneDNN's (eager ``F.gelu``,
per dtype) by ``ONEDNN_MAX_CPU_ISA``, Inductor's vector ISA by ATen's capability, and a
BLAS core type by ``OPENBLAS_CORETYPE`` where torch uses OpenBLAS.  Each simulated machine
runs in its own subprocess with its own ``TORCHINDUCTOR_CACHE_DIR`` (Inductor's cache key
does not hold ``ATEN_CPU_CAPABILITY``), so one CPU exercises the paths of the others:

* ``zen5``: ATen avx512, oneDNN ``AVX512_CORE_BF16`` (AMD Zen 5: no avx512_fp16, so ATen
  keeps fp16 gelu; eager -- Inductor's avx512 code is compiled by the in-process tests);
* ``skylake``: ATen avx512, oneDNN ``AVX512_CORE`` (eager);
* ``zen3``: ATen avx2, oneDNN ``AVX2`` (an AVX2-only CPU; eager and compiled, every dtype);
* ``avx2_bf16``: ATen avx2, oneDNN ``AVX512_CORE_BF16`` (eager);
* ``default_bf16``: ATen's scalar build, oneDNN ``AVX512_CORE_BF16`` (eager, and compiled
  bf16/fp16: Inductor's scalar C++);
* ``default_avx2``: ATen's scalar build, oneDNN ``AVX2`` (eager).

Every case must be 100% bitwise or raise ``NotModelled`` naming the path, and the paths
refused are exactly the ones :func:`_refused` lists (so a new refusal is a failure too).
A simulated path this CPU cannot reach (e.g. avx512 on an AVX2-only machine) is skipped
with the reason printed.  The subprocesses run two at a time, once per test session
(a lock shares them between pytest-xdist workers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

try:  # POSIX: a lock so that pytest-xdist workers share one run of the subprocesses
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

import pytest

from numlab.torch.presets import detect_onednn_isa

pytestmark = pytest.mark.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r'''
import json, sys
import numpy as np, torch, torch.nn.functional as F
from numlab.torch import NotModelled, compile_fn, from_torch, predict, run_torch, torch_cpu_eager
from numlab.torch.data import cancelling_rows, normal
from numlab.torch.presets import describe_machine

TD = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

def centre_tanh(x):  # a row reduction feeding broadcast pointwise ops
    y = torch.tanh((x - x.mean(-1, keepdim=True)) * 0.7)
    return y * x.amax(-1, keepdim=True)

def softmax_by_hand(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)

CASES = {
    "chain": (lambda x, y: (x * 0.1 + y) / 3.0 - x * y, "nn"),
    "alpha": (lambda x, y: torch.add(x, y, alpha=0.7), "nn"),
    "gelu": (lambda x: F.gelu(x), "n"), "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "n"),
    "sigmoid": (torch.sigmoid, "n"), "exp": (torch.exp, "n"), "tanh": (torch.tanh, "n"),
    "sum": (lambda x: x.sum(-1), "c"), "mean": (lambda x: x.mean(-1), "c"),
    "softmax": (lambda x: F.softmax(x, -1), "n"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), "nww"),
    "centre_tanh": (centre_tanh, "n"), "softmax_by_hand": (softmax_by_hand, "n"),
    # scalar tails: rsqrt's 16-bit kernel computes in the tensor's type (32-element steps),
    # silu's scalar loop calls glibc expf
    "rsqrt": (lambda x: torch.rsqrt(x.abs() + 0.01), "n"), "silu": (lambda x: F.silu(x), "n"),
}
# softmax_by_hand is eager only: compiled 16-bit it is refused (a realized bf16 buffer read
# across loops), which would refuse the whole combined graph
COMPILED = ("chain", "sum", "softmax", "layer_norm", "gelu", "centre_tanh")

def inputs(rng, kinds, dt, shape):
    t = lambda a: torch.from_numpy(a).to(TD[dt])
    make = {"n": lambda: normal(rng, shape, dt, 2.0), "c": lambda: cancelling_rows(rng, shape, dt),
            "w": lambda: normal(rng, shape[-1:], dt)}
    return tuple(t(make[k]()) for k in kinds)

def score(p, t):
    p, t = np.asarray(p, np.float32), np.asarray(t, np.float32)
    return float(np.mean((p.view(np.uint32) == t.view(np.uint32)) | (np.isnan(p) & np.isnan(t))))

def one(fn, args, mode, got):
    try:
        return score(predict(from_torch(fn, args), args, mode=mode).outputs[0], got)
    except NotModelled as e:
        return "NotModelled: " + str(e)

compiled_dtypes = [d for d in sys.argv[1].split(",") if d]
pe = torch_cpu_eager()
out = {"capability": pe.capability, "onednn_isa": pe.onednn_isa, "onednn_dtypes": list(pe.onednn_dtypes),
       "mkl_vml": pe.unary_algo == "mkl_vml", "machine": describe_machine().header(), "rows": {}}
rng = np.random.default_rng(26)
SHAPES = ((5, 203), (3, 37))  # flat sizes with tails for every loop step; rows not a lane multiple
for dt in ("fp32", "bf16", "fp16"):
    for shape in SHAPES:
        for name, (fn, kinds) in CASES.items():
            args = inputs(rng, kinds, dt, shape)
            out["rows"][f"{name}/{dt}/{shape[-1]}/eager"] = one(fn, args, "eager", fn(*args).float().numpy())
    if dt not in compiled_dtypes:
        continue
    # one compiled graph per dtype: every compiled case on its own inputs, rows of 203
    fns = [CASES[k][0] for k in COMPILED]
    groups = [inputs(rng, CASES[k][1], dt, SHAPES[0]) for k in COMPILED]
    sizes = [len(g) for g in groups]
    def suite(*flat):
        res, i = [], 0
        for f, k in zip(fns, sizes):
            res.append(f(*flat[i:i + k]))
            i += k
        return tuple(res)
    flat = tuple(a for g in groups for a in g)
    tr = from_torch(suite, flat)
    got = run_torch(tr, flat, mode="compiled", compiled=compile_fn(suite))
    try:
        pred = predict(tr, flat, mode="compiled").outputs
        for k, p, g in zip(COMPILED, pred, got):
            out["rows"][f"{k}/{dt}/{SHAPES[0][-1]}/compiled"] = score(p, g)
    except NotModelled as e:
        for k in COMPILED:
            out["rows"][f"{k}/{dt}/{SHAPES[0][-1]}/compiled"] = "NotModelled: " + str(e)
print("RESULT " + json.dumps(out))
'''

MACHINES = {
    # name: (environment, dtypes compiled, ATen capability torch must report, oneDNN class wanted);
    # Inductor follows ATen's capability only: avx512 is compiled by the in-process tests
    # (tests/test_torch_faithfulness.py), avx2 and the scalar C++ here
    "zen5": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, (),
             "AVX512", "avx512_core"),
    "skylake": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, (),
                "AVX512", "avx512_core"),
    "zen3": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, ("fp32", "bf16", "fp16"),
             "AVX2", "avx2"),
    "avx2_bf16": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, (),
                  "AVX2", "avx512_core"),
    "default_bf16": ({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
                     ("bf16", "fp16"), "DEFAULT", "avx512_core"),
    "default_avx2": ({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"}, (),
                     "DEFAULT", "avx2"),
}
_RUNS: dict = {}


def _refused(machine: dict, case: str, dt: str, mode: str) -> bool:
    """The paths numlab knowingly refuses (the test's own list, not the presets'):
    eager fp32 exp/tanh in a build with MKL (MKL VML), or on ATen's scalar build; eager
    silu on ATen's scalar build; eager 16-bit rsqrt on ATen's scalar build (1/sqrt in the
    16-bit type on every element)."""
    if mode != "eager":
        return False
    if case == "silu":
        return machine["capability"] == "DEFAULT"
    if case == "rsqrt":
        return dt != "fp32" and machine["capability"] == "DEFAULT"
    if case not in ("exp", "tanh", "centre_tanh", "softmax_by_hand"):
        return False
    return dt == "fp32" and (machine["mkl_vml"] or machine["capability"] == "DEFAULT")


def _unreachable(name: str) -> str | None:
    """Why this CPU cannot run the simulated machine's oneDNN path, or None."""
    want = MACHINES[name][3]
    got = detect_onednn_isa(limit=MACHINES[name][0]["ONEDNN_MAX_CPU_ISA"])
    if got != want:
        return f"this CPU's oneDNN reaches {got}, not {want}, under {MACHINES[name][0]}"
    return None


def _measure(name: str, cache_root) -> dict:
    why = _unreachable(name)
    if why is not None:
        return {"skip": why}
    env_add, comp, want, _ = MACHINES[name]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_root / f"inductor_{name}"), **env_add)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(comp)], capture_output=True,
                       text=True, timeout=900, env=env)
    if r.returncode != 0:
        return {"error": r.stderr[-3000:]}
    res = json.loads(r.stdout.split("RESULT ", 1)[1])
    if res["capability"] != want:
        return {"skip": f"torch reports ATen capability {res['capability']} under {env_add} "
                        f"(this CPU cannot run {want})"}
    return res


def _run(name: str, tmp_path_factory) -> dict:
    """Every simulated machine measured once per session (two subprocesses at a time),
    stored as JSON in the session's shared temp root under a lock."""
    if name in _RUNS:
        return _RUNS[name]
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    path = root / "numlab_machines.json"
    with open(root / "numlab_machines.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            res = json.loads(path.read_text())
        else:
            with ThreadPoolExecutor(max_workers=2) as pool:
                futs = {m: pool.submit(_measure, m, root) for m in MACHINES}
                res = {m: f.result() for m, f in futs.items()}
            path.write_text(json.dumps(res))
    _RUNS.update(res)
    return _RUNS[name]


@pytest.mark.parametrize("name", list(MACHINES))
def test_simulated_machine_exact_or_refused(torch, tmp_path_factory, name):
    res = _run(name, tmp_path_factory)
    if "skip" in res:
        print(f"skipping simulated machine {name}: {res['skip']}")
        pytest.skip(res["skip"])
    assert "error" not in res, res.get("error")
    print(f"[{name}] {res['machine']}")
    wrong, bad_refusal = [], []
    for key, v in sorted(res["rows"].items()):
        case, dt, n, mode = key.split("/")
        refused = isinstance(v, str)
        print(f"  {key}: {v if refused else f'{v:.2%}'}")
        if refused != _refused(res, case, dt, mode):
            bad_refusal.append((key, v))
        elif not refused and v != 1.0:
            wrong.append((key, v))
        elif refused:
            assert v.startswith("NotModelled: ") and len(v) > 40, (key, v)  # it names the path
    assert not wrong, f"{name}: predictions not bit for bit: {wrong}"
    assert not bad_refusal, f"{name}: refused or modelled unlike the list of refused paths: {bad_refusal}"
    # the paths the machine really runs: oneDNN takes fp16 gelu only with avx512_core_fp16
    assert "fp16" not in res["onednn_dtypes"] and ("bf16" in res["onednn_dtypes"]) == (
        MACHINES[name][3] == "avx512_core"), res["onednn_dtypes"]
    assert {k.split("/")[1] for k in res["rows"] if k.endswith("/compiled")} == set(MACHINES[name][1])


def test_blas_core_types(torch, monkeypatch):
    """OPENBLAS_CORETYPE selects OpenBLAS's kernels; no torch path numlab predicts calls the
    BLAS (no matmul in the torch predictor), and this torch build's BLAS is reported with
    the settings that select its kernels (read from the environment it runs in)."""
    from numlab.torch.presets import detect_blas

    blas = detect_blas()
    print(f"torch BLAS: {blas['detail']}")
    if blas["library"] == "mkl":
        monkeypatch.setenv("MKL_CBWR", "AVX2")
        assert detect_blas()["detail"].endswith(", MKL_CBWR=AVX2")
        pytest.skip(f"torch uses {blas['library']} here, not OpenBLAS: OPENBLAS_CORETYPE selects nothing "
                    "(MKL picks its kernels itself; MKL_ENABLE_INSTRUCTIONS/MKL_CBWR are reported)")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    got = detect_blas()
    assert got["coretype"] == "Haswell" and "OPENBLAS_CORETYPE=Haswell" in got["detail"]
