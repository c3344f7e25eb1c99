"""The bounded command runners, on real processes: timeout kills the whole group, output is cut
and says so, the memory and CPU limits hold, node still starts under the memory limit, and the
environment carries nothing of the server's; the bubblewrap sandbox shows the command only its
work dir (writable), the system and the toolchains (read-only), its own processes, no network
and exactly the environment it is given, and the work dirs are removed whatever they hold."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marketplace.verifier.sandbox import (
    Limits,
    Sandbox,
    SandboxError,
    format_logs,
    minimal_env,
    run_bounded,
    run_sandboxed,
    sandbox_unavailable_reason,
    shim_interpreter,
)
from marketplace.verifier.workdirs import job_work_dir, remove_tree, sweep_stale
from tests.support.verifier_fixtures import LoopbackListener, processes_with

LIMITS = Limits(timeout_s=20, cpu_seconds=20, memory_mb=512, max_output_bytes=4096)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return status != "Z"


async def test_exit_code_and_output(tmp_path: Path) -> None:
    result = await run_bounded(
        ["sh", "-c", "echo out; echo err >&2; exit 3"],
        cwd=tmp_path,
        env=minimal_env(tmp_path),
        limits=LIMITS,
    )
    assert result.exit_code == 3 and not result.timed_out and not result.ok
    assert result.output == b"out\nerr\n"
    assert not result.truncated
    assert "[exit 3]" in format_logs([result])


async def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    result = await run_bounded(
        ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"],
        cwd=tmp_path,
        env=minimal_env(tmp_path),
        limits=Limits(timeout_s=1, cpu_seconds=20, memory_mb=512, max_output_bytes=4096),
    )
    assert time.monotonic() - started < 10
    assert result.timed_out and result.exit_code is None
    child = int(pid_file.read_text())
    for _ in range(100):  # SIGKILL is immediate; reaping by init may take a moment
        if not _alive(child):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child)
    assert "[killed: wall-clock timeout]" in format_logs([result])


async def test_output_is_bounded(tmp_path: Path) -> None:
    result = await run_bounded(
        ["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"],
        cwd=tmp_path,
        env=minimal_env(tmp_path),
        limits=LIMITS,
    )
    assert result.ok
    assert len(result.output) == 4096 and result.output_bytes == 100_000
    assert result.truncated
    assert "[output cut: 95904 of 100000 bytes not kept]" in format_logs([result])


async def test_memory_limit(tmp_path: Path) -> None:
    grab = "b = bytearray(600 * 1024 * 1024); print('allocated')"
    result = await run_bounded(
        [sys.executable, "-c", grab], cwd=tmp_path, env=minimal_env(tmp_path), limits=LIMITS
    )
    assert result.exit_code not in (0, None)
    assert b"MemoryError" in result.output
    small = await run_bounded(
        [sys.executable, "-c", grab.replace("600", "64")],
        cwd=tmp_path,
        env=minimal_env(tmp_path),
        limits=LIMITS,
    )
    assert small.ok and b"allocated" in small.output


async def test_cpu_limit(tmp_path: Path) -> None:
    result = await run_bounded(
        [sys.executable, "-c", "while True: pass"],
        cwd=tmp_path,
        env=minimal_env(tmp_path),
        limits=Limits(timeout_s=30, cpu_seconds=1, memory_mb=512, max_output_bytes=4096),
    )
    assert not result.timed_out
    assert result.exit_code is not None and result.exit_code < 0  # SIGXCPU


async def test_node_starts_and_uses_webassembly_under_the_memory_limit(tmp_path: Path) -> None:
    """The reason for RLIMIT_DATA over RLIMIT_AS: V8's address-space reservations."""
    script = "new WebAssembly.Memory({initial: 1}); console.log('wasm ok')"
    node = shutil.which("node")
    assert node is not None
    ok = await run_bounded(
        [node, "-e", script], cwd=tmp_path, env=minimal_env(tmp_path), limits=LIMITS
    )
    assert ok.ok and b"wasm ok" in ok.output
    hog = "const a = []; for (let i = 0; i < 2000; i++) a.push(Buffer.alloc(1 << 20, 1));"
    stopped = await run_bounded(
        [node, "-e", hog], cwd=tmp_path, env=minimal_env(tmp_path), limits=LIMITS
    )
    assert stopped.exit_code not in (0, None)


async def test_environment_holds_nothing_of_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKETPLACE_VERIFIER_PRIVATE_KEY", "0x" + "11" * 32)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    env = minimal_env(tmp_path / "home", path_dirs=["/opt/tool/bin"], extra={"CARGO_HOME": "/c"})
    result = await run_bounded(["env"], cwd=tmp_path, env=env, limits=LIMITS)
    seen = dict(line.split("=", 1) for line in result.output.decode().splitlines())
    assert "GITHUB_TOKEN" not in seen and "MARKETPLACE_VERIFIER_PRIVATE_KEY" not in seen
    assert seen["HOME"] == str(tmp_path / "home")
    assert seen["PATH"].startswith("/opt/tool/bin:")
    assert seen["CARGO_HOME"] == "/c"
    assert set(seen) <= {"HOME", "TMPDIR", "PATH", "LANG", "LC_ALL", "CI", "CARGO_HOME", "PWD"}


