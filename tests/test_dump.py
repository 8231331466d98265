"""Dumps: format, atomic writes, no overwrite without force, checksums, loading."""

from __future__ import annotations

import hashlib
import json
import os
import re
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits
from hypothesis import given
from hypothesis import strategies as st

import numlab
from numlab.compare import dump as D
from numlab.compare.dump import (
    MANIFEST,
    Dump,
    DumpError,
    dump_run,
    file_name_for,
    load_dump,
    write_dump,
)

DTYPES = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
          ml_dtypes.float8_e5m2, np.int32, np.bool_]


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, dt in enumerate(DTYPES):
        a = rng.standard_normal((3, 5)) * 4
        if dt is np.bool_:
            a = a > 0
        out[f"n{i}_{np.dtype(dt).name}"] = a.astype(dt)
    # special values survive bit for bit
    out["special_fp16"] = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 6e-8, 65504], np.float16)
    out["special_bf16"] = np.array([np.nan, -np.inf, -0.0, 1e-40], dtype=ml_dtypes.bfloat16)
    return out


def _fake_result():
    """A RunResult-like object (the contract's attributes) for a 4-node chain
    x -> a -> b -> c -> d where b, c are fused into block b1."""
    node = lambda name, op, ins: SimpleNamespace(name=name, op=op, inputs=tuple(ins))  # noqa: E731
    graph = SimpleNamespace(
        inputs={"x": (4,)},
        nodes=[node("a", "exp", ["x"]), node("b", "mul", ["a", "x"]), node("c", "add", ["b", "x"]),
               node("d", "tanh", ["c"])],
        outputs=["d"],
    )
    blocks = [SimpleNamespace(name="b0", members=["a"], kind="elementwise", outputs=["a"]),
              SimpleNamespace(name="b1", members=["b", "c"], kind="elementwise", outputs=["c"]),
              SimpleNamespace(name="b2", members=["d"], kind="elementwise", outputs=["d"])]
    plan = SimpleNamespace(blocks=blocks)
    vals = {k: np.arange(4, dtype=np.float16) + i for i, k in enumerate(["a", "c", "d"])}
    return SimpleNamespace(values=vals, graph=graph, plan=plan, mode="fused", fmt=numlab.FP16,
                           fingerprint="f" * 64)


# --------------------------------------------------------------------------
def test_roundtrip_bit_exact_every_dtype(tmp_path):
    arrays = _arrays()
    write_dump(tmp_path / "d", arrays, run_meta={"mode": "eager", "dtype": "fp16"})
    d = load_dump(tmp_path / "d")
    assert set(d.names) == set(arrays)
    for name, a in arrays.items():
        b = d.array(name)
        assert b.dtype == a.dtype, name
        assert b.shape == a.shape
        assert_same_bits(a, b, what=name)
        narrow = a.dtype.type.__module__ != "numpy"
        assert isinstance(d.array(name), np.memmap) != narrow  # numpy dtypes: memory-mapped
        assert not isinstance(d.array(name, mmap=False), np.memmap)
    # bf16/fp8 are stored as an exact float32 copy: plain numpy (and msit, which
    # reads .npy) sees the real values, never integer codes
    m = json.loads((tmp_path / "d" / MANIFEST).read_text())
    e = m["nodes"]["n3_bfloat16"]
    assert (e["encoding"], e["container"], e["dtype"]) == ("float32", "float32", "bf16")
    raw = np.load(tmp_path / "d" / e["file"])
    assert raw.dtype == np.float32
    assert np.array_equal(raw, arrays["n3_bfloat16"].astype(np.float64), equal_nan=True)
    assert m["nodes"]["n0_float16"]["encoding"] == "npy"
    # a copy edited to a value the format cannot hold is refused, by node name
    f = tmp_path / "d" / e["file"]
    raw[0] = 1.0 + 2.0**-20
    np.save(f, raw)
    d = load_dump(tmp_path / "d", verify=False)
    with pytest.raises(DumpError, match="n3_bfloat16.*not bf16"):
        d.array("n3_bfloat16")


