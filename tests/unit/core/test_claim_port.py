"""`serve` and `up` claim their port before anything starts and hold it until they serve on it
(marketplace/cli.py, ``claim_port``): nothing else can take it meanwhile, a client that connects
early is answered once the server runs, and a port that cannot be claimed leaves nothing open."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import socket

import pytest
from aiohttp import web

from marketplace.cli import PortUnavailable, claim_port
from marketplace.http.server import serve


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bind_error(port: int) -> int | None:
    """The errno another program's bind (with ``SO_REUSEADDR``, as servers do) gets."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            other.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno
    return None


async def hello(request: web.Request) -> web.Response:
    return web.json_response({"hello": "world"})


async def test_a_claimed_port_is_held_and_an_early_client_is_answered_once_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # serve() freezes the heap of a process that serves one app; this one runs many tests.
    monkeypatch.setattr("marketplace.http.server.freeze_start_up_heap", lambda: None)
    frozen = gc.get_freeze_count()
    port = free_port()
    sockets = claim_port("127.0.0.1", port)
    assert [s.getsockname() for s in sockets] == [("127.0.0.1", port)]
    # Held from the claim on: another program cannot take it while dependencies start.
    assert bind_error(port) == errno.EADDRINUSE

    # A client that connects before the server runs waits in the backlog.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()

    app = web.Application()
    app.router.add_get("/hello", hello)
    ready = asyncio.Event()
    server = asyncio.ensure_future(
        serve(app, "127.0.0.1", port, sockets=sockets, on_ready=ready.set)
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert answer.endswith(b'{"hello": "world"}'), answer
    finally:
        writer.close()
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    # The server let go of it as it stopped.
    assert bind_error(port) is None
    # Frozen objects still die by reference counting (other tests freeze this worker's heap:
    # actors used as plain Python), so the count may fall; a freeze would raise it.
    assert gc.get_freeze_count() <= frozen


def test_a_busy_port_is_refused_in_one_line_and_nothing_is_left_open() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        with pytest.raises(PortUnavailable) as refused:
            claim_port("127.0.0.1", port)
    assert str(refused.value) == (
        f"port {port} on 127.0.0.1 is already in use (set --port or MARKETPLACE_PORT)"
    )
    # The holder is gone and the refused claim kept nothing: the port is free.
    assert bind_error(port) is None


def test_every_address_of_the_host_is_claimed_and_released_together() -> None:
    port = free_port()
    addresses = {
        info[4][:2] for info in socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)
    }
    sockets = claim_port("localhost", port)
    try:
        assert {s.getsockname()[:2] for s in sockets} == addresses
        assert all(s.getblocking() is False for s in sockets)
    finally:
        for s in sockets:
            s.close()
    assert bind_error(port) is None


def test_port_zero_claims_nothing() -> None:
    # Any free port: the server picks one as it starts.
    assert claim_port("127.0.0.1", 0) == []


def test_an_unknown_host_is_refused_in_one_line() -> None:
    with pytest.raises(PortUnavailable, match=r"cannot listen on no-such-host\.invalid"):
        claim_port("no-such-host.invalid", free_port())
