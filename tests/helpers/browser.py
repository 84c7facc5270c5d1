"""Headless Chromium for the browser tests (Debian's /usr/bin/chromium driven by Playwright)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def chromium_browser() -> Iterator[Any]:
    """Yield a launched Playwright Chromium browser, closing it afterwards.

    Skips the calling test when Chromium or Playwright is absent; meant to back a
    module-scoped ``browser`` fixture (``yield from chromium_browser()``).
    """
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium not installed at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()