def test_old_bits_encoding_is_still_read(tmp_path):
    a = np.array([1.5, -2.0, np.inf], dtype=ml_dtypes.bfloat16)
    write_dump(tmp_path / "d", {"y": np.zeros(3, np.float32)})
    f = tmp_path / "d" / "y.npy"
    np.save(f, a.view(np.uint16))
    man = json.loads((tmp_path / "d" / MANIFEST).read_text())
    man["nodes"]["y"].update(encoding="bits", dtype="bf16", container="uint16")
    (tmp_path / "d" / MANIFEST).write_text(json.dumps(man))
    got = load_dump(tmp_path / "d", verify=False).array("y")
    assert got.dtype == ml_dtypes.bfloat16 and got.tobytes() == a.tobytes()


def test_manifest_fields_and_checksums(tmp_path):
    res = _fake_result()
    dump_run(res, tmp_path / "run", model="chain", seed=3)
    m = json.loads((tmp_path / "run" / MANIFEST).read_text())
    assert m["numlab_version"] == numlab.__version__
    assert (m["mode"], m["dtype"], m["fingerprint"], m["model"], m["seed"]) == (
        "fused", "fp16", "f" * 64, "chain", 3)
    assert m["order"] == ["a", "b", "c", "d"]
    assert m["blocks"]["b1"]["members"] == ["b", "c"]
    assert m["blocks"]["b1"]["outputs"] == ["c"]
    assert set(m["nodes"]) == {"a", "c", "d"}
    # the fused-away node keeps its graph metadata for first-divergence tracing
    assert m["graph"]["b"]["inputs"] == ["a", "x"]
    for name, e in m["nodes"].items():
        for key in ("file", "op", "block", "inputs", "dtype", "shape", "sha256", "bytes"):
            assert key in e, (name, key)
        raw = (tmp_path / "run" / e["file"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == e["sha256"]  # independent hash
        assert len(raw) == e["bytes"]
        assert e["shape"] == [4] and e["dtype"] == "fp16"
    assert m["nodes"]["c"]["block"] == "b1" and m["nodes"]["c"]["op"] == "add"
    d = load_dump(tmp_path / "run")
    assert d.storage_format is numlab.FP16
    assert d.order == ["a", "b", "c", "d"]


def test_dump_run_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="values"):
        dump_run(object(), tmp_path / "x")
    with pytest.raises(ValueError, match="nodes=.*zz"):
        dump_run(_fake_result(), tmp_path / "x", nodes=["a", "zz"])
    with pytest.raises(TypeError, match="cannot be dumped"):
        write_dump(tmp_path / "y", {"s": np.array(["a", "b"])})
    assert not (tmp_path / "y").exists()


def test_never_overwrites_without_force(tmp_path):
    p = tmp_path / "d"
    write_dump(p, {"a": np.ones(3, np.float32)})
    before = (p / MANIFEST).read_bytes()
    with pytest.raises(FileExistsError, match="force"):
        write_dump(p, {"b": np.zeros(3, np.float32)})
    assert (p / MANIFEST).read_bytes() == before
    assert load_dump(p).names == ["a"]
    write_dump(p, {"b": np.zeros(3, np.float32)}, force=True)
    assert load_dump(p).names == ["b"]
    assert not (p / file_name_for("a")).exists()  # the old dump is gone, not merged
    # an existing empty directory is fine without force
    (tmp_path / "empty").mkdir()
    write_dump(tmp_path / "empty", {"a": np.ones(2)})
    # a file in the way is an error
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        write_dump(tmp_path / "file", {"a": np.ones(2)})
    # no staging or temporary leftovers
    assert [q.name for q in tmp_path.iterdir() if q.name.startswith(".")] == []


def test_force_never_replaces_a_directory_that_is_not_a_dump(tmp_path):
    user = tmp_path / "results"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a dump"):
        write_dump(user, {"a": np.ones(2)}, force=True)
    assert (user / "notes.txt").read_text() == "mine" and (user / "sub").is_dir()
    # a plain folder of .npy files (a dump from another tool) may be replaced with force
    plain = tmp_path / "plain"
    plain.mkdir()
    np.save(plain / "x.npy", np.zeros(2))
    with pytest.raises(FileExistsError, match="force"):
        write_dump(plain, {"a": np.ones(2)})
    write_dump(plain, {"a": np.ones(2)}, force=True)
    assert load_dump(plain).names == ["a"]


_RUN = "import sys; from numlab.cli import main; sys.exit(main(sys.argv[1:]))"


def test_cli_dumps_identical_across_processes(tmp_path):
    """Two processes with different hash seeds write the same bytes for every
    array and the same manifest apart from the creation time."""
    import subprocess
    import sys

    outs = []
    for hs in ("1", "12345"):
        d = tmp_path / f"d{hs}"
        env = dict(os.environ, PYTHONHASHSEED=hs)
        subprocess.run([sys.executable, "-c", _RUN, "run", "transformer_block", "--fmt", "bf16",
                        "--mode", "fused", "--seed", "3", "--dump", str(d)],
                       check=True, env=env, capture_output=True)
        outs.append(d)
    a, b = (json.loads((d / MANIFEST).read_text()) for d in outs)
    assert a.pop("created") and b.pop("created")
    assert a == b and len(a["nodes"]) > 20
    for name, e in a["nodes"].items():
        assert (outs[0] / e["file"]).read_bytes() == (outs[1] / e["file"]).read_bytes(), name


def test_atomic_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "d"
    write_dump(p, {"a": np.ones(3, np.float32)})
    calls = {"n": 0}
    real = D.atomic_save_npy

    def flaky(path, arr):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(path, arr)

    monkeypatch.setattr(D, "atomic_save_npy", flaky)
    with pytest.raises(OSError, match="disk full"):
        write_dump(p, {"x": np.ones(2), "y": np.ones(2)}, force=True)
    # the old dump is intact and nothing half-written is left around
    assert load_dump(p).names == ["a"]
    assert sorted(q.name for q in tmp_path.iterdir()) == ["d"]
    calls["n"] = 0
    with pytest.raises(OSError, match="disk full"):
        write_dump(tmp_path / "new", {"x": np.ones(2), "y": np.ones(2)})
    assert not (tmp_path / "new").exists()


def test_atomic_file_write_leaves_no_temp(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(RuntimeError):
        D.atomic_save_npy(tmp_path / "a.npy", np.ones(3))
    assert list(tmp_path.iterdir()) == []


def test_missing_and_corrupt_reported_by_name(tmp_path):
    p = tmp_path / "d"
    write_dump(p, {"ok": np.ones(4, np.float32), "gone": np.ones(4, np.float32),
                   "flipped": np.arange(8, dtype=np.float32), "short": np.ones(64, np.float32)})
    m = json.loads((p / MANIFEST).read_text())
    os.remove(p / m["nodes"]["gone"]["file"])
    f = p / m["nodes"]["flipped"]["file"]
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0x01
    f.write_bytes(bytes(raw))
    s = p / m["nodes"]["short"]["file"]
    s.write_bytes(s.read_bytes()[:-10])
    with pytest.raises(DumpError) as ei:
        load_dump(p)
    msg = str(ei.value)
    for name in ("gone", "flipped", "short"):
        assert name in msg
    assert "ok" not in ei.value.problems
    assert "missing file" in ei.value.problems["gone"]
    assert "sha256" in ei.value.problems["flipped"]
    assert "truncated" in ei.value.problems["short"]
    d = load_dump(p, strict=False)
    assert set(d.problems) == {"gone", "flipped", "short"}
    assert np.array_equal(d.array("ok"), np.ones(4, np.float32))
    with pytest.raises(DumpError, match="flipped"):
        d.array("flipped")
    # without verification the flipped file loads (its size is unchanged)
    d2 = load_dump(p, strict=False, verify=False)
    assert "flipped" not in d2.problems and "gone" in d2.problems


def test_bad_manifest(tmp_path):
    p = tmp_path / "d"
    write_dump(p, {"a": np.ones(2, np.float32)})
    (p / MANIFEST).write_text("{not json")
    with pytest.raises(DumpError, match="manifest"):
        load_dump(p)
    d = load_dump(p, strict=False)  # falls back to the plain folder
    assert d.manifest is None and d.names == ["a"] and "unreadable" in d.notes[0]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dump(tmp_path / "nope")


def test_plain_folder_and_single_file(tmp_path):
    p = tmp_path / "other_tool"
    (p / "layer1").mkdir(parents=True)
    np.save(p / "a.npy", np.ones(3, np.float32))
    np.save(p / "layer1" / "b.npy", np.zeros(2))
    np.save(p / "bf.npy", np.array([1.5, -2], dtype=ml_dtypes.bfloat16))  # saved as |V2
    (p / ".hidden").mkdir()
    np.save(p / ".hidden" / "c.npy", np.ones(1))
    d = load_dump(p)
    assert d.manifest is None
    assert d.names == ["a", "bf", "layer1/b"]
    bf = d.array("bf")
    assert bf.dtype == ml_dtypes.bfloat16 and list(bf.astype(float)) == [1.5, -2.0]
    one = load_dump(p / "a.npy")
    assert one.names == ["a"] and np.array_equal(one.array("a"), np.ones(3))
    # unreadable file: reported when read, by node and path
    (p / "junk.npy").write_bytes(b"not an npy file")
    d = load_dump(p)
    with pytest.raises(DumpError, match="junk.*unreadable"):
        d.array("junk")


def test_dump_repr_and_contains(tmp_path):
    write_dump(tmp_path / "d", {"a": np.ones(2)})
    d = load_dump(tmp_path / "d")
    assert isinstance(d, Dump) and "a" in d and len(d) == 1 and "1 nodes" in repr(d)
    with pytest.raises(KeyError, match="zz"):
        d.array("zz")


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=20, unique=True))
def test_file_names_safe_and_distinct(names):
    files = [file_name_for(n) for n in names]
    for f in files:
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.npy", f), f
        assert f != MANIFEST
    assert len(set(files)) == len(files)