# --- the sandbox ---------------------------------------------------------------------------


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The sandbox's work dir, inside tmp_path (whose other files it must not see)."""
    path = tmp_path / "work"
    (path / "home").mkdir(parents=True)
    return path


async def _sandboxed(
    script: str, work: Path, *, limits: Limits = LIMITS, box: Sandbox | None = None
) -> tuple[int | None, str]:
    result = await run_sandboxed(
        ["sh", "-c", script],
        sandbox=box or Sandbox(work_dir=work),
        cwd=work,
        env=minimal_env(work / "home"),
        limits=limits,
    )
    return result.exit_code, result.output.decode()


def test_the_sandbox_runs_here() -> None:
    assert sandbox_unavailable_reason() is None


async def test_only_the_work_dir_is_visible_and_writable(tmp_path: Path, work: Path) -> None:
    (tmp_path / "secret.txt").write_text("do not read")
    tools = tmp_path / "toolchain"
    tools.mkdir()
    (tools / "tool").write_text("a tool")
    config = work / "config"
    config.mkdir()
    (config / "tool.toml").write_text("ours")
    box = Sandbox(work_dir=work, read_only=(str(tools),), protected=(str(config),))
    code, out = await _sandboxed(
        f"cat {tmp_path}/secret.txt; echo; ls {tmp_path}; cat {tools}/tool; echo;"
        f"echo x > {tools}/tool || echo tool-ro; echo x > {config}/tool.toml || echo config-ro;"
        "echo x > /usr/x || echo usr-ro; echo x > /etc/x || echo etc-ro;"
        f"echo written > {work}/out && cat {work}/out; ls /; ls /home /root/.cargo /work",
        work,
        box=box,
    )
    assert "do not read" not in out
    # tmp_path holds only the mount points of the binds.
    assert "\ntoolchain\nwork\n" in out
    assert "a tool" in out
    assert "tool-ro" in out and "config-ro" in out and "usr-ro" in out and "etc-ro" in out
    assert "written" in out and (work / "out").read_text() == "written\n"
    assert (config / "tool.toml").read_text() == "ours"
    assert "ls: cannot access '/home'" in out and "ls: cannot access '/work'" in out
    assert code != 0  # the last ls


async def test_the_environment_is_exactly_the_given_one(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKETPLACE_VERIFIER_PRIVATE_KEY", "0x" + "11" * 32)
    code, out = await _sandboxed("env; echo ---; cat /proc/1/environ; echo ---", work)
    assert code == 0
    assert "MARKETPLACE" not in out and "11" * 32 not in out
    seen = dict(line.split("=", 1) for line in out.split("---")[0].splitlines())
    assert set(seen) <= {"HOME", "TMPDIR", "PATH", "LANG", "LC_ALL", "CI", "PWD"}
    # bwrap's init (PID 1 here) started with an empty environment.
    assert out.split("---")[1].strip() == ""


async def test_own_processes_user_and_host_name(work: Path) -> None:
    code, out = await _sandboxed("ls /proc | grep -c '^[0-9]'; id -u; id -un; hostname", work)
    assert code == 0
    count, uid, user, host = out.split()
    assert int(count) <= 4  # init, sh, ls, grep
    assert (uid, user, host) == ("1000", "sandbox", "sandbox")


async def test_no_network(work: Path) -> None:
    listener = LoopbackListener()
    interpreter, _ = shim_interpreter()
    connect = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listener.port}), timeout=3)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
        "print(open('/proc/net/dev').read())\n"
    )
    try:
        result = await run_sandboxed(
            [interpreter, "-I", "-S", "-c", connect],
            sandbox=Sandbox(work_dir=work),
            cwd=work,
            env=minimal_env(work / "home"),
            limits=LIMITS,
        )
        out = result.output.decode()
        assert result.ok and "refused" in out and "CONNECTED" not in out
        # Only a loopback interface of its own.
        interfaces = [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]
        assert interfaces == ["lo"]
        assert listener.accepted() == 0
    finally:
        listener.close()


async def test_sandbox_timeout_kills_everything_in_it(work: Path) -> None:
    marker = f"mkt-timeout-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    result = await run_sandboxed(
        ["sh", "-c", f"setsid sh -c 'sleep 60; : {marker}' & sleep 60; : {marker}"],
        sandbox=Sandbox(work_dir=work),
        cwd=work,
        env=minimal_env(work / "home"),
        limits=Limits(timeout_s=1, cpu_seconds=20, memory_mb=512, max_output_bytes=4096),
    )
    assert time.monotonic() - started < 10
    assert result.timed_out and result.exit_code is None
    for _ in range(100):
        if not processes_with(marker):
            break
        await asyncio.sleep(0.05)
    assert processes_with(marker) == []


