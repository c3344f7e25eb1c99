"""The live event stream (``GET /v1/stream``, docs/stream.md).

``audience``: which users may see each streamed event type (the registry of audience rules).
``hub``: one per frontend process; follows the change events and fans each one out to the open
streams of its audience. ``slots``: the per-user limit on open streams, shared by all frontends
through Redis. ``sse``: the Server-Sent Events framing.
"""
