"""The ``marketplace`` command line."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket
import sys
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import TYPE_CHECKING

from marketplace.cli_commands import CAPABILITY_COMMANDS, Command, plain_text
from marketplace.logs import configure_logging, use_json_logs

if TYPE_CHECKING:
    from marketplace.config import Settings

# Every command imports what it needs when it runs, not here: `marketplace serve` must start
# without loading web3's client (or the dev stack, which it never imports), and `--help` without
# loading even the settings (tests/unit/core/test_cli_imports.py checks).

# Commands other installed distributions add, as entry points of this group. The dev stack
# (devstack/, distribution marketplace-devstack) adds `up`, `status` and `devnet` this way: this
# package never imports it, and `serve` runs without it.
PLUGIN_GROUP = "marketplace.cli"
DEV_STACK_COMMANDS = ("up", "status", "devnet")
DEV_STACK_MISSING = (
    "needs the dev stack, which is not installed: pip install -e ./devstack "
    "(scripts/setup installs it); `marketplace serve` runs without it"
)

log = logging.getLogger("marketplace")

DISTRIBUTION = "marketplace"
VERSION_FLAG = "--version"


def version_line() -> str:
    """What ``marketplace --version`` prints: ``marketplace <version>``, the installed
    distribution's version (``unknown`` when the package runs from a tree it was never
    installed from)."""
    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:
        installed = "unknown"
    return f"marketplace {installed}"


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings, with the ``--host``, ``--port`` and ``--data-dir`` a command was given."""
    from marketplace.config import load_settings

    overrides = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    return load_settings(**overrides)


# As aiohttp's sites (web.TCPSite's default).
LISTEN_BACKLOG = 128


class PortUnavailable(Exception):
    """The API cannot listen where it was told to; the message says why, in one line."""


def claim_port(host: str, port: int) -> list[socket.socket]:
    """Listen on ``port`` at every address ``host`` resolves to, as aiohttp would (``SO_REUSEADDR``
    on; an IPv6 socket does not also claim IPv4), and return the sockets for the server to serve
    on. Raises :class:`PortUnavailable` (nothing left open) when it cannot. Port 0 (any free
    port) claims nothing: the server picks one.

    Claimed before anything starts (``serve``, ``up``): a busy port costs a second, not the start
    of every dependency and a traceback; and holding the port from then on means nothing else
    can take it while the dependencies start (a check that let go of it left a window of the
    whole start-up, about 10 s under ``up``). A client that connects meanwhile waits in the
    backlog until the service serves.
    """
    if port == 0:
        return []
    where = f"port {port} on {host}"
    elsewhere = "(set --host or MARKETPLACE_HOST, --port or MARKETPLACE_PORT)"
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot listen on {host}: {exc.strerror} {elsewhere}") from exc
    claimed: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(addresses):
            sock = socket.socket(family, kind, proto)
            claimed.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortUnavailable(
                        f"{where} is already in use (set --port or MARKETPLACE_PORT)"
                    ) from exc
                raise PortUnavailable(
                    f"cannot listen on {where}: {exc.strerror or exc} {elsewhere}"
                ) from exc
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in claimed:
            sock.close()
        raise
    return claimed


def claim_listening_port(command: str, settings: Settings) -> list[socket.socket] | None:
    """:func:`claim_port` for ``command``: the sockets, or None once the one-line reason it
    cannot listen is printed."""
    try:
        return claim_port(settings.host, settings.port)
    except PortUnavailable as problem:
        print(f"marketplace {command}: {problem}", file=sys.stderr)
        return None


def run_service(
    settings: Settings,
    *,
    migrate: bool,
    on_ready: Callable[[Settings], None] | None = None,
    on_stopping: Callable[[], None] | None = None,
    sockets: Sequence[socket.socket] = (),
) -> None:
    """Serve the API with ``settings`` until interrupted (``serve``; ``up`` once it has started
    what the settings lack); ``on_ready`` runs once it listens, ``on_stopping`` as soon as a
    signal asks it to stop (before the app's contexts stop). ``sockets``: the listening sockets
    :func:`claim_port` returned (none: listen on the settings' host and port now)."""
    if not settings.ray_address:
        from marketplace.actors.ray_env import prepare_local_ray_environment

        prepare_local_ray_environment()  # before anything imports Ray
    from marketplace.http.app import create_app
    from marketplace.http.server import serve
    from marketplace.storage.migrations import migrate_dsn

    if migrate:
        applied = asyncio.run(migrate_dsn(settings.database_url))
        log.info("migrations applied", extra={"applied": applied})
    app = create_app(settings)
    if on_stopping is not None:
        stopping = on_stopping

        async def shutting_down(_: object) -> None:
            stopping()

        # aiohttp runs these first when the runner cleans up, before any cleanup context.
        app.on_shutdown.append(shutting_down)

    def ready() -> None:
        log.info("serving", extra={"url": f"http://{settings.listen_address}/v1/"})
        if on_ready is not None:
            on_ready(settings)

    asyncio.run(serve(app, settings.host, settings.port, on_ready=ready, sockets=sockets))


