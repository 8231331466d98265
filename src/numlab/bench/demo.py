"""``numlab bench demo``: the wall and CPU time of one ``numlab demo`` run (a fresh
interpreter, output to a temporary directory that is removed afterwards), and
of ``numlab demo --quick``.  Target (issue "near the memory floor"): the full
demo within 10 s.  CPU time (user + system of the child) is shown beside the
wall time: on a loaded machine the wall time says more about the neighbours.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from . import Measure, Section

TARGET_S = 10.0


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_demo(args: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of ``python -m numlab demo ARGS`` into a
    temporary output directory; raises CalledProcessError if the demo fails."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("MPLBACKEND", "Agg")
    with tempfile.TemporaryDirectory() as tmp:
        c0, t0 = _child_cpu(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "numlab", "demo", "--out", os.path.join(tmp, "out"), *args],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return time.perf_counter() - t0, _child_cpu() - c0


def main(quick: bool = False) -> str:
    cases = [("numlab demo --quick", ["--quick"])] if quick else [("numlab demo", []),
                                                                  ("numlab demo --quick", ["--quick"])]
    lines = [f"{'command':<22} {'wall s':>8} {'cpu s':>8} {'target':>7}  ok"]
    measures = []
    for label, args in cases:
        wall, cpu = time_demo(args)
        if args:
            lines.append(f"{label:<22} {wall:8.2f} {cpu:8.2f} {'':>7}  -")
        else:
            lines.append(f"{label:<22} {wall:8.2f} {cpu:8.2f} {TARGET_S:6.0f}s  {'yes' if wall <= TARGET_S else 'NO'}")
            measures.append(Measure("`numlab demo`, wall time in a fresh interpreter", wall, TARGET_S, " s"))
    table = "\n".join(lines)
    print(table)
    return Section(table, measures)
