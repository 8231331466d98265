"""SHA-256 digests of arrays: the one place numlab hashes array bytes (compile
fingerprints, graph constants, saved counterexamples, determinism records).

An array is hashed as the bytes of its C-contiguous copy
(:func:`numpy.ascontiguousarray`, which makes a 0-d array 1-d), after an
optional header that describes that copy (its dtype and shape, in the format
each caller has always written, so stored digests stay valid)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

__all__ = ["update", "sha256_hex"]


def update(h, a, header: Callable[[np.ndarray], str] | None = None) -> None:
    """Feed the array ``a`` to the hash ``h``: ``header(c)`` (UTF-8) first when
    given, ``c`` being the C-contiguous copy of ``a``, then the bytes of ``c``."""
    c = np.ascontiguousarray(a)
    if header is not None:
        h.update(header(c).encode())
    h.update(c.tobytes())


def sha256_hex(a, header: Callable[[np.ndarray], str] | None = None) -> str:
    """SHA-256 (hex) of the array ``a`` as :func:`update` feeds it."""
    h = hashlib.sha256()
    update(h, a, header)
    return h.hexdigest()
