"""Counterexample files: ``.npz`` (inputs and the eager / fused / reference
outputs) plus ``.json`` (claim, model, sizes, fmt, fusion spec and
options, seed, trial, compile fingerprints, hashes, margin, worst element);
:func:`load_counterexample` + :func:`reproduce` recompute one and compare
bit for bit.  The storage format's key is ``"fmt"``; files written before
the rename have ``"dtype"`` and still load.  The fusion is rebuilt from the
saved ``"fusion_options"`` fields (what ran), not from the spec string,
whose preset may have changed default since (the autofuse preset kept
composites decomposed before it kept them whole).

A case checked on a real kernel's outputs (``Case.observed``) saves them as
``output/observed/<name>`` next to numlab's eager and reference outputs; a
case whose model is a Graph or a traced function (``Case.source``) saves the
graph in the ``.json`` (``"graph"``: :meth:`numlab.graph.Graph.to_dict`, and
``"graph_roles"``), so :func:`reproduce` rebuilds it without the user's
code and re-evaluates the claim on the saved observed outputs (numlab cannot
re-run the real kernel: ``"bitwise"`` then covers eager and the reference).
Such a file's name hashes the inputs and the observed outputs (two kernels'
outputs on the same inputs are two counterexamples); its ``"case_sha256"``
records that hash.

The kernels are saved as canonical spec strings (``KernelSpec.spec``) in
``"kernels"``: ``{"fused": the fused side's kernels, "fused_library": the
library fused plans call, "eager": eager's library}`` (the last two are one
spec, :attr:`Case.library`); :func:`load_counterexample` rebuilds the case
with them, so :func:`reproduce` re-runs the same kernels.  Files written
before kernel specs were saved hold the descriptions
``"KernelSpec.codegen()"`` / ``"KernelSpec.handwritten()"``, read as those
presets (what ran).  A case with other kernels than the defaults has the
kernel specs in its file-name hash (``"case_sha256"``): the same inputs
under two kernels are two counterexamples."""

from __future__ import annotations

import hashlib
import json
import os
import re

import numpy as np

from .. import _digest
from ..formats import get_format
from ..fusion import FusionOptions
from ..graph import Graph
from ._fusion import fusion_options, fusion_spec
from ._kernels import DEFAULT_KERNELS, DEFAULT_LIBRARY, kernel_spec
from .cases import Case, evaluate
from .catalogue import CaseResult, get_claim

__all__ = ["save_counterexample", "load_counterexample", "reproduce", "sha256_arrays"]


def sha256_arrays(arrs: dict) -> str:
    """SHA-256 over the named arrays (names, dtypes, shapes and bytes, sorted by name)."""
    h = hashlib.sha256()
    for k in sorted(arrs):
        _digest.update(h, arrs[k], lambda c, k=k: f"{k}{c.dtype}{c.shape}")
    return h.hexdigest()


