"""The embedded stack's watcher restarts a server that died, but never once `up` began to stop
(a server that exits then does so because `up` is stopping, and is stopped for good)."""

from __future__ import annotations

import threading

from marketplace_devstack.embedded import stack as stack_module
from marketplace_devstack.embedded.stack import EmbeddedStack
from tests.support.waiting import eventually_sync


class Server:
    """A stand-in for an embedded server: dies when told, counts its restarts."""

    label = "stand-in"

    def __init__(self) -> None:
        self.status: int | None = None
        self.restarts = 0
        self.stopped = False
        self.restarted = threading.Event()

    @property
    def pid(self) -> int | None:
        return 1

    def exit_status(self) -> int | None:
        return self.status

    def restart(self) -> None:
        self.restarts += 1
        self.status = None
        self.restarted.set()

    def stop(self) -> None:
        self.stopped = True


def watched(server: Server) -> EmbeddedStack:
    stack = EmbeddedStack()
    stack.started.append(server)
    stack.watch(on_fatal=lambda reason: None)
    return stack


def test_a_server_that_dies_is_restarted() -> None:
    server = Server()
    stack = watched(server)
    try:
        server.status = 0
        assert server.restarted.wait(timeout=5)
        assert server.restarts == 1
    finally:
        stack.stop()
    assert server.stopped


def test_nothing_is_restarted_once_shutdown_began() -> None:
    server = Server()
    stack = watched(server)
    try:
        stack.begin_shutdown()
        server.status = 0
        # Several watch rounds: none restarts it.
        rounds = 4 * stack_module.WATCH_INTERVAL_SECONDS
        assert not server.restarted.wait(timeout=rounds)
        assert server.restarts == 0
    finally:
        stack.stop()
    assert server.stopped
    eventually_sync(lambda: stack._watcher is None, within=5, what="the watcher to end")
