"""Bounded command runners: :func:`run_sandboxed` for the code of a repository under test (its
tests, its build scripts, its tool configuration), :func:`run_bounded` for our own commands
(git fetching the repository, before any of its code runs).

**The sandbox** (:func:`run_sandboxed`) is bubblewrap (``bwrap``, at least 0.8.0) with:

- new user, PID, network, IPC, UTS (and, where the kernel allows, cgroup) namespaces; nested
  user namespaces disabled; every capability dropped; the command runs as uid/gid
  :data:`SANDBOX_UID` in its own session (``--new-session``: no ``TIOCSTI`` into a terminal);
- ``--die-with-parent``: bwrap gets ``SIGKILL`` when the process that started it dies, and when
  bwrap dies the PID namespace dies with every process in it. Killing the Ray actor that runs a
  policy kills its command. (The kernel ties this to the *thread* that started bwrap: asyncio
  starts it from the event loop's thread, which lives while the run is awaited.)
- a filesystem of its own: ``/usr`` (and the ``/bin``, ``/lib*``, ``/sbin`` links or
  directories) read-only, a few ``/etc`` files the toolchains read (``ld.so.cache``,
  ``alternatives``) plus generated ``passwd``, ``group``, ``hosts`` and ``nsswitch.conf``, a
  fresh ``/proc`` that shows only the sandbox's processes, a minimal ``/dev``, a private
  ``/tmp`` and ``/dev/shm`` (tmpfs of :data:`TMPFS_MB` and :data:`SHM_MB`), the toolchain paths
  the caller names (:attr:`Sandbox.read_only`) read-only, and the job's work dir, the only
  writable host directory, at its own path; the root and ``/dev`` themselves read-only.
  Nothing else of the host: no data dir, no ``/root``, ``/home``, ``/work``, no other job's
  directory;
- no network at all: the network namespace has only a loopback interface of its own;
- an empty environment (``--clearenv``) plus exactly the variables the caller gives; bwrap
  itself starts with an empty environment too, because its init process (PID 1 in the
  sandbox) would otherwise show the service's environment in ``/proc/1/environ``.

Limits, per command:

- a wall-clock timeout: the sandbox (bwrap's process group: bwrap and the sandbox's init) is
  killed with ``SIGKILL`` when it passes, which ends the PID namespace and everything in it
  (and the same after a normal exit, so a stray background child does not outlive the run);
- ``RLIMIT_CPU`` (soft limit, SIGXCPU; the hard limit 5 s later, SIGKILL) per process;
- ``RLIMIT_DATA`` as the memory limit, not ``RLIMIT_AS``: V8 reserves large ranges of address
  space it never touches (measured on node 20: ``RLIMIT_AS`` of 512 MiB stops node from
  starting, and even 4 GiB makes ``new WebAssembly.Memory`` fail, which solcjs and many test
  suites need), while ``RLIMIT_DATA`` counts the private writable memory a process actually
  maps (heap and anonymous mappings; a 256 MiB limit stops a node that allocates 2 GiB of
  buffers and still lets it start and use WebAssembly). Like every rlimit it is per process.
- ``RLIMIT_NPROC`` (sandboxed runs only). The kernel counts it per user namespace and uid, so
  inside the sandbox's own user namespace it bounds the sandbox's processes and threads, not
  the service's (measured: a limit of 20 stops the 19th fork). The kernel never enforces it for
  host uid 0 (``INIT_USER``): a service running as root gets no process limit, only the wall
  clock and the PID namespace's cleanup. The image runs as uid 10001 (deploy/Dockerfile).
- ``RLIMIT_FSIZE`` (sandboxed runs only): the largest file a process may write;
- ``RLIMIT_CORE`` 0.

The limits are set by a tiny Python shim that ``exec``s the command, not by ``preexec_fn``:
``preexec_fn`` is unsafe in a process with threads (a Ray worker has several). In the sandbox
the shim runs inside, after the user namespace exists (an ``RLIMIT_NPROC`` set before would
count the host uid's processes), with the base interpreter (a virtualenv's ``python`` is a
link to it), whose prefix is bound read-only when it is not under ``/usr``.

The output (stdout and stderr merged) is kept up to ``max_output_bytes``; the rest is read and
counted but dropped. A sandbox bwrap could not set up raises :class:`SandboxError` (the node's
fault, never the repository's): the shim reports through a pipe the command never holds that
it ran, so a command cannot pass its own failure off as the sandbox's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Sets the limits, then becomes the command. Runs with -I -S: no site, no environment hooks.
# A limit of 0 is left as it is. Never raises a limit above the current hard limit (that would
# fail): a host that already sets a lower one keeps it. Python ignores SIGPIPE and SIGXFSZ for
# itself and an ignored signal stays ignored across exec: the command gets the defaults back
# (so RLIMIT_FSIZE kills it, as it would any program). In the sandbox, once the limits are set,
# it writes to the start pipe (``start_fd``, from bwrap's parent) and closes it before the
# command runs: what shows that the sandbox was set up, which the command cannot fake or
# prevent.
_SHIM = """
import os, resource, signal, sys
def cap(kind, soft, hard):
    if not soft:
        return
    _, current = resource.getrlimit(kind)
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(kind, (soft, hard))
cpu, data, nproc, fsize, start_fd = (int(v) for v in sys.argv[1:6])
cap(resource.RLIMIT_CPU, cpu, cpu + 5)
cap(resource.RLIMIT_DATA, data, data)
cap(resource.RLIMIT_NPROC, nproc, nproc)
cap(resource.RLIMIT_FSIZE, fsize, fsize)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
if start_fd >= 0:
    os.write(start_fd, b"started\\n")
    os.close(start_fd)