def save_counterexample(claim, case: Case, result: CaseResult, directory="data/counterexamples", *,
                        extra: dict | None = None, force: bool = False) -> str:
    """Save ``case`` as ``<dir>/<claim>__<model>__<fmt>__<hash12>.npz`` and
    ``.json``; returns the path stem.  The name holds a hash of the inputs
    and the claim, so the same counterexample maps to the same files; an
    existing file with different content is never overwritten unless
    ``force``."""
    claim = get_claim(claim)
    os.makedirs(directory, exist_ok=True)
    arrs = {f"input/{k}": np.asarray(v, dtype=np.float64) for k, v in case.inputs.items()}
    for mode, outs in result.outputs.items():
        for k, v in outs.items():
            arrs[f"output/{mode}/{k}"] = np.asarray(v)
    if case.observed is not None:
        for k, v in case.observed.items():
            arrs[f"output/observed/{k}"] = np.asarray(v)
    ih = sha256_arrays({k: v for k, v in arrs.items() if k.startswith("input/")})
    oh = sha256_arrays({k: v for k, v in arrs.items() if k.startswith("output/")})
    key = ih
    extra = dict(extra or {})
    if case.observed is not None:
        key = sha256_arrays({**{f"input/{k}": v for k, v in case.inputs.items()},
                             **{f"observed/{k}": v for k, v in case.observed.items()}})
        extra["case_sha256"] = key
    if (case.kernels, case.library) != (DEFAULT_KERNELS, DEFAULT_LIBRARY) or case.contract is not None:
        h = hashlib.sha256(key.encode())
        h.update(f"kernels={case.kernels}\0library={case.library}".encode())
        if case.contract is not None:
            h.update(f"\0contract={case.contract}".encode())
        key = h.hexdigest()
        extra["case_sha256"] = key
    if case.source is not None:
        extra["graph"] = case.source.to_dict()
        extra["graph_roles"] = dict(case.source.roles)
    label = re.sub(r"[^A-Za-z0-9_.+-]", "_", str(case.model))  # a file name, whatever the label holds
    stem = os.path.join(directory, f"{claim.name}__{label}__{case.fmt}__{key[:12]}")
    meta = {
        "claim": claim.name,
        "statement": claim.statement,
        "model": case.model,
        "sizes": case.sizes,
        "fmt": case.fmt,
        "fusion": case.fusion,
        "fusion_options": fusion_options(case.fusion).canonical(),
        "kernels": {"eager": case.library, "fused": case.kernels, "fused_library": case.library},
        **({"contract": case.contract} if case.contract is not None else {}),
        "kind": case.kind,
        "seed": case.seed,
        "trial": case.trial,
        "origin": case.origin,
        "fingerprints": result.fingerprints,
        "inputs_sha256": ih,
        "outputs_sha256": oh,
        "margin": result.margin,
        "verdict": result.verdict,
        "detail": result.detail,
        "observed": case.observed is not None,
        **extra,
    }
    jpath, npath = stem + ".json", stem + ".npz"
    text = json.dumps(meta, indent=2, sort_keys=True, default=_json_default)
    if os.path.exists(jpath) and not force:
        with open(jpath) as fh:
            old = json.load(fh)
        if old.get("inputs_sha256") == ih and old.get("outputs_sha256") == oh:
            return stem  # the same counterexample is already saved
        raise FileExistsError(f"{jpath} exists with different content; pass force=True (--force) to overwrite")
    np.savez(npath, **arrs)
    with open(jpath, "w") as fh:
        fh.write(text)
    return stem


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def load_counterexample(path, *, verify: bool = True) -> tuple[Case, dict, dict]:
    """Load a saved counterexample (``.npz``/``.json`` path or their stem):
    returns (case, metadata, saved arrays).  ``verify``: the arrays' SHA-256
    (:func:`sha256_arrays`) must equal the ``"inputs_sha256"`` and
    ``"outputs_sha256"`` saved in the ``.json`` (ValueError naming the file
    otherwise: it was changed after saving)."""
    stem = str(path)
    for ext in (".json", ".npz"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    with open(stem + ".json") as fh:
        meta = json.load(fh)
    fmt = meta["fmt"] if "fmt" in meta else meta["dtype"]  # "dtype": files saved before the rename
    container = np.dtype(get_format(fmt, "fmt").container)
    with np.load(stem + ".npz") as z:
        # np.savez keeps ml_dtypes arrays (bfloat16, fp8) as raw bytes (|V2, |V1): view them as S's container
        arrs = {k: z[k].view(container) if z[k].dtype.kind == "V" and z[k].dtype.itemsize == container.itemsize
                else z[k] for k in z.files}
    if verify:
        _verify_arrays(stem, meta, arrs)
    inputs = {k.split("/", 1)[1]: v for k, v in arrs.items() if k.startswith("input/")}
    source = None
    if meta.get("graph"):
        source = Graph.from_dict(meta["graph"]).with_roles(**meta.get("graph_roles", {}))
    observed = None
    if meta.get("observed"):
        observed = {k.split("/", 2)[2]: v for k, v in arrs.items() if k.startswith("output/observed/")}
    kernels, library = _saved_kernels(meta)
    case = Case(meta["model"], meta["sizes"], fmt, _saved_fusion(meta), inputs,
                meta.get("kind", "normal"), meta.get("seed", 0), meta.get("trial", 0), meta.get("origin", ""),
                source=source, observed=observed, kernels=kernels, library=library,
                contract=meta.get("contract"))
    return case, meta, arrs


def _verify_arrays(stem: str, meta: dict, arrs: dict) -> None:
    """ValueError when the loaded arrays' SHA-256 differ from those the
    ``.json`` saved (a key the file lacks is not checked)."""
    for part in ("inputs", "outputs"):
        want = meta.get(f"{part}_sha256")
        got = sha256_arrays({k: v for k, v in arrs.items() if k.startswith(part[:-1] + "/")})
        if want is not None and got != want:
            raise ValueError(f"counterexample {stem}.npz fails its SHA-256 check: {part}_sha256 {got[:12]}... "
                             f"!= {want[:12]}... in {stem}.json (a file was changed after saving); "
                             "save it again, or pass verify=False to load it anyway")


def _saved_fusion(meta: dict) -> str:
    """Canonical spec of the fusion a counterexample ran under: from its
    ``"fusion_options"`` fields when saved (exact), else its spec."""
    fo = meta.get("fusion_options")
    if not fo:
        return fusion_spec(meta["fusion"])
    return FusionOptions(enabled=frozenset(fo["enabled"]), decompose=fo["decompose"],
                         enable_autofuse=fo["enable_autofuse"], name=fo.get("name", "autofuse")).spec


_LEGACY_KERNELS = {"KernelSpec.codegen()": DEFAULT_KERNELS, "KernelSpec.handwritten()": DEFAULT_LIBRARY}
"""What files saved before kernel specs were stored hold in ``"kernels"``
(descriptions of the defaults that ran), mapped to the presets' specs."""


def _saved_kernels(meta: dict) -> tuple[str, str]:
    """(fused kernels, library) canonical specs of a saved counterexample."""
    saved = meta.get("kernels") or {}
    if not isinstance(saved, dict):
        raise ValueError(f"counterexample 'kernels' must be a dict of kernel specs, got {saved!r}")
    specs = {k: _LEGACY_KERNELS.get(v, v) for k, v in saved.items()}
    kernels = kernel_spec(specs.get("fused"), "kernels['fused']", DEFAULT_KERNELS)
    library = kernel_spec(specs.get("fused_library", specs.get("eager")), "kernels['fused_library']",
                          DEFAULT_LIBRARY)
    eager = kernel_spec(specs.get("eager"), "kernels['eager']", library)
    if eager != library:
        raise ValueError(f"counterexample kernels {saved!r}: eager's library {eager!r} differs from the fused "
                         f"plan's library {library!r}; a case has one library (Case.library)")
    return kernels, library


def reproduce(path) -> dict:
    """Re-run a saved counterexample: ``{"bitwise": all saved outputs equal bit
    for bit, "violated": claim still violated (verdict "fails"), "verdict",
    "fingerprints_equal": ..., "kernels", "library" (the specs it re-ran),
    "result": CaseResult}``."""
    case, meta, arrs = load_counterexample(path)
    res = evaluate(meta["claim"], case)
    same = True
    for k, v in arrs.items():
        if not k.startswith("output/"):
            continue
        _, mode, name = k.split("/", 2)
        got = res.outputs.get(mode, {}).get(name)
        if got is None or got.dtype != v.dtype or not np.array_equal(
                np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(v).view(np.uint8)):
            same = False
    fp_equal = all(res.fingerprints.get(m) == f for m, f in meta.get("fingerprints", {}).items())
    return {"bitwise": same, "violated": res.fails, "verdict": res.verdict, "fingerprints_equal": fp_equal,
            "kernels": case.kernels, "library": case.library, "result": res}
