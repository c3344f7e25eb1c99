"""The guardian on its own: what carries the marker, and what those started, is stopped once
the pipe closes; nothing else is."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from marketplace.embedded import guardian
from tests.integration.up.conftest import alive, wait_for


def test_guardian_stops_marked_processes_and_their_children_only() -> None:
    token = "test-" + os.urandom(6).hex()
    keeper = subprocess.Popen(
        [sys.executable, "-I", guardian.__file__, token, str(os.getpid())],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # A marked shell whose child wipes its environment (as PostgreSQL's children overwrite
    # theirs), one that ignores SIGTERM, and an unmarked bystander.
    marked = subprocess.Popen(
        ["bash", "-c", "env -i sleep 300 & trap '' TERM; sleep 300; wait"],
        env={**os.environ, guardian.MARKER_ENV: token},
    )
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        shell = psutil.Process(marked.pid)
        children = wait_for(lambda: len(shell.children()) == 2 and shell.children(), 10, "sleeps")
        assert keeper.poll() is None
        started = time.monotonic()
        assert keeper.stdin is not None
        keeper.stdin.close()  # as if `up` had died
        assert keeper.wait(timeout=60) == 0
        elapsed = time.monotonic() - started
        for proc in [shell, *children]:
            assert not alive(proc), proc
        assert bystander.poll() is None
        # The shell ignored SIGTERM: it went at the SIGKILL after the grace period.
        assert elapsed >= guardian.TERM_GRACE_SECONDS
        assert b"died; stopping" in (keeper.stderr.read() if keeper.stderr else b"")
    finally:
        bystander.kill()
        bystander.wait()
        marked.kill()
        marked.wait()
