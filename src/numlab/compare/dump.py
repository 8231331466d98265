"""Per-node dumps: one ``.npy`` file per node plus ``manifest.json``.

Layout of a dump directory::

    DIR/
      manifest.json         # written last: a dump without it is incomplete
      <node>.npy            # one per dumped node (file name sanitised, see
                            # :func:`file_name_for`; the manifest maps node -> file)

``manifest.json`` holds (``FORMAT`` = 1)::

    {"format": 1, "numlab_version": ..., "mode": "fused", "dtype": "fp16",
     "fingerprint": "<sha256 of the run>", "model": ..., "seed": ...,
     "order": [node names in topological order],
     "graph_inputs": [...], "graph_outputs": [...],
     "blocks": {block name: {"members": [...], "kind": ..., "outputs": [...],
                             "codegen": bool}},
     "decomposed": {node of the executed graph: composite node it came from},
     "nodes": {node: {"file", "op", "category", "block", "inputs",
                      "dtype", "container", "encoding", "shape",
                      "sha256", "bytes"}}}

``dtype`` is the numlab format name of the stored values (``"bf16"``) or the
numpy dtype name when it has none; ``encoding`` is ``"npy"`` (the file holds
the values in their own numpy dtype) or ``"float32"`` (formats numpy cannot
save, bf16 and fp8, are stored as a float32 copy -- exact, every bf16/fp8 value
is a float32 -- so msit, msprobe or plain numpy read the real values, never
integer codes; loading casts back to the format, checking the values are
representable).  Older dumps with ``encoding: "bits"`` (unsigned
bit patterns) are still read.  For the tools' own layouts (torch ``.pt``
files of the real dtype) see :mod:`numlab.compare.layouts`.

Writes are atomic: every file is written to a temporary name and moved into
place with :func:`os.replace`, and the whole dump is staged in a sibling
directory that replaces ``DIR`` only once complete, so a crash never leaves a
half-written dump under ``DIR``.  An existing non-empty ``DIR`` is never
replaced unless ``force=True`` (CLI ``--force``).

Loading (:func:`load_dump`) memory-maps the arrays (``np.load(mmap_mode="r")``),
verifies every file's SHA-256 in 1 MiB blocks, and reports missing or corrupt
files by node name and path.  A folder without a manifest (a dump from another
tool) is read as ``<relative path without .npy>`` -> array; a single ``.npy``
file is a one-entry dump.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__, ops
from ..formats import FORMATS, Format, get_format

__all__ = [
    "MANIFEST",
    "FORMAT",
    "DumpError",
    "DumpEntry",
    "Dump",
    "file_name_for",
    "check_target",
    "format_name",
    "natural_key",
    "sha256_file",
    "atomic_write_bytes",
    "atomic_save_npy",
    "write_dump",
    "dump_run",
    "load_dump",
]

MANIFEST = "manifest.json"
FORMAT = 1
_HASH_BLOCK = 1 << 20


class DumpError(ValueError):
    """A dump cannot be read as asked; ``problems`` maps node -> reason."""

    def __init__(self, message: str, problems: Mapping[str, str] | None = None):
        super().__init__(message)
        self.problems = dict(problems or {})


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_name_for(node: str) -> str:
    """The ``.npy`` file name of ``node``: characters outside ``[A-Za-z0-9._-]``
    become ``_``; if anything changed (or the name starts with a dot), the first
    8 hex digits of the name's SHA-1 are appended so two names never share a
    file."""
    if not isinstance(node, str) or not node:
        raise ValueError(f"node={node!r} is not a valid node name; it must be a non-empty str")
    safe = _SAFE.sub("_", node)
    if safe != node or safe.startswith(".") or safe == MANIFEST[:-5]:
        safe = f"{safe.lstrip('.') or 'node'}-{hashlib.sha1(node.encode()).hexdigest()[:8]}"
    return safe + ".npy"


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB blocks (constant memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_HASH_BLOCK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike):
    """Yield a binary file that becomes ``path`` only when the block ends
    without error: a temporary file in the same directory, flushed, fsynced,
    then :func:`os.replace`-d into place; on error it is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same
    directory, fsync, then :func:`os.replace`)."""
    with _atomic_file(path) as f:
        f.write(data)


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> str:
    """``np.save`` ``array`` to ``path`` atomically; returns the file's SHA-256
    (computed while writing, so the file is not read back)."""
    with _atomic_file(path) as raw:
        hw = _HashingWriter(raw)
        np.save(hw, np.asarray(array), allow_pickle=False)
    return hw.hexdigest()


class _HashingWriter:
    """File-like wrapper that hashes what passes through."""

    def __init__(self, f):
        self._f = f
        self._h = hashlib.sha256()

    def write(self, b) -> int:
        mv = memoryview(b).cast("B")
        self._h.update(mv)
        return self._f.write(mv)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _unlink_quiet(p) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def format_name(dtype) -> str | None:
    """numlab format name of a numpy dtype or Format (``"bf16"``), else the
    dtype's own name; None stays None."""
    if dtype is None:
        return None
    try:
        return get_format(dtype).name
    except (TypeError, ValueError):
        return str(dtype)


