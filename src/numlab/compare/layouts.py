"""Dumps in the layouts msprobe and msit write, read and written by numlab.

msprobe (mindstudio-probe 8.3.3 / 26.2.0, PyTorch, ``task: tensor``)::

    DIR/step0/rank0/dump.json           # {"task", "level", "framework",
                                        #  "dump_data_dir", "data": {API: {
                                        #  "input_args": [...], "input_kwargs": {...},
                                        #  "output": [{"type": "torch.Tensor", "dtype",
                                        #  "shape", "Max", "Min", "Mean", "Norm",
                                        #  "requires_grad", "data_name"}]}}}
    DIR/step0/rank0/dump_tensor_data/<API>.<input|output>.<i>.pt   # torch.save
    DIR/step0/rank0/stack.json, construct.json

(msprobe names the rank folder ``rank`` or ``proc<pid>`` outside a
distributed job; the reader takes any.)  ``msprobe compare`` pairs the
``dump.json`` of two such folders.

msit (msit 8.2.0 ``msit llm dump`` of a torch model)::

    DIR/msit_dump_<time>/torch_tensors/<device>_<pid>/model_tree.json
    DIR/msit_dump_<time>/torch_tensors/<device>_<pid>/<token>/<module>/output.pth
                                                      .../input_<i>.pth

``model_tree.json`` is ``{"name": "root", "type": ..., "children": [...]}``;
``msit llm compare -gp <.../torch_tensors/cpu_0> -mp ...`` pairs modules by
the tree.

numlab writes a graph as these layouts with one API / module per node
(``Numlab.<node>.0.forward`` with the node's inputs as ``input_args``;
module ``root.<node>`` of type ``<op>``), tensors as **torch tensors of
their own dtype** (bf16 as ``torch.bfloat16``, fp8 as ``torch.float8_*``:
the tools read real values, never integer codes), and a sidecar
``numlab_manifest.json`` (ignored by the tools) with each file's SHA-256 and
the graph's order, blocks and inputs, so numlab reading its own dump back
gets the same rows as from its native layout.  Reading needs torch (the
tensors are ``.pt``/``.pth``); writing too.

:func:`load_any` opens any of numlab's native dump, an msprobe dump or an
msit dump (what :func:`numlab.compare.compare_dumps` calls).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..formats import get_format
from .dump import (
    Dump,
    DumpEntry,
    DumpError,
    _swap_into_place,
    atomic_write_bytes,
    describe_graph,
    dump_run,
    format_name,
    load_dump,
    sha256_file,
)
from .flavors import msprobe_api_name, msprobe_items, msprobe_stats

__all__ = [
    "SIDECAR",
    "LAYOUTS",
    "detect_layout",
    "load_any",
    "write_msprobe_dump",
    "load_msprobe_dump",
    "write_msit_dump",
    "load_msit_dump",
    "dump_run_as",
    "to_torch",
    "from_torch",
]

SIDECAR = "numlab_manifest.json"
LAYOUTS = ("numlab", "msprobe", "msit")
_TORCH_DTYPES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
                 "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def _torch():
    try:
        import torch  # optional heavy dependency: the msprobe/msit layouts hold torch tensors
    except ImportError as exc:  # pragma: no cover - torch is in the test environment
        raise ImportError("msprobe and msit dumps hold torch tensors (.pt/.pth): install torch") from exc
    return torch


def to_torch(a: np.ndarray):
    """A torch tensor of the same format and bits (bf16 -> torch.bfloat16,
    fp8 -> torch.float8_e4m3fn / float8_e5m2; never integer codes)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if a.dtype.kind in "biufc" and a.dtype.type.__module__ == "numpy":
        return torch.from_numpy(a.copy())
    name = get_format(a.dtype).name
    tname = _TORCH_DTYPES.get(name)
    if tname is None or not hasattr(torch, tname):
        raise TypeError(f"format {name} has no torch dtype; valid: {sorted(_TORCH_DTYPES)}")
    bits = {1: np.uint8, 2: np.uint16}[a.dtype.itemsize]
    return torch.from_numpy(a.view(bits).copy()).view(getattr(torch, tname))


def from_torch(t) -> np.ndarray:
    """A numpy array of a torch tensor, same format and bits (bf16/fp8 as the
    ml_dtypes dtype numlab uses)."""
    torch = _torch()
    t = t.detach().cpu().contiguous()
    for fmt, tname in _TORCH_DTYPES.items():
        if fmt in ("fp64", "fp32", "fp16"):
            continue
        if hasattr(torch, tname) and t.dtype == getattr(torch, tname):
            bits = torch.uint8 if t.element_size() == 1 else torch.uint16
            return t.view(bits).numpy().view(get_format(fmt).dtype)
    return t.numpy()


