"""Contract bounds held against real kernels: the independently written
correct kernels of numlab.testing.kernels never fail error_within_bound
(from Python and from the CLI, under the derived contract and the presets),
and the contract-breaking ones are caught; the bug table in docs/bounds.md is
what ``numlab bench bugs`` measures."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from numlab import claims as C
from numlab.bench import bugs
from numlab.cli import main as cli_main
from numlab.testing import kernels as K

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(K.CORRECT))
def test_correct_kernels_are_never_accused(name):
    k = K.CORRECT[name]
    for fmt in k.formats:
        for contract in (None, "torch_cpu"):
            f, n = bugs.verdicts(k, fmt, seeds=2, claims=("error_within_bound",), contract=contract)[
                "error_within_bound"]
            assert (f, n) == (0, 2), (name, fmt, contract)


def test_correct_kernels_hold_on_every_case():
    """Not only "not failed": decided and holding (no infinite bound) on the
    kernel library's inputs, for one kernel of each graph and mode."""
    seen = set()
    for k in K.CORRECT.values():
        if (k.graph, k.mode) in seen:
            continue
        seen.add((k.graph, k.mode))
        g, cs = bugs.cases(k, "bf16", 2)
        for x, o in cs:
            rep = C.check("error_within_bound", g, inputs=x, observed=o, fmt="bf16", fusion=K.stated_fusion(k))
            assert rep.verdict == "holds", (k.name, rep.summary())


@pytest.mark.parametrize("graph", K.GRAPHS)
def test_correct_kernel_from_the_cli(graph, tmp_path, capsys):
    k = K.kernels_for(graph, correct=True)[1]
    g, [(x, o)] = bugs.cases(k, "fp16", 1)
    np.savez(tmp_path / "inputs.npz", **x)
    obs = tmp_path / "observed"
    obs.mkdir()
    for name, v in o.items():
        np.save(obs / f"{name}.npy", v)
    sizes = [a for kv in K.SIZES[graph].items() for a in ("--size", f"{kv[0]}={kv[1]}")]
    rc = cli_main(["check", "error_within_bound", graph, *sizes, "--fmt", "fp16", "--inputs",
                   str(tmp_path / "inputs.npz"), "--observed", str(obs), "--fusion", K.stated_fusion(k),
                   "--no-save"])
    out = capsys.readouterr().out
    assert rc == 0 and "HOLDS" in out and "contract derived" in out, out


def test_contract_breaking_kernels_are_caught():
    """error_within_bound catches every bug kind on some format and seed, and
    no correct kernel on any: a violation proves a broken contract."""
    tab = bugs.table(seeds=2, formats=("fp16",), claims=("error_within_bound",))
    for bug, row in tab.items():
        f, n = row["error_within_bound"]
        if bug == "correct kernels":
            assert f == 0 and n > 0
        elif bug in ("textbook_variance",):
            continue  # fp16 only sees it on some seeds (the table's rates, over all formats)
        else:
            assert f > 0, bug


def _doc_table(text: str) -> str:
    m = re.search(r"<!-- bench bugs -->\n(.*?)\n<!-- /bench bugs -->", text, re.S)
    assert m, "docs/bounds.md has no generated bug table"
    return m.group(1).strip()


def test_the_bug_table_in_the_docs_is_measured():
    """The tables in docs/bounds.md and the README are numlab bench bugs' output, number for number."""
    want = bugs.markdown(bugs.table(seeds=4)).strip()
    for path in (ROOT / "docs" / "bounds.md", ROOT / "README.md"):
        assert _doc_table(path.read_text()) == want, path.name
