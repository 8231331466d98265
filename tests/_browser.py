"""What the browser tests need (tests/test_browser.py, the course's offline-math test):
Playwright and Debian's chromium, or a skip naming what is missing -- a failure instead
under ``NUMLAB_REQUIRE_BROWSER=1`` (CI's browser step, where absent means broken)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_browser(reason: str):
    """Skip with ``reason``, or fail with it when ``NUMLAB_REQUIRE_BROWSER=1``."""
    if os.environ.get("NUMLAB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"NUMLAB_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def playwright_and_chromium():
    """``(sync_playwright, chromium executable)``, or :func:`require_browser`."""
    try:
        from playwright.sync_api import sync_playwright  # optional: only the browser checks need it
    except ImportError as exc:
        require_browser(f"playwright is not installed ({exc}); pip install playwright")
    chromium = os.environ.get("LABCHECK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        require_browser("no chromium on PATH (apt-get install chromium, or set LABCHECK_CHROMIUM)")
    return sync_playwright, chromium
