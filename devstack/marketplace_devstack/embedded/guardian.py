"""The guardian of one ``marketplace up``: stops whatever it started once it is gone.

``up`` starts this script first, in a session of its own, with a pipe on its stdin. When the
pipe closes (``up`` stopped, or died of anything, SIGKILL included), the guardian sends SIGTERM
to every process that belongs to that ``up``, then SIGKILL to those left after a grace period.
It holds ``up``'s data-dir lock until then, so a new ``up`` on the same data dir starts only
once the old one's processes are gone.

What belongs to ``up`` is found three ways, because each alone misses some (a child whose parent
died is adopted by init, and programs that set their process title, such as PostgreSQL, Redis
and Ray's agents, overwrite the environment the kernel shows):

- ``up``'s descendants, remembered every second while it runs;
- members of ``up``'s process group, when ``up`` leads its own group (anything started there
  that left no other trace; the embedded servers and Ray's daemons run in groups of their own,
  out of reach of the terminal's signals);
- processes whose environment carries ``up``'s marker (``MARKETPLACE_UP_INSTANCE=<token>``, put
  in ``up``'s environment before it starts anything: Ray's workers, which make groups of their
  own);

and the descendants of all of those.

Run as a script with ``python -I`` (standard library only, so it starts fast and cannot import
anything from the directory it lives in).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

MARKER_ENV = "MARKETPLACE_UP_INSTANCE"
TERM_GRACE_SECONDS = 10.0
KILL_GRACE_SECONDS = 5.0
SNAPSHOT_INTERVAL_SECONDS = 1.0
# What `up` writes before closing the pipe when it stops on purpose.
CLEAN_STOP = b"stopped\n"

# (pid, kernel start time): a pid reused later by another program is a different key.
Key = tuple[int, int]


def _say(text: str) -> None:
    # up's terminal or log pipe may be gone with it.
    with contextlib.suppress(OSError):
        print(f"marketplace up guardian: {text}", file=sys.stderr, flush=True)


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, start time) of a live process; None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return marker in handle.read().split(b"\0")
    except OSError:
        return False


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def belonging(up_pid: int, token: str, pgid: int | None) -> dict[Key, str]:
    """Every live process (but this one and ``up`` itself) that belongs to ``up`` now."""
    marker = f"{MARKER_ENV}={token}".encode()
    me = os.getpid()
    table: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            info = _stat(int(entry))
            if info is not None:
                table[int(entry)] = info
    found = {
        pid
        for pid, (_, group, _) in table.items()
        if (pgid is not None and group == pgid) or _has_marker(pid, marker)
    }
    found.add(up_pid)
    while True:
        children = {pid for pid, (parent, _, _) in table.items() if parent in found} - found
        if not children:
            break
        found |= children
    found.discard(up_pid)
    return {(pid, table[pid][2]): _name(pid) for pid in found if pid in table}


def _same(key: Key) -> bool:
    info = _stat(key[0])
    return info is not None and info[2] == key[1]


def sweep(up_pid: int, token: str, pgid: int | None, remembered: dict[Key, str]) -> int:
    """Stop every process that belongs to ``up``; returns how many there were."""
    targets = dict(remembered)
    signalled: set[Key] = set()
    started = time.monotonic()
    killing = False
    while True:
        targets.update(belonging(up_pid, token, pgid))
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


def _describe(processes: dict[Key, str]) -> str:
    return ", ".join(f"{name} ({pid})" for (pid, _), name in sorted(processes.items()))


def main(argv: list[str]) -> int:
    token, up_pid = argv[1], int(argv[2])
    pgid = int(argv[3]) if len(argv) > 3 else None
    # Own session: the terminal's Ctrl-C is for `up`, which then closes our pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    remembered: dict[Key, str] = {}
    received = b""
    while True:
        try:
            readable, _, _ = select.select([0], [], [], SNAPSHOT_INTERVAL_SECONDS)
            if not readable:
                remembered.update(belonging(up_pid, token, pgid))
                continue
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        received += chunk
    leftovers = {key: name for key, name in remembered.items() if _same(key)}
    leftovers.update(belonging(up_pid, token, pgid))
    if leftovers:
        if CLEAN_STOP in received:
            _say(f"stopping what outlived `marketplace up`: {_describe(leftovers)}")
        else:
            _say(f"`marketplace up` (pid {up_pid}) died; stopping {_describe(leftovers)}")
    sweep(up_pid, token, pgid, remembered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
