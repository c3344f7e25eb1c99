"""The guardian on its own: once its pipe closes, everything that belonged to the dead `up` is
stopped (its remembered descendants, its process group, carriers of its marker), and nothing
else is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from marketplace_devstack.embedded import guardian
from tests.integration.up.conftest import alive
from tests.support.waiting import eventually_sync


def sleeps(*seconds: str) -> list[psutil.Process]:
    """The live `sleep N` processes for these N."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if len(argv) == 2 and argv[0] == "sleep" and argv[1] in seconds:
            found.append(proc)
    return found


def test_guardian_stops_what_belonged_to_a_killed_up_and_nothing_else() -> None:
    token = "test-" + os.urandom(6).hex()
    tag = str(4000 + os.getpid() % 1000)  # sleep durations that name this test's processes
    orphan, own_session, child, marked_s, bystander_s = (f"{tag}{i}" for i in range(5))
    # A stand-in for `up`, leading its own group; everything it starts ignores SIGTERM and has
    # no marker: an orphan left in its group, a child in a session of its own (found only because
    # the guardian remembered it), a plain child.
    fake_up = subprocess.Popen(
        [
            "bash",
            "-c",
            f"trap '' TERM; (env -i sleep {orphan} &); setsid env -i sleep {own_session} & "
            f"env -i sleep {child} & wait",
        ],
        start_new_session=True,
    )
    keeper = subprocess.Popen(
        [sys.executable, "-I", guardian.__file__, token, str(fake_up.pid), str(fake_up.pid)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # Outside its tree and group, found by the marker alone; and a bystander.
    marked = subprocess.Popen(
        ["sleep", marked_s], env={**os.environ, guardian.MARKER_ENV: token}, start_new_session=True
    )
    bystander = subprocess.Popen(["sleep", bystander_s], start_new_session=True)
    try:
        belonging = eventually_sync(
            lambda: sleeps(orphan, own_session, child),
            until=lambda found: len(found) == 3,
            within=10,
            what="the stand-in's processes",
        )
        time.sleep(2 * guardian.SNAPSHOT_INTERVAL_SECONDS)  # the guardian has seen them
        fake_up.send_signal(signal.SIGKILL)
        fake_up.wait()
        started = time.monotonic()
        assert keeper.stdin is not None
        keeper.stdin.close()  # the pipe's last writer is gone, as when `up` dies
        assert keeper.wait(timeout=60) == 0
        elapsed = time.monotonic() - started
        for gone in [*belonging, psutil.Process(marked.pid)]:
            assert not alive(gone), gone
        assert bystander.poll() is None
        # They ignored SIGTERM: they went at the SIGKILL after the grace period.
        assert elapsed >= guardian.TERM_GRACE_SECONDS
        assert keeper.stderr is not None
        assert f"(pid {fake_up.pid}) died; stopping".encode() in keeper.stderr.read()
    finally:
        for proc in (bystander, marked, fake_up):
            proc.kill()
            proc.wait()
        for gone in sleeps(orphan, own_session, child):
            gone.kill()
