"""Calibration: what numlab models of PyTorch on this machine, and how faithfully.

:func:`calibrate` runs, for each requested ATen CPU capability
(:data:`CAPABILITIES`), one subprocess with that capability's environment
(:data:`CAPABILITY_ENV`: ``ATEN_CPU_CAPABILITY``, and ``ONEDNN_MAX_CPU_ISA=AVX2``
for ``avx2`` because oneDNN ignores ATen's variable) and its own empty
``TORCHINDUCTOR_CACHE_DIR`` (Inductor's FX graph cache key does not include the
capability, so a shared cache would hand one capability's kernels to another).
Each subprocess

* detects the machine (:func:`numlab.torch.presets.describe_machine`) and the
  kernels the presets choose for it;
* runs the faithfulness suite (:data:`SUITE`, shared with ``numlab bench
  faithfulness``): per case x dtype x row length, the modelled path of eager
  and of ``torch.compile`` (or ``not modelled: <reason>``) and the share of
  bitwise-equal elements against real torch, eager and compiled (with
  ``emulate_precision_casts`` off and on);
* reveals the summation order of ``torch.sum`` and ``torch.compile(torch.sum)``
  by probing (:func:`numlab.torch.reveal_order`), checks that the revealed tree
  reproduces the function on random rows, and compares it with the preset's
  order (the same tree? does the model reproduce the function?).

:func:`write_report` writes ``report.md``, ``results.csv`` (one row per
capability x case x dtype x shape x mode, :data:`COLUMNS`), ``orders.csv``
(:data:`ORDER_COLUMNS`), each header row first, and their JSON sidecars
``results.json`` and ``orders.json``; ``numlab calibrate`` is its command line.  Needs torch (``pip install torch==2.13.0``, CPU build).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from .. import _json as strict_json
from .._repr import Compact, brief
from ..kernels.orders.reveal import check as check_order
from ..kernels.orders.tree import Tree
from .bridge import from_torch
from .data import cancelling_rows, normal
from .explain import ulp_gap
from .predictor import NotModelled, compile_fn, predict, run_torch
from .presets import describe_machine, inductor_cpu, measure_aten_sum_lanes, torch_cpu_eager
from .reveal import black_box, reveal_order

__all__ = [
    "SUITE", "CASES", "CAUSES", "CAPABILITIES", "CAPABILITY_ENV", "COLUMNS", "ORDER_COLUMNS",
    "REVEALED", "measure_case", "run_suite", "header", "modelled_paths", "parse_capabilities",
    "parse_cases", "measure", "run_capability", "calibrate", "Calibration", "write_report",
    "summary_table", "orders_table", "orders_summary", "not_modelled",
]

# ---------------------------------------------------------------------------
# the faithfulness suite (also `numlab bench faithfulness`)
# ---------------------------------------------------------------------------



def _same_bits(p, t) -> np.ndarray:
    """Elementwise bit for bit (signed zeros distinguished; NaN equal to NaN), float32
    values or truth values."""
    p, t = np.asarray(p), np.asarray(t)
    if p.dtype == bool or t.dtype == bool:
        return p.astype(bool) == t.astype(bool)
    p, t = p.astype(np.float32), t.astype(np.float32)
    return (p.view(np.uint32) == t.view(np.uint32)) | (np.isnan(p) & np.isnan(t))

def _suite():
    import torch  # optional dependency: imported when the suite runs
    import torch.nn.functional as F

    def chain(x, y):
        return (x * 0.1 + y) / 3.0 - x * y

    def scalars_where(x, y):
        return torch.where(x > 0.3, x * 2.5, y - 0.3) + (1.5 - x) + 2.0 / x + torch.add(x, y, alpha=0.7)

    def tanh(x):
        return torch.tanh(x)

    def exp(x):
        return torch.exp(x)

    def sigmoid(x):
        return torch.sigmoid(x)

    def gelu(x):
        return F.gelu(x)

    def gelu_tanh(x):
        return F.gelu(x, approximate="tanh")

    def row_sum(x):
        return x.sum(-1)

    def row_mean(x):
        return x.mean(-1)

    def row_amax(x):
        return x.amax(-1)

    def softmax(x):
        return F.softmax(x, -1)

    def layernorm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w)

    def centre_tanh(x):  # a row reduction feeding broadcast pointwise ops
        y = torch.tanh((x - x.mean(-1, keepdim=True)) * 0.7)
        return y * x.amax(-1, keepdim=True)

    # name -> (fn, number of inputs, data kind, transcendental?)
    return {
        "chain +-*/ scalars": (chain, 2, "normal", False),
        "where, rsub, s/x, alpha": (scalars_where, 2, "normal", False),
        "tanh": (tanh, 1, "normal", True),
        "exp": (exp, 1, "normal", True),
        "sigmoid": (sigmoid, 1, "normal", True),
        "gelu (erf)": (gelu, 1, "normal", True),
        "gelu (tanh)": (gelu_tanh, 1, "normal", True),
        "row sum": (row_sum, 1, "cancel", False),
        "row mean": (row_mean, 1, "cancel", False),
        "row amax": (row_amax, 1, "normal", False),
        "softmax": (softmax, 1, "normal", True),
        "layernorm": (layernorm, 3, "normal", False),
        "rmsnorm": (rmsnorm, 2, "normal", False),
        "mean/amax + broadcast tanh": (centre_tanh, 1, "normal", True),
    }


SUITE = (
    "chain +-*/ scalars", "where, rsub, s/x, alpha", "tanh", "exp", "sigmoid", "gelu (erf)",
    "gelu (tanh)", "row sum", "row mean", "row amax", "softmax", "layernorm", "rmsnorm",
    "mean/amax + broadcast tanh",
)
"""The suite's cases, in table order."""

