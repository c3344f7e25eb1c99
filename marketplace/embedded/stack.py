"""Starts whatever external dependency is not configured, for ``marketplace up``.

Each starter looks at the settings, starts its server when the matching URL is empty and returns
the settings updated to point at it; ``stop`` stops everything that was started, newest first.
Later capabilities (the chain devnet) append their own starter to ``STARTERS``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from pydantic import SecretStr

from marketplace.config import Settings
from marketplace.embedded.procs import read_or_create_secret

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    def stop(self) -> None: ...


Starter = Callable[[Settings, list[Stoppable]], Settings]


def start_postgres(settings: Settings, started: list[Stoppable]) -> Settings:
    if settings.database_url:
        return settings
    from marketplace.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(settings.data_dir)
    dsn = server.start()
    started.append(server)
    log.info("embedded postgres listening", extra={"port": server.port})
    return settings.model_copy(update={"database_url": dsn})


def start_redis(settings: Settings, started: list[Stoppable]) -> Settings:
    if settings.redis_url:
        return settings
    from marketplace.embedded.redis import EmbeddedRedis

    server = EmbeddedRedis(settings.data_dir)
    url = server.start()
    started.append(server)
    log.info("embedded redis listening", extra={"port": server.port})
    return settings.model_copy(update={"redis_url": url})


def dev_session_secret(settings: Settings) -> Settings:
    """Dev mode: without any JWT configuration, sign sessions with a secret kept in the data dir
    so that ``marketplace token`` and the server agree."""
    if settings.jwt_secret or settings.jwt_public_key or settings.jwks_url:
        return settings
    secret = read_or_create_secret(settings.dev_secret_path)
    return settings.model_copy(update={"jwt_secret": SecretStr(secret)})


def start_chain(settings: Settings, started: list[Stoppable]) -> Settings:
    from marketplace.chain.devnet import start_devnet

    return start_devnet(settings, started)


STARTERS: list[Starter] = [start_postgres, start_redis, start_chain]


class EmbeddedStack:
    def __init__(self) -> None:
        self.started: list[Stoppable] = []

    def start(self, settings: Settings) -> Settings:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            for starter in STARTERS:
                settings = starter(settings, self.started)
        except BaseException:
            self.stop()
            raise
        return dev_session_secret(settings)

    def stop(self) -> None:
        while self.started:
            server = self.started.pop()
            try:
                server.stop()
            except Exception:
                log.exception("failed to stop %s", type(server).__name__)
