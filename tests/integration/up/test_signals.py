"""Stopping `up` as a terminal does: the signal goes to its whole process group (Ctrl-C sends
SIGINT to the foreground group; `kill -TERM -<pgid>` and systemd's default send SIGTERM to every
member). Only `up` may act on it: it stops the app, Ray, then the embedded servers, in order,
quietly, within seconds, and leaves nothing running."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from marketplace_devstack.embedded.procs import free_port
from tests.integration.up.conftest import REPO, UpRun, finish, leftovers, up_env
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.timeout(900)

EXIT_WITHIN_SECONDS = 5.0


def loud_lines(log: str) -> list[str]:
    """Lines a person stopping `up` should not see: errors, tracebacks, restarts."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        level = str(entry.get("level", "")) if isinstance(entry, dict) else ""
        if (
            level.lower() in ("error", "critical")
            or "Traceback" in line
            or "restarting" in line
            or " ERROR " in line
            or " CRITICAL " in line
        ):
            found.append(line[:500])
    return found


# SIGINT to the group is what the terminal test below sends (Ctrl-C, with a terminal attached);
# each `up` started costs 30-50 s of the suite's serial part, so SIGINT is not run here again.
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])
def test_a_signal_to_the_process_group_stops_up_quietly_and_fast(
    launch: Any, sig: signal.Signals
) -> None:
    run = launch(sig.name)
    run.wait_ready()
    # Some work in flight across the stack (chain, indexer, actors) when the signal comes.
    data_dir = ("--data-dir", str(run.data_dir))
    run.cli("devnet", "create", *data_dir, "--json")
    tree = run.descendants()
    assert len(tree) > 5, tree
    started_lines = len(run.log().splitlines())

    pgid = os.getpgid(run.proc.pid)
    assert pgid == run.proc.pid  # `up` leads its group, as in a shell with job control
    sent = time.monotonic()
    os.killpg(pgid, sig)
    try:
        status = run.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"up still runs 60 s after {sig.name}:\n{run.log()[-3000:]}") from None
    took = time.monotonic() - sent
    print(f"{sig.name}: up exited {status} after {took:.2f} s")

    assert status == 0, run.log()[-3000:]
    assert took < EXIT_WITHIN_SECONDS, f"{took:.1f} s\n{run.log()[-3000:]}"
    assert loud_lines(run.log()) == []
    messages = run.log_messages()
    assert messages[-1] == "stopped", messages[-10:]
    assert_stopped_in_order(messages)
    assert not any("restarted" in m for m in messages), messages
    assert len(run.log().splitlines()) - started_lines < 40, run.log()[-3000:]
    eventually_sync(
        lambda: not leftovers(run),
        within=3,
        what=lambda: f"no process of the stopped up: {leftovers(run)}",
    )


def assert_stopped_in_order(messages: list[str]) -> None:
    """The app stops before what it uses."""
    order = ["stopping", "ray runtime stopped", "http server stopped", "embedded postgres stopped"]
    positions = [messages.index(m) for m in order]
    assert positions == sorted(positions), messages[-20:]


# A readable line (MARKETPLACE_LOG_FORMAT=auto on a terminal): time, level, logger, message.
TEXT_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING) +[\w.]+: \S")
# Its message: after the logger's name, before the extra fields (two spaces, then key=value).
TEXT_MESSAGE = re.compile(r"^\S+ +\w+ +[\w.]+: (.*?)(?:  \w+=.*)?$")


def copy_terminal(master: int, path: Path) -> None:
    """Everything written to the terminal, into ``path``, until its last writer closes it."""
    with path.open("ab") as out:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: no writer left
                return
            if not chunk:
                return
            out.write(chunk)
            out.flush()


def test_on_a_terminal_up_logs_readable_lines_and_ctrl_c_stops_it_quietly(up_root: Path) -> None:
    master, terminal = pty.openpty()
    log_path = up_root / "terminal.log"
    env = up_env(up_root)
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "marketplace", "up"),
            *("--data-dir", str(up_root / "data"), "--port", str(port)),
        ],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    reader = threading.Thread(target=copy_terminal, args=(master, log_path), daemon=True)
    reader.start()
    run = UpRun(proc, up_root / "data", port, log_path, env)
    try:
        run.wait_ready()
        run.descendants()
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=60)
        took = time.monotonic() - sent
        print(f"SIGINT on a terminal: up exited {status} after {took:.2f} s")
    finally:
        finish(run)
        reader.join(timeout=30)
        os.close(master)

    assert status == 0
    assert took < EXIT_WITHIN_SECONDS, f"{took:.1f} s"
    lines = [line for line in run.log().splitlines() if line.strip()]
    assert loud_lines(run.log()) == []
    # Ours are readable lines (Ray may add a plain warning of its own), never JSON.
    assert not [line for line in lines if line.lstrip().startswith("{")], lines[:5]
    ours = [line for line in lines if TEXT_LINE.match(line)]
    assert len(ours) > 10, lines[:20]
    assert any(
        re.search(r" marketplace\.up: up  url=http://127\.0\.0\.1:\d+/v1/", line) for line in ours
    )
    assert ours[-1].endswith(" marketplace.up: stopped"), ours[-5:]
    assert_stopped_in_order([TEXT_MESSAGE.sub(r"\1", line) for line in ours])
    assert not any("restart" in line for line in lines), lines
    eventually_sync(
        lambda: not leftovers(run),
        within=3,
        what=lambda: f"no process of the stopped up: {leftovers(run)}",
    )


# Ctrl-C while Ray starts: Ray's start cannot be cut short, only waited for (3 to 6 s on a busy
# 2-core machine) and then stopped. Left to the guardian instead, Ray's processes took 29 s.
EXIT_DURING_START_WITHIN_SECONDS = 15.0


def test_ctrl_c_while_up_starts_stops_everything_it_started_quietly(launch: Any) -> None:
    run = launch("starting")
    # Migrations are done and Ray is starting: the moment a first Ctrl-C left Ray behind.
    eventually_sync(
        lambda: "migrations applied" in run.log_messages(),
        within=300,
        what=lambda: f"up to apply migrations:\n{run.log()[-3000:]}",
        interval=0.05,
    )
    run.descendants()
    sent = time.monotonic()
    os.killpg(run.proc.pid, signal.SIGINT)
    status = run.proc.wait(timeout=60)
    took = time.monotonic() - sent
    print(f"SIGINT while starting: up exited {status} after {took:.2f} s")

    assert status == 0, run.log()[-3000:]
    assert took < EXIT_DURING_START_WITHIN_SECONDS, f"{took:.1f} s\n{run.log()[-3000:]}"
    assert loud_lines(run.log()) == []
    # Up stopped what it started itself: nothing was left for the guardian to stop.
    assert "guardian:" not in run.log(), run.log()[-3000:]
    assert run.log_messages()[-1] == "stopped"
    eventually_sync(
        lambda: not leftovers(run),
        within=3,
        what=lambda: f"no process of the stopped up: {leftovers(run)}",
    )