def _stats(t) -> dict:
    """msprobe's dump.json statistics of a tensor (computed by torch in the
    tensor's dtype, as msprobe does: :func:`numlab.compare.flavors.msprobe_stats`)."""
    return msprobe_stats(from_torch(t))


def _torch_save(path: Path, t) -> str:
    """torch.save ``t`` to ``path`` atomically; returns its SHA-256."""
    torch = _torch()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(t, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha256_file(path)


def _check_out(path: Path, force: bool) -> None:
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"dump path {str(path)!r} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise FileExistsError(f"dump directory {str(path)!r} already exists and is not empty; "
                              "pass force=True (CLI: --force) to replace it")


def _staged(path: Path, force: bool, build) -> Path:
    """Build the dump in a sibling staging folder, then swap it into place."""
    _check_out(path, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-", dir=path.parent))
    try:
        build(stage)
        _swap_into_place(stage, path)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return path


def _graph(arrays: Mapping, node_meta: Mapping | None, run_meta: Mapping | None):
    node_meta = {k: dict(v) for k, v in (node_meta or {}).items()}
    run_meta = dict(run_meta or {})
    order = [n for n in run_meta.get("order") or list(arrays) if n in arrays]
    order += [n for n in arrays if n not in order]
    return node_meta, run_meta, order


# --------------------------------------------------------------------------
# msprobe
# --------------------------------------------------------------------------
def _sidecar_entries(root: Path, side: dict, verify: bool, key) -> tuple[dict, dict]:
    """The entries of a tool layout written by numlab, from its sidecar manifest
    (each node's file and metadata, its SHA-256 under ``key(file)``), and the
    manifest without the checksums."""
    files = side.get("files") or {}
    entries = {}
    for n in side.get("order") or list(side["nodes"]):
        meta = dict(side["nodes"].get(n) or {})
        rel = str(meta.get("file", ""))
        entries[n] = DumpEntry(n, root / rel, meta, _verified(root / rel, files.get(key(rel)), verify))
    return entries, {k: v for k, v in side.items() if k != "files"}


def _write_sidecar(root: Path, layout: str, arrays, order, files, node_meta, run_meta, file_of) -> None:
    """numlab's sidecar manifest beside a tool layout: every file's SHA-256, each
    node's metadata with the file a tool reads (``file_of(node)``), the graph."""
    side = dict(run_meta, layout=layout, order=order, files=files,
                nodes={n: {**{k: v for k, v in node_meta.get(n, {}).items() if k != "file"},
                           "file": file_of(n),
                           "dtype": format_name(np.asarray(arrays[n]).dtype)} for n in order},
                graph={k: v for k, v in node_meta.items() if k not in arrays})
    atomic_write_bytes(root / SIDECAR, json.dumps(side, indent=1, default=str).encode())


def write_msprobe_dump(path, arrays: Mapping[str, np.ndarray], *, node_meta: Mapping | None = None,
                       run_meta: Mapping | None = None, force: bool = False, step: int = 0,
                       rank: int = 0) -> Path:
    """Write ``arrays`` (node -> array) as an msprobe PyTorch tensor dump;
    returns the folder holding ``dump.json`` (``path/step<step>/rank<rank>``),
    what ``msprobe compare`` takes (as ``npu_path``/``bench_path`` of its
    compare.json in 8.3.3, ``--target_path``/``--golden_path`` in 26.2.0).

    Each node is API ``Numlab.<node>.0.forward``: its array is ``output.0``
    and the arrays of its inputs (``node_meta[node]["inputs"]``, when
    dumped) are ``input.<i>`` copies, as msprobe dumps an API's inputs; this
    lets msprobe's input-versus-output rules run.  Replaces a non-empty
    ``path`` only with ``force``."""
    path = Path(path)
    node_meta, run_meta, order = _graph(arrays, node_meta, run_meta)
    leaf = Path(f"step{step}") / f"rank{rank}"
    if len({msprobe_api_name(n) for n in order}) != len(order):
        raise ValueError("two node names map to the same msprobe API name (dots become _); rename them")

    def build(stage: Path):
        root = stage / leaf
        data_dir = root / "dump_tensor_data"
        data_dir.mkdir(parents=True)
        data, files = {}, {}

        def entry(t, name):
            sha = _torch_save(data_dir / name, t)
            files[name] = sha
            return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape), **_stats(t),
                    "requires_grad": False, "data_name": name}

        tensors = {n: to_torch(np.asarray(arrays[n])) for n in order}
        for n in order:
            api = msprobe_api_name(n)
            ins = [i for i in node_meta.get(n, {}).get("inputs") or [] if i in tensors]
            data[api] = {
                "input_args": [entry(tensors[i], f"{api}.input.{k}.pt") for k, i in enumerate(ins)],
                "input_kwargs": {},
                "output": [entry(tensors[n], f"{api}.output.0.pt")],
            }
        dump = {"task": "tensor", "level": "L1", "framework": "pytorch",
                "dump_data_dir": str((path / leaf / "dump_tensor_data").resolve()), "data": data}
        atomic_write_bytes(root / "dump.json", json.dumps(dump, indent=1).encode())
        atomic_write_bytes(root / "stack.json", b"{}")
        atomic_write_bytes(root / "construct.json", b"{}")
        _write_sidecar(root, "msprobe", arrays, order, files, node_meta, run_meta,
                       lambda n: f"dump_tensor_data/{msprobe_api_name(n)}.output.0.pt")

    _staged(path, force, build)
    return path / leaf