CASES = {
    "chain": "chain +-*/ scalars", "where": "where, rsub, s/x, alpha", "tanh": "tanh", "exp": "exp",
    "sigmoid": "sigmoid", "gelu": "gelu (erf)", "gelu_tanh": "gelu (tanh)", "sum": "row sum",
    "mean": "row mean", "amax": "row amax", "softmax": "softmax", "layernorm": "layernorm",
    "rmsnorm": "rmsnorm", "centre": "mean/amax + broadcast tanh",
}
"""Short names of the suite's cases (``numlab calibrate --cases sum,gelu``)."""

CAUSES = {
    "tanh": "eager fp32: MKL VML vsTanh, refused (NotModelled)",
    "exp": "eager fp32: MKL VML vsExp, refused (NotModelled)",
    "softmax": "Inductor tiling of the exp-sum loop",
    "layernorm": "ATen RowwiseMoments FMA contraction (rstd)",
}
"""Why a row may be below 100% (the residual's known source), by case."""

_REDUCING = ("row sum", "row mean", "row amax", "softmax", "layernorm", "rmsnorm", "mean/amax + broadcast tanh")
_CALIBRATION_MODES = ("eager", "compiled", "compiled+emulate")


def _inputs(name, nin, kind, shape, dt, rng):
    import torch  # optional dependency: imported when the suite runs

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    xs = []
    for i in range(nin):
        if i == 0:
            x = cancelling_rows(rng, shape, dt) if kind == "cancel" else normal(rng, shape, dt, 2.0)
        else:
            x = normal(rng, (shape[-1],) if name in ("layernorm", "rmsnorm") else shape, dt)
        xs.append(torch.from_numpy(x).to(tdt))
    return tuple(xs)


def measure_case(name, dtype, shape, seed=0, emulate=(False, True)):
    """One row: {'eager': (share, max_ulp), 'compiled': ..., 'compiled+emulate': ...};
    a side numlab does not model on this machine is the ``NotModelled`` message."""
    fn, nin, kind, _ = _suite()[name]
    rng = np.random.default_rng(seed)
    xs = _inputs(name, nin, kind, shape, dtype, rng)
    tr = from_torch(fn, xs)
    row = {}

    def score(p, t):
        same = _same_bits(p, t)
        return float(np.mean(same)), float(np.max(ulp_gap(p, t, dtype))) if p.size else 0.0

    te = run_torch(tr, xs, mode="eager")[0]
    try:
        row["eager"] = score(predict(tr, xs, mode="eager").outputs[0], te)
    except NotModelled as e:
        row["eager"] = str(e)
    for emu in emulate:
        key = "compiled+emulate" if emu else "compiled"
        try:
            pc = predict(tr, xs, mode="compiled", preset=inductor_cpu(emu)).outputs[0]
        except NotModelled as e:
            row[key] = str(e)
            continue
        tc = run_torch(tr, xs, mode="compiled", compiled=compile_fn(fn, emu))[0]
        row[key] = score(pc, tc)
    return row


