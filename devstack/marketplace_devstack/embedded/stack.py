"""Starts whatever external dependency is not configured, for ``marketplace up``.

Each starter looks at the settings, starts its server when the matching URL is empty and returns
the settings updated to point at it; ``stop`` stops everything that was started, newest first.
Later capabilities (the chain devnet) append their own starter to ``STARTERS``.

:meth:`EmbeddedStack.watch` supervises what was started: a server that exits on its own is
started again on the same port (so every URL handed out stays valid), up to ``RESTART_LIMIT``
times within ``RESTART_WINDOW_SECONDS``; past that, ``on_fatal`` is called and ``up`` stops.
Once ``up`` begins to shut down (:meth:`EmbeddedStack.begin_shutdown`), nothing is restarted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import SecretStr

from marketplace.config import Settings
from marketplace_devstack.embedded.procs import read_or_create_secret

if TYPE_CHECKING:
    # The type only: the devnet (web3 and all) loads when the chain starts, not with the stack.
    from marketplace_devstack.devnet.node import Stoppable

log = logging.getLogger(__name__)


RESTART_LIMIT = 3
RESTART_WINDOW_SECONDS = 60.0
WATCH_INTERVAL_SECONDS = 0.5


class Supervised(Protocol):
    """An embedded server ``watch`` can look after (a :class:`Stoppable` too)."""

    label: str

    def stop(self) -> None: ...

    @property
    def pid(self) -> int | None: ...

    def exit_status(self) -> int | None: ...

    def restart(self) -> None: ...


Starter = Callable[[Settings, list["Stoppable"]], Settings]


def start_postgres(settings: Settings, started: list[Stoppable]) -> Settings:
    if settings.database_url:
        return settings
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(settings.data_dir)
    dsn = server.start()
    started.append(server)
    log.info("embedded postgres listening", extra={"port": server.port})
    return settings.model_copy(update={"database_url": dsn})


def start_redis(settings: Settings, started: list[Stoppable]) -> Settings:
    if settings.redis_url:
        return settings
    from marketplace_devstack.embedded.redis import EmbeddedRedis

    server = EmbeddedRedis(settings.data_dir)
    url = server.start()
    started.append(server)
    log.info("embedded redis listening", extra={"port": server.port})
    return settings.model_copy(update={"redis_url": url})


def start_smtp(settings: Settings, started: list[Stoppable]) -> Settings:
    """No SMTP server configured: notification e-mails go to ``<data-dir>/mail/`` as files."""
    if settings.smtp_url is not None:
        return settings
    from marketplace_devstack.embedded.smtp import EmbeddedSmtp

    server = EmbeddedSmtp(settings.data_dir)
    url = server.start()
    started.append(server)
    log.info(
        "embedded smtp listening", extra={"port": server.port, "mail_dir": str(server.mail_dir)}
    )
    return settings.model_copy(update={"smtp_url": SecretStr(url)})


def dev_session_secret(settings: Settings) -> Settings:
    """Dev mode: without any JWT configuration, sign sessions with a secret kept in the data dir
    so that ``marketplace token`` and the server agree."""
    if settings.jwt_secret or settings.jwt_public_key or settings.jwks_url:
        return settings
    secret = read_or_create_secret(settings.dev_secret_path)
    return settings.model_copy(update={"jwt_secret": SecretStr(secret)})


def dev_notification_secret(settings: Settings) -> Settings:
    """Dev mode: without ``MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET``, sign unsubscribe links
    with a secret kept in the data dir, so links mailed before a restart still work."""
    if settings.notification_unsubscribe_secret is not None:
        return settings
    secret = read_or_create_secret(settings.dev_notification_secret_path)
    return settings.model_copy(update={"notification_unsubscribe_secret": SecretStr(secret)})


def start_chain(settings: Settings, started: list[Stoppable]) -> Settings:
    from marketplace_devstack.devnet.node import start_devnet

    return start_devnet(settings, started)


STARTERS: list[Starter] = [start_postgres, start_redis, start_smtp, start_chain]


class EmbeddedStack:
    def __init__(self) -> None:
        self.started: list[Stoppable] = []
        self._stopping = threading.Event()
        # Set when `up` starts shutting down (a signal came), before the app stops: from then on
        # a server that exits is never started again, whatever the reason it exited.
        self._shutting_down = threading.Event()
        # Held while a server is restarted or stopped, so the two never overlap.
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def start(self, settings: Settings) -> Settings:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            for starter in STARTERS:
                settings = starter(settings, self.started)
        except BaseException:
            self.stop()
            raise
        return dev_notification_secret(dev_session_secret(settings))

    def mail_dir(self) -> Path | None:
        """Where the embedded SMTP server writes messages, when one was started."""
        for server in self.started:
            found = getattr(server, "mail_dir", None)
            if isinstance(found, Path):
                return found
        return None

    def pids(self) -> dict[str, int]:
        pids: dict[str, int] = {}
        for server in self.started:
            label, pid = getattr(server, "label", None), getattr(server, "pid", None)
            if isinstance(label, str) and isinstance(pid, int):
                pids[label] = pid
        return pids

    def begin_shutdown(self) -> None:
        """No restart from now on; :meth:`stop` follows once the app has stopped.

        The watcher thread keeps running (without restarting anything) until :meth:`stop`: a
        server it restarted earlier holds a parent-death signal bound to it.
        """
        self._shutting_down.set()

    def watch(
        self, on_fatal: Callable[[str], None], on_restart: Callable[[], object] | None = None
    ) -> None:
        """Restart servers that die, in a thread that lives until :meth:`stop`.

        Servers restarted here get their parent-death signal bound to this thread, which is why
        it must not end before the servers are stopped.
        """
        self._watcher = threading.Thread(
            target=self._watch,
            args=(on_fatal, on_restart),
            name="embedded-supervisor",
            daemon=True,
        )
        self._watcher.start()

    def _watch(
        self, on_fatal: Callable[[str], None], on_restart: Callable[[], object] | None
    ) -> None:
        history: dict[str, deque[float]] = {}
        failed: set[int] = set()  # servers whose last restart raised
        while not self._stopping.wait(WATCH_INTERVAL_SECONDS):
            for server in list(self.started):
                if not hasattr(server, "exit_status"):
                    continue
                watched: Supervised = server  # type: ignore[assignment]
                if self._shutting_down.is_set():
                    break
                status = watched.exit_status()
                if status is None and id(watched) not in failed:
                    continue
                with self._lock:
                    if self._stopping.is_set():
                        return
                    if self._shutting_down.is_set():
                        # Exited while `up` stops: expected; `stop` ends it for good.
                        log.info("embedded %s exited during shutdown", watched.label)
                        break
                    recent = history.setdefault(watched.label, deque())
                    now = time.monotonic()
                    while recent and now - recent[0] > RESTART_WINDOW_SECONDS:
                        recent.popleft()
                    if len(recent) >= RESTART_LIMIT:
                        reason = (
                            f"embedded {watched.label} died {len(recent) + 1} times within "
                            f"{RESTART_WINDOW_SECONDS:g} s"
                        )
                        log.critical("%s; stopping everything", reason)
                        on_fatal(reason)
                        return
                    recent.append(now)
                    log.error(
                        "embedded %s exited; restarting it",
                        watched.label,
                        extra={"exit_status": status, "restart": len(recent)},
                    )
                    try:
                        watched.restart()
                    except Exception:
                        failed.add(id(watched))
                        log.exception("embedded %s did not restart", watched.label)
                        continue
                    failed.discard(id(watched))
                    log.warning("embedded %s restarted", watched.label, extra={"pid": watched.pid})
                    if on_restart is not None:
                        try:
                            on_restart()
                        except Exception:
                            log.exception("could not record the restart")

    def stop(self) -> None:
        self._shutting_down.set()
        self._stopping.set()
        with self._lock:
            while self.started:
                server = self.started.pop()
                name = getattr(server, "label", type(server).__name__)
                try:
                    server.stop()
                    log.info("embedded %s stopped", name)
                except Exception:
                    log.exception("failed to stop embedded %s", name)
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
            self._watcher = None
