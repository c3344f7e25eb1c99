"""An embedded SMTP server (``aiosmtpd``) that writes every message it receives to a directory.

``marketplace up`` starts it when ``MARKETPLACE_SMTP_URL`` is unset, so notification e-mails of a
local run land in ``<data-dir>/mail/`` as ``.eml`` files instead of going anywhere. It runs as a
child process (``python -m marketplace_devstack.embedded.smtp``) like the other embedded servers:
loopback only, on a free port, dies with ``up`` and is restarted on the same port by the stack's
watcher.

Each message is one file named ``<UTC time>-<sequence>-<random>.eml`` (names sort in arrival
order), written to a temporary name and renamed into place, so a reader never sees half a
message. The message is stored as received, after a ``Return-Path`` and a ``Delivered-To``
header per envelope recipient (as a local delivery agent adds them).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from marketplace_devstack.embedded.procs import SupervisedChild, child_options, free_port

MAIL_DIR = "mail"
START_TIMEOUT_SECONDS = 15.0
# Largest message accepted (notification e-mails are a few KiB).
MAX_MESSAGE_BYTES = 10 * 1024 * 1024


class MailDirWriter:
    """An aiosmtpd handler writing each message to ``directory`` as an ``.eml`` file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._sequence = itertools.count()

    def file_name(self) -> str:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        return f"{stamp}-{next(self._sequence) % 1_000_000:06d}-{secrets.token_hex(4)}.eml"

    def write(self, mail_from: str, rcpt_tos: list[str], content: bytes) -> Path:
        trace = f"Return-Path: <{mail_from}>\r\n".encode()
        for rcpt in rcpt_tos:
            trace += f"Delivered-To: {rcpt}\r\n".encode()
        name = self.file_name()
        final = self.directory / name
        partial = self.directory / f".{name}.tmp"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(trace + content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, final)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return final

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or b""
        try:
            await asyncio.to_thread(
                self.write, envelope.mail_from or "", list(envelope.rcpt_tos), content
            )
        except OSError:
            return "451 4.3.0 cannot store the message now"
        return "250 OK"


async def serve(directory: Path, host: str, port: int) -> None:
    """Run the server until SIGTERM or SIGINT."""
    from aiosmtpd.smtp import SMTP

    handler = MailDirWriter(directory)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(
            handler,
            hostname="localhost",
            data_size_limit=MAX_MESSAGE_BYTES,
            enable_SMTPUTF8=True,
        ),
        host=host,
        port=port,
        reuse_address=True,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(args.dir, args.host, args.port))
    return 0


class EmbeddedSmtp(SupervisedChild):
    label = "smtp"

    def __init__(self, data_dir: Path, *, port: int = 0) -> None:
        self.data_dir = data_dir.resolve()
        self.mail_dir = self.data_dir / MAIL_DIR
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> str:
        self.mail_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.data_dir / "smtp.log"
        # The child imports this module; make the dev stack importable whatever its cwd is
        # (devstack/, the directory that holds marketplace_devstack/).
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "marketplace_devstack.embedded.smtp",
                    "--dir",
                    str(self.mail_dir),
                    "--port",
                    str(self.port),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                **child_options(signal.SIGTERM),
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _greets(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"embedded smtp did not start; see {log_path}")
            time.sleep(0.05)
        return self.url

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedSmtp:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _greets(port: int) -> bool:
    """True once an SMTP server on ``port`` sends its 220 greeting."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            greeting = conn.recv(512)
            conn.sendall(b"QUIT\r\n")
            return greeting.startswith(b"220")
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
