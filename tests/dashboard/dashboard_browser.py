"""Debian's Chromium, driven by Playwright. Never downloads a browser: no /usr/bin/chromium (or no
playwright) skips the browser tests, except under CI=true, where they must run and so fail instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

from support import need

CHROMIUM = os.environ.get("TICKETQ_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI's container
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _unavailable(reason: str) -> None:
    need(False, f"{reason} (.ci/run installs chromium)")


def launch() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _unavailable(f"no Chromium at {CHROMIUM}; apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (it is in the dev extra)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
