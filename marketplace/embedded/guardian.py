"""The guardian of one ``marketplace up``: stops whatever it started once it is gone.

``up`` starts this script first, in a session of its own, with a pipe on its stdin, and puts a
marker (``MARKETPLACE_UP_INSTANCE=<token>``) in its own environment, which every process it
starts afterwards inherits: the embedded servers, and Ray's daemons, agents and workers, which
``up`` does not start itself. Descendants of a marked process count too (PostgreSQL's children
overwrite their environment area with their process titles). When the pipe closes (``up``
stopped, or died of anything, SIGKILL included), the guardian sends SIGTERM to every such
process, then SIGKILL to those left after a grace period. It holds ``up``'s data-dir lock until
then, so a new ``up`` on the same data dir starts only once the old one's processes are gone.

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


def _stat(pid: str) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19]), fields[0]


def marked_processes(token: str) -> dict[tuple[int, int], str]:
    """(pid, start time) -> command name of every live process (but this one) whose environment
    has the marker, and of their descendants."""
    marker = f"{MARKER_ENV}={token}".encode()
    me = os.getpid()
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    marked: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        info = _stat(entry)
        if info is None or info[2] in ("Z", "X"):
            continue
        pid = int(entry)
        parents[pid], starts[pid] = info[0], info[1]
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    marked.add(pid)
        except OSError:
            continue  # gone meanwhile, or not ours to read
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in marked} - marked
        grew = bool(children)
        marked |= children
    found: dict[tuple[int, int], str] = {}
    for pid in marked:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                found[(pid, starts[pid])] = handle.read().strip()
        except OSError:
            continue
    return found


def sweep(token: str) -> int:
    """Stop every marked process; returns how many there were."""
    targets: dict[tuple[int, int], str] = {}
    started = time.monotonic()
    signalled: set[tuple[int, int]] = set()
    killing = False
    while True:
        targets.update(marked_processes(token))
        # Still the same processes (a pid reused since has another start time).
        alive = {key: name for key, name in targets.items() if _same(key)}
        if not alive:
            break
        elapsed = time.monotonic() - started
        if elapsed > TERM_GRACE_SECONDS + KILL_GRACE_SECONDS:
            _say(f"could not stop: {_describe(alive)}")
            break
        if elapsed > TERM_GRACE_SECONDS and not killing:
            killing = True
            _say(f"still running after {TERM_GRACE_SECONDS:g} s, killing: {_describe(alive)}")
        for key in alive:
            if killing or key not in signalled:
                signalled.add(key)
                with contextlib.suppress(OSError):
                    os.kill(key[0], signal.SIGKILL if killing else signal.SIGTERM)
        time.sleep(0.1)
    return len(targets)


def _same(key: tuple[int, int]) -> bool:
    info = _stat(str(key[0]))
    return info is not None and info[1] == key[1] and info[2] not in ("Z", "X")


def _describe(processes: dict[tuple[int, int], str]) -> str:
    return ", ".join(f"{name} ({pid})" for (pid, _), name in sorted(processes.items()))


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
