"""The commands the dev stack adds to ``marketplace``: ``up``, ``status`` and ``devnet``.

Each is an entry point of the group ``marketplace.cli`` (devstack/pyproject.toml) naming its
``configure(parser)`` here; the production CLI (:func:`marketplace.cli.plugin_commands`) lists
them with the first line of that function's docstring as their help. This module imports
nothing heavy, so that listing loads no server: a command's own modules (the embedded stack,
web3's client) are imported when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_up(args: argparse.Namespace) -> int:
    from marketplace.cli import run_service, settings_from_args
    from marketplace.logs import configure_logging
    from marketplace_devstack.embedded.supervisor import run_up

    settings = settings_from_args(args)
    configure_logging(settings.log_level, settings.log_json)
    return run_up(settings, lambda s, ready: run_service(s, migrate=True, on_ready=ready))


def configure_up(up: argparse.ArgumentParser) -> None:
    """start embedded dependencies as needed, migrate, serve"""
    up.add_argument("--host")
    up.add_argument("--port", type=int)
    up.add_argument("--data-dir", type=Path, help="default: $MARKETPLACE_DATA_DIR or ./.data")
    up.set_defaults(func=cmd_up)


def cmd_status(args: argparse.Namespace) -> int:
    from marketplace_devstack.embedded.state import print_status

    return print_status(as_json=args.json)


def configure_status(status: argparse.ArgumentParser) -> None:
    """show where `marketplace up` runs (exit 1: nowhere)"""
    status.add_argument("--json", action="store_true", help="print the records as JSON")
    status.set_defaults(func=cmd_status)


def configure_devnet(devnet: argparse.ArgumentParser) -> None:
    """drive the devnet of `marketplace up` (create, bid, dispute, seed, ...)"""
    from marketplace_devstack.devnet.cli import configure

    configure(devnet)