def test_file_name_for_plain_and_bad():
    assert file_name_for("layer_norm_0") == "layer_norm_0.npy"
    assert file_name_for("a/b") != file_name_for("a_b")
    with pytest.raises(ValueError, match="node"):
        file_name_for("")


# --------------------------------------------------------------------------
# msprobe's and msit's layouts (numlab.compare.layouts)
# --------------------------------------------------------------------------
def _graph_arrays():
    rng = np.random.default_rng(4)
    arrays = {"x": rng.standard_normal(16).astype(np.float32),
              "y": rng.standard_normal((2, 8)).astype(ml_dtypes.bfloat16),
              "z": rng.standard_normal(8).astype(ml_dtypes.float8_e4m3fn),
              "w.v": rng.standard_normal(4).astype(np.float16)}
    meta = {"x": {"op": "input", "inputs": []}, "y": {"op": "mul", "inputs": ["x"]},
            "z": {"op": "cast", "inputs": ["y"]}, "w.v": {"op": "exp", "inputs": ["z", "x"]}}
    return arrays, meta


@pytest.mark.parametrize("layout", ["msprobe", "msit"])
def test_tool_layouts_round_trip_bits_and_dtypes(tmp_path, layout):
    torch = pytest.importorskip("torch", reason="msprobe/msit dumps hold torch tensors")
    from numlab.compare import layouts as L

    arrays, meta = _graph_arrays()
    writer = L.write_msprobe_dump if layout == "msprobe" else L.write_msit_dump
    leaf = writer(tmp_path / "d", arrays, node_meta=meta)
    for p in (leaf, tmp_path / "d"):
        assert L.detect_layout(p) == layout
        d = L.load_any(p)
        assert d.names == list(arrays) and not d.problems
        for n, a in arrays.items():
            got = d.array(n)
            assert got.dtype == a.dtype and got.shape == a.shape
            assert got.tobytes() == np.ascontiguousarray(a).tobytes()  # same bits
    # the files hold real values in the tensor's own torch dtype: never integer codes
    files = sorted(leaf.rglob("*.pt*"))
    dtypes = {str(torch.load(f, weights_only=True).dtype) for f in files}
    assert {"torch.bfloat16", "torch.float8_e4m3fn", "torch.float16", "torch.float32"} <= dtypes
    assert not any("int" in t for t in dtypes)
    if layout == "msprobe":
        dj = json.loads((leaf / "dump.json").read_text())
        api = dj["data"]["Numlab.w_v.0.forward"]  # dots become _ : msprobe splits names at dots
        assert [e["data_name"] for e in api["input_args"]] == ["Numlab.w_v.0.forward.input.0.pt",
                                                               "Numlab.w_v.0.forward.input.1.pt"]
        assert api["output"][0]["dtype"] == "torch.float16" and api["output"][0]["shape"] == [4]
    else:
        tree = json.loads((leaf / "model_tree.json").read_text())
        assert [c["name"] for c in tree["children"]] == ["root.x", "root.y", "root.z", "root.w_v"]
        assert (leaf / "0" / "root.y" / "output.pth").is_file()
    # a changed byte (same size) fails its SHA-256; a missing file is named
    f = leaf / json.loads((leaf / L.SIDECAR).read_text())["nodes"]["y"]["file"]
    raw = bytearray(f.read_bytes())
    raw[-30] ^= 1
    f.write_bytes(bytes(raw))
    assert "sha256" in L.load_any(leaf).problems["y"]
    with pytest.raises(DumpError, match="bad file"):
        L.load_any(leaf, strict=True)
    f.unlink()
    assert "missing file" in L.load_any(leaf).problems["y"]
    # no overwrite without force
    with pytest.raises(FileExistsError, match="force"):
        writer(tmp_path / "d", arrays, node_meta=meta)
    writer(tmp_path / "d", arrays, node_meta=meta, force=True)


