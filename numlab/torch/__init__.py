"""numlab's PyTorch bridge (issue 8): trace real torch functions and predict
torch eager and ``torch.compile`` (Inductor C++) outputs bit for bit.

torch is imported lazily: ``import numlab`` and ``import numlab.torch`` work
without it; the functions that need it import it when called.  Inside this
package ``import torch`` is an absolute import and always means the real
PyTorch (Python 3 has no implicit relative imports).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "orders": "numlab.torch.orders",
    "data": "numlab.torch.data",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        mod = importlib.import_module(_LAZY[name])
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'numlab.torch' has no attribute {name!r}")
