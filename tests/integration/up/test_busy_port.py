"""`up` and `serve` refuse a port they cannot listen on before starting anything: one line on
stderr naming the port, exit status 2, within about a second."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.up.conftest import REPO, up_env

# What the refusal may cost the command itself (CPU seconds: interpreter, settings, the probe).
# Wall-clock time also counts the machine's load, so its bound is looser; both are printed.
CPU_SECONDS = 1.0
WALL_SECONDS = 5.0


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def run_timed(
    args: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The command's result, its wall-clock seconds and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "marketplace", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, wall, cpu


def assert_refused(
    result: subprocess.CompletedProcess[str], command: str, port: int, wall: float, cpu: float
) -> None:
    print(f"{command}: exit {result.returncode} after {wall:.2f} s ({cpu:.2f} s CPU)")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"marketplace {command}: port {port} on 127.0.0.1 is already in use "
        "(set --port or MARKETPLACE_PORT)"
    ]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    assert cpu < CPU_SECONDS, f"{cpu:.2f} s CPU"
    assert wall < WALL_SECONDS, f"{wall:.2f} s"


def processes_naming(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if str(path) in " ".join(proc.info["cmdline"] or ()):
            found.append(f"{proc.info['pid']} {proc.info['cmdline']}")
    return found


def test_up_refuses_a_busy_port_before_starting_anything(tmp_path: Path, held_port: int) -> None:
    os.chmod(tmp_path, 0o755)
    data_dir = tmp_path / "data"
    env = up_env(tmp_path)
    result, wall, cpu = run_timed(
        ["up", "--data-dir", str(data_dir), "--port", str(held_port)], env
    )
    assert_refused(result, "up", held_port, wall, cpu)
    # Nothing started: no data dir (not even its lock), no process working on it.
    assert not data_dir.exists()
    assert processes_naming(data_dir) == []


def test_serve_refuses_a_busy_port_before_starting_anything(tmp_path: Path, held_port: int) -> None:
    env = up_env(tmp_path)
    # Dependencies that do not exist: any attempt to start would fail differently (and slowly).
    env.update(
        MARKETPLACE_PORT=str(held_port),
        MARKETPLACE_DATABASE_URL="postgresql://nobody:nothing@127.0.0.1:1/none",
        MARKETPLACE_REDIS_URL="redis://127.0.0.1:1/0",
        MARKETPLACE_JWT_SECRET="s" * 32,
        MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET="u" * 32,
    )
    result, wall, cpu = run_timed(["serve"], env)
    assert_refused(result, "serve", held_port, wall, cpu)
