"""What ``marketplace`` loads: ``serve`` never loads the dev stack (``marketplace_devstack``: the
devnet tooling, the embedded servers of ``up``), and runs where it is not installed.

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

# Imports what a running `serve` loads: the serve path of the CLI, and the capability registry,
# which imports every route table, setup function, cleanup context, guard and queue it declares.
LOAD_SERVE = """
import json, sys
import marketplace.http.capabilities
from marketplace import cli
import marketplace.actors.ray_env, marketplace.http.app, marketplace.http.server
import marketplace.storage.migrations
print(json.dumps(sorted(sys.modules)))
"""

DEV_STACK = ("marketplace_devstack",)

# Prepended to a script: the interpreter behaves as if the dev stack were not installed (as in
# the service's image): its modules cannot be imported and its entry points are not there.
WITHOUT_DEV_STACK = """
import importlib.metadata, sys

class _NoDevStack:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "marketplace_devstack":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoDevStack())
_entry_points = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda **kw: [
    e for e in _entry_points(**kw) if not e.value.startswith("marketplace_devstack")
]
"""


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


def test_serve_help_loads_neither_the_dev_stack_nor_web3() -> None:
    modules, output = _modules(RUN_CLI, json.dumps(["serve", "--help"]))
    assert "--skip-migrations" in output  # the help really was printed
    assert _under(modules, DEV_STACK) == []
    # web3 and eth-account were most of the start time when the devnet client loaded with the
    # CLI; Ray would be worse. None is needed to print help.
    assert _under(modules, ("web3", "eth_account", "ray")) == []
    # The CLI reads its commands from cli_commands, never the server's capability registry.
    assert "marketplace.cli_commands" in modules
    assert "marketplace.http.capabilities" not in modules


def test_devnet_help_loads_the_devnet_cli_only_when_asked() -> None:
    # The counterpart: the lazy declaration does load the command when it is the one invoked.
    modules, output = _modules(RUN_CLI, json.dumps(["devnet", "--help"]))
    assert "advance-time" in output
    assert "marketplace_devstack.devnet.cli" in modules


def test_the_dev_stack_commands_come_from_its_entry_points() -> None:
    # `marketplace --help` lists them (reading their help loads only the light commands module);
    # `up --help` configures `up` from the dev stack without starting anything.
    modules, output = _modules(RUN_CLI, json.dumps(["--help"]))
    assert all(name in output for name in ("up", "status", "devnet"))
    assert _under(modules, DEV_STACK) == ["marketplace_devstack", "marketplace_devstack.commands"]
    modules, output = _modules(RUN_CLI, json.dumps(["up", "--help"]))
    assert "--data-dir" in output
    assert "marketplace_devstack.commands" in modules


def test_a_running_serve_loads_no_dev_stack() -> None:
    modules, _ = _modules(LOAD_SERVE)
    assert "marketplace.http.app" in modules  # the app factory and its routes were loaded
    assert _under(modules, DEV_STACK) == []


def test_serve_runs_without_the_dev_stack_and_up_says_how_to_install_it() -> None:
    modules, output = _modules(WITHOUT_DEV_STACK + LOAD_SERVE)
    assert "marketplace.http.app" in modules
    modules, output = _modules(WITHOUT_DEV_STACK + RUN_CLI, json.dumps(["serve", "--help"]))
    assert "--skip-migrations" in output
    modules, output = _modules(WITHOUT_DEV_STACK + RUN_CLI, json.dumps(["--help"]))
    assert "up, status, devnet: needs the dev stack" in " ".join(output.split())
    for command in ("up", "status", "devnet"):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                WITHOUT_DEV_STACK + "from marketplace.cli import main\n"
                f"raise SystemExit(main([{command!r}, '--help']))",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        [line] = done.stderr.splitlines()  # one line, saying what to install
        assert line.startswith(f"marketplace {command}: needs the dev stack")
        assert "pip install -e ./devstack" in line
