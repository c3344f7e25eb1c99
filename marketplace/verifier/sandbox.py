"""A bounded command runner for the test policies (``npm test``, ``cargo test``, ``forge test``).

Each command runs in its own session (process group) with stdin closed, stdout and stderr merged
into one pipe, and:

- a wall-clock timeout: the whole process group is killed with SIGKILL when it passes (and
  after a normal exit too, so a stray background child does not outlive the run). A child that
  starts its own session escapes the group; the CPU limit still bounds it.
- ``RLIMIT_CPU`` (soft limit, SIGXCPU; the hard limit 5 s later, SIGKILL) per process;
- ``RLIMIT_DATA`` as the memory limit, not ``RLIMIT_AS``: V8 reserves large ranges of address
  space it never touches (measured on node 20: ``RLIMIT_AS`` of 512 MiB stops node from
  starting, and even 4 GiB makes ``new WebAssembly.Memory`` fail, which solcjs and many test
  suites need), while ``RLIMIT_DATA`` counts the private writable memory a process actually
  maps (heap and anonymous mappings; a 256 MiB limit stops a node that allocates 2 GiB of
  buffers and still lets it start and use WebAssembly). Like every rlimit it is per process.
- ``RLIMIT_CORE`` 0.

The limits are set by a tiny Python shim that ``exec``s the command, not by ``preexec_fn``:
``preexec_fn`` is unsafe in a process with threads (a Ray worker has several).

The output is kept up to ``max_output_bytes``; the rest is read and counted but dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Sets the limits, then becomes the command. Runs with -I -S: no site, no environment hooks.
_SHIM = """
import os, resource, sys
cpu, data = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
resource.setrlimit(resource.RLIMIT_DATA, (data, data))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
try:
    os.execvpe(sys.argv[3], sys.argv[3:], os.environ)
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[3]}: {exc}\\n")
    os._exit(127)
"""

# After the group is killed, how long the pipe may take to reach EOF.
_DRAIN_GRACE_S = 5.0


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_seconds: int
    memory_mb: int
    max_output_bytes: int


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    # None when the command was killed on the timeout; negative for "killed by that signal".
    exit_code: int | None
    timed_out: bool
    output: bytes
    # Everything the command wrote, counted even past the bound.
    output_bytes: int
    duration_ms: int

    @property
    def truncated(self) -> bool:
        return self.output_bytes > len(self.output)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def minimal_env(
    home: Path, *, path_dirs: Iterable[str] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """An environment with nothing inherited: ``HOME`` and ``TMPDIR`` under ``home``, a ``PATH``
    of ``path_dirs`` then the system directories, a UTF-8 locale, ``CI=true`` (tools stay
    non-interactive), plus ``extra``. No token, key or credential of the server can leak."""
    dirs: list[str] = []
    for d in [*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"]:
        if d and d not in dirs:
            dirs.append(d)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PATH": ":".join(dirs),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CI": "true",
    }
    env.update(extra or {})
    return env


def limited_argv(argv: Iterable[str], limits: Limits) -> list[str]:
    data_bytes = limits.memory_mb * 1024 * 1024
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _SHIM,
        str(limits.cpu_seconds),
        str(data_bytes),
        *argv,
    ]


class _Sink:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.kept = bytearray()
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(65_536)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.bound - len(self.kept)
            if room > 0:
                self.kept.extend(chunk[:room])


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_bounded(
    argv: Iterable[str], *, cwd: Path, env: Mapping[str, str], limits: Limits
) -> CommandResult:
    """Run ``argv`` under ``limits``; never raises for the command's own failure (a nonzero
    exit, a signal, the timeout are all in the result). ``OSError`` if it cannot start."""
    command = tuple(argv)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *limited_argv(command, limits),
        cwd=str(cwd),
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    sink = _Sink(limits.max_output_bytes)
    reader = asyncio.ensure_future(sink.drain(proc.stdout))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout=limits.timeout_s)
        except TimeoutError:
            timed_out = True
    finally:
        # Also on cancellation: nothing the command started may outlive the run.
        _kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()
    duration_ms = int((time.monotonic() - started) * 1000)
    # A child in its own session may still hold the pipe; then keep what was read so far.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, timeout=_DRAIN_GRACE_S)
    return CommandResult(
        argv=command,
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        output=bytes(sink.kept),
        output_bytes=sink.total,
        duration_ms=duration_ms,
    )


def format_logs(results: Iterable[CommandResult]) -> str:
    """The commands' output for the logs, each under a ``$ command`` line, with a note where the
    output was cut."""
    parts: list[str] = []
    for result in results:
        parts.append(f"$ {' '.join(result.argv)}\n")
        parts.append(result.output.decode("utf-8", errors="replace"))
        if result.truncated:
            parts.append(
                f"\n[output cut: {result.output_bytes - len(result.output)} of "
                f"{result.output_bytes} bytes not kept]\n"
            )
        if result.timed_out:
            parts.append("\n[killed: wall-clock timeout]\n")
        else:
            parts.append(f"\n[exit {result.exit_code}]\n")
    return "".join(parts)
