"""numlab's PyTorch bridge: trace real torch functions and predict
torch eager and ``torch.compile`` (Inductor C++) outputs bit for bit.

* :func:`from_torch` -- trace to ATen ops (:class:`~numlab.torch.bridge.TorchTrace`),
  ``.to_graph()`` maps onto numlab's operator catalogue;
* :func:`predict` -- ``mode="eager" | "compiled" | "reference"``: the function lowered to a
  numlab Graph (:func:`lower`, per-node dtypes) and run by :func:`numlab.execute.run`
  under the presets' ``KernelSpec``;
* :func:`torch_cpu_eager`, :func:`inductor_cpu` -- the measured presets;
* :func:`explain` -- eager vs compiled attributed to the four sources.

torch is imported lazily: ``import numlab`` and ``import numlab.torch`` work
without it; the functions that need it import it when called.  Inside this
package ``import torch`` is an absolute import and always means the real
PyTorch (Python 3 has no implicit relative imports).
"""

from __future__ import annotations

from numlab._lazy import lazy_loader

_LAZY = {
    "orders": "numlab.torch.orders",
    "data": "numlab.torch.data",
    "libm": "numlab.torch.libm",
    "bridge": "numlab.torch.bridge",
    "lowering": "numlab.torch.lowering",
    "predictor": "numlab.torch.predictor",
    "presets": "numlab.torch.presets",
    "reveal": "numlab.torch.reveal",
}
_ATTRS = {
    "from_torch": ("numlab.torch.bridge", "from_torch"),
    "TorchTrace": ("numlab.torch.bridge", "TorchTrace"),
    "predict": ("numlab.torch.predictor", "predict"),
    "lower": ("numlab.torch.lowering", "lower"),
    "run_torch": ("numlab.torch.predictor", "run_torch"),
    "compile_fn": ("numlab.torch.predictor", "compile_fn"),
    "Switches": ("numlab.torch.predictor", "Switches"),
    "NotModelled": ("numlab.torch.predictor", "NotModelled"),
    "torch_cpu_eager": ("numlab.torch.presets", "torch_cpu_eager"),
    "inductor_cpu": ("numlab.torch.presets", "inductor_cpu"),
    "TorchCpuEager": ("numlab.torch.presets", "TorchCpuEager"),
    "InductorCpu": ("numlab.torch.presets", "InductorCpu"),
    "reveal_order": ("numlab.torch.reveal", "reveal_order"),
    "describe_machine": ("numlab.torch.presets", "describe_machine"),
}

# imported eagerly (numpy only, no torch) so that the function ``explain`` owns the
# package attribute: a lazily imported submodule ``explain`` would replace it
from .explain import Explanation as Explanation  # noqa: E402
from .explain import explain as explain  # noqa: E402

__all__ = sorted(set(_LAZY) | set(_ATTRS) | {"explain", "Explanation"})


__getattr__, __dir__ = lazy_loader(globals(), _LAZY, _ATTRS)
