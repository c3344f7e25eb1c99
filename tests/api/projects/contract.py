"""Response bodies must be exactly what the response models accept and re-emit.

The read path builds its models without validation (``model_construct``, for speed), so the
tests validate what goes over the wire instead: a body that round-trips through its model
unchanged has every pattern, enum, bound, checksum and omitted null right.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


def conforms(model: type[BaseModel], body: dict[str, Any]) -> dict[str, Any]:
    parsed = model.model_validate(body)
    # rendered as the read routes render (routing.render with exclude_none)
    assert json.loads(parsed.model_dump_json(by_alias=True, exclude_none=True)) == body
    return body