try:
    os.execvpe(sys.argv[6], sys.argv[6:], os.environ)
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[6]}: {exc}\\n")
    os._exit(127)
"""

# After the group is killed, how long the pipe may take to reach EOF.
_DRAIN_GRACE_S = 5.0

# The uid and gid the command sees (mapped to the service's own uid: no privilege either way).
SANDBOX_UID = 1000
SANDBOX_HOSTNAME = "sandbox"
# The private /tmp. Tools write their temporary files under TMPDIR (in the work dir); this only
# keeps a program that insists on /tmp working, without letting it fill the node's memory.
TMPFS_MB = 256
# /dev/shm (POSIX shared memory), for the same reason and as small.
SHM_MB = 64
# Defaults of the two limits that have no setting of their own. Processes count threads too:
# cargo runs one rustc per core with several threads each.
DEFAULT_PROCESSES = 4096
DEFAULT_FILE_SIZE_MB = 4096

# System directories bound read-only (a merged-/usr system has links for the rest).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Host /etc files the toolchains read: the dynamic linker's cache and the alternatives links
# (/usr/bin/cc -> /etc/alternatives/cc -> gcc, which rustc links with). Nothing else of /etc.
_HOST_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_PROBE_TIMEOUT_S = 30.0


class SandboxError(RuntimeError):
    """bwrap could not set the sandbox up (the command never ran): the node's fault, not the
    repository's."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_seconds: int
    memory_mb: int
    max_output_bytes: int
    # Sandboxed runs only (see the module docstring).
    processes: int = DEFAULT_PROCESSES
    file_size_mb: int = DEFAULT_FILE_SIZE_MB


@dataclass(frozen=True)
class Sandbox:
    """What a sandboxed command may see besides the system directories."""

    # The only writable host directory, bound at its own path.
    work_dir: Path
    # Host paths (toolchains) bound read-only at their own paths.
    read_only: tuple[str, ...] = ()
    # Paths inside ``work_dir`` bound read-only over the writable bind (e.g. a generated tool
    # configuration the command must not change).
    protected: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    # None when the command was killed on the timeout; negative for "killed by that signal"
    # (in the sandbox bwrap reports a signal N as exit status 128 + N, as a shell does: such a
    # status is read as the signal).
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


def _shim_args(limits: Limits, *, start_fd: int | None = None) -> list[str]:
    """The shim's arguments; ``start_fd`` only in the sandbox, with the limits that apply
    only there."""
    sandboxed = start_fd is not None
    return [
        str(limits.cpu_seconds),
        str(limits.memory_mb * 1024 * 1024),
        str(limits.processes if sandboxed else 0),
        str(limits.file_size_mb * 1024 * 1024 if sandboxed else 0),
        str(start_fd if start_fd is not None else -1),
    ]


def limited_argv(argv: Iterable[str], limits: Limits) -> list[str]:
    """``argv`` behind the limits shim, outside any sandbox (our own commands)."""
    return [sys.executable, "-I", "-S", "-c", _SHIM, *_shim_args(limits), *argv]


