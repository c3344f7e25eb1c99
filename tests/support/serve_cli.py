"""Run ``marketplace serve`` as an operator would, with only the given settings in its
environment (none inherited from the test's own), for the checks that refuse to start."""

from __future__ import annotations

import os
import subprocess
import sys


def serve_with(**settings: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MARKETPLACE_")}
    env.update(settings)
    return subprocess.run(
        [sys.executable, "-m", "marketplace", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
