"""``npm-test``, ``cargo-test``, ``forge-test``: fetch the repository at the ref (depth 1, no
submodules) into a scratch directory and run the project's tests under the sandbox's limits
(:mod:`marketplace.verifier.sandbox`).

The wall-clock budget ``verifier_command_timeout_seconds`` covers the fetch and every command
together. The result is deterministic for a given commit and configuration: exit 0 of every
command passes; a nonzero exit, a signal (the CPU limit) or the timeout is ``passes: false``
with the reason in the evidence. Durations and output go to ``raw`` and the logs, never to the
evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marketplace.verifier.net import HostNotFound, HostRefused
from marketplace.verifier.policies import gitrepo
from marketplace.verifier.policies.tooling import Tooling, probe
from marketplace.verifier.policy import PolicyContext, PolicyOutcome, TransientPolicyError
from marketplace.verifier.sandbox import (
    CommandResult,
    Limits,
    format_logs,
    minimal_env,
    run_bounded,
)


@dataclass(frozen=True)
class TestCommand:
    # What the evidence calls it ("npm test"), and the argv after the tool's path.
    label: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class TestSuite:
    policy: str
    tool: Callable[[Tooling], str | None]
    commands: tuple[TestCommand, ...]
    env: Callable[[Tooling, Path], dict[str, str]]


def _npm_env(tools: Tooling, home: Path) -> dict[str, str]:
    return {
        "npm_config_cache": str(home / ".npm"),
        "npm_config_update_notifier": "false",
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "npm_config_progress": "false",
    }


def _cargo_env(tools: Tooling, home: Path) -> dict[str, str]:
    # A CARGO_HOME of its own: the server's may hold registry tokens (credentials.toml).
    env = {"CARGO_HOME": str(home / ".cargo"), "CARGO_TERM_COLOR": "never"}
    if tools.rustup_home:
        env["RUSTUP_HOME"] = tools.rustup_home
    return env


def _forge_env(tools: Tooling, home: Path) -> dict[str, str]:
    # The node's solc (native or the solcjs shim), never a download (FOUNDRY_OFFLINE). The
    # shim is one compiler version (the `solc` npm package's): a project pinning another
    # version fails to compile, which is a negative result, not a transient one.
    env = {"FOUNDRY_OFFLINE": "true", "NO_COLOR": "1"}
    if tools.solc:
        env["FOUNDRY_SOLC"] = tools.solc
    if tools.solcjs_module:
        env["SOLCJS_MODULE"] = tools.solcjs_module
    return env


NPM = TestSuite(
    policy="npm-test",
    tool=lambda t: t.npm if t.node else None,
    commands=(
        TestCommand("npm ci", ("ci", "--no-audit", "--no-fund")),
        TestCommand("npm test", ("test",)),
    ),
    env=_npm_env,
)
CARGO = TestSuite(
    policy="cargo-test",
    tool=lambda t: t.cargo,
    commands=(TestCommand("cargo test", ("test",)),),
    env=_cargo_env,
)
FORGE = TestSuite(
    policy="forge-test",
    tool=lambda t: t.forge if t.solc else None,
    commands=(TestCommand("forge test", ("test",)),),
    env=_forge_env,
)


def suite_available(suite: TestSuite) -> bool:
    tools = probe()
    return tools.git is not None and suite.tool(tools) is not None


def _limits(ctx: PolicyContext, timeout_s: float) -> Limits:
    s = ctx.settings
    return Limits(
        timeout_s=timeout_s,
        cpu_seconds=s.verifier_command_cpu_seconds,
        memory_mb=s.verifier_command_memory_mb,
        max_output_bytes=s.verifier_max_log_bytes,
    )


async def run_suite(suite: TestSuite, ref: gitrepo.RepoRef, ctx: PolicyContext) -> PolicyOutcome:
    tools = probe()
    tool = suite.tool(tools)
    if tools.git is None or tool is None:
        # Another node may have it: the job is retried, never passed without running.
        raise TransientPolicyError(f"{suite.policy} is not available on this node")
    settings = ctx.settings
    budget = settings.verifier_command_timeout_seconds
    deadline = time.monotonic() + budget
    scratch = gitrepo.scratch_dir(ctx, f"{suite.policy}-")
    home = scratch / "home"
    home.mkdir()
    checkout = scratch / "src"
    evidence: dict[str, Any] = {
        "policy": suite.policy,
        "repository": ref.slug,
        "repositoryUrl": ref.url,
        "ref": ref.ref,
        "limits": {
            "timeoutMs": int(budget * 1000),
            "cpuSeconds": settings.verifier_command_cpu_seconds,
            "memoryMb": settings.verifier_command_memory_mb,
        },
    }
    try:
        resolved, missing = await gitrepo.resolve(ref, ctx, home)
        if resolved is None:
            evidence.update(commit=None, commands=[], reason=missing)
            return PolicyOutcome(passes=False, evidence=evidence)
        commit = await gitrepo.fetch_commit(
            ref,
            resolved,
            ctx,
            home,
            checkout,
            checkout=True,
            timeout_s=max(1.0, deadline - time.monotonic()),
        )
    except HostNotFound as exc:
        # The git host is the deployment's own setting: a name that does not resolve is DNS
        # trouble to retry, not the delivery's fault.
        raise TransientPolicyError(str(exc)) from exc
    except HostRefused as exc:
        evidence.update(commit=None, commands=[], reason="host_refused")
        return PolicyOutcome(passes=False, evidence=evidence, raw={"error": str(exc)})
    except gitrepo.RepositoryNotFound as exc:
        evidence.update(commit=None, commands=[], reason="ref_not_found")
        return PolicyOutcome(passes=False, evidence=evidence, raw={"error": str(exc)})
    except OSError as exc:
        raise TransientPolicyError(f"fetching {ref.url}: {exc}") from exc
    evidence.update(commit=resolved.commit, refName=resolved.ref_name)
    env = minimal_env(home, path_dirs=tools.path_dirs(), extra=suite.env(tools, home))
    results: list[CommandResult] = []
    reason = "passed"
    for command in suite.commands:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = "timeout"
            break
        result = await run_bounded(
            [tool, *command.args], cwd=checkout, env=env, limits=_limits(ctx, remaining)
        )
        results.append(result)
        if result.timed_out:
            reason = "timeout"
            break
        if result.exit_code != 0:
            reason = "signal" if (result.exit_code or 0) < 0 else "exit_nonzero"
            break
    evidence.update(
        commands=[
            {"command": command.label, "exitCode": result.exit_code, "timedOut": result.timed_out}
            for command, result in zip(suite.commands, results, strict=False)
        ],
        reason=reason,
    )
    raw = {
        "commit": commit,
        "commands": [
            {
                "argv": list(result.argv),
                "exitCode": result.exit_code,
                "durationMs": result.duration_ms,
                "outputBytes": result.output_bytes,
                "outputTruncated": result.truncated,
            }
            for result in results
        ],
    }
    logs = format_logs(results)
    return PolicyOutcome(
        passes=reason == "passed", evidence=evidence, raw=raw, logs=_bound(logs, settings)
    )


def _bound(logs: str, settings: Any) -> str:
    limit = settings.verifier_max_log_bytes
    data = logs.encode()
    if len(data) <= limit:
        return logs
    note = f"\n[logs cut to {limit} bytes of {len(data)}]\n".encode()
    return data[: max(0, limit - len(note))].decode("utf-8", errors="ignore") + note.decode()
