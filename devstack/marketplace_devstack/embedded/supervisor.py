"""``marketplace up`` as a supervisor of what it starts.

- One ``up`` per data dir: an exclusive ``flock`` on ``<data_dir>/up.lock``. Every embedded
  server and the guardian inherit the locked descriptor, so the lock is free only once the last
  process working on that data dir is gone (an orphan can never share it with a new ``up``).
- Nothing outlives ``up``: the embedded servers get a parent-death signal from the kernel, and
  the guardian (:mod:`marketplace_devstack.embedded.guardian`) stops whatever else carries this
  run's marker (Ray's processes) when ``up`` is gone, however it went.
- A dependency that dies is restarted on the same port by the stack's watcher
  (:meth:`EmbeddedStack.watch`); one that keeps dying makes ``up`` stop everything and exit 1.
- The terminal's signals are for ``up`` alone: the embedded servers run in sessions of their own
  and Ray's processes in groups of their own (:mod:`marketplace_devstack.embedded.ray_groups`),
  so Ctrl-C (or SIGTERM to ``up``'s group) reaches ``up``, which stops the app, then Ray, then
  anvil, SMTP, Redis and PostgreSQL, restarting nothing once the signal came.

See docs/architecture.md, "Supervision".
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from marketplace.config import Settings
from marketplace.config.data_dir import UpRun, pid_alive, state_file
from marketplace_devstack.embedded import guardian
from marketplace_devstack.embedded.procs import forget_fd, inherit_fd, inherited_fds
from marketplace_devstack.embedded.stack import EmbeddedStack
from marketplace_devstack.embedded.state import forget_run, record_run

log = logging.getLogger("marketplace.up")

LOCK_FILE = "up.lock"
# How long a new `up` waits for the processes of a dead one to finish stopping.
PREVIOUS_RUN_WAIT_SECONDS = 30.0
GUARDIAN_STOP_SECONDS = guardian.TERM_GRACE_SECONDS + guardian.KILL_GRACE_SECONDS + 5


class DataDirBusy(RuntimeError):
    """Another ``marketplace up`` (or what is left of one) uses the data dir."""


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self.fd: int | None = None

    def _holder(self, fd: int) -> int | None:
        try:
            return int(os.pread(fd, 32, 0).decode().strip())
        except ValueError:
            return None

    def acquire(self, wait_s: float = PREVIOUS_RUN_WAIT_SECONDS) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline: float | None = None
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                holder = self._holder(fd)
                if holder is not None and holder != os.getpid() and _is_up(holder):
                    raise DataDirBusy(
                        f"data dir {self.path.parent} is in use by another `marketplace up` "
                        f"(pid {holder}); stop it first (`marketplace status` shows it), or "
                        "give this one its own --data-dir"
                    )
                if deadline is None:
                    deadline = time.monotonic() + wait_s
                    log.warning(
                        "processes of a previous `marketplace up` still hold the data dir; "
                        "waiting for them to exit",
                        extra={"lock": str(self.path), "previous_pid": holder},
                    )
                if time.monotonic() > deadline:
                    raise DataDirBusy(
                        f"{self.path} is still held after {wait_s:g} s by processes of a previous "
                        f"`marketplace up` (pid {holder}, gone); `fuser -v {self.path}` lists them"
                    )
                time.sleep(0.1)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        inherit_fd(fd)

    def release(self) -> None:
        if self.fd is not None:
            forget_fd(self.fd)
            os.close(self.fd)
            self.fd = None


def _is_up(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    # A recycled pid of some unrelated program does not count.
    return b"marketplace" in cmdline


class Guardian:
    """Starts the guardian process and marks everything we start from now on for it."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(12)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != guardian.MARKER_ENV}
        group = _own_process_group()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                guardian.__file__,
                self.token,
                str(os.getpid()),
                *([str(group)] if group is not None else []),
            ],
            stdin=subprocess.PIPE,
            env=env,
            # Its own session: out of reach of the terminal's signals and of a kill aimed at
            # our process group, so that it outlives us.
            start_new_session=True,
            pass_fds=inherited_fds(),
        )
        # Inherited by every process started after this line, Ray's included.
        os.environ[guardian.MARKER_ENV] = self.token

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.write(guardian.CLEAN_STOP)
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=GUARDIAN_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            log.error("the guardian did not finish; leaving it", extra={"pid": proc.pid})


