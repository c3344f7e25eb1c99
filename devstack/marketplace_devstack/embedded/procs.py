"""Small helpers shared by the embedded servers."""

from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
# File descriptors every embedded child inherits: the data-dir lock of `marketplace up`, so the
# lock stays held until the last process working on the data dir is gone.
_inherited_fds: set[int] = set()


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


def inherit_fd(fd: int) -> None:
    """Hand ``fd`` to every child started with :func:`child_options` from now on."""
    _inherited_fds.add(fd)


def forget_fd(fd: int) -> None:
    _inherited_fds.discard(fd)


def inherited_fds() -> tuple[int, ...]:
    return tuple(sorted(_inherited_fds))


def parent_death_signal(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to send ``sig`` to the child when its parent dies.

    Linux delivers it when the *thread* that forked the child exits, so start children from a
    thread that lives as long as the process (the main thread or the supervisor's).
    """
    if not sys.platform.startswith("linux"):
        return None
    # Bound here: after fork, only async-signal-safe work belongs in the child.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            # The parent died between fork and prctl: the signal will never come.
            os.kill(os.getpid(), sig)

    return preexec


def child_options(death_signal: int = signal.SIGTERM) -> dict[str, Any]:
    """``Popen`` keyword arguments for an embedded server: dies with us, holds our lock, and
    runs in a session of its own.

    The session keeps the server out of the terminal's foreground process group: Ctrl-C (and a
    SIGTERM sent to ``up``'s group) reaches ``up`` alone, which then stops the app before the
    servers it uses, in order. Were the servers to get the signal too, they would exit under the
    running app and the supervisor would see them die. Leaving the group costs no safety: the
    parent-death signal and the guardian (which remembers ``up``'s descendants) still stop
    them when ``up`` is killed.
    """
    return {
        "preexec_fn": parent_death_signal(death_signal),
        "pass_fds": inherited_fds(),
        "start_new_session": True,
    }


class SupervisedChild:
    """What the supervisor of ``up`` needs of a server we run as a child process: its pid, its
    exit status once it died on its own, and a restart on the same port (the URL others were
    given stays valid). Subclasses set ``_proc`` in ``start`` and clear it in ``stop``."""

    _proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def exit_status(self) -> int | None:
        """The exit code once the server has died on its own; None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    def restart(self) -> None:
        self.stop()
        self.start()
