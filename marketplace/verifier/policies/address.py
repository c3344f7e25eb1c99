"""``address-smoke``: the address holds code at the chain's latest block."""

from __future__ import annotations

import re

from eth_utils import keccak, to_checksum_address

from marketplace.chain.rpc import JsonRpcClient, RpcError
from marketplace.types import JsonObject
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    PolicyContext,
    PolicyOutcome,
    PolicySettings,
    TransientPolicyError,
)

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def parse_address(text: str, settings: PolicySettings) -> str:
    value = text.strip()
    if not _ADDRESS.fullmatch(value):
        raise InvalidDeliveryRef("expected an address: 0x followed by 40 hex digits")
    checksummed = to_checksum_address(value)
    mixed = value[2:] != value[2:].lower() and value[2:] != value[2:].upper()
    if mixed and value != checksummed:
        raise InvalidDeliveryRef("the address's mixed-case checksum is wrong (EIP-55)")
    return checksummed


async def run_address_smoke(address: str, ctx: PolicyContext) -> PolicyOutcome:
    if not ctx.rpc_url:
        raise TransientPolicyError("no chain RPC URL configured")
    client = JsonRpcClient(ctx.rpc_url, timeout_s=ctx.settings.verifier_http_timeout_seconds)
    try:
        # One block for every answer, so the evidence describes one chain state.
        block_number = int(await client.call("eth_blockNumber", []), 16)
        chain_id_hex, code_hex = await client.batch(
            [("eth_chainId", []), ("eth_getCode", [address, hex(block_number)])]
        )
    except (RpcError, ValueError, TypeError) as exc:
        raise TransientPolicyError(f"chain RPC: {exc}") from exc
    finally:
        await client.close()
    code = bytes.fromhex(str(code_hex).removeprefix("0x"))
    evidence: JsonObject = {
        "policy": "address-smoke",
        "chainId": int(chain_id_hex, 16),
        "address": address,
        "blockNumber": block_number,
        "codeSize": len(code),
        "codeHash": "0x" + keccak(code).hex(),
        "hasCode": bool(code),
    }
    return PolicyOutcome(passes=bool(code), evidence=evidence)
