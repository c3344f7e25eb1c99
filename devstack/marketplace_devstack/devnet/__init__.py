"""Devnet tooling: a local chain with the reference contracts, and a client that drives it.

- :mod:`.anvil`: an anvil process on a free loopback port.
- :mod:`.deploy`: deploys the reference contracts (dev keys, manifest, funding).
- :mod:`.node`: the persistent devnet of ``marketplace up`` (state kept in the data dir).
- :mod:`.client`: :class:`~.client.DevnetClient`, which sends transactions from node-unlocked
  accounts as a client would, and :func:`~.client.locate_devnet` (the devnet of
  ``marketplace up``).
- :mod:`.seed`: fills a devnet with projects in every status (``marketplace devnet seed``).
- :mod:`.wallet_link`: links a dev account's wallet to a user through the API.
- :mod:`.cli`: the ``marketplace devnet ...`` commands.

Part of the dev stack (:mod:`marketplace_devstack`), which the production package never imports:
a test walks the imports of every production module, and another checks what ``serve`` loads.
Only the embedded stack of ``marketplace up`` and the ``devnet`` command load it. It imports
production code (the contracts' ABIs, enumerations, EIP-712 and hash helpers in
:mod:`marketplace.chain`), never the other way round. This module imports nothing, so loading
one tool (say the anvil process) does not load web3's client.
"""
