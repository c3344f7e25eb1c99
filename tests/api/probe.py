"""A route table used only by tests, to drive the framework's generic paths."""

from __future__ import annotations

from typing import Any, cast

from pydantic import Field

from marketplace.errors import ErrorExtra, MarketplaceError
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.types import Address, QueryModel, RequestModel, ResponseModel

probe = RouteTable(tag="probe")


class EchoBody(RequestModel):
    name: str = Field(min_length=1, max_length=10)
    count: int = Field(ge=0)
    wallet: Address | None = None


class EchoQuery(QueryModel):
    limit: int = Field(default=10, ge=1, le=100)
    tags: list[str] = Field(default_factory=list)


class EchoResponse(ResponseModel):
    """What the probe saw."""

    userId: str | None
    kind: str | None
    scheduler: bool
    body: dict[str, Any] | None = None
    query: dict[str, Any] | None = None


def _echo(call: Call[Any, Any, Any]) -> EchoResponse:
    return EchoResponse(
        userId=str(call.principal.user_id) if call.principal else None,
        kind=call.principal.kind.value if call.principal else None,
        scheduler=call.is_scheduler,
        body=call.body.model_dump(mode="json") if call.body is not None else None,
        query=call.query.model_dump(mode="json") if call.query is not None else None,
    )


for mode in AuthMode:

    @probe.get(
        f"/v1/_probe/auth/{mode.value}",
        name=f"probeAuth_{mode.value}",
        summary="probe",
        auth=mode,
        response=EchoResponse,
    )
    async def probe_auth(call: Call[None, None, None]) -> EchoResponse:
        return _echo(call)


@probe.post(
    "/v1/_probe/echo",
    name="probeEcho",
    summary="probe",
    auth=AuthMode.OPTIONAL,
    body=EchoBody,
    query=EchoQuery,
    response=EchoResponse,
)
async def probe_echo(call: Call[EchoBody, EchoQuery, None]) -> EchoResponse:
    return _echo(call)


@probe.post(
    "/v1/_probe/guarded",
    name="probeGuarded",
    summary="probe",
    auth=AuthMode.EITHER,
    guarded=True,
    body=EchoBody,
    response=EchoResponse,
)
async def probe_guarded(call: Call[EchoBody, None, None]) -> EchoResponse:
    return _echo(call)


class Boom(MarketplaceError):
    code = "boom"
    status = 409


@probe.get(
    "/v1/_probe/crash",
    name="probeCrash",
    summary="probe",
    auth=AuthMode.NONE,
    response=EchoResponse,
)
async def probe_crash(call: Call[None, None, None]) -> EchoResponse:
    raise RuntimeError("secret internal detail")


@probe.get(
    "/v1/_probe/domain-error",
    name="probeDomainError",
    summary="probe",
    auth=AuthMode.NONE,
    response=EchoResponse,
)
async def probe_domain_error(call: Call[None, None, None]) -> EchoResponse:
    # An extra member no error of the spec has: the body carries whatever extra is given.
    raise Boom("it went boom", cast(ErrorExtra, {"hint": "extra field"}))


@probe.get(
    "/v1/_probe/limited",
    name="probeLimited",
    summary="probe",
    auth=AuthMode.OPTIONAL,
    response=EchoResponse,
)
async def probe_limited(call: Call[None, None, None]) -> EchoResponse:
    return _echo(call)


@probe.get(
    "/v1/_probe/stream",
    name="probeStream",
    summary="a streaming response that stays open for ?seconds",
    auth=AuthMode.NONE,
    response=None,
    query=EchoQuery,
    rate_limited=False,
)
async def probe_stream(call: Call[None, EchoQuery, None]) -> Any:
    import asyncio

    from aiohttp import web

    from marketplace.http.streaming import open_stream

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await open_stream(call.request, response)
    for index in range(call.query.limit):
        await response.write(f"data: {index}\n\n".encode())
        await asyncio.sleep(0.1)
    if "fail" in call.query.tags:
        raise MarketplaceError("broken after the head was sent")
    await response.write_eof()
    return response