def _shapes(name, quick):
    if name in _REDUCING:
        return [(8, n) for n in ((64, 100) if quick else (64, 100, 1000))]
    return [(8, 100) if quick else (16, 100)]


def run_suite(quick: bool = False, dtypes=("fp32", "bf16", "fp16"), cases=SUITE):
    """Rows (name, dtype, shape, row dict of :func:`measure_case`) of the suite: reductions
    at lengths 64, 100 and 1000 (``quick``: 64 and 100), the others on (16, 100) (``quick``:
    (8, 100))."""
    rows = []
    for dt in dtypes:
        for name in cases:
            for shape in _shapes(name, quick):
                rows.append((name, dt, shape, measure_case(name, dt, shape)))
    return rows


def header() -> str:
    """The machine and the kernels the presets chose for it (needs torch): the header
    of ``numlab bench faithfulness`` and of each capability in ``numlab calibrate``."""
    pe, pi = torch_cpu_eager(), inductor_cpu()
    m = describe_machine()
    return (f"{m.header()}\n"
            f"presets: eager softmax lanes {pe.softmax_lanes}, ATen sum lanes {measure_aten_sum_lanes()} "
            f"(measured), F.gelu {'/'.join(str(pe.gelu_algo_for(d)) for d in ('fp32', 'bf16', 'fp16'))} "
            f"(fp32/bf16/fp16); compiled {pi.vec_isa} "
            f"{pi.lanes} lanes{' (scalar C++)' if pi.scalar else ''}"
            f"{' (not modelled)' if pi.not_modelled() else ''}")


def modelled_paths(name: str, dtype: str, shape, threads: int | None = None) -> dict:
    """The path the presets model for suite case ``name`` on ``dtype`` rows of ``shape`` in
    this process: ``{"eager": str, "compiled": str}`` (kernels, lanes, orders, oneDNN
    ISA).  Whether the path is really modelled is what predicting says (a
    ``NotModelled`` message replaces it in :func:`measure`)."""
    import torch  # optional dependency: imported when called

    pe, pi = torch_cpu_eager(), inductor_cpu()
    threads = threads or int(torch.get_num_threads())
    cap = pe.capability
    order_e = str(pe.sum_order(dtype))
    order_c = str(pi.reduce_order(dtype, threads))
    eager = {
        "chain +-*/ scalars": f"ATen {cap} elementwise; scalars: add/sub to {dtype}, mul/div fp32",
        "where, rsub, s/x, alpha": (f"ATen {cap} elementwise; add(alpha) "
                                    f"{'FMA' if pe.fma_alpha else 'mul then add'}, scalar tail of "
                                    f"{pe.elementwise_step}"),
        "tanh": f"ATen vml tanh ({'MKL VML' if dtype == 'fp32' and pe.unary_algo == 'mkl_vml' else 'SLEEF'})",
        "exp": f"ATen vml exp ({'MKL VML' if dtype == 'fp32' and pe.unary_algo == 'mkl_vml' else pe.vec_exp})",
        "sigmoid": f"ATen {cap} Vectorized exp {pe.vec_exp}",
        "gelu (erf)": f"{pe.gelu_path(dtype)} (algo {pe.gelu_algo_for(dtype)})",
        "gelu (tanh)": "ATen gelu tanh (algo aten_vec: FMA, SLEEF tanhf)",
        "row sum": f"ATen cascade_sum {order_e}",
        "row mean": f"ATen cascade_sum {order_e}, then / n",
        "row amax": "ATen max (exact)",
        "softmax": f"ATen {cap} softmax: {pe.softmax_lanes}-lane sum, exp {pe.vec_exp}",
        "layernorm": f"ATen RowwiseMoments {pe.layernorm_lanes} lanes",
        "rmsnorm": f"pow, mean by {order_e}, rsqrt, mul",
        "mean/amax + broadcast tanh": f"mean by {order_e}, amax, ATen vml tanh",
    }[name]
    red = name in _REDUCING
    isa = "scalar C++ (no vector ISA)" if pi.scalar else f"{pi.vec_isa} {pi.lanes} lanes"
    compiled = (f"Inductor {isa}"
                + (f", {order_c}" if red and name != "row amax" else "")
                + (f", exp {pi.vec_exp}" if name in ("sigmoid", "softmax", "exp") else "")
                + (f", tanh {pi.vec_tanh}" if name in ("tanh", "gelu (tanh)", "mean/amax + broadcast tanh") else "")
                + (f", gelu {pi.vec_gelu}" if name == "gelu (erf)" else ""))
    return {"eager": eager, "compiled": compiled}


