"""Backend of an on-chain project marketplace."""

__version__ = "0.1.0"
API_VERSION = "1.0.0"
