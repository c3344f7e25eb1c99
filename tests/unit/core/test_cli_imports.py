"""What ``marketplace`` loads: ``serve`` never loads the devnet tooling or the embedded stack.

Each check runs in a fresh interpreter, since this one has long imported everything the suite
uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# Runs `marketplace ARGS...` as `python -m marketplace` would, then prints what got imported.
RUN_CLI = """
import json, runpy, sys
sys.argv = ["marketplace", *json.loads(sys.argv[1])]
try:
    runpy.run_module("marketplace", run_name="__main__")
except SystemExit:
    pass
print()
print(json.dumps(sorted(sys.modules)))
"""

# Imports what a running `serve` loads: the serve path of the CLI, and every route table, setup
# function, cleanup context and guard the app factory resolves from the capability registry.
LOAD_SERVE = """
import json, sys
from marketplace.capabilities import CAPABILITIES, resolve
from marketplace import cli
import marketplace.actors.ray_env, marketplace.http.app, marketplace.http.server
import marketplace.storage.migrations
for cap in CAPABILITIES:
    for ref in (*cap.routes, *cap.setup, *cap.contexts, *cap.queues, *(g for _, g in cap.guards)):
        resolve(ref)
print(json.dumps(sorted(sys.modules)))
"""

DEVNET_OR_EMBEDDED = ("marketplace.devnet", "marketplace.embedded")


def _modules(code: str, *args: str) -> tuple[list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    modules = json.loads(done.stdout.splitlines()[-1])
    return modules, done.stdout


def _under(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m in roots or m.startswith(tuple(f"{r}." for r in roots))]


def test_serve_help_loads_neither_devnet_embedded_nor_web3() -> None:
    modules, output = _modules(RUN_CLI, json.dumps(["serve", "--help"]))
    assert "--skip-migrations" in output  # the help really was printed
    assert _under(modules, DEVNET_OR_EMBEDDED) == []
    # web3 and eth-account were most of the start time when the devnet client loaded with the
    # CLI; Ray would be worse. None is needed to print help.
    assert _under(modules, ("web3", "eth_account", "ray")) == []


def test_devnet_help_loads_the_devnet_cli_only_when_asked() -> None:
    # The counterpart: the lazy declaration does load the command when it is the one invoked.
    modules, output = _modules(RUN_CLI, json.dumps(["devnet", "--help"]))
    assert "advance-time" in output
    assert "marketplace.devnet.cli" in modules


def test_a_running_serve_loads_neither_devnet_nor_embedded() -> None:
    modules, _ = _modules(LOAD_SERVE)
    assert "marketplace.http.app" in modules  # the app factory and its routes were loaded
    assert _under(modules, DEVNET_OR_EMBEDDED) == []
