"""Chain side: web3/JSON-RPC clients, contract artifacts and bindings, devnet, hash helpers."""
