"""The dev stack of the marketplace: everything that runs the service on a laptop, nothing that
runs it in production.

- :mod:`.commands`: the ``marketplace up``, ``status`` and ``devnet`` commands, which the
  production CLI finds through the entry points of this distribution (``marketplace.cli``).
- :mod:`.embedded`: ``up``'s embedded PostgreSQL, Redis and SMTP servers, their supervisor and
  the guardian that stops whatever outlives it.
- :mod:`.devnet`: the local demo chain (anvil, the reference contracts) and the client that
  drives it.
- :mod:`.schema`: ``make schema``, which regenerates ``marketplace/storage/schema.sql``.

It imports the production package (``marketplace``); the production package never imports it
(tests/unit/core/test_architecture.py), and the service's image does not contain it. This
module imports nothing, so ``marketplace --help`` lists the commands without loading a server.
"""
