"""Value types of the spec's conventions (section "Conventions"), shared by every model."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from eth_utils import to_checksum_address
from pydantic import AfterValidator, ConfigDict, Field
from pydantic import BaseModel as _PydanticBaseModel

ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"
BYTES32_PATTERN = r"^0x[0-9a-fA-F]{64}$"
DECIMAL_PATTERN = r"^(0|[1-9][0-9]*)$"
HEX_SIGNATURE_PATTERN = r"^0x[0-9a-fA-F]+$"
ZERO_BYTES32 = "0x" + "0" * 64
ZERO_ADDRESS = "0x" + "0" * 40


@lru_cache(maxsize=65_536)
def checksum_address(value: str) -> str:
    # EIP-55 costs a keccak per call; the same few thousand addresses recur on every read.
    return to_checksum_address(value)


def _lower_hex(value: str) -> str:
    return value.lower()


# Addresses are accepted in any case and always returned in EIP-55 checksum form.
Address = Annotated[
    str,
    Field(pattern=ADDRESS_PATTERN, examples=["0x5FbDB2315678afecb367f032d93F642f64180aa3"]),
    AfterValidator(checksum_address),
]
# bytes32 values are returned lower-case so equal hashes compare equal as strings.
Bytes32 = Annotated[str, Field(pattern=BYTES32_PATTERN), AfterValidator(_lower_hex)]
Usdc = Annotated[str, Field(pattern=DECIMAL_PATTERN, description="whole-token USDC units")]
UnixSeconds = Annotated[str, Field(pattern=DECIMAL_PATTERN, description="Unix seconds")]
HexSignature = Annotated[str, Field(pattern=HEX_SIGNATURE_PATTERN)]


class RequestModel(_PydanticBaseModel):
    """A request body: unknown fields are refused so typos fail loudly instead of being ignored."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class QueryModel(_PydanticBaseModel):
    """Query string parameters: unknown ones are ignored (cache busters, tracking parameters)."""

    model_config = ConfigDict(extra="ignore")


class ResponseModel(_PydanticBaseModel):
    model_config = ConfigDict(extra="forbid")