# ---------------------------------------------------------------------------
# capabilities and the measurement of one of them (in its own process)
# ---------------------------------------------------------------------------

CAPABILITIES = ("native", "avx512", "zen5", "avx2", "default")
"""What ``numlab calibrate --capabilities`` accepts: ``native`` (the process as it
starts), the ATen capabilities set through the environment, and ``zen5``: ATen
avx512 with oneDNN capped at ``AVX512_CORE_BF16`` (an AMD Zen 5: no avx512_fp16, so
fp16 gelu runs ATen's kernel)."""
CAPABILITY_ENV = {
    "native": {},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "zen5": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
}
"""The environment of each capability's subprocess (oneDNN ignores
``ATEN_CPU_CAPABILITY``: ``avx2`` also caps it with ``ONEDNN_MAX_CPU_ISA``)."""
_REPORTED = {"avx512": "AVX512", "zen5": "AVX512", "avx2": "AVX2", "default": "DEFAULT"}

REVEALED = ("torch.sum", "torch.compile(torch.sum)")
"""The reductions whose order is revealed per capability and dtype."""

COLUMNS = ("capability", "aten_capability", "case", "dtype", "shape", "mode", "path", "share",
           "max_ulp", "cause")
"""Columns of ``results.csv``: one row per capability x case x dtype x shape x mode
(``eager``, ``compiled``, ``compiled+emulate``); ``share`` (bitwise-equal elements, in
[0, 1]) and ``max_ulp`` are empty where the path is not modelled (``path`` then says
``not modelled: <reason>``)."""
ORDER_COLUMNS = ("capability", "function", "dtype", "n", "tree", "probes", "calls", "check_rows",
                 "reproduced", "model", "same_tree", "model_reproduced")
"""Columns of ``orders.csv``: the revealed tree (compact, elided in the middle), probe
rows and calls, rows checked, rows the revealed tree reproduces bit for bit, the preset's
order (or ``not modelled: <reason>``), whether it is the same tree, and the rows the
model reproduces."""


def parse_capabilities(spec, name: str = "capabilities") -> tuple[str, ...]:
    """``"native,avx2,default"`` (or a sequence) -> a tuple of :data:`CAPABILITIES`;
    ValueError naming ``name``, the value and the valid choices."""
    items = [s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec)
    bad = [s for s in items if s not in CAPABILITIES]
    if not items or bad or len(set(items)) != len(items):
        why = f"{bad[0]!r} is not one" if bad else ("it is empty" if not items else "a capability repeats")
        raise ValueError(f"{name} {spec!r} is not valid ({why}); give a comma-separated list of "
                         f"{list(CAPABILITIES)}, e.g. native,avx2,default")
    return tuple(items)


def parse_cases(spec, name: str = "cases") -> tuple[str, ...]:
    """``"sum,gelu"`` (short names of :data:`CASES`, or suite names) -> suite names."""
    if spec is None:
        return SUITE
    items = [s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec)
    if not items:
        raise ValueError(f"{name} {spec!r} is not valid (it is empty); valid choices: {list(CASES)}")
    out = []
    for s in items:
        if s in CASES:
            out.append(CASES[s])
        elif s in SUITE:
            out.append(s)
        else:
            raise ValueError(f"{name} {spec!r} is not valid ({s!r} is not a case); valid choices: "
                             f"{list(CASES)}")
    return tuple(out)


