"""``numlab check CLAIM --graph mymod:fn --inputs in.npz --observed out.npy`` as a kernel
engineer runs it: the ``numlab`` command started outside the directory that holds ``mymod.py``
(a console script's ``sys.path`` does not hold the working directory) and no ``PYTHONPATH`` to it.
Each misuse exits 2 with a message naming the option, the value and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import numlab
from numlab import claims as C
from numlab.graph import trace_function

SRC = str(Path(numlab.__file__).resolve().parents[1])


def _fn(x, w):
    return np.exp(x) * w + 1.0


MODULE = textwrap.dedent('''
    import numpy as np

    def fn(x, w):
        return np.exp(x) * w + 1.0

    def two(x, w):
        return {"a": x * w, "b": x + w}
''')


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A directory holding mymod.py, in.npz, a misnamed bad.npz, the kernel's output under
    several names, and a ``numlab`` launcher outside it (as the console script is)."""
    d = tmp_path_factory.mktemp("kernel")
    (d / "mymod.py").write_text(MODULE)
    x, w = np.random.default_rng(0).standard_normal((2, 16, 32)).astype(np.float16)
    np.savez(d / "in.npz", x=x, w=w)
    np.savez(d / "bad.npz", a=x, w=w)
    y = (np.exp(x.astype(np.float32)) * w + 1).astype(np.float16)
    np.save(d / "out.npy", y)
    np.savez(d / "out.npz", y=y)
    np.savez(d / "two.npz", y=y, z=y)
    launcher = tmp_path_factory.mktemp("bin") / "numlab"
    launcher.write_text("import sys\nfrom numlab.cli import main\nsys.exit(main())\n")
    return d, launcher, trace_function(_fn, {"x": x, "w": w}).outputs[0]


