"""The bounded command runner, on real processes: timeout kills the whole group, output is cut
and says so, the memory and CPU limits hold, node still starts under the memory limit, and the
environment carries nothing of the server's."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from marketplace.verifier.sandbox import Limits, format_logs, minimal_env, run_bounded

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