def _order_row(cap, fn_name, dt, n, rows, seed, threads):
    """Reveal ``fn_name`` at length ``n`` and compare it with the preset's order."""
    r = reveal_order(fn_name, n, dt, check_rows=rows, seed=seed)
    if fn_name == "torch.sum":
        model, why = torch_cpu_eager().sum_order(dt), None
    else:
        pi = inductor_cpu()
        why = pi.not_modelled()
        model = None if why else pi.reduce_order(dt, threads)
    row = {"capability": cap, "function": fn_name, "dtype": dt, "n": n, "tree": r.order.summary(160),
           "probes": r.probes, "calls": r.calls, "check_rows": rows, "reproduced": r.check.matches}
    if model is None:
        row.update(model=f"not modelled: {why}", same_tree="", model_reproduced="")
    else:
        res = check_order(black_box(fn_name), model, n, dt, rows=rows, seed=seed)
        row.update(model=str(model), same_tree=Tree.from_order(model, n) == r.order,
                   model_reproduced=res.matches)
    return row


def measure(cap: str = "native", *, cases=SUITE, dtypes=("fp32", "bf16", "fp16"), quick=False,
            reveal_n=(100, 1000), rows: int = 10_000, seed: int = 0, echo=None) -> dict:
    """Calibrate in this process (as it is: the caller sets the environment).

    Returns ``{"capability", "aten_capability", "header", "machine", "rows", "orders",
    "seconds"}`` with ``rows`` as dicts of :data:`COLUMNS` and ``orders`` of
    :data:`ORDER_COLUMNS`; ``{"capability", "skipped": reason}`` when ``cap`` asks
    for an ATen capability that torch does not report here (the CPU cannot run it)."""
    import torch  # optional dependency: imported when called

    t0 = time.perf_counter()
    m = describe_machine()
    if cap in _REPORTED and m.capability != _REPORTED[cap]:
        return {"capability": cap, "skipped": f"torch reports ATen capability {m.capability} under "
                                              f"{CAPABILITY_ENV[cap]} (this CPU cannot run {_REPORTED[cap]})"}
    threads = int(torch.get_num_threads())
    out_rows = []
    for name, dt, shape, row in run_suite(quick, dtypes, cases):
        paths = modelled_paths(name, dt, shape, threads)
        for mode in _CALIBRATION_MODES:
            v = row[mode]
            modelled = not isinstance(v, str)
            full = modelled and v[0] == 1.0
            out_rows.append({
                "capability": cap, "aten_capability": m.capability, "case": name, "dtype": dt,
                "shape": "x".join(map(str, shape)), "mode": mode,
                "path": paths["eager" if mode == "eager" else "compiled"] if modelled else f"not modelled: {v}",
                "share": v[0] if modelled else None, "max_ulp": v[1] if modelled else None,
                "cause": "" if full or not modelled else CAUSES.get(name, "?")})
        if echo:
            echo(f"  [{cap}] {name} {dt} {shape}: " + ", ".join(
                f"{k} {'n/m' if isinstance(v, str) else f'{v[0]:.2%}'}" for k, v in row.items()))
    orders = [_order_row(cap, f, dt, n, rows, seed, threads)
              for f in REVEALED for dt in dtypes for n in reveal_n]
    return {"capability": cap, "aten_capability": m.capability, "header": header(),
            "machine": {k: getattr(m, k) for k in m.__dataclass_fields__}, "rows": out_rows,
            "orders": orders, "seconds": time.perf_counter() - t0}


def _worker() -> None:
    """Entry point of a capability's subprocess: ``argv = [config.json, out.json]``."""
    cfg = json.loads(Path(sys.argv[1]).read_text())
    res = measure(cfg["cap"], cases=tuple(cfg["cases"]), dtypes=tuple(cfg["dtypes"]), quick=cfg["quick"],
                  reveal_n=tuple(cfg["reveal_n"]), rows=cfg["rows"], seed=cfg["seed"])
    Path(sys.argv[2]).write_text(json.dumps(res, default=str))


_PKG_ROOT = str(Path(__file__).resolve().parents[2])


