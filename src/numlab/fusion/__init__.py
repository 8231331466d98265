"""Fusion planner: group the nodes of a graph into kernels ("blocks").

A compiler that fuses operators decides, per operator *kind*, whether the
operator may join a neighbouring kernel.  numlab models two such compilers:

* **Ascend autofusion** (``AUTOFUSE_FLAGS``).  Elementwise fusion (including
  broadcast) is on and, in the real tool, cannot be switched off; reduce,
  concat, slice, gather and transpose fusion are off by default and are
  enabled with ``--autofuse_enable_pass=...`` (source: the graph-autofusion
  precision note's section 6.2, table "融合类型 / 默认状态"; see
  ``docs/design.md``, section "Fusion presets").
* **PyTorch Inductor** (``FusionOptions.inductor()``): Inductor's fusion
  *decisions* only -- pointwise operators, reductions and views are fused;
  matmul is left to a library call (Inductor's default ``max_autotune=False``
  path calls aten.mm/cuBLAS).  The numerics inside a block are the kernel
  spec's: the default ``KernelSpec.codegen()`` is a generic code generator,
  not Inductor (it rounds broadcast scalars to S and contracts FMAs);
  ``KernelSpec.inductor_cpu()`` has Inductor CPU's conventions.  Not
  modelled: Inductor's per-pair fusion score, ``max_fusion_size`` (64
  nodes), ``realize_reads_threshold`` (a pointwise value read more than 4
  times is stored to a buffer), ``max_pointwise_cat_inputs`` (8),
  ``split_reductions`` (GPU), epilogue fusion of
  ``max_autotune`` matmul templates, and the rounding of a reduction's result
  to its dtype inside a fused C++ kernel (``docs/design.md``, "Fusion presets").

Rules of the planner (:func:`plan`)

1. If ``decompose`` is on, composite operators (softmax, log_softmax,
   layer_norm, rms_norm) are first replaced by their primitive decompositions
   (``numlab.ops``), as Inductor's decompositions do before fusion.  The
   composite's output keeps the composite's node name, so dumps still line up
   by name with eager.  With ``decompose`` off a composite stays one library
   kernel (a singleton block), exactly as eager runs it.  The autofuse preset
   keeps composites whole (``decompose`` off: the autofusion note's
   GE/TensorFlow path runs LayerNorm and Softmax as library operators);
   ``autofuse+decompose`` and the inductor preset decompose them.
2. Nodes are visited in topological order.  A node whose kind is enabled joins
   the block of one of its producers whose kind set is fusible (only along
   producer -> consumer edges), and blocks of several fusible producers are
   merged, *only if the block graph stays acyclic* (a move that would create
   a cycle is not made; the check searches only the blocks placed between
   the move's two ends in a topological order of the block graph kept up to
   date, so chains and stacks of layers are planned in linear time).  A node
   whose kind is not enabled is a singleton block.
3. Each block gets a live-buffer count: the largest number of tensors held at
   once in the on-chip buffer when the members run in topological order (the
   block's inputs still to be read, members' values still to be used or still
   to be written out, and the value being computed).  A single operator with
   k distinct inputs holds k + 1.  The tile (elements per buffer) is
   ``numlab.kernels.tile_elements(hardware, live_buffers, elem_bytes)`` with
   ``elem_bytes = 4``: numlab's kernels compute in fp32 inside the buffer
   (``docs/design.md``, section "The four sources of difference", source 3).  A fused block holds more live buffers
   than a one-operator kernel, so it gets smaller tiles; :meth:`Plan.op_tile`
   gives the tile the same operator would get as its own (eager) kernel,
   whose buffers hold S elements (2 bytes for fp16/bf16).
4. A block is *code-generated* when every member's kind is enabled;
   otherwise (matmul, composites kept whole, disabled kinds) it is a call
   into the hand-written library, as a real compiler falls back to the
   vendor's operator, and the executor runs it exactly as eager.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from dataclasses import dataclass, field

from .. import kernels, ops
from .._repr import Compact
from ..formats import get_format
from ..graph import decompose
from ._block_graph import _BlockGraph, _quotient_graph

__all__ = [
    "FUSION_KINDS",
    "AUTOFUSE_DEFAULT",
    "FusionOptions",
    "FUSION_PRESETS",
    "MODIFIERS",
    "DEFAULT_SPEC",
    "GRAMMAR",
    "split_specs",
    "Block",
    "Plan",
    "plan",
    "parse_autofuse_flags",
    "op_kind",
]

FUSION_KINDS = (
    "elementwise",
    "broadcast",
    "reshape",
    "reduce",
    "concat",
    "slice",
    "gather",
    "transpose",
    "matmul",
)
"""Fusion kinds that can be switched.  ``reshape`` (a view, no data moved)
is numlab's own switch; ``concat`` also covers ``split``; ``matmul`` models
matmul-epilogue (template) fusion and is off in both presets.  Composite
operators that are not decomposed are never fused (they are library kernels)."""

AUTOFUSE_DEFAULT = frozenset({"elementwise", "broadcast", "reshape"})
"""Kinds fused by Ascend autofusion with no flags (the autofusion precision
note's section 6.2; ``docs/design.md``, section "Fusion presets")."""

INDUCTOR_DEFAULT = frozenset(
    {"elementwise", "broadcast", "reshape", "reduce", "concat", "slice", "gather", "transpose"}
)
"""Kinds fused by the ``inductor`` preset (Inductor's fusion decisions): pointwise,
reductions and views; matmul left to a library call."""

FUSION_PRESETS = ("autofuse", "inductor", "off")
"""Fusion presets of the spec grammar (:meth:`FusionOptions.parse`)."""

MODIFIERS = ("decompose", "nodecompose")
"""``+modifier`` suffixes of the spec grammar: set ``decompose`` on or off."""

DEFAULT_SPEC = "autofuse"
"""The one default fusion spec: ``FusionOptions.parse(None)`` and every CLI
command without ``--fusion`` use it."""

GRAMMAR = """\
spec     := preset [":" FLAGS] ["+" modifier]  |  FLAGS
preset   := "autofuse" | "inductor" | "off"
FLAGS    := an AUTOFUSE_FLAGS string: ";"-separated --key=value items,
            keys enable_autofuse (true/false), autofuse_enable_pass and
            autofuse_disable_pass (comma lists of kinds: elementwise,
            broadcast, reshape, reduce, concat, slice, gather, transpose,
            matmul), e.g.
            "--enable_autofuse=true;--autofuse_enable_pass=concat,reduce"
            (only with autofuse; a spec that starts with "--" means
            "autofuse:" + spec)
modifier := "decompose" | "nodecompose"   (composites decomposed or kept whole;
            autofuse and off keep them whole, inductor decomposes them)
default  := "autofuse"   (None gives the default)
examples:   autofuse   autofuse+decompose   inductor+nodecompose   off
            autofuse:--autofuse_enable_pass=reduce+decompose
            --autofuse_enable_pass=reduce   (= autofuse:--autofuse_enable_pass=reduce)"""
"""The fusion spec grammar (shown by ``numlab --help`` and in
:class:`FusionOptions`' docstring)."""


# Names accepted in AUTOFUSE_FLAGS pass lists -> numlab kinds.
_PASS_ALIASES = {
    "elemwise": "elementwise",
    "elementwise": "elementwise",
    "pointwise": "elementwise",
    "broadcast": "broadcast",
    "reshape": "reshape",
    "reduce": "reduce",
    "reduction": "reduce",
    "concat": "concat",
    "split": "concat",
    "slice": "slice",
    "gather": "gather",
    "transpose": "transpose",
    "matmul": "matmul",
    "mm": "matmul",
}

_FLAG_KEYS = ("enable_autofuse", "autofuse_enable_pass", "autofuse_disable_pass")

# data-movement op name -> fusion kind
_MOVE_KIND = {
    "reshape": "reshape",
    "broadcast_to": "broadcast",
    "transpose": "transpose",
    "slice": "slice",
    "concat": "concat",
    "split": "concat",
    "gather": "gather",
}


def _as_kinds(kinds, arg: str) -> frozenset:
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        items = list(kinds)
    except TypeError:
        raise TypeError(
            f"{arg} must be a collection of fusion kinds, got {type(kinds).__name__}"
        ) from None
    out = set()
    for k in items:
        if not isinstance(k, str):
            raise TypeError(f"{arg} holds {k!r} ({type(k).__name__}); kinds are strings: {list(FUSION_KINDS)}")
        key = _PASS_ALIASES.get(k.strip().lower())
        if key is None:
            raise ValueError(
                f"{arg}: {k!r} is not a fusion kind; valid kinds: {list(FUSION_KINDS)} "
                f"(aliases: {sorted(set(_PASS_ALIASES) - set(FUSION_KINDS))})"
            )
        out.add(key)
    return frozenset(out)


@dataclass(frozen=True)
class FusionOptions:
    """Which operator kinds a compiler fuses, and whether it decomposes composites.

    Parameters
    ----------
    enabled : frozenset of str
        Fusion kinds that may join a block (see :data:`FUSION_KINDS`).  Default
        :data:`AUTOFUSE_DEFAULT` = elementwise, broadcast, reshape (Ascend
        autofusion's defaults; reduce, concat, slice, gather, transpose off).
    decompose : bool
        Replace composite operators by their primitive decompositions before
        fusing, as Inductor does (default False: the autofusion note's
        GE/TensorFlow path runs composites such as LayerNorm and Softmax as
        library operators, so a composite runs as the same single kernel
        eager uses).  ``autofuse+decompose`` sets it (spec grammar below).
    enable_autofuse : bool
        Master switch (``--enable_autofuse``).  False: every node is its own
        block and no block is code-generated: each is a call into the
        hand-written library, so ``fused`` runs exactly as ``eager`` (with
        ``decompose`` False; with it True the decomposed primitives run as
        library kernels).
    name : str
        Label shown in the plan and in reports: the preset the options
        came from (``autofuse``, ``inductor`` or ``off``).

    Spec grammar
    ------------
    :meth:`parse` turns a spec string into options and :attr:`spec` gives
    the canonical string back (``FusionOptions.parse(o.spec) == o``)::

        <GRAMMAR>

    Examples
    --------
    >>> FusionOptions.parse(None).spec
    'autofuse'
    >>> FusionOptions.parse("autofuse+decompose").spec
    'autofuse+decompose'
    >>> FusionOptions.parse("inductor+nodecompose").spec
    'inductor+nodecompose'
    >>> FusionOptions.parse("--autofuse_enable_pass=reduce").spec
    'autofuse:--autofuse_enable_pass=reduce'
    >>> FusionOptions.autofuse("--enable_autofuse=true;--autofuse_enable_pass=concat,reduce")
    ... # doctest: +ELLIPSIS
    FusionOptions(enabled=frozenset({...}), decompose=False, enable_autofuse=True, name='autofuse')
    """

    enabled: frozenset = AUTOFUSE_DEFAULT
    decompose: bool = False
    enable_autofuse: bool = True
    name: str = "autofuse"

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", _as_kinds(self.enabled, "enabled"))
        for f in ("decompose", "enable_autofuse"):
            v = getattr(self, f)
            if not isinstance(v, bool):
                raise TypeError(f"FusionOptions.{f} must be a bool, got {v!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"FusionOptions.name must be a str, got {self.name!r}")

    # ---- presets -------------------------------------------------------
    @classmethod
    def autofuse(cls, flags: str | None = None) -> FusionOptions:
        """Ascend autofusion, optionally configured by an ``AUTOFUSE_FLAGS`` string.

        ``flags`` is parsed by :func:`parse_autofuse_flags`, e.g.
        ``"--enable_autofuse=true;--autofuse_enable_pass=concat,reduce"`` or
        ``"--autofuse_disable_pass=broadcast"``.  ``None`` or ``""`` gives the
        defaults (elementwise + broadcast + reshape).  Composites are kept
        whole (``decompose=False``); ``dataclasses.replace(o, decompose=True)``
        or the spec ``autofuse:FLAGS+decompose`` decomposes them.
        """
        return parse_autofuse_flags(flags or "")

    @classmethod
    def from_env(cls, environ=None) -> FusionOptions:
        """:meth:`autofuse` configured from the ``AUTOFUSE_FLAGS`` environment
        variable (of ``environ``, default ``os.environ``)."""
        env = os.environ if environ is None else environ
        return parse_autofuse_flags(env.get("AUTOFUSE_FLAGS", ""))

    @classmethod
    def inductor(cls, decompose: bool = True) -> FusionOptions:
        """Inductor's fusion decisions: pointwise, reductions and views fused;
        matmul left to a library call; composites decomposed.  Only the plan:
        pair it with ``kernels="inductor_cpu"`` for Inductor CPU's kernel
        numerics (the default ``codegen`` kernels are not Inductor's)."""
        return cls(enabled=INDUCTOR_DEFAULT, decompose=decompose, name="inductor")

    @classmethod
    def off(cls, decompose: bool = False) -> FusionOptions:
        """No fusion: every operator its own library kernel (``fused`` with
        these options and ``decompose=False`` equals ``eager`` bit for bit)."""
        return cls(enabled=frozenset(), decompose=decompose, enable_autofuse=False, name="off")

    def enable(self, *kinds: str) -> FusionOptions:
        """A copy with ``kinds`` added to :attr:`enabled`."""
        return dataclasses.replace(self, enabled=self.enabled | _as_kinds(kinds, "enable"))

    def disable(self, *kinds: str) -> FusionOptions:
        """A copy with ``kinds`` removed from :attr:`enabled`."""
        return dataclasses.replace(self, enabled=self.enabled - _as_kinds(kinds, "disable"))

    def fuses(self, kind: str) -> bool:
        """Whether operators of ``kind`` may join a block."""
        return self.enable_autofuse and kind in self.enabled

    def canonical(self) -> dict:
        """A JSON-able canonical form (sorted), used by compile fingerprints."""
        return {
            "enabled": sorted(self.enabled),
            "decompose": self.decompose,
            "enable_autofuse": self.enable_autofuse,
            "name": self.name,
        }

    def describe(self) -> str:
        """One line: ``autofuse[elementwise,broadcast,reshape] decompose=on``."""
        kinds = ",".join(k for k in FUSION_KINDS if k in self.enabled) if self.enable_autofuse else "off"
        return f"{self.name}[{kinds}] decompose={'on' if self.decompose else 'off'}"

    # ---- the spec grammar ----------------------------------------------
    @classmethod
    def parse(cls, spec: str | FusionOptions | None = None, *, arg: str = "fusion") -> FusionOptions:
        """Options from a fusion spec (grammar in the class docstring).

        ``None`` gives the default (:data:`DEFAULT_SPEC`, ``"autofuse"``); a
        :class:`FusionOptions` is returned unchanged.  ``arg`` is the name
        the error messages use for the argument (the CLI passes
        ``"--fusion"``).

        Raises
        ------
        TypeError
            ``spec`` is neither a str, a FusionOptions nor None.
        ValueError
            Unknown preset, modifier, flag key or pass name; FLAGS after a
            preset other than autofuse; an empty spec.  The message names
            ``arg``, the offending part and the valid choices.
        """
        if spec is None:
            return cls()
        if isinstance(spec, FusionOptions):
            return spec
        if not isinstance(spec, str):
            raise TypeError(
                f"{arg} must be a fusion spec string (e.g. 'autofuse', 'inductor+nodecompose') or a "
                f"FusionOptions, got {type(spec).__name__}"
            )
        text = spec.strip()
        if not text:
            raise ValueError(f"{arg}={spec!r} is empty; valid presets: {list(FUSION_PRESETS)} (default {DEFAULT_SPEC!r})")
        if text.startswith("--"):
            text = "autofuse:" + text
        head, *mods = text.split("+")
        preset, colon, flags = head.partition(":")
        preset = preset.strip()
        if preset not in FUSION_PRESETS:
            raise ValueError(
                f"{arg}={spec!r}: preset {preset!r} is unknown; valid presets: {list(FUSION_PRESETS)}, or an "
                "AUTOFUSE_FLAGS string starting with '--'"
            )
        if colon and preset != "autofuse":
            raise ValueError(
                f"{arg}={spec!r}: flags {flags!r} follow preset {preset!r}; AUTOFUSE_FLAGS apply only to "
                "the 'autofuse' preset (write 'autofuse:FLAGS')"
            )
        try:
            if preset == "autofuse":
                opts = parse_autofuse_flags(flags)
            elif preset == "inductor":
                opts = cls.inductor()
            else:
                opts = cls.off()
        except ValueError as e:
            raise ValueError(f"{arg}={spec!r}: {e}") from None
        seen = []
        for m in mods:
            m = m.strip()
            if m not in MODIFIERS:
                raise ValueError(f"{arg}={spec!r}: modifier {'+' + m!r} is unknown; valid modifiers: "
                                 f"{['+' + x for x in MODIFIERS]}")
            if seen:  # one modifier at most, as the kernel grammar takes a field once
                raise ValueError(f"{arg}={spec!r}: modifier {'+' + m!r} after {'+' + seen[0]!r}; give one "
                                 f"of {['+' + x for x in MODIFIERS]}")
            seen.append(m)
            opts = dataclasses.replace(opts, decompose=(m == "decompose"))
        return opts

    @property
    def spec(self) -> str:
        """The canonical spec string: ``FusionOptions.parse(o.spec) == o``.

        A preset whose kinds and switch are the preset's is written by its
        name (``"inductor"``, ``"off+decompose"``); options named
        ``autofuse`` as ``autofuse[:FLAGS]`` with the difference from
        :data:`AUTOFUSE_DEFAULT` (``--enable_autofuse=false`` first, then
        ``--autofuse_enable_pass=`` and ``--autofuse_disable_pass=`` with
        kinds sorted alphabetically); ``+nodecompose`` / ``+decompose`` when
        ``decompose`` differs from the preset's default.

        Options the grammar cannot name (an ``inductor`` or ``off`` preset
        whose kinds or switch were changed with :meth:`enable` /
        :meth:`disable`, or a custom ``name``) get the ``autofuse:FLAGS``
        spec that fuses the same kinds the same way; parsing it gives equal
        ``enabled``, ``decompose`` and ``enable_autofuse`` (the same bits)
        with ``name="autofuse"``.
        """
        for preset in ("inductor", "off"):
            base = FusionOptions.inductor() if preset == "inductor" else FusionOptions.off()
            if (self.name == preset and self.enabled == base.enabled
                    and self.enable_autofuse == base.enable_autofuse):
                return preset + _modifier(self.decompose, base.decompose)
        items = []
        if not self.enable_autofuse:
            items.append("--enable_autofuse=false")
        more = sorted(self.enabled - AUTOFUSE_DEFAULT)
        less = sorted(AUTOFUSE_DEFAULT - self.enabled)
        if more:
            items.append("--autofuse_enable_pass=" + ",".join(more))
        if less:
            items.append("--autofuse_disable_pass=" + ",".join(less))
        head = "autofuse:" + ";".join(items) if items else "autofuse"
        return head + _modifier(self.decompose, False)


if FusionOptions.__doc__:  # None under python -OO
    FusionOptions.__doc__ = FusionOptions.__doc__.replace("<GRAMMAR>", GRAMMAR.replace("\n", "\n" + " " * 8))


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of fusion specs.

    A comma inside an AUTOFUSE_FLAGS pass list stays in its spec: a new spec
    starts only at a piece that begins with a preset name (:data:`FUSION_PRESETS`)
    or with ``--``, e.g. ``"autofuse:--autofuse_enable_pass=concat,reduce,inductor"``
    -> ``["autofuse:--autofuse_enable_pass=concat,reduce", "inductor"]``.
    Empty pieces are dropped; the specs are not parsed (see
    :meth:`FusionOptions.parse`)."""
    if not isinstance(text, str):
        raise TypeError(f"fusion spec list must be a str, got {type(text).__name__}")
    specs: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if specs and not piece.startswith((*FUSION_PRESETS, "--")):
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return specs


def _modifier(decompose: bool, preset_default: bool) -> str:
    """``""`` when ``decompose`` is the preset's default, else the modifier that sets it."""
    if decompose == preset_default:
        return ""
    return "+decompose" if decompose else "+nodecompose"


def _parse_bool(value: str, key: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "on", "yes"):
        return True
    if v in ("false", "0", "off", "no"):
        return False
    raise ValueError(f"--{key}={value!r} is not a boolean; use true or false")


def parse_autofuse_flags(flags: str) -> FusionOptions:
    """Parse an ``AUTOFUSE_FLAGS`` string into :class:`FusionOptions` (composites
    kept whole, ``decompose=False``, as the autofuse preset does).

    Grammar: items separated by ``;`` (or whitespace), each ``--key=value``
    (leading dashes optional).  Keys:

    ``enable_autofuse``        ``true``/``false`` (master switch; default true)
    ``autofuse_enable_pass``   comma list of kinds to add to the defaults
    ``autofuse_disable_pass``  comma list of kinds to remove (numlab's form;
                               the real tool cannot switch elementwise off,
                               numlab allows it for experiments)

    Pass names: ``elemwise`` (or ``elementwise``), ``broadcast``, ``reshape``,
    ``reduce``, ``concat`` (also ``split``), ``slice``, ``gather``,
    ``transpose``, ``matmul``.  Items apply left to right.

    Raises
    ------
    ValueError
        Naming the bad item and the valid keys or pass names.
    """
    if not isinstance(flags, str):
        raise TypeError(f"flags must be a str like '--autofuse_enable_pass=reduce', got {type(flags).__name__}")
    enabled = set(AUTOFUSE_DEFAULT)
    on = True
    items = [s for part in flags.split(";") for s in part.split()]
    for item in items:
        body = item.lstrip("-")
        if "=" not in body:
            raise ValueError(
                f"AUTOFUSE_FLAGS item {item!r} is not --key=value; valid keys: {list(_FLAG_KEYS)}"
            )
        key, value = body.split("=", 1)
        key = key.strip().lower()
        if key == "enable_autofuse":
            on = _parse_bool(value, key)
        elif key in ("autofuse_enable_pass", "autofuse_disable_pass"):
            names = [v for v in value.split(",") if v.strip()]
            if not names:
                raise ValueError(f"--{key}= lists no pass; valid passes: {sorted(_PASS_ALIASES)}")
            kinds = _as_kinds(names, f"--{key}")
            if key == "autofuse_enable_pass":
                enabled |= kinds
            else:
                enabled -= kinds
        else:
            raise ValueError(
                f"AUTOFUSE_FLAGS key {key!r} (in {item!r}) is unknown; valid keys: {list(_FLAG_KEYS)}"
            )
    return FusionOptions(enabled=frozenset(enabled), decompose=False, enable_autofuse=on, name="autofuse")


# ---------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------
def op_kind(op: str) -> str:
    """Fusion kind of an operator: its catalogue category mapped to a kind
    (elementwise -> "elementwise", reduction -> "reduce", matmul -> "matmul",
    composite -> "composite", data movement -> per op: reshape, broadcast,
    transpose, slice, concat (concat and split), gather)."""
    info = ops.CATALOGUE.get(op)
    if info is None:
        raise ValueError(f"op {op!r} is not in numlab.ops.CATALOGUE; known ops: {sorted(ops.CATALOGUE)}")
    cat = info.category
    if cat == "elementwise":
        return "elementwise"
    if cat == "reduction":
        return "reduce"
    if cat == "matmul":
        return "matmul"
    if cat == "composite":
        return "composite"
    if cat == "data_movement":
        return _MOVE_KIND.get(op, op)
    if cat in ("input", "constant", "source"):
        return "constant"
    raise ValueError(f"op {op!r} has category {cat!r}, which the planner does not know")


@dataclass(frozen=True)
class Block:
    """One kernel of a plan.

    Attributes
    ----------
    name : str
        ``"b0"``, ``"b1"``, ... in topological order.
    members : list of str
        Node names in topological order.
    kind : str
        ``"+"``-joined sorted kinds of the members (``"elementwise+reduce"``).
    tile : int
        Elements per on-chip buffer: ``tile_elements(hw, live_buffers, 4)``
        for a code-generated block (fp32 buffers), else the one-operator
        tile with S-sized elements.
    live_buffers : int
        Tensors held at once (see module docstring, rule 3).
    inputs : list of str
        Values the block reads from memory (in S): graph inputs or other
        blocks' outputs.
    outputs : list of str
        Members whose value leaves the block (used by another block or a
        graph output); rounded to S there.
    codegen : bool
        True when the code generator compiles the block (every member's
        kind is enabled); False for a call into the hand-written library
        (matmul, an undecomposed composite, a kind that is not enabled),
        which runs exactly as eager.
    fused : bool
        True when the block was formed by fusion (more than one member).
    """

    name: str
    members: list
    kind: str
    tile: int
    live_buffers: int
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    codegen: bool = False

    @property
    def fused(self) -> bool:
        return len(self.members) > 1


@dataclass(frozen=True, repr=False)
class Plan(Compact):
    """The result of :func:`plan`.

    Attributes
    ----------
    graph : Graph
        The graph that is executed (after decomposition when enabled).
    source : Graph
        The graph that was planned, as given.
    options : FusionOptions
    hardware : numlab.kernels.Hardware
    blocks : list of Block
        In topological order; every node of ``graph`` is in exactly one.
    decomposed : dict
        Node of ``graph`` -> name of the composite node of ``source`` it came
        from (empty when nothing was decomposed).
    """

    graph: object
    source: object
    options: FusionOptions
    hardware: object
    blocks: list
    decomposed: dict = field(default_factory=dict)
    _index: dict = field(default_factory=dict, repr=False, compare=False)
    _op_tiles: dict = field(default_factory=dict, repr=False, compare=False)

    def block_of(self, node_name: str) -> Block | None:
        """The block holding ``node_name``, or None for graph inputs and
        names not in the executed graph."""
        i = self._index.get(node_name)
        return None if i is None else self.blocks[i]

    def op_tile(self, node_name: str) -> int:
        """The tile the node gets as its own one-operator kernel: live
        buffers = distinct inputs + 1, elements of S's size."""
        if node_name not in self._op_tiles:
            raise ValueError(
                f"node {node_name!r} is not in the planned graph; nodes: "
                f"{[n.name for n in self.graph.nodes]}"
            )
        return self._op_tiles[node_name]

    @property
    def n_fused(self) -> int:
        """Number of blocks with more than one member."""
        return sum(b.fused for b in self.blocks)

    def _repr_facts(self):
        nb = len(self.blocks)
        rows = [("graph", repr(self.graph)), ("options", self.options.describe()), ("hardware", str(self.hardware)),
                ("decomposed", ", ".join(sorted(set(self.decomposed.values()))) if self.decomposed else None)]
        rows += [(b.name, f"{'codegen' if b.codegen else 'library'} {b.kind} tile={b.tile} "
                          f"[{', '.join(b.members[:8])}{' ...' if len(b.members) > 8 else ''}]")
                 for b in self.blocks[:12]]
        if nb > 12:
            rows.append(("...", f"{nb - 12} more blocks (str(plan) lists them all)"))
        return f"Plan: {nb} block{'s' if nb != 1 else ''} ({self.n_fused} fused) for {len(self.graph.nodes)} nodes", rows

    def __str__(self) -> str:
        hw = self.hardware
        ub = getattr(hw, "ub_bytes", None)
        hw_s = f"ub={ub // 1024}KiB" if isinstance(ub, int) else str(hw)
        n_nodes = len(self.graph.nodes)
        nb = len(self.blocks)
        lines = [
            f"Plan: {nb} block{'s' if nb != 1 else ''} ({self.n_fused} fused) for {n_nodes} "
            f"node{'s' if n_nodes != 1 else ''}; {self.options.describe()}; hardware {hw_s} "
            "(tile = elements per on-chip buffer, live = buffers held at once)"
        ]
        if self.decomposed:
            comps = sorted(set(self.decomposed.values()))
            lines.append(f"  decomposed composites: {', '.join(comps)}")
        w = max((len(b.kind) for b in self.blocks), default=4)
        for b in self.blocks:
            how = "codegen" if b.codegen else "library"
            lines.append(
                f"  {b.name:>4}  {how:<7}  {b.kind:<{w}}  tile={b.tile:<6d} live={b.live_buffers:<2d} "
                f"[{', '.join(b.members)}]"
            )
            lines.append(
                f"        reads {', '.join(b.inputs) or '-'}; writes {', '.join(b.outputs) or '-'}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-able summary (blocks with members, kind, tile, live buffers)."""
        return {
            "options": self.options.canonical(),
            "blocks": [
                {
                    "name": b.name,
                    "members": list(b.members),
                    "kind": b.kind,
                    "tile": b.tile,
                    "live_buffers": b.live_buffers,
                    "codegen": b.codegen,
                    "inputs": list(b.inputs),
                    "outputs": list(b.outputs),
                }
                for b in self.blocks
            ],
            "decomposed": dict(self.decomposed),
        }


def live_buffers(graph, members, outputs) -> int:
    """Live-buffer count of a block (module docstring, rule 3).

    At step ``i`` (member ``i`` being computed) the live tensors are: the
    value being computed; each block input until its last use (steps
    ``0 .. last use``); each earlier member until its last use inside the
    block (steps ``pos + 1 .. last use``), or to the end when it is an output
    (steps ``pos + 1 ..``).  The count is the largest over the steps, summed
    from the intervals' ends."""
    mem = list(members)
    pos = {m: i for i, m in enumerate(mem)}
    outs = set(outputs)
    last_use: dict = {}
    for i, m in enumerate(mem):
        for p in graph.node(m).inputs:
            last_use[p] = i
    delta = [0] * (len(mem) + 1)  # delta[i]: change of the count at step i
    for v, lu in last_use.items():
        start = pos[v] + 1 if v in pos else 0
        end = len(mem) - 1 if v in outs and v in pos else lu
        if start <= end:
            delta[start] += 1
            delta[end + 1] -= 1
    for v in outs - last_use.keys():
        if v in pos and pos[v] + 1 < len(mem):
            delta[pos[v] + 1] += 1
    best = live = 0
    for d in delta[:len(mem)]:
        live += d
        best = max(best, live + 1)
    return best


def _op_tile(node, hardware, eb: int, library) -> tuple[int, int]:
    """(live buffers, tile) of ``node`` as its own one-operator kernel."""
    return kernels.hardware.kernel_tile(library, hardware, len(dict.fromkeys(node.inputs)) + 1, eb, False)


def _elem_bytes(fmt) -> int:
    if fmt is None:
        return 2
    # bytes of the storage container: 1 for fp4/fp6/fp8 (one code per byte, as
    # ml_dtypes stores them), 4 for tf32 and custom formats (float32 containers)
    return get_format(fmt, "fmt").container.itemsize


def plan(graph, options: FusionOptions | None = None, hardware=None, fmt=None, *,
         codegen=None, library=None) -> Plan:
    """Group the nodes of ``graph`` into blocks.

    Parameters
    ----------
    graph : numlab.graph.Graph
    options : FusionOptions, optional
        Default ``FusionOptions()`` (Ascend autofusion defaults, composites
        kept whole).
    hardware : numlab.kernels.Hardware, optional
        Default ``numlab.kernels.Hardware()``.
    fmt : Format or str, optional
        Storage format S: one-operator kernels (:meth:`Plan.op_tile`, and
        blocks the code generator does not take) tile buffers of S elements
        (default 2 bytes, fp16/bf16); code-generated blocks tile fp32
        buffers (4 bytes).
    codegen, library : numlab.kernels.KernelSpec, optional
        When given, tiles come from the specs: a code-generated block's from
        ``codegen.tile(S, fused=True, live_buffers)`` (the plan's count when
        ``codegen.live_buffers`` is None), a one-operator kernel's from
        ``library.tile(S, fused=False, ...)`` (the spec's ``live_buffers``
        when set, else distinct inputs + 1).  Without them the formula above
        is applied directly.

    Returns
    -------
    Plan
        See the module docstring for the rules: :func:`_assign_blocks`
        (rule 2), :func:`_block_order`, then :func:`_make_blocks` (rules 3, 4).
    """
    if options is None:
        options = FusionOptions()
    if not isinstance(options, FusionOptions):
        raise TypeError(
            f"options must be a FusionOptions (e.g. FusionOptions.inductor()), got {type(options).__name__}"
        )
    if hardware is None:
        hardware = kernels.Hardware()
    if not isinstance(hardware, kernels.Hardware):
        raise TypeError(f"hardware must be a numlab.kernels.Hardware, got {type(hardware).__name__}")
    source = graph
    decomposed: dict = {}
    if options.decompose:
        graph, decomposed = _decompose(graph)
    nodes = list(graph.nodes)
    kinds = {n.name: op_kind(n.op) for n in nodes}
    assign = _assign_blocks(nodes, kinds, options)
    order = _block_order(nodes, assign)
    eb = _elem_bytes(fmt)
    blocks = _make_blocks(graph, order, kinds, options, hardware, eb, codegen, library)
    index = {m: i for i, b in enumerate(blocks) for m in b.members}
    op_tiles = {n.name: _op_tile(n, hardware, eb, library)[1] for n in nodes}
    return Plan(graph=graph, source=source, options=options, hardware=hardware, blocks=blocks,
                decomposed=decomposed, _index=index, _op_tiles=op_tiles)


def _assign_blocks(nodes, kinds: dict, options: FusionOptions) -> dict:
    """Which block each node joins (module docstring, rule 2): node -> block id.

    Nodes are visited in topological order.  A node whose kind ``options``
    does not fuse is a singleton block.  A fusible node joins the first block
    of a producer (in the order of its inputs) whose block is fusible and
    where joining keeps the block graph acyclic, or else starts a fusible
    block of its own; having joined, the other fusible producer blocks are
    merged into its block one by one, each merge kept only when the block
    graph stays acyclic."""
    bg = _BlockGraph()
    block_of: dict = {}  # node -> the block id it was first given (bg.find: its block now)
    fusible: dict = {}
    for i, n in enumerate(nodes):
        producers = list(dict.fromkeys(bg.find(block_of[p]) for p in n.inputs if p in block_of))
        cands = [b for b in producers if fusible[b]] if options.fuses(kinds[n.name]) else None
        target = None
        for b in cands or ():
            if bg.join(b, [q for q in producers if q != b]):
                target = b
                break
        if target is None:
            block_of[n.name] = i
            fusible[i] = cands is not None
            bg.new_block(i, producers)
            continue
        block_of[n.name] = joined = target
        for c in cands:
            if c == joined:
                continue
            merged = bg.merge(target, c)
            if merged is not None:
                target = merged
                fusible[target] = True
    return {name: bg.find(b) for name, b in block_of.items()}


def _block_order(nodes, assign: dict) -> list:
    """The blocks' member lists in the order the plan lists them: a
    topological order of the block graph (Kahn's algorithm), ties broken by
    the position of the block's first member; members in node order."""
    first: dict = {}
    members: dict = {}
    for i, n in enumerate(nodes):
        b = assign[n.name]
        if b not in members:
            members[b] = []
            first[b] = i
        members[b].append(n.name)
    succ, indeg = _quotient_graph(nodes, assign)
    heap = [(first[b], b) for b, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order: list = []
    while heap:
        _, b = heapq.heappop(heap)
        order.append(members[b])
        for c in succ[b]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (first[c], c))
    assert len(order) == len(members), "fusion produced a cyclic block graph"
    return order


def _make_blocks(graph, order: list, kinds: dict, options: FusionOptions, hardware, eb: int,
                 codegen, library) -> list:
    """The :class:`Block` of each member list of ``order``: inputs read from
    memory and outputs written to it, whether the code generator takes it
    (every member's kind fused, rule 4), its live buffers and tile (rule 3)."""
    graph_outputs = set(graph.outputs)
    blocks = []
    for i, mem in enumerate(order):
        mset = set(mem)
        ins: dict = {}
        outs: list = []
        for m in mem:
            ins.update((p, None) for p in graph.node(m).inputs if p not in mset)
            if m in graph_outputs or any(c.name not in mset for c in graph.consumers(m)):
                outs.append(m)
        kset = {kinds[m] for m in mem}
        is_cg = all(options.fuses(k) for k in kset)
        if is_cg:
            nbuf, tile = kernels.hardware.kernel_tile(codegen, hardware, live_buffers(graph, mem, outs), eb, True)
        else:
            nbuf, tile = _op_tile(graph.node(mem[0]), hardware, eb, library)
        blocks.append(Block(name=f"b{i}", members=mem, kind="+".join(sorted(kset)), tile=tile,
                            live_buffers=nbuf, inputs=list(ins), outputs=outs, codegen=is_cg))
    return blocks


def _decompose(graph):
    """Replace composite nodes by their decompositions (numlab.graph.decompose);
    returns the new graph and node -> composite it came from."""
    comps = {n.name for n in graph.nodes if ops.CATALOGUE[n.op].category == "composite"}
    if not comps:
        return graph, {}
    g = decompose(graph)
    origin = {n.name: n.attrs.get("origin") for n in g.nodes}
    return g, {k: v for k, v in origin.items() if v in comps}
