"""``marketplace --version`` (issue 27): prints ``marketplace <version>`` (the installed
distribution's, from importlib.metadata) and exits 0, in a fresh interpreter that imports no
server code: only the CLI module, its lazy command map and the log setup."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPECTED = f"marketplace {version('marketplace')}\n"

# Runs `marketplace --version` as `python -m marketplace` would, then prints its exit code and
# what got imported.
RUN_CLI = """
import json, runpy, sys
sys.argv = ["marketplace", *json.loads(sys.argv[1])]
code = None
try:
    runpy.run_module("marketplace", run_name="__main__")
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
# Ours that --version may load; and others' heavy packages a server loads.
ALLOWED_OURS = {"marketplace", "marketplace.cli", "marketplace.cli_commands", "marketplace.logs"}
HEAVY = ("ray", "aiohttp", "asyncpg", "redis", "web3", "eth_account", "pydantic")


def _run(*args: str) -> tuple[int, str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", RUN_CLI, json.dumps(list(args))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    *printed, last = done.stdout.splitlines(keepends=True)
    result = json.loads(last)
    return result["code"], "".join(printed), result["modules"]


def test_version_prints_the_distribution_version_and_exits_0() -> None:
    code, output, modules = _run("--version")
    assert code == 0
    assert output == EXPECTED
    ours = {m for m in modules if m == "marketplace" or m.startswith("marketplace.")}
    assert ours <= ALLOWED_OURS, sorted(ours - ALLOWED_OURS)
    loaded = [m for m in HEAVY if m in modules]
    assert loaded == []


def test_version_through_the_installed_command() -> None:
    # scripts/setup installs the package (and its console script) into this interpreter's venv.
    command = shutil.which("marketplace", path=str(Path(sys.executable).parent))
    assert command is not None, "the marketplace console script is not next to this interpreter"
    done = subprocess.run(
        [command, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, EXPECTED, "")


def test_help_lists_the_version_flag() -> None:
    code, output, _ = _run("--help")
    assert code == 0
    assert "--version" in output
