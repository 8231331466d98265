"""``numlab bench bugs``: which claim catches which bug, measured.

Every contract-breaking kernel of :data:`numlab.testing.kernels.BROKEN` (an
fp16 intermediate inside a fused block, an fp16 accumulator, double rounding
through another format, a bit-trick rsqrt, a missing Newton step, a dropped
tail, RTZ at the output, a scale applied in S, the textbook variance, a
bit-trick exp) runs on seeded inputs (``seeds`` per format it applies to,
kinds alternating normal / shifted_mean) at :data:`~numlab.testing.kernels.SIZES`,
and its outputs are checked as a real kernel's observed outputs
(:func:`numlab.claims.check` with ``observed=``) under the plan it pretends
to honour (:func:`~numlab.testing.kernels.stated_fusion`), with every claim
that runs on outputs.  The detection rate of a claim is the share of cases
where it **fails** (a counterexample); "undecided" is not a detection.  The
population claim pools all cases of one kernel and format (one verdict).
The correct kernels of :data:`~numlab.testing.kernels.CORRECT` are run the
same way: the false-accusation column counts their failures.
"""

from __future__ import annotations

import numpy as np

from .. import claims as C
from .. import zoo
from ..formats import get_format
from ..rounding import round_to
from ..testing import kernels as K

#: the claims that run on a kernel's observed outputs
CLAIMS = ("no_worse_elementwise", "no_worse_tensor", "no_worse_population", "error_within_bound",
          "inductor_rule", "msprobe_accuracy", "bound_no_worse")
BENCH_INPUT_KINDS = ("normal", "shifted_mean")


def cases(kernel, fmt: str, seeds: int):
    """``[(inputs in S's container, observed outputs)]`` of ``kernel`` on ``seeds`` seeded inputs."""
    g = zoo.get_model(kernel.graph, **K.SIZES[kernel.graph])
    out = []
    for s in range(seeds):
        raw = zoo.make_inputs(g, kind=BENCH_INPUT_KINDS[s % len(BENCH_INPUT_KINDS)], seed=s)
        xs = {k: np.asarray(round_to(np.asarray(v, dtype=np.float64), fmt)).astype(get_format(fmt).container)
              for k, v in raw.items()}
        with np.errstate(all="ignore"):
            obs = kernel.fn(xs, fmt)
        out.append((xs, obs))
    return g, out


def verdicts(kernel, fmt: str, seeds: int, claims=CLAIMS, contract=None) -> dict:
    """``{claim: (fails, cases)}`` for ``kernel`` in ``fmt`` (the bound claims under
    ``contract``; None: the contract derived from numlab's default kernels)."""
    g, cs = cases(kernel, fmt, seeds)
    fusion = K.stated_fusion(kernel)
    res = {}
    for claim in claims:
        if C.CLAIMS[claim].scope == "population":
            rep = C.check(claim, g, inputs=[x for x, _ in cs], observed=[o for _, o in cs], fmt=fmt,
                          fusion=fusion, shrink_cex=False, contract=contract)
            res[claim] = (int(rep.verdict == "fails"), 1)
            continue
        n = 0
        for x, o in cs:
            rep = C.check(claim, g, inputs=x, observed=o, fmt=fmt, fusion=fusion, shrink_cex=False, contract=contract)
            n += rep.verdict == "fails"
        res[claim] = (n, len(cs))
    return res


def table(seeds: int = 4, formats=K.FORMATS, claims=CLAIMS, kernels=None, contract=None) -> dict:
    """``{bug kind: {claim: (fails, cases)}}`` over the broken kernels (and
    ``"correct kernels"``: the correct ones, whose failures are false accusations)."""
    out: dict = {}
    for k in kernels if kernels is not None else [*K.BROKEN.values(), *K.CORRECT.values()]:
        row = out.setdefault(k.bug if not k.correct else "correct kernels", {c: (0, 0) for c in claims})
        for fmt in formats:
            if fmt not in k.formats:
                continue
            for c, (f, n) in verdicts(k, fmt, seeds, claims, contract).items():
                row[c] = (row[c][0] + f, row[c][1] + n)
    return out


def markdown(tab: dict, claims=CLAIMS) -> str:
    """The table as markdown: bug kind, then the detection rate of each claim."""
    short = {"no_worse_elementwise": "no_worse_elem", "no_worse_population": "no_worse_pop",
             "error_within_bound": "**error_within_bound**"}
    head = "| bug | " + " | ".join(short.get(c, c) for c in claims) + " |"
    lines = [head, "|---" * (len(claims) + 1) + "|"]
    for bug, row in tab.items():
        cells = []
        for c in claims:
            f, n = row[c]
            cells.append(f"{f}/{n}" if n else "-")
        lines.append(f"| {bug} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(quick: bool = False) -> str:
    seeds = 2 if quick else 4
    tab = table(seeds=seeds, formats=("fp16",) if quick else K.FORMATS)
    text = (f"detection = failing cases / cases (seeds 0..{seeds - 1}, kinds {'/'.join(BENCH_INPUT_KINDS)} alternating, every "
            "format the bug applies to; the population claim pools one kernel and format)\n\n" + markdown(tab))
    print(text)
    return text
