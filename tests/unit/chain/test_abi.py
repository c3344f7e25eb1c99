"""The word-slicing decoder agrees with eth_abi on every function and event of the contracts."""

from __future__ import annotations

import random
from typing import Any, get_type_hints

import pytest
from eth_abi import encode
from eth_utils import to_checksum_address

from marketplace.chain.abi import ContractAbi, _address_style, _normalize, abi_type
from marketplace.chain.artifacts import AbiParam, artifact_names
from marketplace.chain.project_state import MilestoneState, ProjectCreated, ProjectState


def _value(param: AbiParam, rng: random.Random) -> Any:
    kind = param["type"]
    if kind.endswith("[]"):
        element: AbiParam = {**param, "type": kind[:-2]}
        return [_value(element, rng) for _ in range(rng.randint(0, 3))]
    if kind == "tuple":
        return tuple(_value(c, rng) for c in param["components"])
    if kind == "address":
        return to_checksum_address(rng.randbytes(20))
    if kind == "bool":
        return rng.random() < 0.5
    if kind.startswith("uint"):
        return rng.getrandbits(int(kind[4:] or 256))
    if kind.startswith("int"):
        bits = int(kind[3:] or 256)
        return rng.getrandbits(bits) - 2 ** (bits - 1)
    if kind.startswith("bytes") and kind[5:].isdigit():
        return rng.randbytes(int(kind[5:]))
    if kind == "string":
        return "s" * rng.randint(0, 40)
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 40))
    raise AssertionError(kind)


def _generic(params: list[AbiParam], data: bytes, checksum: bool) -> list[Any]:
    from eth_abi import decode

    values = decode([abi_type(p) for p in params], data)
    address = _address_style(checksum)
    return [_normalize(p, v, address) for p, v in zip(params, values, strict=True)]


@pytest.mark.parametrize("name", artifact_names())
@pytest.mark.parametrize("checksum", [True, False])
def test_fast_function_decoding_matches_eth_abi(name: str, checksum: bool) -> None:
    rng = random.Random(7)
    for function in ContractAbi.load(name).functions.values():
        outputs = function.abi["outputs"]
        if not outputs:
            continue
        for _ in range(3):
            values = [_value(o, rng) for o in outputs]
            data = "0x" + encode([abi_type(o) for o in outputs], values).hex()
            expected = _generic(outputs, bytes.fromhex(data[2:]), checksum)
            got = function.decode_result(data, checksum_addresses=checksum)
            assert got == (expected[0] if len(expected) == 1 else expected), function.signature


@pytest.mark.parametrize("name", artifact_names())
def test_fast_event_decoding_matches_eth_abi(name: str) -> None:
    rng = random.Random(11)
    for event in ContractAbi.load(name).events.values():
        inputs = event.abi["inputs"]
        indexed = [i for i in inputs if i["indexed"]]
        plain = [i for i in inputs if not i["indexed"]]
        topic_values = [_value(i, rng) for i in indexed]
        plain_values = [_value(p, rng) for p in plain]
        topics = [event.topic0] + [
            "0x" + encode([abi_type(i)], [v]).hex()
            for i, v in zip(indexed, topic_values, strict=True)
        ]
        data = "0x" + encode([abi_type(p) for p in plain], plain_values).hex()
        got = event.decode_log({"topics": topics, "data": data})
        expected = _generic(plain, bytes.fromhex(data[2:]), True)
        for param, value in zip(plain, expected, strict=True):
            assert got[param["name"]] == value, event.signature
        for param, value in zip(
            indexed,
            _generic(indexed, b"".join(bytes.fromhex(t[2:]) for t in topics[1:]), True),
            strict=True,
        ):
            assert got[param["name"]] == value, event.signature


_PYTHON_TYPES = {"address": str, "bool": bool, "bytes32": str}


def _python_type(param: AbiParam) -> type:
    kind = param["type"]
    return _PYTHON_TYPES.get(kind, int if kind.startswith(("uint", "int")) else object)


def _assert_typed_dict_matches(typed_dict: type, params: list[AbiParam]) -> None:
    hints = get_type_hints(typed_dict)
    assert list(hints) == [p["name"] for p in params], typed_dict.__name__
    for param in params:
        if param["type"] in ("tuple", "tuple[]"):
            continue  # the nested struct is checked on its own
        assert hints[param["name"]] is _python_type(param), (typed_dict.__name__, param)


def test_project_state_typed_dicts_match_the_abi() -> None:
    """The TypedDicts callers read decoded structs and events through name every member, in
    order, with the Python type the decoder gives it."""
    (state,) = ContractAbi.load("MarketplaceProject").functions["getProjectState"].abi["outputs"]
    _assert_typed_dict_matches(ProjectState, state["components"])
    (milestones,) = [c for c in state["components"] if c["name"] == "milestones"]
    _assert_typed_dict_matches(MilestoneState, milestones["components"])
    created = ContractAbi.load("MarketplaceRegistry").events["ProjectCreated"]
    _assert_typed_dict_matches(ProjectCreated, created.abi["inputs"])
