"""Tests of numlab.determinism: compile and execution determinism across
processes, the atomic order breaking the second layer, replay, the plan, CLI."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import same_bits_mask

from numlab import determinism as D
from numlab import execute, zoo
from numlab import kernels as K
from numlab.fusion import FusionOptions


def test_default_fused_run_is_deterministic_across_processes():
    rep = D.check_determinism("softmax", fmt="fp16", mode="fused", runs=3)
    assert rep.runs == 3
    assert [r.hashseed for r in rep.records] == ["0", "1", "2"]
    assert len({r.pid for r in rep.records}) == 3
    assert rep.compile_deterministic and rep.execution_deterministic and rep.ok
    # the worker's fingerprint is execute.run's fingerprint for the same inputs, in this process too
    g = zoo.MODELS["softmax"]()
    res = execute.run(g, zoo.make_inputs(g, seed=0), mode="fused", fmt="fp16")
    assert rep.records[0].fingerprint == res.fingerprint
    assert rep.records[0].outputs["y"] == D._digest(res.outputs["y"])
    assert not any(h.active for h in rep.plan)


def test_unseeded_atomic_order_breaks_execution_not_compile_determinism():
    rep = D.check_determinism("softmax", fmt="fp32", mode="eager", runs=3, order="atomic")
    assert rep.compile_deterministic
    assert not rep.execution_deterministic and not rep.ok
    seeds = [r.order_seed for r in rep.records]
    assert len(set(seeds)) == 3
    active = [h.option for h in rep.plan if h.active]
    assert active == ["reduce order 'atomic' without a seed"]
    # replay each process in this one with its drawn seed: same bits (a seeded schedule is a replay)
    g = zoo.MODELS["softmax"]()
    x = zoo.make_inputs(g, seed=0)
    outs = []
    for r in rep.records:
        spec = K.KernelSpec.handwritten(reduce_order=K.Shuffled(r.order_seed))
        y = execute.run(g, x, mode="eager", fmt="fp32", kernels=spec, seed=r.order_seed).outputs["y"]
        assert D._digest(y) == r.outputs["y"]
        assert D.run_once(D._config("softmax", "fp32", "eager", order="atomic", seed=r.order_seed)).outputs == r.outputs
        outs.append(y)
    # the reported diff counts, recomputed independently from the replays
    differ = np.zeros(outs[0].shape, bool)
    for y in outs[1:]:
        differ |= ~same_bits_mask(y, outs[0])
    n, mx, mu = rep.diffs["y"]
    assert n == int(differ.sum()) > 0
    assert mx == max(float(np.abs(y.astype(np.float64) - outs[0]).max()) for y in outs[1:])
    assert mu >= 1
    assert "execution determinism: NO" in str(rep)


def test_seeded_atomic_order_is_deterministic():
    rep = D.check_determinism("softmax", fmt="fp32", mode="eager", runs=2, order="atomic", seed=5)
    assert rep.ok and [r.order_seed for r in rep.records] == [5, 5]
    assert not any(h.active for h in rep.plan)


def test_run_once_in_process_matches_and_fused_library_gets_the_order():
    cfg = D._config("rmsnorm", "fp32", "fused", order="atomic", seed=3)
    a, b = D.run_once(cfg), D.run_once(cfg)
    assert a.outputs == b.outputs and a.fingerprint == b.fingerprint
    c = D.run_once(D._config("rmsnorm", "fp32", "fused", order="atomic", seed=4))
    assert c.fingerprint == a.fingerprint          # the seed is a run-time input
    assert c.outputs != a.outputs                  # ... that changes the bits
    d = D.run_once(D._config("rmsnorm", "fp32", "fused", order="pairwise"))
    assert d.fingerprint != a.fingerprint          # a different compiled order is a different kernel


def test_planted_set_order_breaks_compile_determinism_only():
    rep = D.check_determinism("softmax", fmt="fp16", runs=3, inject="set_order")
    assert not rep.compile_deterministic and rep.execution_deterministic
    assert len({r.plan_digest for r in rep.records}) > 1
    # the walk depends on the process, not on the call: repeated in one process it is stable
    a = D.run_once(D._config("softmax", "fp16", "fused", inject="set_order"))
    b = D.run_once(D._config("softmax", "fp16", "fused", inject="set_order"))
    assert a.fingerprint == b.fingerprint
    assert "INJECTED=set_order" in str(rep)


def test_report_logic_on_differing_records():
    def rec(fp, plan, y):
        return D.RunRecord(fingerprint=fp, plan_digest=plan, outputs={"y": y}, order_seed=None,
                           hashseed="0", pid=1)
    cfg = D._config("softmax", "fp16", "fused")
    same = D.DeterminismReport(cfg, [rec("a", "p", "h"), rec("a", "p", "h")], [])
    assert same.ok
    assert not D.DeterminismReport(cfg, [rec("a", "p", "h"), rec("b", "p", "h")], []).compile_deterministic
    assert not D.DeterminismReport(cfg, [rec("a", "p", "h"), rec("a", "q", "h")], []).compile_deterministic
    r = D.DeterminismReport(cfg, [rec("a", "p", "h"), rec("a", "p", "g")], [])
    assert r.compile_deterministic and not r.execution_deterministic


def test_plan_lists_every_hazard():
    plan = D.determinism_plan()
    names = " | ".join(h.option for h in plan)
    for needle in ("atomic", "race", "PYTHONHASHSEED", "stochastic", "split-K", "shuffled"):
        assert needle in names
    assert {h.layer for h in plan} == {"compile", "execution"}
    assert not any(h.active for h in plan)
    assert [h.active for h in D.determinism_plan(order="atomic")].count(True) == 1
    assert not any(h.active for h in D.determinism_plan(order="atomic", seed=1))
    assert not any(h.active for h in D.determinism_plan(order="atomic", mode="reference"))
    assert "the spec uses it" in str(D.determinism_plan(kernels=K.KernelSpec.codegen(matmul_algo="split_k"))[4])


@pytest.mark.parametrize("kw, match", [
    (dict(model="nope"), "valid models"),
    (dict(runs=1), "runs"),
    (dict(mode="jit"), "valid modes"),
    (dict(kernels="fast"), "preset"),
    (dict(fusion="xla"), "preset"),
    (dict(mode="eager", fusion="default"), "fusion="),
    (dict(order="zigzag"), "zigzag"),
    (dict(seed=-1), "seed"),
    (dict(fmt="fp12"), "fmt='fp12'"),
    (dict(inject="leak"), "inject"),
    (dict(sizes={"foo": 3}), r"\['foo'\] not parameters of model 'softmax'; valid sizes: \['batch', 'n'\]"),
    (dict(sizes={"batch": -1}), r"sizes=\{'batch': -1\} are not valid"),
    (dict(input_kind="weird"), "input_kind='weird'.*normal"),
    (dict(input_seed=-1), "input_seed=-1"),
    (dict(timeout=0), "timeout=0"),
])
def test_bad_arguments(kw, match):
    args = dict(model="softmax", runs=2) | kw
    with pytest.raises(ValueError, match=match):
        D.check_determinism(**args)


def test_check_parser_exit_codes(capsys):
    from numlab.cli import main

    assert main(["check", "determinism", "softmax", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "compile determinism:   yes" in out
    assert "fusion=autofuse " in out  # the one default, printed as its canonical spec
    assert main(["check", "determinism", "softmax", "--runs", "2", "--fmt", "fp32", "--mode", "eager",
                 "--order", "atomic", "--json"]) == 1
    out = capsys.readouterr().out
    assert '"execution_deterministic": false' in out and '"compile_deterministic": true' in out
    assert main(["check", "determinism", "softmax", "--runs", "2", "--timeout", "0"]) == 2
    assert "timeout=0.0 must be" in capsys.readouterr().err
    from numlab.zoo import parse_sizes

    assert parse_sizes("batch=4,hidden=64", "--size") == {"batch": 4, "hidden": 64}
    with pytest.raises(ValueError, match="--size 'batch' is not NAME=VALUE"):
        parse_sizes("batch", "--size")


def test_fusion_and_kernel_specs_reach_the_workers():
    """The spec is parsed once and kept: flags change the fingerprint (before,
    ``autofuse_enable_pass=reduce`` silently ran the defaults), and the
    configuration holds the canonical spec strings."""
    base = D.check_determinism("softmax", runs=2)
    red = D.check_determinism("softmax", runs=2, fusion="--autofuse_enable_pass=reduce",
                              kernels="codegen:fma=false")
    assert base.config["fusion"] == "autofuse" and base.config["kernels"] is None
    assert red.config["fusion"] == "autofuse:--autofuse_enable_pass=reduce"
    assert red.config["kernels"] == "codegen:fma=false"
    assert red.records[0].fingerprint != base.records[0].fingerprint
    g = zoo.softmax()
    r = execute.run(g, zoo.make_inputs(g, seed=0), mode="fused", fmt="fp16",
                    fusion=FusionOptions().enable("reduce"), kernels=K.KernelSpec.codegen(fma=False))
    assert red.records[0].fingerprint == r.fingerprint
    with pytest.raises(ValueError, match="fusion='autofuse_enable_pass=reduce': preset"):
        D.check_determinism("softmax", runs=2, fusion="autofuse_enable_pass=reduce")


# --------------------------------------------------------------------------- worker processes


def test_workers_do_not_inherit_a_blocking_stdin(tmp_path):
    """A Jupyter kernel's stdin is a pipe nobody writes to: a worker that read it
    would hang the kernel.  Run the worker pool from a process with such a stdin,
    with workers that read stdin: they must see EOF at once."""
    import subprocess
    import sys

    code = ("import os, sys, tempfile\n"
            "from numlab.determinism import _run_workers\n"
            "job = ([sys.executable, '-c', 'import sys; print(repr(sys.stdin.read()))'], dict(os.environ))\n"
            "with tempfile.TemporaryDirectory() as d:\n"
            "    print(_run_workers([job, job], timeout=20, workdir=d))\n")
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as fo, open(err, "w") as fe:
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=fo, stderr=fe)
    try:   # p.stdin stays open and unwritten while the workers run, as a kernel's stdin does
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
    assert p.returncode == 0, err.read_text()
    assert out.read_text().strip() == repr(["''\n", "''\n"])


def test_workers_timeout_kills_and_reaps_every_worker(tmp_path):
    import os
    import sys
    import time

    pidfile = tmp_path / "pids"
    sleeper = [sys.executable, "-c",
               f"import os, time; open({str(pidfile)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(120)"]
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 1.5 s"):
        D._run_workers([(sleeper, dict(os.environ))] * 3, timeout=1.5, workdir=str(tmp_path), parallel=3)
    assert time.monotonic() - t < 30
    pids = [int(x) for x in pidfile.read_text().split()]
    assert 1 <= len(pids) <= 3
    for pid in pids:   # killed and reaped: the pid no longer exists
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_failing_worker_reports_its_stderr_and_stops_the_others(tmp_path):
    import os
    import sys

    bad = [sys.executable, "-c", "import sys; sys.stderr.write('boom: planted failure\\n'); sys.exit(3)"]
    slow = [sys.executable, "-c", "import time; time.sleep(120)"]
    env = dict(os.environ)
    with pytest.raises(RuntimeError, match=r"(?s)worker 1 failed \(exit 3.*boom: planted failure"):
        D._run_workers([(slow, env), (bad, env)], timeout=60, workdir=str(tmp_path), parallel=2)
    # parallel bounds the number of live workers; output order follows the jobs
    echo = [(["/bin/sh", "-c", f"echo {i}"], env) for i in range(5)]
    assert D._run_workers(echo, timeout=60, workdir=str(tmp_path), parallel=2) == [f"{i}\n" for i in range(5)]


def test_worker_env_pins_blas_threads_unless_set(monkeypatch):
    for v in D.BLAS_THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    env = D._worker_env(4)
    assert env["PYTHONHASHSEED"] == "4" and all(env[v] == "1" for v in D.BLAS_THREAD_VARS)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert D._worker_env(0)["OMP_NUM_THREADS"] == "3"