def logging_from_settings(settings: Settings, *, interactive: bool = False) -> Settings:
    """Configure the log (``MARKETPLACE_LOG_LEVEL``, ``MARKETPLACE_LOG_FORMAT``,
    ``MARKETPLACE_LOG_JSON``; ``interactive``: a person watches, see
    :func:`marketplace.logs.use_json_logs`); returns the settings with ``log_json`` saying the
    format chosen, which the access log follows."""
    json_logs = use_json_logs(settings.log_format, settings.log_json, interactive=interactive)
    configure_logging(settings.log_level, json_logs)
    return settings.model_copy(update={"log_json": json_logs})


def cmd_serve(args: argparse.Namespace) -> int:
    settings = logging_from_settings(settings_from_args(args))
    required = {"database_url": settings.database_url, "redis_url": settings.redis_url}
    missing = [name for name, value in required.items() if not value]
    if not (settings.jwt_secret or settings.jwt_public_key or settings.jwks_url):
        missing.append("jwt_secret | jwt_public_key | jwks_url")
    if settings.notification_unsubscribe_secret is None:
        missing.append("notification_unsubscribe_secret")
    if missing:
        print(
            "serve uses external dependencies only; set "
            + ", ".join(f"MARKETPLACE_{m.upper()}" for m in missing)
            + " (or use `marketplace up` for embedded ones)",
            file=sys.stderr,
        )
        return 2
    sockets = claim_listening_port("serve", settings)
    if sockets is None:
        return 2
    run_service(settings, migrate=not args.skip_migrations, sockets=sockets)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from marketplace.storage.migrations import migrate_dsn

    settings = logging_from_settings(settings_from_args(args))
    if not settings.database_url:
        print("set MARKETPLACE_DATABASE_URL", file=sys.stderr)
        return 2
    applied = asyncio.run(migrate_dsn(settings.database_url))
    print(f"applied migrations: {applied or 'none (up to date)'}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from marketplace.auth import email_claim, issue_session_token
    from marketplace.config.data_dir import DataDirNotFound, locate_data_dir

    if args.email is not None and email_claim(args.email) != args.email:
        # The service would read such a claim as absent: the token would receive no e-mail.
        print(
            f"marketplace token: --email {args.email!r} is not an address (local@domain, "
            "no spaces, at most 320 characters)",
            file=sys.stderr,
        )
        return 2
    settings = settings_from_args(args)
    if settings.jwt_secret is not None:
        secret = settings.jwt_secret.get_secret_value()
    elif settings.jwt_public_key or settings.jwks_url:
        print("tokens can only be minted with a shared secret (HS256)", file=sys.stderr)
        return 2
    else:
        # Never a new secret here: a token the running server rejects helps nobody.
        try:
            data_dir = locate_data_dir(args.data_dir)
        except DataDirNotFound as exc:
            print(f"marketplace token: {exc}", file=sys.stderr)
            return 2
        secret_path = settings.model_copy(update={"data_dir": data_dir}).dev_secret_path
        try:
            secret = secret_path.read_text().strip()
        except FileNotFoundError:
            print(
                f"marketplace token: {data_dir} has no dev-jwt-secret: is it the data dir of a "
                "`marketplace up`? (`marketplace status` shows where one runs)",
                file=sys.stderr,
            )
            return 2
    print(
        issue_session_token(
            secret,
            args.user_id,
            email_verified=args.email_verified,
            ttl_seconds=args.ttl,
            now=int(time.time()),
            email=args.email,
        )
    )
    return 0


# The listen address flags of `serve` and `up` (the dev stack's `up` uses them too).
HOST_HELP = "address to listen on (default: $MARKETPLACE_HOST, else 127.0.0.1)"
PORT_HELP = "port to listen on (default: $MARKETPLACE_PORT, else 8080)"


def configure_serve(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", help=HOST_HELP)
    serve.add_argument("--port", type=int, help=PORT_HELP)
    serve.add_argument(
        "--skip-migrations",
        action="store_true",
        help="do not apply pending database migrations first (default: apply them)",
    )
    serve.set_defaults(func=cmd_serve)


def configure_migrate(mig: argparse.ArgumentParser) -> None:
    mig.set_defaults(func=cmd_migrate)


def configure_token(token: argparse.ArgumentParser) -> None:
    from marketplace.config.data_dir import DATA_DIR_HELP

    token.add_argument(
        "--user-id",
        type=uuid.UUID,
        required=True,
        metavar="UUID",
        help="the user the token signs in (its sub claim); required",
    )
    token.add_argument(
        "--email",
        metavar="ADDRESS",
        help="the user's e-mail address (the email claim): notifications go there once the "
        "service has seen a request with the token (default: none, so no e-mail is sent)",
    )
    token.add_argument(
        "--email-verified",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the email_verified claim: guarded calls need it true, and the service records "
        "--email only from a verified token (default: --email-verified)",
    )
    token.add_argument(
        "--ttl",
        type=int,
        default=3600,
        metavar="SECONDS",
        help="lifetime of the token, in seconds (default: 3600)",
    )
    token.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    token.set_defaults(func=cmd_token)


def configure_group(group: argparse.ArgumentParser) -> None:
    """A command group: its sub-commands are the commands declared with ``parent=<its name>``,
    added by :func:`build_parser`."""


CORE_COMMANDS: tuple[Command, ...] = (
    Command("serve", "serve against external dependencies only", f"{__name__}:configure_serve"),
    Command("migrate", "apply database migrations", f"{__name__}:configure_migrate"),
    Command(
        "token",
        "print a session JWT signed with the dev secret",
        f"{__name__}:configure_token",
    ),
    Command(
        "admin",
        "operator commands: permission flags, leaderboard categories",
        f"{__name__}:configure_group",
    ),
)


def plugin_commands(*, described: bool = True) -> tuple[Command, ...]:
    """The commands installed distributions add (entry points of :data:`PLUGIN_GROUP`; the dev
    stack's first, in :data:`DEV_STACK_COMMANDS` order). An entry point names the command's
    ``configure(parser)``, in a module that imports nothing heavy; its help is the first line of
    that function's docstring, read (the module imported) only when ``described``:
    ``marketplace --help`` lists them, ``marketplace serve`` imports none."""
    found = []
    for entry in entry_points(group=PLUGIN_GROUP):
        help_ = ""
        if described:
            help_ = (entry.load().__doc__ or "").strip().partition("\n")[0]
        found.append(Command(entry.name, help_, f"{entry.module}:{entry.attr}"))

    def order(command: Command) -> tuple[int, str]:
        known = command.name in DEV_STACK_COMMANDS
        return (
            DEV_STACK_COMMANDS.index(command.name) if known else len(DEV_STACK_COMMANDS),
            command.name,
        )

    return tuple(sorted(found, key=order))


def commands(*, described: bool = True) -> tuple[Command, ...]:
    """The top-level commands: the core's, then each capability's, in the registry's order, then
    those of installed plugins (:func:`plugin_commands`)."""
    return (
        *CORE_COMMANDS,
        *(c for cmds in CAPABILITY_COMMANDS.values() for c in cmds if c.parent is None),
        *plugin_commands(described=described),
    )


def subcommands(parent: str) -> tuple[Command, ...]:
    """The commands of the group ``parent``, in the registry's order."""
    return tuple(c for cmds in CAPABILITY_COMMANDS.values() for c in cmds if c.parent == parent)


def invoked_command(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (the top-level
    parser has no option taking a value, so no option's value can be mistaken for it)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(configured: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``marketplace`` parser. Every command is listed (``marketplace --help``), but only
    those in ``configured`` (all when None) get their arguments: configuring a command imports
    its module, and ``main`` configures just the one being run."""
    parser = argparse.ArgumentParser(prog="marketplace", description=plain_text(__doc__ or ""))
    # Listed in --help; main() answers it before building a parser (see there).
    parser.add_argument(
        VERSION_FLAG, action="version", version=version_line(), help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # Plugins' help texts only for a listing: reading one imports its module.
    listed = commands(described=configured is None or not configured)
    missing = [name for name in DEV_STACK_COMMANDS if name not in {c.name for c in listed}]
    if missing:
        parser.epilog = f"{', '.join(missing)}: {DEV_STACK_MISSING}"
    for command in listed:
        command_parser = sub.add_parser(
            command.name, help=command.help, description=plain_text(command.help)
        )
        if configured is None or command.name in configured:
            configure = command.load()
            if not command_parser.description:
                # A plugin's help is its configure function's docstring, loaded only now.
                first_line = (configure.__doc__ or "").strip().partition("\n")[0]
                command_parser.description = plain_text(first_line) or None
            configure(command_parser)
            children = subcommands(command.name)
            if children:
                actions = command_parser.add_subparsers(
                    dest=f"{command.name}_command", required=True
                )
                for child in children:
                    child.load()(
                        actions.add_parser(
                            child.name, help=child.help, description=plain_text(child.help)
                        )
                    )
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    command = invoked_command(argv)
    if command is None and VERSION_FLAG in argv:
        # Before anything else: a parser without a command lists every command, and reading the
        # plugins' help texts imports their modules. `--version` imports nothing of ours.
        print(version_line())
        return 0
    installed = {c.name for c in plugin_commands(described=False)}
    if command in DEV_STACK_COMMANDS and command not in installed:
        print(f"marketplace {command}: {DEV_STACK_MISSING}", file=sys.stderr)
        return 2
    args = build_parser(() if command is None else (command,)).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
