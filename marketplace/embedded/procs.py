"""Small helpers shared by the embedded servers."""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import stat
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def read_or_create_secret(path: Path, nbytes: int = 32) -> str:
    """A secret generated once and kept in the data dir (mode 0600)."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value


def unprivileged_user() -> str | None:
    """The OS user to run PostgreSQL as when we are root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("MARKETPLACE_EMBEDDED_OS_USER", "nobody")
    pwd.getpwnam(name)
    return name


def check_traversable(path: Path) -> None:
    """As root, the unprivileged user must be able to reach the data dir through its parents."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise RuntimeError(
                f"{parent} is not searchable by other users, so the embedded PostgreSQL (which "
                "cannot run as root) cannot reach its data there; use --data-dir elsewhere, "
                "e.g. under /tmp or /var/lib"
            )


def chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)
