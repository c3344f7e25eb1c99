"""The notification rate limit: its setting, and the sliding-window log the limiter keeps.

``MARKETPLACE_NOTIFICATION_RATE_LIMIT`` is either one rate for every event type (``"5/3600"``:
at most five deliveries per hour per recipient and event type) or a JSON object naming event
types (and optionally ``"default"``), each with its own rate: ``{"direct_message": "10/3600"}``.
A type it does not name takes ``"default"``, else 5/3600.

Why a sliding-window log rather than GCRA (marketplace/gcra.py): the contract is "at most N in
any window of T", and the delivery rows are the log. GCRA with a burst of N refills one slot
every T/N, so it lets through up to about 2N in one window (a burst of N, then N-1 more as the
slots refill); with N = 5 per hour that would be 9 e-mails in the hour. The log keeps the
admission times of the deliveries still inside the window (at most N per key, so memory stays
bounded), admits a new one while fewer than N are there, and is rebuilt exactly from the rows
with status queued, sent or failed (the index ``notification_deliveries_window`` serves that
read): a restarted limiter knows everyone's window as it was.

The setting's parsing (``NotificationRates``, ``WindowRate``) lives in
``marketplace/config/notifications.py``, so that ``config`` imports no domain package.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from marketplace.config.notifications import (
    WindowRate,
)


def limiter_key(recipient_user_id: str, event_type: str) -> str:
    return f"{recipient_user_id}:{event_type}"


class SlidingWindowLog:
    """Per key, the (time, event id) of the admitted deliveries still inside the window.

    ``admit`` is idempotent per event id: asked again about an event it admitted (the consumer
    retrying a batch whose transaction did not commit), it answers yes again without counting
    it twice. Refusals change nothing, so asking again is safe too. Times are the database's
    (the consumer's transaction time, which is also the rows' ``created_at``), so the log and
    the rows it is rebuilt from use one clock.
    """

    def __init__(self) -> None:
        self._log: dict[str, deque[tuple[float, int]]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._log

    def __len__(self) -> int:
        return len(self._log)

    def load(self, key: str, entries: Iterable[tuple[float, int]]) -> None:
        """Set a key's log from the admitted deliveries found in the rows (any order)."""
        self._log[key] = deque(sorted(entries))

    def admitted(self, key: str, now: float, period: float) -> int:
        log = self._log.get(key)
        if log is None:
            return 0
        self._expire(log, now, period)
        return len(log)

    def admit(self, key: str, event_id: int, now: float, rate: WindowRate) -> bool:
        log = self._log.setdefault(key, deque())
        self._expire(log, now, rate.period_seconds)
        if any(entry_id == event_id for _, entry_id in log):
            return True
        if len(log) >= rate.count:
            return False
        log.append((now, event_id))
        return True

    def forget_idle(self, now: float, period: float) -> int:
        """Drop keys whose every admission left the window (a later look rebuilds them from the
        rows, which then hold nothing in the window); the number dropped."""
        idle = [k for k, log in self._log.items() if not log or log[-1][0] <= now - period]
        for key in idle:
            del self._log[key]
        return len(idle)

    @staticmethod
    def _expire(log: deque[tuple[float, int]], now: float, period: float) -> None:
        while log and log[0][0] <= now - period:
            log.popleft()


@dataclass(frozen=True)
class LimitRequest:
    """May the delivery of event ``event_id`` to ``recipient_user_id`` go out now?"""

    event_id: int
    recipient_user_id: str
    event_type: str
    count: int
    period_seconds: int

    @property
    def key(self) -> str:
        return limiter_key(self.recipient_user_id, self.event_type)

    @property
    def rate(self) -> WindowRate:
        return WindowRate(self.count, self.period_seconds)


# (recipient user id, event type, since epoch seconds) -> (epoch seconds, event id) of the
# deliveries that count against the limit created after ``since``.
LoadWindow = Callable[[str, str, float], Awaitable[Iterable[tuple[float, int]]]]


class WindowLimiter:
    """The limiter's state and rules, without Ray or a database (the actor gives it ``load``).

    A key seen for the first time (by this process, or again after it went idle) is loaded from
    the delivery rows before its first decision, so a restart resets nobody's window. Requests
    of one call are decided in order, so a burst within one batch is counted exactly.
    """

    def __init__(self, load: LoadWindow) -> None:
        self.log = SlidingWindowLog()
        self._load = load
        self.rebuilt_keys = 0
        self._longest_period = 0.0

    async def admit(self, requests: Sequence[LimitRequest], now: float) -> list[bool]:
        verdicts = []
        for request in requests:
            key = request.key
            self._longest_period = max(self._longest_period, request.period_seconds)
            if key not in self.log:
                entries = await self._load(
                    request.recipient_user_id, request.event_type, now - request.period_seconds
                )
                self.log.load(key, entries)
                self.rebuilt_keys += 1
            verdicts.append(self.log.admit(key, request.event_id, now, request.rate))
        return verdicts

    def forget_idle(self, now: float) -> int:
        return self.log.forget_idle(now, self._longest_period)
