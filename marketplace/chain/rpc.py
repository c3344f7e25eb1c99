"""A small asynchronous JSON-RPC client with batching, for the indexer's hot path."""

from __future__ import annotations

import itertools
from typing import Any, NotRequired, TypedDict, cast

import aiohttp
from pydantic import JsonValue


class RpcError(Exception):
    """The node answered with a JSON-RPC error (or not at all)."""

    def __init__(self, message: str, code: int | None = None, data: JsonValue = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


# What a chain read that did not get an answer raises (the node's error, HTTP trouble, a timeout,
# a refused connection): callers that retry later catch exactly these.
RPC_FAILURES: tuple[type[BaseException], ...] = (
    RpcError,
    aiohttp.ClientError,
    TimeoutError,
    OSError,
)


class RpcErrorObject(TypedDict):
    code: int
    message: str
    data: NotRequired[JsonValue]


class RpcResponse(TypedDict):
    """One JSON-RPC 2.0 response: ``result`` or ``error``."""

    jsonrpc: str
    id: int | str | None
    result: NotRequired[JsonValue]
    error: NotRequired[RpcErrorObject]


class RpcRequest(TypedDict):
    jsonrpc: str
    id: int
    method: str
    params: list[Any]  # whatever each method takes (hex text, objects, booleans)


class RpcLog(TypedDict):
    """A log as ``eth_getLogs`` and receipts give it (quantities as ``0x`` hex)."""

    address: str
    topics: list[str]
    data: str
    blockNumber: str
    blockHash: str
    transactionHash: str
    transactionIndex: str
    logIndex: str
    removed: NotRequired[bool]


class RpcBlockHeader(TypedDict):
    """What callers read of ``eth_getBlockByNumber(tag, false)`` (quantities as ``0x`` hex)."""

    number: str
    hash: str
    parentHash: str
    timestamp: str


class JsonRpcClient:
    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        self.url = url
        self._ids = itertools.count(1)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, payload: RpcRequest | list[RpcRequest]) -> JsonValue:
        session = await self._http()
        try:
            async with session.post(self.url, json=payload) as resp:
                if resp.status != 200:
                    raise RpcError(f"HTTP {resp.status} from {self.url}")
                answer: JsonValue = await resp.json(content_type=None)
                return answer
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RpcError(f"RPC transport error: {exc!r}") from exc

    @staticmethod
    def _result(response: RpcResponse) -> Any:
        # Any: the shape of a result depends on the method (callers that read one know it).
        if "error" in response:
            error = response["error"]
            raise RpcError(str(error.get("message")), error.get("code"), error.get("data"))
        return response.get("result")

    async def call(self, method: str, params: list[Any]) -> Any:
        response = await self._post(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        )
        return self._result(cast(RpcResponse, response))

    async def batch(self, calls: list[tuple[str, list[Any]]], *, chunk: int = 200) -> list[Any]:
        """Several calls in as few HTTP requests as possible; results in call order.

        A failed call raises: the indexer treats a batch as all-or-nothing.
        """
        results: list[Any] = []
        for start in range(0, len(calls), chunk):
            part = calls[start : start + chunk]
            ids = [next(self._ids) for _ in part]
            payload: list[RpcRequest] = [
                {"jsonrpc": "2.0", "id": i, "method": m, "params": p}
                for i, (m, p) in zip(ids, part, strict=True)
            ]
            responses = await self._post(payload)
            if not isinstance(responses, list):
                raise RpcError(f"batch answered with {type(responses).__name__}")
            by_id = {r.get("id"): r for r in cast(list[RpcResponse], responses)}
            results.extend(self._result(by_id[i]) for i in ids)
        return results
