"""The public API: every advertised name resolves, ``from numlab import *``
works, ``py.typed`` ships, and :mod:`numlab.widgets` builds working controls
headless (ipywidgets objects exist without a browser)."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import numlab as nl
from numlab import widgets

PACKAGES = ["numlab", "numlab.kernels", "numlab.compare", "numlab.formats", "numlab.rounding",
            "numlab.primitives", "numlab.metrics", "numlab.widgets"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_resolves(package):
    mod = importlib.import_module(package)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{package}.__all__ names that do not resolve: {missing}"
    assert len(set(mod.__all__)) == len(mod.__all__), f"{package}.__all__ has duplicates"


def test_every_name_in_torch_all_resolves():
    pytest.importorskip("torch")
    mod = importlib.import_module("numlab.torch")
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"numlab.torch.__all__ names that do not resolve: {missing}"


def test_star_import_in_a_fresh_process():
    """``from numlab import *`` binds every name of ``numlab.__all__`` (a fresh
    interpreter, so earlier imports in this process cannot hide a failure)."""
    code = ("import numlab\nns = {}\nexec('from numlab import *', ns)\n"
            "missing = [n for n in numlab.__all__ if n not in ns]\n"
            "assert not missing, missing\nprint(len(numlab.__all__))")
    root = Path(nl.__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, env={"PYTHONPATH": str(root), "PATH": ""}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == len(nl.__all__)


def test_py_typed_ships():
    assert (Path(nl.__file__).parent / "py.typed").is_file()


def test_rounding_modes_exported_under_one_name():
    assert nl.ROUNDINGS == ("rne", "rtz", "up", "down", "odd", "stochastic")


# --------------------------------------------------------------------------
# numlab.widgets
# --------------------------------------------------------------------------
def test_controls_move_one_field_each():
    spec = nl.KernelSpec.handwritten()
    ws, current = widgets.controls(spec, vector_rounding=["rne", "rtz", "odd"],
                                   k_tile=(16, 512, 16), fma=bool)
    assert list(ws) == ["vector_rounding", "k_tile", "fma"]
    assert type(ws["vector_rounding"]).__name__ == "Dropdown"
    assert type(ws["k_tile"]).__name__ == "IntSlider"
    assert type(ws["fma"]).__name__ == "Checkbox"
    assert current() == spec  # untouched controls give the object back
    ws["vector_rounding"].value = "rtz"
    got = current()
    changed = {f.name for f in dataclasses.fields(spec) if getattr(got, f.name) != getattr(spec, f.name)}
    assert changed == {"vector_rounding"} and got.vector_rounding == "rtz"
    ws["k_tile"].value = 64
    ws["fma"].value = not spec.fma
    got = current()
    assert (got.vector_rounding, got.k_tile, got.fma) == ("rtz", 64, not spec.fma)
    assert spec.vector_rounding == "rne"  # the original object is not modified


def test_controls_float_slider_dropdown_of_objects_and_on_change():
    hw = nl.Hardware()
    seen = []
    ws, current = widgets.controls(hw, ub_bytes=range(32768, 262145, 32768),
                                   double_buffer=[True, False], on_change=seen.append)
    ws["ub_bytes"].value = 65536
    ws["double_buffer"].value = False
    assert [h.ub_bytes for h in seen] == [65536, 65536]
    assert seen[-1] == current() == dataclasses.replace(hw, ub_bytes=65536, double_buffer=False)

    @dataclasses.dataclass(frozen=True)
    class Knob:
        scale: float = 0.5
        fmt: object = nl.FP16

    ws, current = widgets.controls(Knob(), scale=(0.0, 1.0), fmt=[nl.FP16, nl.BF16])
    assert type(ws["scale"]).__name__ == "FloatSlider"
    ws["scale"].value = 0.25
    ws["fmt"].value = nl.BF16
    assert current() == Knob(0.25, nl.BF16)


def test_controls_errors_name_the_field_and_choices():
    spec = nl.KernelSpec.handwritten()
    with pytest.raises(ValueError, match=r"'k_tiles' is not a field of KernelSpec; valid fields: \["):
        widgets.controls(spec, k_tiles=(1, 4))
    with pytest.raises(ValueError, match=r"k_tile: the current value 256 is not in the range \[1, 4\]"):
        widgets.controls(spec, k_tile=(1, 4))
    with pytest.raises(ValueError, match=r"vector_rounding: the current value 'rne' is not among"):
        widgets.controls(spec, vector_rounding=["rtz"])
    with pytest.raises(ValueError, match="name at least one field"):
        widgets.controls(spec)
    with pytest.raises(TypeError, match="obj must be a dataclass instance, got dict"):
        widgets.controls({}, a=(0, 1))
    with pytest.raises(TypeError, match="is not a control spec"):
        widgets.controls(spec, k_tile="wide")
    with pytest.raises(TypeError, match="asks for a checkbox"):
        widgets.controls(spec, k_tile=bool)
    # the dataclass's own validation runs on the rebuilt object
    ws, current = widgets.controls(spec, k_tile=(0, 512))
    ws["k_tile"].value = 0
    with pytest.raises((ValueError, TypeError), match="k_tile"):
        current()


def test_a_clone_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    """A checkout cloned into ``./numlab`` (the repository root: no ``__init__.py``, the
    package one level down) and a script run from its parent: the src layout keeps the
    installed package first, so ``numlab.zoo`` resolves (the flat layout gave a namespace
    package and ``AttributeError: module 'numlab' has no attribute 'zoo'``)."""
    clone = tmp_path / "numlab"
    (clone / "numlab").mkdir(parents=True)
    (clone / "README.md").write_text("a clone\n")
    (clone / "numlab" / "stray.py").write_text("X = 1\n")
    (clone / "src" / "numlab").mkdir(parents=True)
    (clone / "src" / "numlab" / "__init__.py").write_text("raise ImportError('the clone was imported')\n")
    script = tmp_path / "run.py"
    script.write_text("import numlab, numlab.zoo\nprint(numlab.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).resolve() == Path(nl.__file__).resolve()
