"""``getProjectState()`` of one project contract, read on demand (the indexer reads it in
batches itself). Used where a decision must follow the chain rather than the read model, which
may lag behind it: freezing acceptance policies once bidding opens, and what a verifier
signature may judge."""

from __future__ import annotations

from functools import cache
from typing import Any

from marketplace.chain.abi import AbiFunction, ContractAbi
from marketplace.chain.enums import ProjectStatus
from marketplace.chain.rpc import JsonRpcClient


@cache
def _get_state() -> AbiFunction:
    return ContractAbi.load("MarketplaceProject").functions["getProjectState"]


async def project_state(
    rpc: JsonRpcClient, project: str, block: str = "latest"
) -> dict[str, Any] | None:
    """The decoded ``ProjectState`` struct (field names as in the contract, addresses
    lower-case) at ``block``; None when no project contract answers at ``project``. RPC failures
    propagate (``RpcError``, ``aiohttp.ClientError``, ``TimeoutError``, ``OSError``)."""
    function = _get_state()
    data = await rpc.call("eth_call", [{"to": project, "data": function.encode_call()}, block])
    if not isinstance(data, str) or data in ("0x", ""):
        return None
    try:
        state: dict[str, Any] = function.decode_result(data, checksum_addresses=False)
    except Exception:
        # Some other contract answered with data that is no ProjectState.
        return None
    return state


async def project_status(rpc: JsonRpcClient, project: str) -> ProjectStatus | None:
    state = await project_state(rpc, project)
    return None if state is None else ProjectStatus(state["status"])


def bytes32_hex(value: Any) -> str:
    """A decoded ``bytes32`` as lower-case ``0x`` hex, whichever form the decoder gave."""
    text = value if isinstance(value, str) else "0x" + bytes(value).hex()
    return text.lower()
