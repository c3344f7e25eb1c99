"""The real browser of the browser tests (tests/api/test_docs_page.py, tests/browser/): Debian's
Chromium driven by Playwright. scripts/test installs the package (a test tool's own browser
download is not reachable here); without it these tests fail rather than skip."""

from __future__ import annotations

import os
import shutil

# As the machine notes say: without the networking switches Chromium tries to reach Google's
# services at start; the pages under test must need nothing but the servers the test starts.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Debian's Chromium (scripts/setup installs it), or MARKETPLACE_TEST_CHROMIUM."""
    path = os.environ.get("MARKETPLACE_TEST_CHROMIUM") or shutil.which("chromium")
    assert path, "no Chromium: run scripts/setup, or set MARKETPLACE_TEST_CHROMIUM"
    return path