@functools.cache
def shim_interpreter() -> tuple[str, str | None]:
    """The real base interpreter (not a virtualenv's link to it) and, when it lives outside
    the system directories, its installation prefix (bound read-only into the sandbox)."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    return executable, None if _under(prefix, _SYSTEM_DIRS) else prefix


def bwrap_path() -> str | None:
    found = shutil.which("bwrap")
    return os.path.realpath(found) if found else None


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _read_only_paths(sandbox: Sandbox, extra: Iterable[str]) -> list[str]:
    """Absolute, existing-or-not paths to bind read-only, without those the system binds
    already show nor those inside another one, parents first."""
    paths = sorted({os.path.normpath(os.path.abspath(p)) for p in (*sandbox.read_only, *extra)})
    kept: list[str] = []
    for path in paths:
        if path == "/" or _under(path, _SYSTEM_DIRS) or _under(path, kept):
            continue
        kept.append(path)
    return kept


def _generated_files(home: str) -> dict[str, bytes]:
    """Small /etc files of the sandbox's own: its user and group, localhost, files-only name
    lookup (the host's nsswitch.conf may name modules the sandbox does not have)."""
    uid = SANDBOX_UID
    return {
        "/etc/passwd": f"sandbox:x:{uid}:{uid}:sandbox:{home}:/usr/sbin/nologin\n".encode(),
        "/etc/group": f"sandbox:x:{uid}:\n".encode(),
        "/etc/hosts": f"127.0.0.1\tlocalhost {SANDBOX_HOSTNAME}\n::1\tlocalhost\n".encode(),
        "/etc/nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
    }


@dataclass
class _Prepared:
    argv: list[str]
    pass_fds: tuple[int, ...]
    # The start pipe's read end (see _SHIM).
    start_read: int
    # Every descriptor still open here. Each is closed exactly once: closing a number twice
    # could close another thread's file that reused it.
    open_fds: set[int] = field(default_factory=set)

    def close(self, fds: Iterable[int]) -> None:
        for fd in fds:
            if fd in self.open_fds:
                self.open_fds.discard(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)

    def close_passed(self) -> None:
        """The parent's copies of what bwrap inherited, once it runs."""
        self.close(self.pass_fds)


def sandbox_argv(
    command: Iterable[str],
    *,
    sandbox: Sandbox,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
    data_fds: Mapping[str, int],
    start_fd: int,
) -> list[str]:
    """The bwrap command line (the profile) that runs ``command`` behind the limits shim.
    ``data_fds``: for each generated file (:func:`_generated_files`), the descriptor bwrap
    reads it from; ``start_fd``: the start pipe's write end (see ``_SHIM``)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxError("bwrap not found (install the bubblewrap package)")
    interpreter, interpreter_prefix = shim_interpreter()
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        SANDBOX_HOSTNAME,
    ]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _HOST_ETC:
        argv += ["--ro-bind-try", path, path]
    for dest, fd in data_fds.items():
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(TMPFS_MB * 1024 * 1024), "--tmpfs", "/tmp"]
    extra = [interpreter_prefix] if interpreter_prefix else []
    for path in _read_only_paths(sandbox, extra):
        argv += ["--ro-bind", path, path]
    # After /tmp's tmpfs: the work dir usually lives under /tmp.
    work = str(sandbox.work_dir)
    argv += ["--bind", work, work]
    for path in sandbox.protected:
        argv += ["--ro-bind", path, path]
    # The root and /dev are tmpfs mounts bwrap made (of no size limit): read-only once set up,
    # so a command cannot fill the node's memory through them. Mounts on them (the work dir,
    # /tmp, /dev/shm, the device nodes) keep their own flags.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    argv += ["--chdir", str(cwd), "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--", interpreter, "-I", "-S", "-c", _SHIM, *_shim_args(limits, start_fd=start_fd)]
    return [*argv, *command]


@contextlib.contextmanager
def _prepare(
    command: tuple[str, ...], *, sandbox: Sandbox, cwd: Path, env: Mapping[str, str], limits: Limits
) -> Iterator[_Prepared]:
    """The bwrap argv for ``command`` and the pipes it reads (generated files, start), closed
    when the block ends."""
    fds: set[int] = set()
    try:
        data_fds: dict[str, int] = {}
        for dest, content in _generated_files(env.get("HOME", str(sandbox.work_dir))).items():
            read_end, write_end = os.pipe()
            fds.add(read_end)
            # Far below a pipe's buffer: the write never blocks.
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(content)
            data_fds[dest] = read_end
        start_read, start_write = os.pipe()
        fds |= {start_read, start_write}
        # Read after the exit: whatever is there by then.
        fcntl.fcntl(start_read, fcntl.F_SETFL, os.O_NONBLOCK)
        argv = sandbox_argv(
            command,
            sandbox=sandbox,
            cwd=cwd,
            env=env,
            limits=limits,
            data_fds=data_fds,
            start_fd=start_write,
        )
        prepared = _Prepared(
            argv=argv,
            pass_fds=(*data_fds.values(), start_write),
            start_read=start_read,
            open_fds=fds,
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    try:
        yield prepared
    finally:
        prepared.close(list(prepared.open_fds))


def _sandbox_started(prepared: _Prepared) -> bool:
    """Whether the shim wrote to the start pipe: bwrap set the sandbox up and the limits hold.
    (bwrap's own status reports its child's pid before the mounts, so it cannot say this.)"""
    data = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(prepared.start_read, 65_536):
            data += chunk
    return data.startswith(b"started\n")


def _exit_code(returncode: int | None) -> int | None:
    if returncode is not None and 128 < returncode <= 128 + 64:
        return -(returncode - 128)
    return returncode


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


async def _run(
    command: tuple[str, ...],
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
    pass_fds: tuple[int, ...] = (),
) -> CommandResult:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
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


async def run_bounded(
    argv: Iterable[str], *, cwd: Path, env: Mapping[str, str], limits: Limits
) -> CommandResult:
    """Run ``argv`` (our own command, e.g. git) under ``limits`` in its own process group,
    without a sandbox; never raises for the command's own failure (a nonzero exit, a signal,
    the timeout are all in the result). ``OSError`` if it cannot start."""
    command = tuple(argv)
    return await _run(command, limited_argv(command, limits), cwd=cwd, env=env, limits=limits)


async def run_sandboxed(
    argv: Iterable[str],
    *,
    sandbox: Sandbox,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
) -> CommandResult:
    """Run ``argv`` (code of the repository under test) in the sandbox under ``limits``, with
    exactly the environment ``env``, in ``cwd`` (inside ``sandbox.work_dir``). Never raises for
    the command's own failure (a nonzero exit, a signal, the timeout are in the result);
    :class:`SandboxError` when bwrap could not set the sandbox up (the command never ran),
    ``OSError`` when bwrap cannot start."""
    command = tuple(argv)
    with _prepare(command, sandbox=sandbox, cwd=cwd, env=env, limits=limits) as prepared:
        # bwrap gets an empty environment: see the module docstring (/proc/1/environ).
        result = await _run(
            command,
            prepared.argv,
            cwd=cwd,
            env={},
            limits=limits,
            pass_fds=prepared.pass_fds,
        )
        prepared.close_passed()
        if not _sandbox_started(prepared):
            text = result.output.decode("utf-8", errors="replace").strip()
            raise SandboxError(f"bwrap could not start the sandbox: {text[-500:]}")
    return CommandResult(
        argv=result.argv,
        exit_code=None if result.timed_out else _exit_code(result.exit_code),
        timed_out=result.timed_out,
        output=result.output,
        output_bytes=result.output_bytes,
        duration_ms=result.duration_ms,
    )


def sandbox_error(
    commands: Iterable[Iterable[str]],
    *,
    read_only: Iterable[str] = (),
    env: Callable[[Path], Mapping[str, str]] = minimal_env,
    timeout_s: float = _PROBE_TIMEOUT_S,
) -> str | None:
    """Run each of ``commands`` in a sandbox like the test policies' (a scratch work dir, the
    ``read_only`` paths, the environment ``env(home)`` gives for a HOME in the work dir); None
    when every one exits 0, else a one-line reason. Synchronous (availability checks are), so
    call it once and cache the answer."""
    limits = Limits(timeout_s=timeout_s, cpu_seconds=60, memory_mb=2048, max_output_bytes=4096)
    with tempfile.TemporaryDirectory(prefix="mkt-sandbox-probe-") as tmp:
        work = Path(tmp)
        home = work / "home"
        home.mkdir()
        environment = dict(env(home))
        sandbox = Sandbox(work_dir=work, read_only=tuple(read_only))
        for argv in commands:
            command = tuple(argv)
            try:
                with _prepare(
                    command, sandbox=sandbox, cwd=work, env=environment, limits=limits
                ) as p:
                    try:
                        done = subprocess.run(
                            p.argv,
                            env={},
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            pass_fds=p.pass_fds,
                            start_new_session=True,
                            timeout=timeout_s,
                            check=False,
                        )
                    except subprocess.TimeoutExpired:
                        return f"{' '.join(command)} timed out in the sandbox"
                    p.close_passed()
                    started = _sandbox_started(p)
            except (OSError, SandboxError) as exc:
                return f"cannot run bwrap: {exc}"
            if done.returncode != 0 or not started:
                lines = done.stdout.decode("utf-8", errors="replace").strip().splitlines()
                last = lines[-1] if lines else ""
                where = "the sandbox" if started else "bwrap"
                return f"{' '.join(command)} failed in {where} (exit {done.returncode}): {last}"
    return None


@functools.cache
def sandbox_unavailable_reason() -> str | None:
    """Why this node cannot run the test policies' sandbox, in one line, or None when a trivial
    run with the real profile (namespaces, mounts, the limits shim) succeeds. Probed once per
    process."""
    if bwrap_path() is None:
        return "bwrap not found (install the bubblewrap package)"
    interpreter, _ = shim_interpreter()
    return sandbox_error([[interpreter, "-I", "-S", "-c", "print('sandbox ok')"]])


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
