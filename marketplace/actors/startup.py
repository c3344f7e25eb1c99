"""What every long-lived actor does first, in one place: pin the interpreter's recursion limit
(marketplace/interpreter.py), freeze the start-up heap and count its own restart
(marketplace/actors/restarts.py)."""

from __future__ import annotations

from marketplace.actors.restarts import in_ray_actor, note_restart
from marketplace.actors.settings import ActorSettings
from marketplace.interpreter import freeze_start_up_heap, pin_recursion_limit


def start_actor(kind: str, settings: ActorSettings) -> None:
    """The process-wide preparations every actor needs; ``kind`` is the label its restarts are
    counted under."""
    pin_recursion_limit()
    if in_ray_actor():
        # Only in the actor's own process: a class used as plain Python (tests) runs in a
        # process that builds many, where what is frozen is never collected.
        freeze_start_up_heap()
    note_restart(kind, settings.redis_url)