def _numlab(work, *argv):
    d, launcher, _ = work
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = SRC  # numlab itself; mymod only through the working directory
    r = subprocess.run([sys.executable, str(launcher), *argv], cwd=d, capture_output=True, text=True, env=env,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


CHECK = ("check", "no_worse_tensor", "--graph", "mymod:fn", "--inputs", "in.npz")


def test_the_working_directory_module_is_found_and_one_npy_is_the_one_output(work):
    out_name = work[2]
    rc, out, err = _numlab(work, *CHECK, "--observed", "out.npy")
    assert rc == 0, err
    assert "HOLDS" in out
    assert f"observed: out.npy taken as output {out_name!r}" in err


def test_one_array_of_an_npz_is_the_one_output_and_the_report_names_it(work):
    rc, out, err = _numlab(work, *CHECK, "--observed", "out.npz")
    assert rc == 0, err
    assert f"observed: out.npz['y'] taken as output {work[2]!r}" in err


def test_two_arrays_for_one_output_ask_which(work):
    rc, _, err = _numlab(work, *CHECK, "--observed", "two.npz")
    assert rc == 2
    assert "--observed 'two.npz'" in err and "['y', 'z']" in err
    assert f"--observed-name {work[2]}=y" in err


@pytest.mark.parametrize("graph, words", [
    ("nomod:fn", ["--graph 'nomod:fn'", "cannot import module 'nomod'",
                  "put nomod.py in the current directory or on PYTHONPATH"]),
    ("mymod:nope", ["--graph 'mymod:nope'", "no function 'nope'", "['fn', 'two']", "--graph mymod:NAME"]),
])
def test_an_unimportable_graph_names_the_option_and_the_fix(work, graph, words):
    rc, _, err = _numlab(work, "check", "no_worse_tensor", "--graph", graph, "--inputs", "in.npz",
                         "--observed", "out.npy")
    assert rc == 2
    for w in words:
        assert w in err, (w, err)


def test_a_module_that_fails_to_import_says_what_it_raised(work, tmp_path):
    d = work[0]
    (d / "broken.py").write_text("import numpy as np\nimport no_such_dependency_xyz\n\ndef fn(x):\n    return x\n")
    rc, _, err = _numlab(work, "check", "no_worse_tensor", "--graph", "broken:fn", "--inputs", "in.npz")
    assert rc == 2
    assert "--graph 'broken:fn'" in err and "no_such_dependency_xyz" in err and "install" in err
    assert "put broken.py" not in err  # the module was found; its own import failed


@pytest.mark.parametrize("extra", [["--trials", "5"], ["--steps", "7"], ["--seed", "3"], ["--executor", "process"],
                                   ["--workers", "3"], ["--progress"]])
def test_search_options_are_refused_with_observed(work, extra):
    rc, out, err = _numlab(work, *CHECK, "--observed", "out.npy", *extra)
    assert rc == 2 and "HOLDS" not in out
    assert " ".join(extra) + " does not apply" in err
    assert "--observed 'out.npy'" in err and "--inputs 'in.npz'" in err and f"drop {extra[0]}" in err


def test_trials_are_refused_with_an_inputs_file_without_observed_too(work):
    rc, _, err = _numlab(work, *CHECK, "--trials", "5")
    assert rc == 2 and "--trials 5 does not apply with --inputs 'in.npz'" in err


def test_contract_is_refused_for_a_claim_that_holds_no_bound(work):
    rc, _, err = _numlab(work, *CHECK, "--observed", "out.npy", "--contract", "triton_cuda")
    assert rc == 2
    assert "--contract triton_cuda does not apply to no_worse_tensor" in err and "error_within_bound" in err
    rc, out, err = _numlab(work, "check", "error_within_bound", *CHECK[2:], "--observed", "out.npy",
                           "--contract", "triton_cuda")
    assert rc == 0 and "HOLDS" in out, err


def test_fusion_kernels_and_no_shrink_with_observed_are_noted(work):
    rc, out, err = _numlab(work, *CHECK, "--observed", "out.npy", "--fusion", "inductor", "--no-shrink")
    assert rc == 0 and "HOLDS" in out, err
    assert "--fusion inductor does not change the verdict of no_worse_tensor with --observed 'out.npy'" in err
    assert "--no-shrink has no effect with --observed 'out.npy'" in err


def test_seed_with_an_inputs_file_is_refused_by_bound(work):
    rc, _, err = _numlab(work, "bound", "--graph", "mymod:fn", "--inputs", "in.npz", "--seed", "4")
    assert rc == 2 and "--seed 4 does not apply with --inputs 'in.npz'" in err and "drop --seed" in err


def test_a_reversed_observed_name_says_did_you_mean(work):
    out_name = work[2]
    rc, _, err = _numlab(work, *CHECK, "--observed", "out.npz", "--observed-name", f"y={out_name}")
    assert rc == 2
    assert f"--observed-name y={out_name}" in err and "OUTPUT=TENSOR" in err
    assert f"did you mean --observed-name {out_name}=y?" in err
    rc, out, err = _numlab(work, *CHECK, "--observed", "out.npz", "--observed-name", f"{out_name}=y")
    assert rc == 0 and "HOLDS" in out, err


def test_an_observed_name_that_is_no_output_lists_the_outputs(work):
    rc, _, err = _numlab(work, *CHECK, "--observed", "out.npz", "--observed-name", "q=y")
    assert rc == 2 and "'q' is not an output of the graph" in err and f"[{work[2]!r}]" in err


def test_misnamed_inputs_name_the_file_the_names_found_and_expected(work):
    rc, _, err = _numlab(work, *CHECK, "--observed", "out.npy")
    assert rc == 0
    rc, _, err = _numlab(work, "check", "no_worse_tensor", "--graph", "mymod:fn", "--inputs", "bad.npz",
                         "--observed", "out.npy")
    assert rc == 2
    assert "cannot call it with the --size" not in err
    for w in ("--inputs 'bad.npz'", "['a', 'w']", "['x', 'w']", "--graph 'mymod:fn'", "rename array 'a' to 'x'"):
        assert w in err, (w, err)


def test_observed_without_an_inputs_file_names_both_options(work):
    rc, _, err = _numlab(work, "check", "no_worse_tensor", "--graph", "mymod:fn", "--inputs", "normal",
                         "--observed", "out.npy")
    assert rc == 2 and "--observed needs the inputs" in err and "--inputs 'normal'" in err


def test_python_check_takes_one_array_for_the_one_output():
    x, w = np.random.default_rng(1).standard_normal((2, 8, 16)).astype(np.float16)
    y = (np.exp(x.astype(np.float32)) * w + 1).astype(np.float16)
    assert C.check("error_within_bound", _fn, inputs={"x": x, "w": w}, observed=y).verdict == "holds"
    bad = (y.astype(np.float32) * np.float32(1 + 2 ** -6)).astype(np.float16)
    assert C.check("error_within_bound", _fn, inputs={"x": x, "w": w}, observed=bad).verdict == "fails"

    def two(x, w):
        return {"a": x * w, "b": x + w}

    with pytest.raises(ValueError, match=r"one array given.*\['a', 'b'\].*dict"):
        C.check("no_worse_tensor", two, inputs={"x": x, "w": w}, observed=y)
