"""The records of running ``marketplace up`` processes: ``up`` writes them, ``status`` shows them.

The file format, reading it and the rules by which the other commands find a data dir are
production code (:mod:`marketplace.config.data_dir`: ``token`` and ``admin`` use them without
the dev stack); writing a record is ``up``'s alone, here. Each run is recorded in the per-user
state file when it starts and removed when it stops; stale records (their pid gone or reused)
are dropped at the next write.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from marketplace.config.data_dir import UpRun, process_start, read_runs, running, state_file


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, runs: list[UpRun]) -> None:
    if not runs:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"runs": [asdict(run) for run in runs]}, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)


def record_run(run: UpRun) -> Path:
    """Add (or replace) this run's record; drops stale ones on the way."""
    path = state_file()
    run.processStart = process_start(run.pid)
    run.startedAt = run.startedAt or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with _locked(path):
        runs = [r for r in read_runs(path) if r.pid != run.pid and r.is_live()]
        _write(path, [*runs, run])
    return path


def forget_run(pid: int) -> None:
    path = state_file()
    if not path.exists():
        return
    with _locked(path):
        _write(path, [r for r in read_runs(path) if r.pid != pid and r.is_live()])


def _health(url: str) -> str:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=2) as response:
            return "ok" if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return f"not answering ({type(exc).__name__})"


def print_status(*, as_json: bool = False) -> int:
    """``marketplace status``: what runs where; exit status 1 when nothing does."""
    runs = running()
    if as_json:
        print(json.dumps([{**asdict(run), "health": _health(run.url)} for run in runs], indent=2))
        return 0 if runs else 1
    if not runs:
        print(f"no `marketplace up` is running (none recorded in {state_file()})")
    for run in runs:
        pids = ", ".join(f"{name} {pid}" for name, pid in run.pids.items())
        print(
            f"marketplace up (pid {run.pid}) since {run.startedAt}\n"
            f"  url:       {run.url} ({_health(run.url)})\n"
            f"  data dir:  {run.dataDir}\n"
            f"  chain RPC: {run.chainRpcUrl or '-'}\n"
            f"  pids:      {pids}"
        )
    return 0 if runs else 1
