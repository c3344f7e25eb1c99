"""Where the data dir of a ``marketplace up`` is, and the DSN of the PostgreSQL it runs there.

``marketplace up`` belongs to the dev stack (``devstack/``, not part of this package), but some
production commands (``token``, ``admin``) fall back to the data dir of a running ``up`` when
no external dependency is configured. What they share with it is this module: the file formats
``up`` writes (the per-user state file of the running ``up`` processes, the embedded PostgreSQL's
password and ``postmaster.pid``) and the rules for finding a data dir. ``up`` writes them (the
dev stack imports this module), the production commands only read them.

``up`` records each run (its pid, data dir, URL, chain RPC URL and the pids of what it started)
in a per-user state file, ``$XDG_STATE_HOME/marketplace/up.json`` (``~/.local/state/...`` by
default), and removes the record when it stops. A run killed without a chance to clean up leaves
its record behind; a record counts only while its pid runs the process that wrote it (same start
time), so stale ones are ignored (and dropped at ``up``'s next write).

The commands other than ``up`` never create a data dir: they use ``--data-dir``, else
``$MARKETPLACE_DATA_DIR``, else the data dir of the one running ``up``, else an existing
``./.data``, and otherwise fail saying where they looked (:func:`locate_data_dir`).

Standard library only, like the rest of ``config``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

STATE_FILE = "up.json"
DEFAULT_DATA_DIR = Path(".data")
DATA_DIR_ENV = "MARKETPLACE_DATA_DIR"
DATA_DIR_HELP = (
    "data dir of `marketplace up` (default: $MARKETPLACE_DATA_DIR, else the running up's, "
    "else an existing ./.data; never created here)"
)

# The embedded PostgreSQL of `up`: its cluster in <data_dir>/postgres, the password of its
# superuser in <data_dir>/postgres-password, the service's database.
POSTGRES_DIR = "postgres"
POSTGRES_PASSWORD_FILE = "postgres-password"
POSTGRES_SUPERUSER = "postgres"
POSTGRES_DATABASE = "marketplace"


def state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "marketplace" / STATE_FILE


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone: it only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    # The state follows the parenthesised command, which may itself contain spaces.
    return stat_line.rpartition(")")[2].split()[0] not in ("Z", "X")


def process_start(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a reused pid apart."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat_line.rpartition(")")[2].split()[19])


@dataclass
class UpRun:
    """One record of the state file (its JSON field names)."""

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


def read_runs(path: Path) -> list[UpRun]:
    """Every record of the state file at ``path``, live or not (none when it is unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [UpRun.from_json(item) for item in data.get("runs", [])]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def running() -> list[UpRun]:
    """Live runs only (never writes: stale records are left for ``up`` to drop)."""
    return [run for run in read_runs(state_file()) if run.is_live()]


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


def postgres_dsn(password: str, port: int, database: str = POSTGRES_DATABASE) -> str:
    """The DSN of the embedded PostgreSQL listening on ``port`` (loopback, password auth).

    ``sslmode=disable``: the embedded server has no TLS, so the default ``prefer`` only costs a
    round trip per connection, and a connect cancelled during that exchange (Ctrl-C while ``up``
    starts) leaves asyncpg a future nobody reads, which asyncio logs at error level."""
    return (
        f"postgresql://{POSTGRES_SUPERUSER}:{quote(password)}@127.0.0.1:{port}/{database}"
        "?sslmode=disable"
    )


def embedded_postgres_dsn(data_dir: Path) -> str | None:
    """The DSN of the embedded PostgreSQL ``marketplace up`` runs in ``data_dir``; None when none
    runs there (no ``postmaster.pid``, or no password file: never a data dir of ``up``)."""
    data_dir = data_dir.resolve()
    try:
        lines = (data_dir / POSTGRES_DIR / "postmaster.pid").read_text().splitlines()
        port = int(lines[3])
        password = (data_dir / POSTGRES_PASSWORD_FILE).read_text().strip()
    except (OSError, IndexError, ValueError):
        return None
    return postgres_dsn(password, port)
