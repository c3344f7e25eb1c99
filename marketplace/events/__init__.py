"""Durable, typed change events (transactional outbox); see docs/events.md.

``types``: the event types, their payload models and the row a producer writes; a leaf module
that repositories may import. ``relay``: copies committed events to the Redis Stream.
``consumer``: ``subscribe`` / ``read_since`` for whoever reacts to changes.
"""
