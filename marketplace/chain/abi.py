"""Minimal ABI codec for the hot paths (indexer, claim checks, devnet client).

web3's contract layer is convenient but costs a lot per call; the indexer decodes thousands of
logs and state structs per second, so it works on raw JSON-RPC payloads with these helpers.

Decoding slices the 32-byte words directly for the types the marketplace ABI uses (uint, int,
bool, address, bytesN, tuples, arrays of static types): eth_abi plus an EIP-55 checksum per
address were most of a backfill's time (bench/README.md, "Indexer backfill"). Anything
else (strings, dynamic bytes, fixed-size arrays, arrays of dynamic types) falls back to eth_abi.
Addresses come out checksummed unless the caller asks for lower case (``checksum_addresses``),
which is what the read models store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeAlias

from eth_abi import decode, encode
from eth_utils import keccak

from marketplace.chain.artifacts import AbiEntry, AbiParam, load_artifact
from marketplace.types import checksum_address

#: A decoded ABI value: integers as int, ``bool``, addresses and ``bytesN`` as ``0x`` text, arrays
#: as lists, structs as dicts by member name.
AbiValue: TypeAlias = int | bool | str | list["AbiValue"] | dict[str, "AbiValue"]


def abi_type(param: Mapping[str, Any]) -> str:
    # Any mapping with the ABI's keys: web3's own ABI types too (the tests and devnet use them).
    kind = param["type"]
    if kind.startswith("tuple"):
        inner = ",".join(abi_type(c) for c in param["components"])
        return f"({inner}){kind[len('tuple') :]}"
    return kind


def _lower_address(raw: str) -> str:
    return raw.lower()


# --- generic path (eth_abi) -------------------------------------------------------------------


def _element(param: AbiParam, kind: str) -> AbiParam:
    element = param.copy()
    element["type"] = kind
    return element


def _normalize(param: AbiParam, value: Any, address: Callable[[str], str]) -> AbiValue:
    kind = param["type"]
    if kind.endswith("]"):
        element = _element(param, kind[: kind.rindex("[")])
        return [_normalize(element, v, address) for v in value]
    if kind == "tuple":
        return _struct(param["components"], value, address)
    if kind == "address":
        return address(value)
    if kind.startswith("bytes"):
        return "0x" + bytes(value).hex()
    return value


def _struct(
    components: list[AbiParam], value: Any, address: Callable[[str], str]
) -> dict[str, AbiValue]:
    return {c["name"]: _normalize(c, v, address) for c, v in zip(components, value, strict=True)}


# --- fast path (word slicing) -------------------------------------------------------------------


class _Unsupported(Exception):
    pass


# (data, head position, base of the enclosing tuple)
Decoder = Callable[[bytes, int, int], AbiValue]


def _is_dynamic(param: AbiParam) -> bool:
    kind = param["type"]
    if kind.endswith("[]") or kind in ("string", "bytes"):
        return True
    return kind == "tuple" and any(_is_dynamic(c) for c in param["components"])


def _word(data: bytes, pos: int) -> bytes:
    if pos + 32 > len(data):
        raise ValueError(f"ABI data too short: {len(data)} bytes, need {pos + 32}")
    return data[pos : pos + 32]


def _head_size(param: AbiParam) -> int:
    if _is_dynamic(param):
        return 32
    if param["type"] == "tuple":
        return sum(_head_size(c) for c in param["components"])
    return 32


def _decoder(param: AbiParam, address: Callable[[str], str]) -> Decoder:
    kind = param["type"]
    if kind.endswith("]") and not kind.endswith("[]"):
        raise _Unsupported(kind)  # fixed-size arrays
    if kind.endswith("[]"):
        element = _element(param, kind[:-2])
        if _is_dynamic(element):
            raise _Unsupported(kind)
        item, size = _decoder(element, address), _head_size(element)

        def array(data: bytes, pos: int, base: int) -> list[AbiValue]:
            start = base + int.from_bytes(_word(data, pos), "big")
            count = int.from_bytes(_word(data, start), "big")
            first = start + 32
            return [item(data, first + i * size, first) for i in range(count)]

        return array
    if kind == "tuple":
        return _tuple_decoder(param, address)
    convert = _word_converter(kind, address)
    return lambda data, pos, _: convert(_word(data, pos))


_ZERO_WORD = bytes(32)


def _word_converter(kind: str, address: Callable[[str], str]) -> Callable[[bytes], AbiValue]:
    """How one 32-byte word of a static scalar type becomes its value."""
    if kind == "address":
        return lambda word: address("0x" + word[12:].hex())
    if kind == "bool":
        return lambda word: word != _ZERO_WORD
    if kind.startswith("uint"):
        return functools.partial(int.from_bytes, byteorder="big")
    if kind.startswith("int"):
        return functools.partial(int.from_bytes, byteorder="big", signed=True)
    if kind.startswith("bytes") and kind[5:].isdigit():
        length = int(kind[5:])
        return lambda word: "0x" + word[:length].hex()
    raise _Unsupported(kind)


def _tuple_decoder(param: AbiParam, address: Callable[[str], str]) -> Decoder:
    # Scalar members are converted straight from their word (one bounds check for the whole
    # head instead of one per word): a getProjectState struct has about 75 words, and the
    # per-word calls were most of a backfill's decoding time.
    parts: list[tuple[str, int, Callable[[bytes], AbiValue] | None, Decoder | None]] = []
    offset = 0
    for component in param["components"]:
        kind = component["type"]
        if kind != "tuple" and not kind.endswith("]") and not _is_dynamic(component):
            parts.append((component["name"], offset, _word_converter(kind, address), None))
        else:
            parts.append((component["name"], offset, None, _decoder(component, address)))
        offset += _head_size(component)
    head = offset
    dynamic = _is_dynamic(param)

    def struct(data: bytes, pos: int, base: int) -> dict[str, AbiValue]:
        start = base + int.from_bytes(_word(data, pos), "big") if dynamic else pos
        if start + head > len(data):
            raise ValueError(f"ABI data too short: {len(data)} bytes, need {start + head}")
        out: dict[str, AbiValue] = {}
        for name, at, convert, decode_part in parts:
            if convert is not None:
                out[name] = convert(data[start + at : start + at + 32])
            else:
                assert decode_part is not None
                out[name] = decode_part(data, start + at, start)
        return out

    return struct


def _fast_sequence(
    params: list[AbiParam], address: Callable[[str], str]
) -> Callable[[bytes], list[AbiValue]] | None:
    try:
        decoders = [(_decoder(p, address), _head_size(p)) for p in params]
    except _Unsupported:
        return None

    def decode_all(data: bytes) -> list[AbiValue]:
        values: list[AbiValue] = []
        at = 0
        for decoder, size in decoders:
            values.append(decoder(data, at, 0))
            at += size
        return values

    return decode_all


def _address_style(checksum_addresses: bool) -> Callable[[str], str]:
    return checksum_address if checksum_addresses else _lower_address


# --- functions and events -----------------------------------------------------------------------


@dataclass(frozen=True)
class AbiFunction:
    abi: AbiEntry

    @cached_property
    def signature(self) -> str:
        return f"{self.abi['name']}({','.join(abi_type(i) for i in self.abi['inputs'])})"

    @cached_property
    def selector(self) -> bytes:
        return keccak(text=self.signature)[:4]

    def encode_call(self, *args: Any) -> str:
        types = [abi_type(i) for i in self.abi["inputs"]]
        return "0x" + (self.selector + encode(types, list(args))).hex()

    @cached_property
    def _fast(self) -> dict[bool, Callable[[bytes], list[AbiValue]] | None]:
        outputs = self.abi["outputs"]
        return {flag: _fast_sequence(outputs, _address_style(flag)) for flag in (True, False)}

    def decode_result(self, data: str, *, checksum_addresses: bool = True) -> Any:
        """The decoded outputs (one :data:`AbiValue`, or a list of them for several outputs):
        ``Any``, since only the caller knows which function it called and so the shape."""
        raw = bytes.fromhex(data.removeprefix("0x"))
        fast = self._fast[checksum_addresses]
        if fast is not None:
            decoded = fast(raw)
        else:
            outputs = self.abi["outputs"]
            address = _address_style(checksum_addresses)
            values = decode([abi_type(o) for o in outputs], raw)
            decoded = [_normalize(o, v, address) for o, v in zip(outputs, values, strict=True)]
        return decoded[0] if len(decoded) == 1 else decoded


@dataclass(frozen=True)
class AbiEvent:
    abi: AbiEntry

    @cached_property
    def signature(self) -> str:
        return f"{self.abi['name']}({','.join(abi_type(i) for i in self.abi['inputs'])})"

    @cached_property
    def topic0(self) -> str:
        return "0x" + keccak(text=self.signature).hex()

    @cached_property
    def _parts(self) -> tuple[list[AbiParam], list[AbiParam]]:
        inputs = self.abi["inputs"]
        return [i for i in inputs if i["indexed"]], [i for i in inputs if not i["indexed"]]

    @cached_property
    def _fast(self) -> dict[bool, Callable[[bytes], list[AbiValue]] | None]:
        _, plain = self._parts
        return {flag: _fast_sequence(plain, _address_style(flag)) for flag in (True, False)}

    @cached_property
    def _topic_decoders(self) -> dict[bool, list[Decoder | None]]:
        # A dynamic indexed value (string, bytes, arrays) is only its hash in the topic: None.
        indexed, _ = self._parts
        return {
            flag: [None if _is_dynamic(p) else _decoder(p, _address_style(flag)) for p in indexed]
            for flag in (True, False)
        }

    def decode_log(
        self, log: Mapping[str, Any], *, checksum_addresses: bool = True
    ) -> dict[str, AbiValue]:
        """The event's arguments by name, from a log's ``topics`` and ``data`` (an RPC log, a
        web3 receipt's, a test's dict); callers that know the event cast the result to a
        TypedDict of it (``marketplace.chain.project_state.ProjectCreated``)."""
        indexed, plain = self._parts
        address = _address_style(checksum_addresses)
        topics = log["topics"][1:]
        if len(topics) != len(indexed):
            raise ValueError(f"expected {len(indexed)} indexed topics, got {len(topics)}")
        args: dict[str, AbiValue] = {}
        for param, topic_decoder, topic in zip(
            indexed, self._topic_decoders[checksum_addresses], topics, strict=True
        ):
            raw = bytes.fromhex(topic.removeprefix("0x"))
            args[param["name"]] = topic_decoder(raw, 0, 0) if topic_decoder else "0x" + raw.hex()
        data = bytes.fromhex(log["data"].removeprefix("0x"))
        fast = self._fast[checksum_addresses]
        if fast is not None:
            values: list[AbiValue] = fast(data)
        else:
            raw_values = decode([abi_type(p) for p in plain], data)
            values = [_normalize(p, v, address) for p, v in zip(plain, raw_values, strict=True)]
        for param, value in zip(plain, values, strict=True):
            args[param["name"]] = value
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
