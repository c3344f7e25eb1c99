"""Verifier jobs: deterministic policy checks over a delivery reference, evidence with a
recomputable hash, and EIP-712 attestations the project contract accepts (docs/verifier.md)."""
