"""Event arguments read straight from a log's hex text, for the indexer's hot path.

``AbiEvent.decode_log`` turns the data into bytes and converts word by word; the indexer decodes
every log of a backfill (about twelve per project), and reading each argument as
``int(text[a:b], 16)`` from the JSON-RPC answer's hex costs a fraction of that. Supported: the
types the marketplace's events use (``uint<N>``, ``bool``, ``address``, ``bytes32`` and arrays of
them); anything else is refused when the decoder is built, never misread. ``tests/unit/indexer``
checks every event it serves against ``decode_log``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marketplace.chain.abi import AbiEvent, AbiValue


def _scalar(kind: str) -> Callable[[str], AbiValue]:
    if kind.startswith("uint") and kind[4:].isdigit():
        return lambda word: int(word, 16)
    if kind == "bool":
        return lambda word: int(word, 16) != 0
    if kind == "address":
        return lambda word: "0x" + word[24:].lower()
    if kind == "bytes32":
        return lambda word: "0x" + word.lower()
    raise ValueError(f"unsupported event argument type {kind}")


class HexEvent:
    """Decodes one event's logs from their hex text; addresses come out lower-case."""

    def __init__(self, event: AbiEvent) -> None:
        self.topic0 = event.topic0
        self._topics: list[tuple[str, int, Callable[[str], AbiValue]]] = []
        self._words: list[tuple[str, int, Callable[[str], AbiValue], bool]] = []
        position = 1
        word = 0
        for param in event.abi["inputs"]:
            kind = param["type"]
            if param["indexed"]:
                self._topics.append((param["name"], position, _scalar(kind)))
                position += 1
                continue
            array = kind.endswith("[]")
            self._words.append((param["name"], word, _scalar(kind[:-2] if array else kind), array))
            word += 1

    def decode(self, log: Mapping[str, Any]) -> dict[str, AbiValue]:
        topics: list[str] = log["topics"]
        data: str = log["data"]
        args: dict[str, AbiValue] = {}
        for name, position, convert in self._topics:
            args[name] = convert(topics[position][2:])
        for name, index, convert, array in self._words:
            word = data[2 + 64 * index : 66 + 64 * index]
            if len(word) != 64:
                raise ValueError(f"log data too short for {name}")
            if not array:
                args[name] = convert(word)
                continue
            start = 2 + 2 * int(word, 16)
            count = int(data[start : start + 64], 16)
            first = start + 64
            if len(data) < first + 64 * count:
                raise ValueError(f"log data too short for {name}")
            args[name] = [convert(data[first + 64 * k : first + 64 * k + 64]) for k in range(count)]
        return args
