"""What every long-lived actor does first, in one place: pin the interpreter's recursion limit
(marketplace/interpreter.py), freeze the start-up heap, parse its settings and count its own
restart (marketplace/actors/restarts.py)."""

from __future__ import annotations

from typing import Any

from marketplace.actors.restarts import note_restart
from marketplace.config import Settings
from marketplace.interpreter import freeze_start_up_heap, pin_recursion_limit


def start_actor(kind: str, settings: dict[str, Any]) -> Settings:
    """The actor's Settings, after the process-wide preparations every actor needs; ``kind`` is
    the label its restarts are counted under."""
    pin_recursion_limit()
    freeze_start_up_heap()
    parsed = Settings(**settings)
    note_restart(kind, parsed.redis_url)
    return parsed