def _find(path: Path, name: str) -> list[Path]:
    if (path / name).is_file():
        return [path / name]
    return sorted(p for p in path.rglob(name) if not any(q.startswith(".") for q in p.relative_to(path).parts))


class _TorchDump(Dump):
    """A dump whose tensors are torch files (.pt/.pth)."""

    def array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        if name not in self.entries:
            raise KeyError(f"node {name!r} is not in dump {str(self.path)!r}")
        e = self.entries[name]
        if e.problem:
            raise DumpError(f"node {name!r}: {e.problem}", {name: e.problem})
        torch = _torch()
        try:
            t = torch.load(e.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated, not a torch file, a pickle of something else
            reason = f"unreadable file {str(e.path)!r}: {type(exc).__name__}: {exc}"
            raise DumpError(f"node {name!r}: {reason}", {name: reason}) from None
        if not isinstance(t, torch.Tensor):
            reason = f"file {str(e.path)!r} holds {type(t).__name__}, not a tensor"
            raise DumpError(f"node {name!r}: {reason}", {name: reason})
        return from_torch(t)


def _sidecar(root: Path, verify: bool) -> tuple[dict | None, list[str]]:
    p = root / SIDECAR
    if not p.is_file():
        return None, []
    try:
        side = json.loads(p.read_text())
        if not isinstance(side, dict) or not isinstance(side.get("nodes"), dict):
            raise ValueError("no 'nodes' object")
        return side, []
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        return None, [f"manifest {str(p)!r} is unreadable ({exc}); reading the dump without it"]


def _verified(fpath: Path, sha: str | None, verify: bool) -> str | None:
    if not fpath.is_file():
        return f"missing file {str(fpath)!r}"
    if verify and sha:
        got = sha256_file(fpath)
        if got != sha:
            return f"corrupt file {str(fpath)!r}: sha256 {got[:12]}... != manifest {sha[:12]}..."
    return None


def load_msprobe_dump(path, *, verify: bool = True, strict: bool = False) -> Dump:
    """Read an msprobe PyTorch tensor dump: ``path`` is ``dump.json``, the
    folder holding it, or a folder with one ``step*/rank*/dump.json`` below.

    A dump numlab wrote (with :data:`SIDECAR`) gives one entry per node (its
    ``output.0``), with the graph metadata and SHA-256 checks.  Any other
    gives one entry per dumped tensor named as msprobe names it
    (``Torch.matmul.0.forward.output.0``, ``...input.1``, ``...input.dim``
    for a kwarg, ``...input.1.0`` inside a list argument), in dump.json order; the tensor's dtype and shape from
    dump.json are kept as metadata."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dump path {str(p)!r} does not exist")
    found = [p] if p.is_file() else _find(p, "dump.json")
    if not found:
        raise DumpError(f"no dump.json under {str(p)!r}: not an msprobe dump")
    notes = []
    if len(found) > 1:
        notes.append(f"{len(found)} dump.json under {str(p)!r} (steps/ranks); reading {str(found[0])!r} "
                     "-- give the step/rank folder to choose")
    djson = found[0]
    root = djson.parent
    try:
        dump = json.loads(djson.read_text())
        data = dump["data"]
        if not isinstance(data, dict):
            raise ValueError("'data' is not an object")
    except (ValueError, KeyError, OSError, UnicodeDecodeError) as exc:
        raise DumpError(f"{str(djson)!r} is not an msprobe dump.json ({exc})") from None
    data_dir = root / "dump_tensor_data"
    side, more = _sidecar(root, verify)
    notes += more
    entries: dict[str, DumpEntry] = {}
    manifest = None
    if side is not None:  # the msprobe writer keys its checksums by file name
        entries, manifest = _sidecar_entries(root, side, verify, key=lambda rel: Path(rel).name)
    else:
        for api, rec in data.items():
            if not isinstance(rec, dict):
                continue
            for suffix, t in msprobe_items(rec):  # nested lists give input.<i>.<j>, as msprobe names them
                if t.get("data_name"):
                    name = f"{api}.{suffix}"
                    f = data_dir / t["data_name"]
                    meta = {"dtype": t.get("dtype"), "shape": t.get("shape"), "api": api}
                    entries[name] = DumpEntry(name, f, meta, _verified(f, None, verify))
    d = _TorchDump(root, manifest, entries, notes)
    if strict and d.problems:
        raise DumpError(f"dump {str(root)!r} has {len(d.problems)} bad file(s)", d.problems)
    return d


# --------------------------------------------------------------------------
# msit
# --------------------------------------------------------------------------
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def _msit_module(node: str) -> str:
    """The module name of a node in numlab's msit dump: ``root.<node>``
    (characters other than letters, digits, ``_`` and ``-`` become ``_``:
    msit joins module names with dots and uses them as folder names)."""
    return "root." + _SAFE.sub("_", node)


def write_msit_dump(path, arrays: Mapping[str, np.ndarray], *, node_meta: Mapping | None = None,
                    run_meta: Mapping | None = None, force: bool = False, token: int = 0,
                    device: str = "cpu", pid: int = 0, inputs: bool = False) -> Path:
    """Write ``arrays`` as msit's torch dump tree; returns the
    ``.../torch_tensors/<device>_<pid>`` folder that ``msit llm compare
    -gp/-mp`` takes.  Each node is module ``root.<node>`` of type ``<op>``
    with ``output.pth`` (its array, a torch tensor of its own dtype) and,
    with ``inputs=True``, ``input_<i>.pth`` (its inputs' arrays; msit's
    compare reads only outputs, so they are off by default)."""
    path = Path(path)
    node_meta, run_meta, order = _graph(arrays, node_meta, run_meta)
    leaf = Path(f"msit_dump_{time.strftime('%Y%m%d_%H%M%S', time.gmtime())}") / "torch_tensors" / f"{device}_{pid}"
    mods = {n: _msit_module(n) for n in order}
    if len(set(mods.values())) != len(mods):
        raise ValueError("two node names map to the same msit module name; rename them")

    def build(stage: Path):
        root = stage / leaf
        tok = root / str(token)
        tok.mkdir(parents=True)
        tensors = {n: to_torch(np.asarray(arrays[n])) for n in order}
        files = {}
        for n in order:
            d = tok / mods[n]
            d.mkdir()
            files[f"{token}/{mods[n]}/output.pth"] = _torch_save(d / "output.pth", tensors[n])
            ins = [i for i in node_meta.get(n, {}).get("inputs") or [] if i in tensors and inputs]
            for k, i in enumerate(ins):
                files[f"{token}/{mods[n]}/input_{k}.pth"] = _torch_save(d / f"input_{k}.pth", tensors[i])
        tree = {"name": "root", "type": "NumlabGraph", "children": [
            {"name": mods[n], "type": str(node_meta.get(n, {}).get("op") or "Node"), "children": []}
            for n in order]}
        atomic_write_bytes(root / "model_tree.json", json.dumps(tree).encode())
        _write_sidecar(root, "msit", arrays, order, files, node_meta, run_meta,
                       lambda n: f"{token}/{mods[n]}/output.pth")

    _staged(path, force, build)
    return path / leaf


def _tree_modules(node: Mapping, out: list) -> None:
    """Depth-first module names of a model_tree.json (iterative over levels
    would lose msit's order; trees are shallow)."""
    out.append((node.get("name"), node.get("type")))
    for c in node.get("children") or []:
        if isinstance(c, Mapping):
            _tree_modules(c, out)


def load_msit_dump(path, *, verify: bool = True, strict: bool = False) -> Dump:
    """Read msit's torch dump tree: ``path`` is the ``<device>_<pid>`` folder
    (holding ``model_tree.json``), a token folder below it, or a folder with
    one such tree below.  A dump numlab wrote gives one entry per node; any
    other gives one entry per module output, ``<module>`` (``<module>.output_<i>``
    for several outputs; ``<token>/<module>`` when several tokens are
    dumped), in model-tree order."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dump path {str(p)!r} does not exist")
    token = None
    for up in (p, p.parent):
        if (up / "model_tree.json").is_file():
            root = up
            if up != p:
                token = p.name
            break
    else:
        found = _find(p, "model_tree.json")
        if not found:
            raise DumpError(f"no model_tree.json under {str(p)!r}: not an msit torch dump")
        root = found[0].parent
    notes = []
    side, more = _sidecar(root, verify)
    notes += more
    entries: dict[str, DumpEntry] = {}
    manifest = None
    if side is not None:  # the msit writer keys its checksums by the path under the root
        entries, manifest = _sidecar_entries(root, side, verify, key=lambda rel: rel)
    else:
        try:
            tree = json.loads((root / "model_tree.json").read_text())
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise DumpError(f"{str(root / 'model_tree.json')!r} is unreadable ({exc})") from None
        mods: list = []
        _tree_modules(tree, mods)
        tokens = [token] if token is not None else sorted(
            (q.name for q in root.iterdir() if q.is_dir()), key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
        for tok in tokens:
            for mod, typ in mods:
                d = root / tok / str(mod)
                outs = sorted(d.glob("output*.pth")) + sorted(d.glob("output*.pt")) if d.is_dir() else []
                for f in outs:
                    name = str(mod) if len(outs) == 1 else f"{mod}.{f.stem}"
                    if len(tokens) > 1:
                        name = f"{tok}/{name}"
                    entries[name] = DumpEntry(name, f, {"op": typ}, _verified(f, None, verify))
        # the module types (msit's golden_op_type/my_op_type); no order or edges: msit's own
        # dump records neither
        manifest = {"nodes": {n: {"op": e.meta["op"]} for n, e in entries.items()}} if entries else None
    d = _TorchDump(root, manifest, entries, notes)
    if strict and d.problems:
        raise DumpError(f"dump {str(root)!r} has {len(d.problems)} bad file(s)", d.problems)
    return d


# --------------------------------------------------------------------------
# any layout
# --------------------------------------------------------------------------
def detect_layout(path) -> str:
    """``"msprobe"`` (a ``dump.json`` at or below ``path``), ``"msit"`` (a
    ``model_tree.json``), else ``"numlab"`` (manifest.json, plain .npy
    folders, single .npy files)."""
    p = Path(path)
    if p.is_file():
        return "msprobe" if p.name == "dump.json" else "numlab"
    if not p.is_dir() or (p / "manifest.json").is_file():
        return "numlab"
    if (p / "dump.json").is_file():
        return "msprobe"
    if (p / "model_tree.json").is_file() or (p.parent / "model_tree.json").is_file():
        return "msit"
    if _find(p, "dump.json"):
        return "msprobe"
    if _find(p, "model_tree.json"):
        return "msit"
    return "numlab"


def load_any(path, *, verify: bool = True, strict: bool = False) -> Dump:
    """Load a dump of any layout (:func:`detect_layout`)."""
    layout = detect_layout(path)
    if layout == "msprobe":
        return load_msprobe_dump(path, verify=verify, strict=strict)
    if layout == "msit":
        return load_msit_dump(path, verify=verify, strict=strict)
    return load_dump(path, verify=verify, strict=strict)


def dump_run_as(result, path, layout: str, force: bool = False) -> Path:
    """Dump a RunResult (``.values``, ``.graph``, ``.plan``) in ``layout``
    (``numlab``, ``msprobe`` or ``msit``); returns the path a tool takes."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not valid; valid: {list(LAYOUTS)}")
    if layout == "numlab":
        return dump_run(result, path, force=force)
    node_meta, run_meta = describe_graph(getattr(result, "graph", None), getattr(result, "plan", None))
    run_meta.update(mode=getattr(result, "mode", None), dtype=format_name(getattr(result, "fmt", None)))
    writer = write_msprobe_dump if layout == "msprobe" else write_msit_dump
    return writer(path, result.values, node_meta=node_meta, run_meta=run_meta, force=force)
