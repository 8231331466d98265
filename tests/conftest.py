"""Shared test configuration.

* Hypothesis runs derandomised (same examples in every process) with a
  profile chosen by ``HYPOTHESIS_PROFILE`` (``ci`` by default, ``dev`` for
  more examples).
* ``requires_torch``: PyTorch tests skip with a printed reason when torch is
  missing, and fail instead when ``NUMLAB_REQUIRE_TORCH=1`` (as in CI).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", parent=settings.get_profile("ci"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def torch_or_skip():
    """Import torch, or skip (fail when NUMLAB_REQUIRE_TORCH=1)."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("NUMLAB_REQUIRE_TORCH") == "1":
            pytest.fail(f"NUMLAB_REQUIRE_TORCH=1 but torch cannot be imported: {exc}")
        pytest.skip(f"torch is not installed ({exc}); install numlab[torch]")
    import torch

    return torch


@pytest.fixture
def torch():
    return torch_or_skip()
