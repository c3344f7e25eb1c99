"""Following the outbox (docs/events.md): the infrastructure around the event contract.

``leader``: one active instance among all processes, woken by outbox commits (the relay's and
the durable consumers' loop). ``relay``: copies committed events to the Redis Stream.
``consumer``: ``EventStream.subscribe`` / ``read_since`` for whoever reacts to changes. The
contract itself (types, payload models) is ``marketplace.events``, a leaf that storage imports;
this package imports storage.
"""
