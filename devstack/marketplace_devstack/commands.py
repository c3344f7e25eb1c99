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
    from marketplace.cli import (
        claim_listening_port,
        logging_from_settings,
        run_service,
        settings_from_args,
    )
    from marketplace.logs import stderr_is_terminal

    settings = settings_from_args(args)
    # Before anything starts (or loads): a busy port would otherwise show only once every
    # dependency ran. Held from now on, so nothing takes it while they start.
    sockets = claim_listening_port("up", settings)
    if sockets is None:
        return 2
    from marketplace_devstack.embedded.supervisor import run_up

    settings = logging_from_settings(settings, interactive=stderr_is_terminal())
    if not settings.ray_address:
        from marketplace.actors.ray_env import prepare_local_ray_environment

        prepare_local_ray_environment()  # before Ray is imported, as `run_service` does
        from marketplace_devstack.embedded.ray_groups import ray_processes_in_own_groups

        ray_processes_in_own_groups()
    return run_up(
        settings,
        lambda s, ready, stopping: run_service(
            s, migrate=True, on_ready=ready, on_stopping=stopping, sockets=sockets
        ),
    )


def configure_up(up: argparse.ArgumentParser) -> None:
    """start embedded dependencies as needed, migrate, serve"""
    from marketplace.cli import HOST_HELP, PORT_HELP

    up.add_argument("--host", help=HOST_HELP)
    up.add_argument("--port", type=int, help=PORT_HELP)
    up.add_argument(
        "--data-dir",
        type=Path,
        help="where the embedded servers keep their data, created if missing "
        "(default: $MARKETPLACE_DATA_DIR, else ./.data)",
    )
    up.set_defaults(func=cmd_up)


def cmd_status(args: argparse.Namespace) -> int:
    from marketplace_devstack.embedded.state import print_status

    return print_status(as_json=args.json)


def configure_status(status: argparse.ArgumentParser) -> None:
    """show where `marketplace up` runs (exit 1: nowhere)"""
    status.add_argument(
        "--json", action="store_true", help="print the records as JSON (default: as text)"
    )
    status.set_defaults(func=cmd_status)


def configure_devnet(devnet: argparse.ArgumentParser) -> None:
    """drive the devnet of `marketplace up` (create, bid, dispute, seed, ...)"""
    from marketplace_devstack.devnet.cli import configure

    configure(devnet)
