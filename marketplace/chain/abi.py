"""Minimal ABI codec over eth_abi for the hot paths (indexer, claim checks).

web3's contract layer is convenient but costs a lot per call; the indexer decodes thousands of
logs and state structs per second, so it works on raw JSON-RPC payloads with these helpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from eth_abi import decode, encode
from eth_utils import keccak, to_checksum_address

from marketplace.chain.artifacts import load_artifact


def abi_type(param: dict[str, Any]) -> str:
    kind: str = param["type"]
    if kind.startswith("tuple"):
        inner = ",".join(abi_type(c) for c in param["components"])
        return f"({inner}){kind[len('tuple') :]}"
    return kind


def _normalize(param: dict[str, Any], value: Any) -> Any:
    kind: str = param["type"]
    if kind.startswith("tuple"):
        components = param["components"]
        if kind.endswith("[]"):
            return [_struct(components, item) for item in value]
        return _struct(components, value)
    if kind == "address":
        return to_checksum_address(value)
    if kind == "address[]":
        return [to_checksum_address(v) for v in value]
    if kind.startswith("bytes") and not kind.endswith("[]"):
        return "0x" + bytes(value).hex()
    return value


def _struct(components: list[dict[str, Any]], value: Any) -> dict[str, Any]:
    return {c["name"]: _normalize(c, v) for c, v in zip(components, value, strict=True)}


@dataclass(frozen=True)
class AbiFunction:
    abi: dict[str, Any]

    @cached_property
    def signature(self) -> str:
        return f"{self.abi['name']}({','.join(abi_type(i) for i in self.abi['inputs'])})"

    @cached_property
    def selector(self) -> bytes:
        return keccak(text=self.signature)[:4]

    def encode_call(self, *args: Any) -> str:
        types = [abi_type(i) for i in self.abi["inputs"]]
        return "0x" + (self.selector + encode(types, list(args))).hex()

    def decode_result(self, data: str) -> Any:
        outputs = self.abi["outputs"]
        values = decode([abi_type(o) for o in outputs], bytes.fromhex(data.removeprefix("0x")))
        decoded = [_normalize(o, v) for o, v in zip(outputs, values, strict=True)]
        return decoded[0] if len(decoded) == 1 else decoded


@dataclass(frozen=True)
class AbiEvent:
    abi: dict[str, Any]

    @cached_property
    def signature(self) -> str:
        return f"{self.abi['name']}({','.join(abi_type(i) for i in self.abi['inputs'])})"

    @cached_property
    def topic0(self) -> str:
        return "0x" + keccak(text=self.signature).hex()

    def decode_log(self, log: dict[str, Any]) -> dict[str, Any]:
        inputs = self.abi["inputs"]
        indexed = [i for i in inputs if i["indexed"]]
        plain = [i for i in inputs if not i["indexed"]]
        args: dict[str, Any] = {}
        for param, topic in zip(indexed, log["topics"][1:], strict=True):
            (value,) = decode([abi_type(param)], bytes.fromhex(topic.removeprefix("0x")))
            args[param["name"]] = _normalize(param, value)
        data = bytes.fromhex(log["data"].removeprefix("0x"))
        values = decode([abi_type(p) for p in plain], data)
        for param, value in zip(plain, values, strict=True):
            args[param["name"]] = _normalize(param, value)
        return args


@dataclass(frozen=True)
class ContractAbi:
    name: str
    functions: dict[str, AbiFunction]
    events: dict[str, AbiEvent]

    @classmethod
    def load(cls, name: str) -> ContractAbi:
        abi = load_artifact(name)["abi"]
        return cls(
            name=name,
            functions={e["name"]: AbiFunction(e) for e in abi if e["type"] == "function"},
            events={e["name"]: AbiEvent(e) for e in abi if e["type"] == "event"},
        )

    @cached_property
    def events_by_topic(self) -> dict[str, AbiEvent]:
        return {event.topic0: event for event in self.events.values()}
