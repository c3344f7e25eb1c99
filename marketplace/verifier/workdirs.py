"""Work directories of policy runs: ``<root>/<pid>-<random>``, one per run, mode 0700.

:func:`job_work_dir` creates one and removes it however the run ends; :func:`sweep_stale`
removes those a killed process left (its pid is in the name). The test policies' sandbox
(:mod:`marketplace.verifier.sandbox`) sees only its run's directory, writable; everything in it
was written by the repository's code, so removal never follows a symbolic link and makes
read-only directories (npm's and cargo's caches have some) writable first.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

WORK_ROOT = Path(tempfile.gettempdir()) / "marketplace-verifier"
_NAME = re.compile(r"(\d+)-[0-9a-f]{16}")


def _root(root: Path | None) -> Path:
    """``root`` (default :data:`WORK_ROOT`), created 0700 if missing. In a shared ``/tmp``
    another user could have created it first (or a link in its place): then it is refused."""
    base = root if root is not None else WORK_ROOT
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(f"{base} is not a directory of this user: refusing to use it")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(base, 0o700)
    return base


@contextlib.contextmanager
def job_work_dir(root: Path | None = None) -> Iterator[Path]:
    """A new directory ``<root>/<pid>-<random>`` (mode 0700), removed when the block ends,
    whatever way it ends."""
    path = _root(root) / f"{os.getpid()}-{secrets.token_hex(8)}"
    path.mkdir(mode=0o700)
    # mkdir's mode passes through the umask: say it exactly.
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        remove_tree(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True


def sweep_stale(root: Path | None = None) -> int:
    """Remove the work directories whose process is gone; how many were removed. A live
    process's directory is never touched (nor anything not named like a work directory)."""
    base = root if root is not None else WORK_ROOT
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        remove_tree(Path(entry.path))
        if not os.path.lexists(entry.path):
            removed += 1
    return removed


def _make_dirs_writable(top: Path) -> None:
    """u+rwx on ``top`` and every directory below it, never through a symbolic link: each is
    opened with ``O_PATH | O_NOFOLLOW``, checked to be a directory, and changed through
    ``/proc/self/fd`` (Linux has no ``lchmod``). Iterative: a hostile tree may be deep."""
    stack = [str(top)]
    while stack:
        path = stack.pop()
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode):
                continue
            if info.st_mode & 0o700 != 0o700:
                with contextlib.suppress(OSError):
                    os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(info.st_mode) | 0o700)
        finally:
            os.close(fd)
        try:
            with os.scandir(path) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything in it without following symbolic links, after making
    its directories writable. Falls back to ``rm -rf`` for what Python's recursive removal
    cannot reach (a tree deeper than the recursion limit, or than PATH_MAX)."""
    if not os.path.lexists(path):
        return
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        path.unlink()
        return
    _make_dirs_writable(path)
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        # rm -rf removes what it can reach and also never follows links.
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
