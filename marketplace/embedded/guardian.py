"""The guardian of one ``marketplace up``: stops whatever it started once it is gone.

``up`` starts this script first, in a session of its own, with a pipe on its stdin, and puts a
marker (``MARKETPLACE_UP_INSTANCE=<token>``) in its own environment, which every process it
starts afterwards inherits: the embedded servers, and Ray's daemons, agents and workers, which
``up`` does not start itself. When the pipe closes (``up`` stopped, or died of anything,
SIGKILL included), the guardian sends SIGTERM to every process still carrying the marker, then
SIGKILL to those left after a grace period. It holds ``up``'s data-dir lock until then, so a new
``up`` on the same data dir starts only once the old one's processes are gone.

Run as a script with ``python -I`` (standard library only, so it starts fast and cannot import
anything from the directory it lives in).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

MARKER_ENV = "MARKETPLACE_UP_INSTANCE"
TERM_GRACE_SECONDS = 10.0
KILL_GRACE_SECONDS = 5.0
# What `up` writes before closing the pipe when it stops on purpose.
CLEAN_STOP = b"stopped\n"


def _say(text: str) -> None:
    # up's terminal or log pipe may be gone with it.
    with contextlib.suppress(OSError):
        print(f"marketplace up guardian: {text}", file=sys.stderr, flush=True)


def marked_processes(token: str) -> dict[int, str]:
    """pid -> command name of every process (but this one) whose environment has the marker."""
    marker = f"{MARKER_ENV}={token}".encode()
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            if marker not in environ.split(b"\0"):
                continue
            with open(f"/proc/{entry}/comm", encoding="utf-8", errors="replace") as handle:
                found[int(entry)] = handle.read().strip()
        except OSError:
            continue  # gone meanwhile, a zombie, or not ours to read
    return found


def sweep(token: str) -> int:
    """Stop every marked process; returns how many there were."""
    seen: dict[int, str] = {}
    started = time.monotonic()
    killing = False
    while True:
        alive = marked_processes(token)
        if not alive:
            break
        elapsed = time.monotonic() - started
        if elapsed > TERM_GRACE_SECONDS + KILL_GRACE_SECONDS:
            _say(f"could not stop: {_describe(alive)}")
            break
        if elapsed > TERM_GRACE_SECONDS and not killing:
            killing = True
            _say(f"still running after {TERM_GRACE_SECONDS:g} s, killing: {_describe(alive)}")
        for pid, name in alive.items():
            if killing or pid not in seen:
                seen.setdefault(pid, name)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL if killing else signal.SIGTERM)
        time.sleep(0.1)
    return len(seen)


def _describe(processes: dict[int, str]) -> str:
    return ", ".join(f"{name} ({pid})" for pid, name in sorted(processes.items()))


def main(argv: list[str]) -> int:
    token, up_pid = argv[1], argv[2]
    # Own session: the terminal's Ctrl-C is for `up`, which then closes our pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    received = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        received += chunk
    leftovers = marked_processes(token)
    if leftovers:
        if CLEAN_STOP in received:
            _say(f"stopping what outlived `marketplace up`: {_describe(leftovers)}")
        else:
            _say(f"`marketplace up` (pid {up_pid}) died; stopping {_describe(leftovers)}")
    sweep(token)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
