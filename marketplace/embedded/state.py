"""Where ``marketplace up`` runs, so the other commands find it from any directory.

``up`` records each run (its pid, data dir, URL, chain RPC URL and the pids of what it started)
in a per-user state file, ``$XDG_STATE_HOME/marketplace/up.json`` (``~/.local/state/...`` by
default), and removes the record when it stops. A run killed without a chance to clean up leaves
its record behind; a record counts only while its pid runs the process that wrote it (same start
time), so stale ones are ignored and dropped at the next write.

The other commands (``token``, ``admin``, ``devnet`` ...) never create a data dir: they use
``--data-dir``, else ``$MARKETPLACE_DATA_DIR``, else the data dir of the one running ``up``, else
an existing ``./.data``, and otherwise fail saying where they looked (:func:`locate_data_dir`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from marketplace.embedded.procs import pid_alive

STATE_FILE = "up.json"
DEFAULT_DATA_DIR = Path(".data")
DATA_DIR_ENV = "MARKETPLACE_DATA_DIR"
DATA_DIR_HELP = (
    "data dir of `marketplace up` (default: $MARKETPLACE_DATA_DIR, else the running up's, "
    "else an existing ./.data; never created here)"
)


def state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "marketplace" / STATE_FILE


def process_start(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a reused pid apart."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat_line.rpartition(")")[2].split()[19])


@dataclass
class UpRun:
    pid: int
    dataDir: str
    url: str
    chainRpcUrl: str
    pids: dict[str, int] = field(default_factory=dict)
    startedAt: str = ""
    processStart: int | None = None

    def is_live(self) -> bool:
        if not pid_alive(self.pid):
            return False
        return self.processStart is None or process_start(self.pid) == self.processStart

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UpRun:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


def _read(path: Path) -> list[UpRun]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [UpRun.from_json(item) for item in data.get("runs", [])]
    except (OSError, ValueError, TypeError, KeyError):
        return []


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
        runs = [r for r in _read(path) if r.pid != run.pid and r.is_live()]
        _write(path, [*runs, run])
    return path


def forget_run(pid: int) -> None:
    path = state_file()
    if not path.exists():
        return
    with _locked(path):
        _write(path, [r for r in _read(path) if r.pid != pid and r.is_live()])


def running() -> list[UpRun]:
    """Live runs only (never writes: stale records are left for ``up`` to drop)."""
    return [run for run in _read(state_file()) if run.is_live()]


class DataDirNotFound(Exception):
    """No data dir to use; the message says where we looked and how to point at one."""


def locate_data_dir(explicit: Path | None) -> Path:
    """The data dir a command other than ``up`` should use; it must exist already."""
    looked: list[str] = []
    if explicit is not None:
        if explicit.is_dir():
            return explicit
        raise DataDirNotFound(
            f"--data-dir {explicit} does not exist; give the data dir of a `marketplace up` "
            "(`marketplace status` shows where it runs)"
        )
    from_env = os.environ.get(DATA_DIR_ENV)
    if from_env:
        if Path(from_env).is_dir():
            return Path(from_env)
        raise DataDirNotFound(
            f"{DATA_DIR_ENV}={from_env} does not exist; point it at the data dir of a "
            "`marketplace up` (`marketplace status` shows where it runs)"
        )
    looked.append(f"--data-dir and ${DATA_DIR_ENV}: not given")
    runs = running()
    if len(runs) == 1:
        return Path(runs[0].dataDir)
    if len(runs) > 1:
        listing = "; ".join(f"{r.dataDir} (pid {r.pid}, {r.url})" for r in runs)
        raise DataDirNotFound(
            f"several `marketplace up` are running: {listing}; choose one with --data-dir DIR "
            f"or {DATA_DIR_ENV}=DIR"
        )
    looked.append(f"running `marketplace up`: none recorded in {state_file()}")
    local = Path.cwd() / DEFAULT_DATA_DIR
    if local.is_dir():
        return DEFAULT_DATA_DIR
    looked.append(f"{local}: absent")
    raise DataDirNotFound(
        "no data dir found (looked at: "
        + "; ".join(looked)
        + "). Start `marketplace up`, or point this command at its data dir with --data-dir DIR "
        f"or {DATA_DIR_ENV}=DIR"
    )


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