async def test_sandbox_limits(work: Path) -> None:
    code, _ = await _sandboxed(
        "while :; do :; done",
        work,
        limits=Limits(timeout_s=30, cpu_seconds=1, memory_mb=512, max_output_bytes=4096),
    )
    assert code == -24  # SIGXCPU: bwrap's 128 + 24, read as the signal
    code, _ = await _sandboxed(
        "head -c 2097152 /dev/zero > big",
        work,
        limits=Limits(
            timeout_s=30, cpu_seconds=10, memory_mb=512, max_output_bytes=4096, file_size_mb=1
        ),
    )
    assert code == -25  # SIGXFSZ
    assert (work / "big").stat().st_size == 1024 * 1024
    interpreter, _ = shim_interpreter()
    grab = await run_sandboxed(
        [interpreter, "-I", "-S", "-c", "b = bytearray(600 * 1024 * 1024)"],
        sandbox=Sandbox(work_dir=work),
        cwd=work,
        env=minimal_env(work / "home"),
        limits=LIMITS,
    )
    assert grab.exit_code not in (0, None) and b"MemoryError" in grab.output


async def test_sandbox_process_limit(work: Path) -> None:
    """The limit is set on every sandboxed command. The kernel does not enforce RLIMIT_NPROC
    for host uid 0 (docs/verifier.md, "The test policies"), so the forks fail only when the
    service runs unprivileged, as the image does (uid 10001)."""
    _, out = await _sandboxed(
        "grep 'Max processes' /proc/self/limits; for i in $(seq 40); do sleep 0.5 & done 2>&1;"
        " wait",
        work,
        limits=Limits(
            timeout_s=30, cpu_seconds=10, memory_mb=512, max_output_bytes=4096, processes=16
        ),
    )
    assert re.search(r"Max processes\s+16\s+16", out), out
    if os.getuid() != 0:
        assert "fork" in out.lower() or "resource" in out.lower(), out


async def test_a_sandbox_that_cannot_start_is_an_error(work: Path) -> None:
    with pytest.raises(SandboxError, match="bwrap could not start"):
        await run_sandboxed(
            ["true"],
            sandbox=Sandbox(work_dir=work, read_only=("/nonexistent/toolchain",)),
            cwd=work,
            env=minimal_env(work / "home"),
            limits=LIMITS,
        )


@pytest.fixture
def fresh_reason() -> Iterator[None]:
    sandbox_unavailable_reason.cache_clear()
    try:
        yield
    finally:
        sandbox_unavailable_reason.cache_clear()


def test_unavailable_without_bwrap(
    fresh_reason: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sandbox_unavailable_reason() == "bwrap not found (install the bubblewrap package)"


def test_unavailable_when_bwrap_fails(
    fresh_reason: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = sandbox_unavailable_reason()
    assert reason is not None and "Permission denied" in reason and "\n" not in reason


# --- work dirs -----------------------------------------------------------------------------


def test_job_work_dir_is_private_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with job_work_dir(root) as path:
        assert path.parent == root
        pid, _, token = path.name.partition("-")
        assert int(pid) == os.getpid() and len(token) == 16
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        # What npm and cargo leave: read-only directories with files in them.
        locked = path / "cache" / "locked"
        locked.mkdir(parents=True)
        (locked / "file").write_text("x")
        locked.chmod(0o500)
        (path / "cache").chmod(0o500)
    assert not path.exists()
    seen: list[Path] = []

    def fail() -> None:
        with job_work_dir(root) as failing:
            seen.append(failing)
            (failing / "file").write_text("x")
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        fail()
    assert not seen[0].exists()
    assert list(root.iterdir()) == []


def test_removal_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("keep")
    outside.chmod(0o555)
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    (work / "file-link").symlink_to(outside / "keep.txt")
    remove_tree(work)
    assert not work.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o555
    outside.chmod(0o755)


def test_removal_of_a_very_deep_tree(tmp_path: Path) -> None:
    top = tmp_path / "deep"
    # Deeper than Python's recursion limit (shutil.rmtree recurses per level).
    nest = "for i in $(seq 1500); do mkdir d && cd d || exit 1; done"
    subprocess.run(["sh", "-c", f"mkdir {top} && cd {top} && {nest}"], check=True)
    remove_tree(top)
    assert not top.exists()


def test_sweep_stale_removes_only_dead_processes_dirs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = root / f"{dead.pid}-{'a' * 16}"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub").chmod(0o500)
    mine = root / f"{os.getpid()}-{'b' * 16}"
    init = root / f"1-{'c' * 16}"
    other = root / "not-a-work-dir"
    for path in (mine, init, other):
        path.mkdir()
    assert sweep_stale(root) == 1
    assert sorted(p.name for p in root.iterdir()) == sorted([mine.name, init.name, other.name])
    assert sweep_stale(tmp_path / "missing") == 0


def test_a_work_root_of_someone_else_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    root = tmp_path / "root"
    root.symlink_to(target)
    with pytest.raises(RuntimeError, match="refusing"), job_work_dir(root):
        pass
