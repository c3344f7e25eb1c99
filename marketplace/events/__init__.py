"""The change-event contract (transactional outbox; docs/events.md): a leaf package.

``types``: the event types, one payload model per type, ``NewEvent`` (what a producer writes)
and ``parse_event`` (what a consumer gets). It imports nothing from ``marketplace``, so
repositories may import it; the relay and the consumers that follow the outbox live in
``marketplace.outbox``.
"""