def _fixture(rel):
    from pathlib import Path

    return Path(__file__).parent / "data" / "compare_tools" / rel


@pytest.mark.parametrize("key", ["msprobe83", "msprobe26", "msit"])
def test_dumps_the_tools_wrote_are_read(key):
    """Dumps written by mindstudio-probe 8.3.3 / 26.2.0 and msit 8.2.0 (recorded
    fixtures): every tensor file is read, dtype and shape as the tool's own
    metadata says; bf16 comes back as bf16 values."""
    pytest.importorskip("torch", reason="the tools' dumps hold torch tensors")
    from numlab.compare import layouts as L

    index = json.loads(_fixture("index.json").read_text())
    d = L.load_any(_fixture(index["tool"][f"{key}/golden"]))
    assert not d.problems and len(d) >= 5
    if key == "msit":
        assert "root.norm" in d.names and "root.block.lin" in d.names
        assert d.array("root.norm").shape == (2, 8)
    else:
        dj = json.loads((d.path / "dump.json").read_text())["data"]
        for n in d.names:
            meta = d.entries[n].meta
            a = d.array(n)
            assert list(a.shape) == meta["shape"], n
            assert meta["dtype"].replace("torch.", "") in (str(a.dtype), "bfloat16"), n
        assert "Functional.linear.0.forward.output.0" in d.names
        bf = [n for n in d.names if d.entries[n].meta["dtype"] == "torch.bfloat16"]
        assert all(d.array(n).dtype == ml_dtypes.bfloat16 for n in bf)
        assert bf or key == "msprobe26"  # 26.2.0 does not dump Tensor.to, the bf16 cast
        assert set(dj) >= {"Functional.linear.0.forward", "Torch.softmax.0.forward"}


