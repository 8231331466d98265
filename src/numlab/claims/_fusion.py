"""Fusion specs for the claims: every entry point coerces through
:meth:`numlab.fusion.FusionOptions.parse` and a case stores the canonical
spec string (``FusionOptions.spec``), so an object given is kept, never
replaced by the default."""

from __future__ import annotations

from ..fusion import FusionOptions, split_specs

__all__ = ["fusion_options", "fusion_spec", "fusion_specs"]


def fusion_options(spec, arg: str = "fusion") -> FusionOptions:
    """``FusionOptions.parse(spec)`` (None: the default; an object unchanged)."""
    return FusionOptions.parse(spec, arg=arg)


def fusion_spec(spec, arg: str = "fusion") -> str:
    """The canonical spec string of ``spec`` (a str, a FusionOptions or None)."""
    return fusion_options(spec, arg).spec


def fusion_specs(fusion, default: tuple, arg: str = "fusion") -> list:
    """Canonical spec strings of a list of fusion configurations: None gives
    ``default``; a str is a comma-separated list (split by
    :func:`numlab.fusion.split_specs`: a comma inside an AUTOFUSE_FLAGS pass
    list stays in its spec); a FusionOptions is one configuration; a list or
    tuple holds strs (each such a list) or FusionOptions.  Each element is
    parsed by ``FusionOptions.parse``; duplicates (same canonical spec) are
    dropped, order kept."""
    if fusion is None:
        fusion = list(default)
    items = [fusion] if isinstance(fusion, (str, FusionOptions)) else fusion
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{arg} must be a fusion spec, a comma-separated list of them, a FusionOptions or a "
                        f"list of those, got {type(fusion).__name__}")
    out: list = []
    for item in items:
        if isinstance(item, FusionOptions):
            parts = [item]
        elif isinstance(item, str):
            parts = split_specs(item)
        else:
            raise TypeError(f"{arg} holds {item!r} ({type(item).__name__}); each element is a fusion spec "
                            "string or a FusionOptions")
        for p in parts:
            sp = fusion_spec(p, arg)
            if sp not in out:
                out.append(sp)
    if not out:
        raise ValueError(f"{arg}={fusion!r} names no configuration; give at least one fusion spec "
                         "(e.g. 'autofuse', 'inductor+nodecompose')")
    return out
