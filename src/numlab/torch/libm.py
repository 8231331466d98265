"""PyTorch's CPU math routines (SLEEF ``expf``/``tanhf``, ATen's A&S ``erf``,
oneDNN's gelu_erf): re-exported from :mod:`numlab.kernels.libm`, where they
live as the numerics of the ``algo=`` choices of :mod:`numlab.kernels.algorithms`
(``exp(algo="sleef_u10")``, ``tanh(algo="sleef")``, ``erf(algo="aten_vec")``,
``gelu(algo="onednn")``)."""

from __future__ import annotations

from ..kernels.libm import aten_vec_erf, fma32, onednn_gelu_erf, sleef_expf, sleef_tanhf

__all__ = ["sleef_expf", "sleef_tanhf", "aten_vec_erf", "onednn_gelu_erf", "fma32"]