@pytest.mark.parametrize("layout", ["numlab", "msprobe", "msit"])
def test_dump_run_as_each_layout_compares_like_the_native_dump(tmp_path, layout):
    """A RunResult dumped in any layout is read back with its graph metadata:
    the compare rows (fused-block matching included) are the native dump's."""
    pytest.importorskip("torch", reason="msprobe/msit dumps hold torch tensors")
    from numlab.compare import compare_dumps
    from numlab.compare.layouts import dump_run_as, write_msprobe_dump

    res = _fake_result()
    p = dump_run_as(res, tmp_path / layout, layout)
    native = dump_run(res, tmp_path / "native")
    a, b = compare_dumps(native, p), compare_dumps(native, native)
    assert [(r["node"], r["match"], r["block"]) for r in a.rows] == \
        [(r["node"], r["match"], r["block"]) for r in b.rows]
    assert all(r["bitwise_equal_ratio"] == 1.0 for r in a.compared) and len(a.compared) == 3
    with pytest.raises(ValueError, match="layout='zip' is not valid"):
        dump_run_as(res, tmp_path / "z", "zip")
    with pytest.raises(ValueError, match="same msprobe API name"):
        write_msprobe_dump(tmp_path / "clash", {"a.b": np.zeros(2), "a_b": np.ones(2)})
