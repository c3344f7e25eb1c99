"""`marketplace up` run for real, as a subprocess, on a temporary data dir.

Each run gets its own HOME and XDG_STATE_HOME under a temporary directory (nothing touches the
real user's files) and imports this tree through PYTHONPATH, so commands work from any cwd.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from marketplace_devstack.embedded.procs import free_port
from tests.support.waiting import eventually_sync

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_SECONDS = 300.0


def up_env(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MARKETPLACE_", "RAY_", "PYTEST_")) and k != "XDG_STATE_HOME"
    }
    home = root / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(root / "state"),
        PYTHONPATH=str(REPO),
        MARKETPLACE_LOG_JSON="true",
    )
    return env


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def name_of(proc: psutil.Process) -> str | None:
    """A process's name, or None once it has ended: Ray starts short-lived processes, and one can
    end between the listing of a tree and the read of its name."""
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return None


def http(
    url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    """(status, headers, decoded JSON body) without raising on 4xx/5xx."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


@dataclass
class UpRun:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    log_path: Path
    env: dict[str, str]
    tree: list[psutil.Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_messages(self) -> list[str]:
        messages = []
        for line in self.log().splitlines():
            try:
                messages.append(json.loads(line)["msg"])
            except (ValueError, KeyError, TypeError):
                continue
        return messages

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"up exited with {self.proc.returncode}:\n{self.log()[-4000:]}"
                )
            try:
                status, _, _ = http(f"{self.url}/v1/health/ready")
            except OSError:
                return False
            return status == 200

        eventually_sync(ready, within=timeout, what="up to become ready", interval=0.25)

    def descendants(self) -> list[psutil.Process]:
        self.tree = psutil.Process(self.proc.pid).children(recursive=True)
        return self.tree

    def cli(
        self, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "marketplace", *args],
            env=self.env,
            cwd=cwd or REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"marketplace {' '.join(args)}: {result.stderr}")
        return result

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def start_up(data_dir: Path, env: dict[str, str], log_path: Path, *, cwd: Path = REPO) -> UpRun:
    port = free_port()
    command = ["up", "--data-dir", str(data_dir), "--port", str(port)]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "marketplace", *command],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return UpRun(proc, data_dir, port, log_path, env)


def leftovers(run: UpRun) -> list[str]:
    """What still runs of an `up`: its recorded process tree and anything naming its data dir."""
    found = {p.pid: p for p in run.tree if alive(p)}
    for proc in psutil.process_iter(["cmdline"]):
        if str(run.data_dir) in " ".join(proc.info["cmdline"] or ()) and alive(proc):
            found[proc.pid] = proc
    described = []
    for pid, proc in sorted(found.items()):
        try:
            described.append(f"{pid} {proc.name()} ({proc.status()}, parent {proc.ppid()})")
        except psutil.NoSuchProcess:
            continue
    return described


def make_root() -> Path:
    # Under /tmp and world-searchable: as root, the embedded PostgreSQL runs as `nobody`.
    root = Path(tempfile.mkdtemp(prefix="mkt-up-", dir="/tmp"))
    os.chmod(root, 0o755)
    return root


def finish(run: UpRun) -> None:
    if run.proc.poll() is None:
        try:
            run.stop(timeout=120)
        except subprocess.TimeoutExpired:
            run.stop(signal.SIGKILL)


@pytest.fixture
def up_root() -> Iterator[Path]:
    root = make_root()
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def running_up() -> Iterator[UpRun]:
    """One `up` shared by a module's tests (they leave it running and healthy)."""
    root = make_root()
    run = start_up(root / "data", up_env(root), root / "up.log")
    try:
        run.wait_ready()
        yield run
    finally:
        finish(run)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def launch(up_root: Path) -> Iterator[Callable[..., UpRun]]:
    """Start `up` runs; whatever is still running at the end is stopped."""
    runs: list[UpRun] = []

    def start(name: str = "up", data_dir: Path | None = None, cwd: Path = REPO) -> UpRun:
        run = start_up(
            data_dir or up_root / "data", up_env(up_root), up_root / f"{name}.log", cwd=cwd
        )
        runs.append(run)
        return run

    yield start
    for run in runs:
        finish(run)