def _own_process_group() -> int | None:
    """Our process group, if it is ours alone (then the guardian may signal all of it).

    A shell with job control, ``scripts/up`` (exec), systemd and containers all make ``up`` the
    leader of its group. Otherwise we take a group of our own, unless a terminal is attached:
    leaving its foreground group would cut ``up`` off from Ctrl-C.
    """
    if os.getpgid(0) == os.getpid():
        return os.getpid()
    if sys.stdin is not None and sys.stdin.isatty():
        return None
    try:
        os.setpgid(0, 0)
    except OSError:
        return None
    return os.getpid()


ServeFn = Callable[[Settings, Callable[[Settings], None], Callable[[], None]], None]


def run_up(settings: Settings, serve: ServeFn) -> int:
    """Lock the data dir, start the embedded stack, serve until a signal; stop everything.

    ``serve(settings, on_ready, on_stopping)`` runs the HTTP server until SIGINT/SIGTERM, calls
    ``on_ready(settings)`` once it listens and ``on_stopping()`` as soon as a signal asks it to
    stop: from then on the embedded servers are never restarted, and they are stopped (newest
    first) once the app has stopped using them. Returns the process exit status.
    """
    lock = DataDirLock(settings.data_dir)
    try:
        lock.acquire()
    except DataDirBusy as exc:
        print(f"marketplace up: {exc}", file=sys.stderr)
        return 2
    keeper = Guardian()
    stack = EmbeddedStack()
    failures: list[str] = []
    recorded: list[str] = []
    served = False
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    previous_unraisable = sys.unraisablehook
    sys.unraisablehook = _redeliver_interrupts(previous_unraisable)
    try:
        keeper.start()

        def fatal(reason: str) -> None:
            failures.append(reason)
            os.kill(os.getpid(), signal.SIGTERM)

        def record(running: Settings) -> UpRun:
            run = UpRun(
                pid=os.getpid(),
                dataDir=str(running.data_dir.resolve()),
                url=f"http://{running.listen_address}/v1/",
                chainRpcUrl=running.chain_rpc_url,
                pids={"up": os.getpid(), "guardian": keeper.pid or 0, **stack.pids()},
            )
            record_run(run)
            return run

        def ready(running: Settings) -> None:
            run = record(running)
            recorded.append(run.startedAt)
            # Restarted servers have new pids: keep the record (`marketplace status`) true.
            stack.watch(fatal, on_restart=lambda: record(running))
            mail_dir = stack.mail_dir()
            log.info(
                "up",
                extra={
                    "url": run.url,
                    "data_dir": run.dataDir,
                    "chain_rpc_url": run.chainRpcUrl,
                    "pids": run.pids,
                    "state_file": str(state_file()),
                    # Notification e-mails land here as .eml files (no MARKETPLACE_SMTP_URL).
                    **({"mail_dir": str(mail_dir)} if mail_dir is not None else {}),
                },
            )

        settings = stack.start(settings)
        serve(settings, ready, stack.begin_shutdown)
        served = True  # the server logged "stopping" when the signal came
    except KeyboardInterrupt:
        pass
    finally:
        # Stopping now: a Ctrl-C that comes during the stop is no longer one to give back.
        sys.unraisablehook = previous_unraisable
        stack.begin_shutdown()
        if not served:
            log.info("stopping")
        if recorded:
            forget_run(os.getpid())
        try:
            stack.stop()
            keeper.stop()
            log.info("guardian stopped")
        finally:
            lock.release()
            signal.signal(signal.SIGTERM, previous_term)
        log.info("stopped", extra={"failure": failures[0]} if failures else {})
    return 1 if failures else 0


def _redeliver_interrupts(hook: Callable[[Any], object]) -> Callable[[Any], object]:
    """An unraisable-exception hook that gives a swallowed Ctrl-C a second chance.

    A signal's KeyboardInterrupt is raised wherever the main thread is; when that is a finalizer
    (an asyncio transport's ``__del__`` right after the migrations, say), Python prints
    "Exception ignored" and drops it, and ``up`` would start as if nobody had asked it to stop.
    """

    def redeliver(unraisable: Any) -> object:  # sys.UnraisableHookArgs
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # From another thread, a moment later: delivered now, it would be raised (and
            # dropped) in this hook, which still runs in the finalizer's context.
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
            return None
        return hook(unraisable)

    return redeliver


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # Until the server installs its own handlers (and after it removes them), SIGTERM stops us
    # the way Ctrl-C does, through the `finally` that stops everything.
    raise KeyboardInterrupt
