"""`up` supervises what it starts: SIGKILL leaves nothing behind, the data dir is locked, and a
restart finds the chain where the killed run left it (no orphaned anvil overwrites its state)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.integration.up.conftest import http, leftovers, name_of
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.timeout(900)


def test_sigkill_leaves_no_orphan_and_restart_keeps_chain_state(launch: Any) -> None:
    first = launch("first")
    first.wait_ready()
    state_file = Path(first.env["XDG_STATE_HOME"]) / "marketplace" / "up.json"

    # A second `up` on the same data dir refuses to start, saying why.
    rival = launch("rival", data_dir=first.data_dir)
    assert rival.proc.wait(timeout=120) == 2
    assert "in use by another `marketplace up`" in rival.log()
    assert f"pid {first.proc.pid}" in rival.log()

    data_dir = ("--data-dir", str(first.data_dir))
    project = json.loads(first.cli("devnet", "create", *data_dir, "--json").stdout)["project"]
    head_before = json.loads(first.cli("devnet", "info", *data_dir, "--json").stdout)["head"]

    names = {name for p in first.descendants() if (name := name_of(p))}
    assert {"postgres", "redis-server", "anvil", "gcs_server", "raylet"} <= names, names
    assert any(name.startswith("ray::") for name in names), names

    assert first.cli("status").returncode == 0
    first.stop(signal.SIGKILL)
    eventually_sync(
        lambda: not leftovers(first),
        within=60,
        what=lambda: f"no process of the killed up: {leftovers(first)}\n{first.log()[-3000:]}",
    )
    assert "`marketplace up` (pid" in first.log() and "died; stopping" in first.log()
    # Its record outlives it, but counts for nothing.
    assert state_file.exists()
    assert first.cli("status", check=False).returncode == 1

    second = launch("second", data_dir=first.data_dir)
    second.wait_ready()
    shown = json.loads(second.cli("devnet", "show", project, *data_dir, "--json").stdout)
    assert shown["project"] == project
    head_after = json.loads(second.cli("devnet", "info", *data_dir, "--json").stdout)["head"]
    assert head_after["number"] >= head_before["number"]

    # The restarted indexer serves the project from Postgres.
    def indexed() -> bool:
        status, _, body = http(f"{second.url}/v1/projects/{project}")
        return status == 200 and body["projectAddress"].lower() == project.lower()

    eventually_sync(indexed, within=120, what="the project in the read model", interval=0.25)

    [record] = json.loads(second.cli("status", "--json").stdout)
    assert record["pids"]["up"] == second.proc.pid  # the stale record was replaced

    second.descendants()
    assert second.stop(signal.SIGTERM) == 0
    assert not leftovers(second)
    assert not state_file.exists()  # a clean stop removes its record
    messages = second.log_messages()
    expected = [
        "stopping",
        "ray runtime stopped",
        "http server stopped",
        "embedded anvil stopped",
        "embedded redis stopped",
        "embedded postgres stopped",
        "guardian stopped",
        "stopped",
    ]
    positions = [messages.index(m) for m in expected]
    assert positions == sorted(positions), messages[-20:]