def run_capability(cap: str, *, cases=SUITE, dtypes=("fp32", "bf16", "fp16"), quick=False,
                   reveal_n=(100, 1000), rows: int = 10_000, seed: int = 0,
                   timeout: float = 3600) -> dict:
    """:func:`measure` in a subprocess with ``cap``'s environment (:data:`CAPABILITY_ENV`)
    and its own empty ``TORCHINDUCTOR_CACHE_DIR``; RuntimeError if the subprocess fails."""
    parse_capabilities([cap])
    with tempfile.TemporaryDirectory(prefix=f"numlab_calibrate_{cap}_") as tmp:
        cfg = Path(tmp) / "config.json"
        res_path = Path(tmp) / "result.json"
        cfg.write_text(json.dumps({"cap": cap, "cases": list(cases), "dtypes": list(dtypes), "quick": quick,
                                   "reveal_n": list(reveal_n), "rows": rows, "seed": seed}))
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                                  "DNNL_MAX_CPU_ISA")}
        env.update(CAPABILITY_ENV[cap], TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"))
        env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        code = "from numlab.torch.calibrate import _worker; _worker()"
        r = subprocess.run([sys.executable, "-c", code, str(cfg), str(res_path)], capture_output=True,
                           text=True, timeout=timeout, env=env)
        if r.returncode != 0 or not res_path.exists():
            raise RuntimeError(f"calibration of capability {cap!r} failed (exit {r.returncode}): "
                               f"{r.stderr[-2000:]}")
        res = json.loads(res_path.read_text())
    res["env"] = CAPABILITY_ENV[cap]
    return res


@dataclass(repr=False)
class Calibration(Compact):
    """The result of :func:`calibrate`: one :func:`measure` dict per capability."""

    capabilities: tuple
    results: dict
    command: str = ""
    settings: dict = field(default_factory=dict)

    def _repr_facts(self):
        rows = [(c, f"{len(self.results[c].get('rows', []))} rows, {len(self.results[c].get('orders', []))} orders"
                 if isinstance(self.results.get(c), dict) else brief(self.results.get(c)))
                for c in self.capabilities[:12]]
        rows.append(("command", self.command or None))
        return f"Calibration: {len(self.capabilities)} capabilities, {len(self.rows)} rows", rows

    @property
    def rows(self) -> list[dict]:
        return [r for c in self.capabilities for r in self.results[c].get("rows", [])]

    @property
    def orders(self) -> list[dict]:
        return [r for c in self.capabilities for r in self.results[c].get("orders", [])]

    @classmethod
    def load(cls, path) -> Calibration:
        """A calibration back from the ``results.json`` :func:`write_report` wrote (a file
        or its folder), e.g. to print its tables again."""
        path = Path(path)
        data = strict_json.revive(json.loads((path / "results.json" if path.is_dir() else path).read_text()))
        return cls(tuple(data["capabilities"]), data["results"], data.get("command", ""),
                   data.get("settings", {}))


def calibrate(capabilities=("native", "avx2", "default"), *, cases=SUITE, dtypes=("fp32", "bf16", "fp16"),
              quick=False, reveal_n=None, rows: int = 10_000, seed: int = 0, command: str = "",
              echo=None) -> Calibration:
    """Calibrate every capability of ``capabilities`` (:data:`CAPABILITIES`), each in
    its own subprocess (:func:`run_capability`).  ``reveal_n``: row lengths of the
    revealed orders (default 100 and 1000; ``quick``: 100); ``rows``: random rows each
    revealed order (and the preset's) is checked on."""
    caps = parse_capabilities(capabilities)
    cases = parse_cases(cases)
    reveal_n = tuple(reveal_n or ((100,) if quick else (100, 1000)))
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows={rows!r} is not valid; it must be an integer >= 1")
    results = {}
    for cap in caps:
        if echo:
            echo(f"calibrating {cap} {CAPABILITY_ENV[cap] or '(environment as is)'} ...")
        results[cap] = run_capability(cap, cases=cases, dtypes=dtypes, quick=quick, reveal_n=reveal_n,
                                      rows=rows, seed=seed)
        if echo:
            res = results[cap]
            echo(f"  {cap}: skipped ({res['skipped']})" if "skipped" in res else
                 f"  {cap}: ATen {res['aten_capability']}, {len(res['rows'])} rows, "
                 f"{len(res['orders'])} orders in {res['seconds']:.0f} s")
    settings = {"cases": list(cases), "dtypes": list(dtypes), "quick": quick, "reveal_n": list(reveal_n),
                "rows": rows, "seed": seed}
    return Calibration(caps, results, command, settings)


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------


def _pct(s: float) -> str:
    return "100%" if s == 1.0 else f"{100 * s:.2f}%"


def _cell(rows) -> str:
    """Min share over ``rows`` (one case x mode of one capability) with the max ulp when
    below 100%; ``n/m`` where not modelled."""
    done = [r for r in rows if r["share"] is not None]
    nm = sorted({r["dtype"] for r in rows if r["share"] is None})
    if not done:
        return "n/m"
    lo = min(r["share"] for r in done)
    s = _pct(lo) + ("" if lo == 1.0 else f" ({max(r['max_ulp'] for r in done):.3g} ulp)")
    return s + (f"; n/m {','.join(nm)}" if nm else "")


def _cap_label(res) -> str:
    if res["capability"] == "native" and "aten_capability" in res:
        return f"native ({res['aten_capability']})"
    return res["capability"]


def summary_table(cal: Calibration) -> str:
    """Markdown: per case, per capability, the lowest share of bitwise-equal elements over
    dtypes and lengths, eager and compiled (``emulate_precision_casts`` off / on, one value
    when they agree); ``n/m`` = not modelled (``NotModelled`` raised: the report says why)."""
    caps = [c for c in cal.capabilities if "rows" in cal.results[c]]
    head = ["case"]
    for c in caps:
        lab = _cap_label(cal.results[c])
        head += [f"{lab} eager", f"{lab} compiled (emulate off / on)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = [n for n in SUITE if any(r["case"] == n for r in cal.rows)]
    for name in names:
        cells = [name]
        for c in caps:
            got = {mode: _cell([r for r in cal.results[c]["rows"] if r["case"] == name and r["mode"] == mode])
                   for mode in _CALIBRATION_MODES}
            off, on = got["compiled"], got["compiled+emulate"]
            cells += [got["eager"], off if off == on else f"{off} / {on}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def not_modelled(cal: Calibration) -> list[str]:
    """One line per capability, mode and reason: the cases (and dtypes) numlab does not
    model there."""
    seen: dict = {}
    for r in cal.rows:
        if r["share"] is None:
            key = (r["capability"], "eager" if r["mode"] == "eager" else "compiled",
                   r["path"].removeprefix("not modelled: "))
            seen.setdefault(key, {}).setdefault(r["case"], set()).add(r["dtype"])
    dts = {r["dtype"] for r in cal.rows}
    names = {r["case"] for r in cal.rows}
    out = []
    for (cap, mode, why), cases in seen.items():
        if set(cases) == names and all(v == dts for v in cases.values()):
            what = "every case"
        else:
            what = ", ".join(k if v == dts else f"{k} ({','.join(sorted(v))})" for k, v in cases.items())
        out.append(f"{cap} {mode}: {what}: {why}")
    return out


def orders_table(cal: Calibration) -> str:
    """Markdown: the revealed orders, whether they reproduce the function and whether the
    preset's model is the same tree and reproduces it (one row per revealed order)."""
    lines = ["| capability | function | dtype | n | revealed reproduces | probes (calls) | preset's order "
             "| same tree | model reproduces |", "|---|---|---|---|---|---|---|---|---|"]
    for o in cal.orders:
        same = "n/m" if o["same_tree"] == "" else ("yes" if o["same_tree"] else "no")
        mrep = "n/m" if o["model_reproduced"] == "" else f"{o['model_reproduced']}/{o['check_rows']}"
        model = "not modelled" if str(o["model"]).startswith("not modelled") else f"`{o['model']}`"
        lines.append(f"| {_cap_label(cal.results[o['capability']])} | `{o['function']}` | {o['dtype']} | "
                     f"{o['n']} | {o['reproduced']}/{o['check_rows']} | {o['probes']} ({o['calls']}) | "
                     f"{model} | {same} | {mrep} |")
    return "\n".join(lines)


def orders_summary(cal: Calibration) -> str:
    """Markdown: per capability and revealed function, over its dtypes and lengths: how many
    revealed trees reproduce the function on every check row, and how many times the
    preset's order is the same tree and reproduces it too."""
    lines = ["| capability | function | revealed (dtypes x n) | reproduce torch on every check row "
             "| preset's order: same tree, reproduces |", "|---|---|---|---|---|"]
    for c in cal.capabilities:
        res = cal.results[c]
        for f in REVEALED:
            os_ = [o for o in res.get("orders", []) if o["function"] == f]
            if not os_:
                continue
            k = len(os_)
            rep = sum(o["reproduced"] == o["check_rows"] for o in os_)
            mod = [o for o in os_ if o["same_tree"] != ""]
            if mod:
                same = sum(bool(o["same_tree"]) for o in mod)
                mrep = sum(o["model_reproduced"] == o["check_rows"] for o in mod)
                model = f"{same}/{len(mod)} same tree, {mrep}/{len(mod)} reproduce"
            else:
                small = min(os_, key=lambda o: o["n"])
                model = f"not modelled (revealed at n={small['n']}: `{small['tree']}`)"
            dims = f"{len({o['dtype'] for o in os_})} x {sorted({o['n'] for o in os_})}"
            lines.append(f"| {_cap_label(res)} | `{f}` | {dims} | {rep}/{k} "
                         f"({os_[0]['check_rows']} rows each) | {model} |")
    return "\n".join(lines)


def _markdown(cal: Calibration) -> str:
    out = [f"# numlab calibrate (numlab {__version__})", ""]
    if cal.command:
        out += [f"command: `{cal.command}`", ""]
    out += [f"settings: {json.dumps(cal.settings)}", ""]
    for c in cal.capabilities:
        res = cal.results[c]
        if "skipped" in res:
            out += [f"* **{c}**: skipped: {res['skipped']}"]
        else:
            env = " ".join(f"{k}={v}" for k, v in res["env"].items()) or "environment as is"
            out += [f"* **{c}** ({env}):", "", "  ```", *("  " + s for s in res["header"].splitlines()),
                    "  ```"]
    out += ["", "## Bitwise share against real torch (lowest over dtypes and lengths)", "",
            summary_table(cal), "",
            "n/m: not modelled (numlab raises NotModelled, never a guess):", "",
            *(f"* {line}" for line in not_modelled(cal)), "",
            "## Revealed summation orders", "", orders_summary(cal), "", orders_table(cal), "", "Trees:", ""]
    out += [f"* {o['capability']} `{o['function']}` {o['dtype']} n={o['n']}: `{o['tree']}`" for o in cal.orders]
    out += ["", "## Every case", "",
            "| capability | case | dtype | shape | mode | path | share | max ulp | cause |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in cal.rows:
        share = "" if r["share"] is None else _pct(r["share"])
        ulp = "" if r["max_ulp"] is None else f"{r['max_ulp']:.3g}"
        out.append(f"| {r['capability']} | {r['case']} | {r['dtype']} | {r['shape']} | {r['mode']} | "
                   f"{r['path']} | {share} | {ulp} | {r['cause']} |")
    return "\n".join(out) + "\n"


def write_report(cal: Calibration, outdir) -> list[Path]:
    """Write ``report.md``, ``results.csv``, ``orders.csv`` (each header row first) and
    their JSON sidecars ``results.json`` (the whole calibration, :meth:`Calibration.load`
    reads it back) and ``orders.json`` (the run's description) to ``outdir`` (created;
    existing files are replaced: the caller decides, as ``numlab calibrate`` does with
    ``--force`` or a fresh ``run-NNN`` folder).  Each sidecar names its CSV
    (``file``), its ``columns`` and ``row_count`` (data rows)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    run = {"numlab": __version__, "command": cal.command, "settings": cal.settings,
           "capabilities": list(cal.capabilities)}
    for name, cols, rows in (("results.csv", COLUMNS, cal.rows), ("orders.csv", ORDER_COLUMNS, cal.orders)):
        with open(outdir / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(cols)
            for r in rows:
                w.writerow(["" if r[k] is None else r[k] for k in cols])
        files.append(outdir / name)
        side = {"file": name, "columns": list(cols), "row_count": len(rows), **run}
        if name == "results.csv":
            side["results"] = cal.results
        (outdir / name).with_suffix(".json").write_text(strict_json.dumps(side, default=str, indent=1))
        files.append((outdir / name).with_suffix(".json"))
    (outdir / "report.md").write_text(_markdown(cal))
    files.append(outdir / "report.md")
    return files
