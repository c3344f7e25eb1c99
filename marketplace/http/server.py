"""Running the app: aiohttp's server with errors of its own HTTP parser rendered as our JSON.

aiohttp answers requests its parser rejects (a header line over the limit, a malformed request
line) from ``RequestHandler.handle_error`` with plain text, before any middleware runs. Our
request handler renders those as ``{"error", "message"}`` JSON like every other error: 431 for an
oversize header field or request line, 400 for anything else malformed. :func:`serve` runs an app
with it (in place of ``web.run_app``); tests use :class:`JsonErrorsTestServer`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.test_utils import TestServer
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from marketplace.errors import HeaderTooLarge, InvalidRequest, MarketplaceError
from marketplace.interpreter import freeze_start_up_heap

log = logging.getLogger(__name__)


def parser_error(status: int, exc: BaseException | None) -> MarketplaceError:
    if isinstance(exc, LineTooLong):
        return HeaderTooLarge()
    if isinstance(exc, BadHttpMessage) or 400 <= status < 500:
        # aiohttp's own text may quote the offending bytes back; a fixed message is enough.
        return InvalidRequest("malformed HTTP request")
    return MarketplaceError()


class JsonErrorsRequestHandler(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            self.log_exception("Error handling request", exc_info=exc)
        else:
            log.info("refused a malformed request: %s", type(exc).__name__ if exc else status)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send an error")
        error = parser_error(status, exc)
        response = web.Response(
            body=json.dumps(error.body()).encode(),
            status=error.status,
            content_type="application/json",
            headers=error.headers(),
        )
        response.force_close()
        return response


class _JsonErrorsServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorsRequestHandler(self, loop=self._loop, **self._kwargs)


class JsonErrorsAppRunner(web.AppRunner):
    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorsServer
        return server


class JsonErrorsTestServer(TestServer):
    """``aiohttp.test_utils.TestServer`` with our request handler (for ``aiohttp_client``)."""

    async def _make_runner(self, **kwargs: Any) -> web.BaseRunner:
        return JsonErrorsAppRunner(self.app, **kwargs)


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    on_ready: Callable[[], None] | None = None,
    shutdown_timeout: float = 10.0,
    sockets: Sequence[socket.socket] = (),
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut down gracefully: on ``sockets``
    (listening already) when given, else on ``host:port``."""
    runner = JsonErrorsAppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    freeze_start_up_heap()
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        sites: list[web.BaseSite] = (
            [web.SockSite(runner, sock) for sock in sockets]
            if sockets
            else [web.TCPSite(runner, host, port)]
        )
        for site in sites:
            await site.start()
        if on_ready is not None:
            on_ready()
        await stop.wait()
        log.info("stopping", extra={"signal": received[0].name})
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        log.info("http server stopped")