def _encode_for_save(arr: np.ndarray) -> tuple[np.ndarray, str]:
    """(array numpy can save faithfully, encoding): numpy bool/int/float/complex
    as they are; bf16/fp8 (ml_dtypes) as an exact float32 copy (real values
    for every reader, not integer codes)."""
    if arr.dtype.kind in "biufc" and arr.dtype.type.__module__ == "numpy":
        return arr, "npy"
    try:
        fmt = get_format(arr.dtype)
    except (TypeError, ValueError):
        fmt = None
    if fmt is None or fmt.dtype is None:
        raise TypeError(
            f"array dtype {arr.dtype} cannot be dumped; supported: numpy bool/int/float "
            f"and the numlab formats {sorted(FORMATS)}"
        )
    return arr.astype(np.float32), "float32"


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------
def check_target(path: str | os.PathLike, force: bool) -> None:
    """Raise FileExistsError when writing a dump to ``path`` would replace
    something: a file, a non-empty directory without ``force``, or (even with
    ``force``) a non-empty directory that is not a dump -- one with neither
    ``manifest.json`` nor only ``.npy`` files -- since replacing a dump
    deletes the whole directory."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"dump path {str(path)!r} exists and is not a directory")
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not force:
        raise FileExistsError(
            f"dump directory {str(path)!r} already exists and is not empty; "
            "pass force=True (CLI: --force) to replace it"
        )
    if not (path / MANIFEST).is_file():
        other = [q.name for q in path.iterdir() if not (q.is_file() and q.suffix == ".npy")]
        if other:
            raise FileExistsError(
                f"dump directory {str(path)!r} is not a dump (no {MANIFEST}; it holds {sorted(other)[:5]}); "
                "refusing to replace it even with force -- choose another directory"
            )


def write_dump(
    path: str | os.PathLike,
    arrays: Mapping[str, np.ndarray],
    *,
    node_meta: Mapping[str, Mapping] | None = None,
    run_meta: Mapping | None = None,
    force: bool = False,
) -> Path:
    """Write ``arrays`` (node name -> array) as a dump directory at ``path``.

    Parameters
    ----------
    path : path
        The dump directory.  Must not exist or be empty unless ``force``.
    arrays : mapping
        Node name -> array (numpy bool/int/float or an ml_dtypes format).
    node_meta : mapping, optional
        Node name -> extra manifest fields (``op``, ``category``, ``block``,
        ``inputs``); nodes without arrays may appear (their metadata, e.g. the
        inputs of a node fused into a block, is kept under ``"graph"``).
    run_meta : mapping, optional
        Top-level manifest fields (``mode``, ``dtype``, ``fingerprint``,
        ``order``, ``blocks``, ...).
    force : bool
        Replace an existing non-empty directory.

    Returns
    -------
    Path of the written dump.

    Raises
    ------
    FileExistsError
        ``path`` exists and is not empty and ``force`` is False.
    """
    path = Path(path)
    check_target(path, force)
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping of node name -> array, got {type(arrays).__name__}")
    node_meta = dict(node_meta or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-", dir=path.parent))
    try:
        nodes: dict[str, dict] = {}
        used: set[str] = set()
        for name, value in arrays.items():
            arr = np.asarray(value)
            stored, encoding = _encode_for_save(arr)
            fname = file_name_for(name)
            if fname in used:  # pragma: no cover - sha1 suffix makes this practically impossible
                raise ValueError(f"two nodes map to the file name {fname!r}")
            used.add(fname)
            digest = atomic_save_npy(stage / fname, stored)
            entry = {k: v for k, v in node_meta.get(name, {}).items() if v is not None or k == "block"}
            entry.update(
                file=fname,
                dtype=format_name(arr.dtype),
                container=str(stored.dtype),
                encoding=encoding,
                shape=list(arr.shape),
                sha256=digest,
                bytes=(stage / fname).stat().st_size,
            )
            nodes[name] = entry
        manifest = {
            "format": FORMAT,
            "numlab_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        manifest.update(dict(run_meta or {}))
        graph_meta = {k: dict(v) for k, v in node_meta.items() if k not in nodes}
        if graph_meta:
            manifest["graph"] = graph_meta
        manifest["nodes"] = nodes
        atomic_write_bytes(stage / MANIFEST, json.dumps(manifest, indent=1, default=_json_default).encode())
        _swap_into_place(stage, path)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return path


def _json_default(o):
    if isinstance(o, Format):
        return o.name
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    return str(o)


def _swap_into_place(stage: Path, path: Path) -> None:
    """Move the staged directory to ``path``; an existing ``path`` (allowed by
    force, or empty) is moved aside first and deleted only afterwards."""
    if not path.exists():
        os.replace(stage, path)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    os.rmdir(aside)
    os.replace(path, aside)
    try:
        os.replace(stage, path)
    except BaseException:
        os.replace(aside, path)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def dump_run(
    result,
    path: str | os.PathLike,
    force: bool = False,
    *,
    nodes: Iterable[str] | None = None,
    model: str | None = None,
    seed: int | None = None,
    extra: Mapping | None = None,
) -> Path:
    """Dump a :class:`numlab.execute.RunResult` (or any object with
    ``.values`` and optionally ``.graph``, ``.plan``, ``.mode``, ``.fmt``,
    ``.fingerprint``) to ``path``.

    One ``.npy`` per entry of ``result.values`` (or only ``nodes``); the
    manifest records each node's op, operator category, fusion block and
    inputs, the run's mode, storage dtype, fingerprint and numlab version, the
    graph's topological order and the plan's blocks -- everything
    :func:`numlab.compare.compare_dumps` needs to match fused blocks and to
    find the first divergence from the dumps alone.
    """
    values = getattr(result, "values", None)
    if not isinstance(values, Mapping):
        raise TypeError(
            f"result must have a .values mapping (a numlab RunResult), got {type(result).__name__}"
        )
    names = list(values) if nodes is None else list(nodes)
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"nodes={missing} are not in result.values; available: {sorted(values)}")
    graph = getattr(result, "graph", None)
    plan = getattr(result, "plan", None)
    node_meta, run_meta = describe_graph(graph, plan)
    run_meta.update(
        mode=getattr(result, "mode", None),
        dtype=format_name(getattr(result, "fmt", None)),  # manifest key "dtype": the dump format
        fingerprint=getattr(result, "fingerprint", None),
        model=model,
        seed=seed,
    )
    if extra:
        run_meta.update(extra)
    return write_dump(path, {n: values[n] for n in names}, node_meta=node_meta, run_meta=run_meta, force=force)


def describe_graph(graph, plan=None) -> tuple[dict[str, dict], dict]:
    """(node metadata, run metadata) of a graph and plan, as stored in a
    manifest.  Works on anything with ``.nodes`` (objects with ``name``, ``op``,
    ``inputs``), ``.inputs`` and ``.outputs``; a missing graph gives empty
    metadata."""
    node_meta: dict[str, dict] = {}
    run_meta: dict = {}
    if graph is None:
        return node_meta, run_meta
    catalogue = ops.CATALOGUE
    block_of = {}
    if plan is not None:
        blocks = {}
        for b in getattr(plan, "blocks", []) or []:
            members = list(getattr(b, "members", []))
            blocks[b.name] = {
                "members": members,
                "kind": getattr(b, "kind", None),
                "outputs": list(getattr(b, "outputs", None) or members[-1:]),
                "codegen": getattr(b, "codegen", None),
            }
            for m in members:
                block_of[m] = b.name
        run_meta["blocks"] = blocks
        dec = getattr(plan, "decomposed", None)
        if isinstance(dec, Mapping) and dec:
            run_meta["decomposed"] = {str(k): str(v) for k, v in dec.items()}
    order = []
    for n in getattr(graph, "nodes", []):
        info = catalogue.get(n.op) if isinstance(catalogue, Mapping) else None
        node_meta[n.name] = {
            "op": n.op,
            "category": getattr(info, "category", None),
            "block": block_of.get(n.name),
            "inputs": list(n.inputs),
        }
        order.append(n.name)
    run_meta["order"] = order
    gin = getattr(graph, "inputs", None)
    run_meta["graph_inputs"] = list(gin) if gin is not None else []
    gout = getattr(graph, "outputs", None)
    run_meta["graph_outputs"] = list(gout) if gout is not None else []
    return node_meta, run_meta


# --------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------
@dataclass
class DumpEntry:
    """One dumped node: its name, file and manifest metadata; ``problem`` is
    None or why the file cannot be used (missing, corrupt)."""

    name: str
    path: Path | None
    meta: dict = field(default_factory=dict)
    problem: str | None = None


class Dump:
    """A loaded dump (see :func:`load_dump`)."""

    def __init__(self, path: Path, manifest: dict | None, entries: dict[str, DumpEntry],
                 notes: list[str] | None = None):
        self.path = path
        self.manifest = manifest
        self.entries = entries
        self.notes = list(notes or [])

    # -- metadata --------------------------------------------------------
    @property
    def problems(self) -> dict[str, str]:
        """node -> reason, for entries that are missing or corrupt."""
        return {n: e.problem for n, e in self.entries.items() if e.problem}

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    @property
    def order(self) -> list[str]:
        """Topological order of the graph when known, else natural sort."""
        if self.manifest and self.manifest.get("order"):
            return list(self.manifest["order"])
        return sorted(self.entries, key=natural_key)

    @property
    def blocks(self) -> dict[str, dict]:
        return dict((self.manifest or {}).get("blocks") or {})

    @property
    def storage_format(self) -> Format | None:
        name = (self.manifest or {}).get("dtype")
        if not name:
            return None
        try:
            return get_format(name)
        except (TypeError, ValueError):
            return None

    def node_info(self, name: str) -> dict:
        """Manifest metadata of ``name`` (a dumped node or a graph node)."""
        m = self.manifest or {}
        if name in m.get("nodes", {}):
            return m["nodes"][name]
        return m.get("graph", {}).get(name, {})

    def __contains__(self, name) -> bool:
        return name in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Dump({str(self.path)!r}, {len(self.entries)} nodes, {len(self.problems)} problems)"

    # -- data ------------------------------------------------------------
    def array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        """The array of node ``name``, memory-mapped when ``mmap`` (read-only;
        bf16/fp8 stored as a float32 copy come back as an in-memory array of
        their format), decoded to its format's dtype.

        Raises
        ------
        DumpError
            The entry is missing, corrupt or unreadable (the message names the
            node and the file).
        KeyError
            ``name`` is not in the dump.
        """
        if name not in self.entries:
            raise KeyError(f"node {name!r} is not in dump {str(self.path)!r}")
        e = self.entries[name]
        if e.problem:
            raise DumpError(f"node {name!r}: {e.problem}", {name: e.problem})
        try:
            arr = np.load(e.path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except Exception as exc:  # truncated header, bad magic, short data, pickles
            reason = f"unreadable file {str(e.path)!r}: {type(exc).__name__}: {exc}"
            raise DumpError(f"node {name!r}: {reason}", {name: reason}) from None
        if not isinstance(arr, np.ndarray):  # pragma: no cover - np.load of .npz
            reason = f"file {str(e.path)!r} is not a single array"
            raise DumpError(f"node {name!r}: {reason}", {name: reason})
        if e.meta.get("encoding") == "float32":
            fmt = get_format(e.meta["dtype"])
            if arr.dtype != np.float32 or fmt.dtype is None:
                reason = f"file {str(e.path)!r} holds {arr.dtype}, expected the float32 copy of {fmt.name}"
                raise DumpError(f"node {name!r}: {reason}", {name: reason})
            back = np.asarray(arr).astype(fmt.dtype)
            if not np.array_equal(back.astype(np.float32), arr, equal_nan=True):
                reason = f"file {str(e.path)!r} holds values that are not {fmt.name} (edited?)"
                raise DumpError(f"node {name!r}: {reason}", {name: reason})
            return back
        if e.meta.get("encoding") == "bits":  # dumps written before the float32 copy
            fmt = get_format(e.meta["dtype"])
            if arr.dtype.itemsize != fmt.dtype.itemsize or arr.dtype.kind != "u":
                reason = (f"file {str(e.path)!r} holds {arr.dtype}, expected {fmt.bits}-bit codes "
                          f"of {fmt.name}")
                raise DumpError(f"node {name!r}: {reason}", {name: reason})
            arr = arr.view(fmt.dtype)
        elif arr.dtype.kind == "V" and not arr.dtype.fields and arr.dtype.itemsize == 2:
            # np.save of a bfloat16 array from another tool writes '|V2'
            arr = arr.view(get_format("bf16").dtype)
        return arr


def natural_key(s: str):
    """Sort key ordering ``n2`` before ``n10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def load_dump(
    path: str | os.PathLike,
    *,
    verify: bool = True,
    strict: bool = True,
) -> Dump:
    """Load a dump directory, a plain folder of ``.npy`` files, or one ``.npy``.

    Parameters
    ----------
    path : path
    verify : bool
        Check every manifest file's size and SHA-256 (read in 1 MiB blocks).
    strict : bool
        Raise :class:`DumpError` listing every missing or corrupt file by node
        name; with ``strict=False`` the problems are kept on the entries
        (``Dump.problems``) so a compare can report them as rows.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    DumpError
        (strict) missing/corrupt files, or an unreadable manifest.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dump path {str(p)!r} does not exist")
    if p.is_file():
        if p.name == MANIFEST:
            p = p.parent
        else:
            return Dump(p, None, {p.stem: DumpEntry(p.stem, p, {})})
    notes: list[str] = []
    mpath = p / MANIFEST
    manifest = None
    if mpath.exists():
        try:
            manifest = json.loads(mpath.read_text())
            if not isinstance(manifest, dict) or not isinstance(manifest.get("nodes"), dict):
                raise ValueError("no 'nodes' object")
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            msg = f"manifest {str(mpath)!r} is unreadable ({exc}); reading the folder without it"
            if strict:
                raise DumpError(msg, {MANIFEST: str(exc)}) from None
            notes.append(msg)
            manifest = None
    entries: dict[str, DumpEntry] = {}
    if manifest is not None:
        for name, meta in manifest["nodes"].items():
            meta = dict(meta) if isinstance(meta, dict) else {}
            fname = meta.get("file")
            if not isinstance(fname, str) or "/" in fname or "\\" in fname or fname.startswith(".."):
                entries[name] = DumpEntry(name, None, meta, f"manifest entry has no valid file name ({fname!r})")
                continue
            fpath = p / fname
            entries[name] = DumpEntry(name, fpath, meta, _check_file(fpath, meta, verify))
    else:
        for f in sorted(p.rglob("*.npy")):
            if any(part.startswith(".") for part in f.relative_to(p).parts):
                continue  # staging / temporary files
            name = f.relative_to(p).with_suffix("").as_posix()
            entries[name] = DumpEntry(name, f, {})
    dump = Dump(p, manifest, entries, notes)
    if strict and dump.problems:
        lines = "; ".join(f"{n}: {r}" for n, r in dump.problems.items())
        raise DumpError(f"dump {str(p)!r} has {len(dump.problems)} bad file(s): {lines}", dump.problems)
    return dump


def _check_file(fpath: Path, meta: dict, verify: bool) -> str | None:
    if not fpath.exists():
        return f"missing file {str(fpath)!r}"
    if not verify:
        return None
    size = fpath.stat().st_size
    want = meta.get("bytes")
    if isinstance(want, int) and size != want:
        return f"corrupt file {str(fpath)!r}: {size} bytes, manifest says {want} (truncated?)"
    want_sha = meta.get("sha256")
    if want_sha:
        try:
            got = sha256_file(fpath)
        except OSError as exc:
            return f"unreadable file {str(fpath)!r}: {exc}"
        if got != want_sha:
            return f"corrupt file {str(fpath)!r}: sha256 {got[:12]}... != manifest {str(want_sha)[:12]}..."
    return None
