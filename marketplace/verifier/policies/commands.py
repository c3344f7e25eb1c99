"""``npm-test``, ``cargo-test``, ``forge-test``: fetch the repository at the ref (depth 1, no
submodules) into a scratch directory with our own git (outside the sandbox, through the SSRF
guard), then run the project's tests in the sandbox (:mod:`marketplace.verifier.sandbox`): the
scratch directory is the only writable one, the suite's toolchain is visible read-only, there
is no network, and the environment is exactly what :func:`run_suite` gives.

The wall-clock budget ``verifier_command_timeout_seconds`` covers the fetch and every command
together. The result is deterministic for a given commit and configuration: exit 0 of every
command passes; a nonzero exit, a signal (the CPU limit) or the timeout is ``passes: false``
with the reason in the evidence. Durations and output go to ``raw`` and the logs, never to the
evidence.

A suite is offered only when its tools also run inside the sandbox (probed once per process
and toolset): a sandbox that cannot run them would otherwise sign a negative verdict for code
that never ran.
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import stat
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, cast

from marketplace.types import JsonObject
from marketplace.verifier.net import HostNotFound, HostRefused
from marketplace.verifier.policies import gitrepo
from marketplace.verifier.policies.tooling import Tooling, probe
from marketplace.verifier.policy import PolicyContext, PolicyOutcome, TransientPolicyError
from marketplace.verifier.sandbox import (
    CommandResult,
    Limits,
    Sandbox,
    SandboxError,
    format_logs,
    minimal_env,
    run_sandboxed,
    sandbox_error,
    sandbox_unavailable_reason,
)


@dataclass(frozen=True)
class TestCommand:
    # What the evidence calls it ("npm test"), and the argv after the tool's path.
    label: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Prepared:
    """What a suite adds once the checkout exists: environment variables, and files inside the
    work dir that the sandbox shows read-only."""

    env: dict[str, str] = field(default_factory=dict)
    protected: tuple[str, ...] = ()


@dataclass(frozen=True)
class TestSuite:
    policy: str
    tool: Callable[[Tooling], str | None]
    commands: tuple[TestCommand, ...]
    env: Callable[[Tooling, Path], dict[str, str]]
    # Host paths the tools need in the sandbox (bound read-only).
    toolchain: Callable[[Tooling], list[str]]
    # Commands that must exit 0 in the sandbox for the suite to be offered.
    probes: Callable[[Tooling], list[list[str]]]
    # Runs on the checkout (and the scratch dir) before the commands.
    prepare: Callable[[Path, Path], Prepared] | None = None


def _npm_env(tools: Tooling, home: Path) -> dict[str, str]:
    # offline: there is no network in the sandbox; npm fails at once on a dependency that is
    # not vendored instead of retrying the registry until the timeout.
    return {
        "npm_config_cache": str(home / ".npm"),
        "npm_config_offline": "true",
        "npm_config_update_notifier": "false",
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "npm_config_progress": "false",
    }


def _cargo_env(tools: Tooling, home: Path) -> dict[str, str]:
    # A CARGO_HOME of its own: the server's may hold registry tokens (credentials.toml).
    # CARGO_NET_OFFLINE: no network in the sandbox; fail at once, not after retries.
    env = {
        "CARGO_HOME": str(home / ".cargo"),
        "CARGO_TERM_COLOR": "never",
        "CARGO_NET_OFFLINE": "true",
    }
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


# forge's configuration keys the repository may not set, compared without case, "-" and "_"
# (foundry reads kebab-case and camelCase keys as snake_case). `extends` would pull in another
# file's values, which the rewrite below does not see.
_FORGE_FORCED = {"ffi", "fspermissions", "extends"}
#: A value :mod:`tomllib` gives (and :func:`toml_dumps` writes back).
TomlValue: TypeAlias = (
    str
    | int
    | float
    | bool
    | datetime.datetime
    | datetime.date
    | datetime.time
    | list["TomlValue"]
    | dict[str, "TomlValue"]
)
TomlTable: TypeAlias = dict[str, TomlValue]
# What every profile gets: no ffi; the cheatcodes' file access only inside the checkout
# (forge resolves "./" against the project root and refuses paths that leave it, links too).
_FORGE_PROFILE_FORCED: TomlTable = {
    "ffi": False,
    "fs_permissions": [{"access": "read-write", "path": "./"}],
}
# A foundry.toml larger than this is not read (a configuration is a few kB).
_FORGE_CONFIG_MAX_BYTES = 1024 * 1024


def _forced_key(key: str) -> bool:
    return key.lower().replace("-", "").replace("_", "") in _FORGE_FORCED


def _strip_forced(value: TomlValue) -> TomlValue:
    """``value`` without any forced key, at any depth (a profile may sit in a legacy top-level
    table; stripping everywhere needs no list of which tables are profiles)."""
    if isinstance(value, dict):
        return {k: _strip_forced(v) for k, v in value.items() if not _forced_key(k)}
    if isinstance(value, list):
        return [_strip_forced(v) for v in value]
    return value


def _read_no_follow(path: Path) -> bytes | None:
    """The file at ``path`` if it is a regular file (not a link: the repository could point it
    at a host file this process, outside the sandbox, would read), at most the bound."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _FORGE_CONFIG_MAX_BYTES:
            return None
        return handle.read(_FORGE_CONFIG_MAX_BYTES + 1)


def forge_config(checkout: Path) -> str:
    """The foundry.toml forge runs with (``FOUNDRY_CONFIG``): the repository's, parsed, with
    ``ffi``, ``fs_permissions`` and ``extends`` removed everywhere, then every profile (and
    ``default``, always) given ffi off and file access to the checkout only. foundry ignores
    ``FOUNDRY_FFI`` and ``FOUNDRY_FS_PERMISSIONS`` (measured on forge 1.7: the file wins), so the
    file is the only lever. A file that does not parse (or is a link) gives the forced keys
    alone, on forge's defaults."""
    raw = _read_no_follow(checkout / "foundry.toml")
    document: TomlTable = {}
    if raw is not None and len(raw) <= _FORGE_CONFIG_MAX_BYTES:
        try:
            document = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            document = {}
    document = cast(TomlTable, _strip_forced(document))
    profiles = document.get("profile")
    if not isinstance(profiles, dict):
        profiles = {}
    for name, profile in list(profiles.items()):
        profiles[name] = (
            {**profile, **_FORGE_PROFILE_FORCED}
            if isinstance(profile, dict)
            else {**_FORGE_PROFILE_FORCED}
        )
    # Every profile is a table by now (the loop above made it one).
    default = cast(TomlTable, profiles.get("default", {}))
    profiles["default"] = {**default, **_FORGE_PROFILE_FORCED}
    document["profile"] = profiles
    return toml_dumps(document)


def _toml_string(value: str) -> str:
    out = ['"']
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _toml_value(value: TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise TypeError(f"not a TOML value: {type(value).__name__}")


def toml_dumps(document: TomlTable) -> str:
    """TOML for what :mod:`tomllib` parsed: one ``[table]`` per top-level table (profiles as
    ``[profile."name"]``), everything below inline. Only for our own rewrite of a foundry.toml
    (the standard library reads TOML but does not write it)."""
    lines: list[str] = []
    for key, value in document.items():
        if not isinstance(value, dict):
            lines.append(f"{_toml_string(key)} = {_toml_value(value)}")
    for key, value in document.items():
        if not isinstance(value, dict):
            continue
        if key == "profile":
            for name, profile in value.items():
                lines.append(f"\n[profile.{_toml_string(name)}]")
                table = cast(TomlTable, profile)  # forge_config made every profile a table
                lines += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in table.items()]
            continue
        lines.append(f"\n[{_toml_string(key)}]")
        lines += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _prepare_forge(checkout: Path, scratch: Path) -> Prepared:
    """Write the rewritten configuration beside the checkout (read-only in the sandbox) and
    point forge at it. ``FOUNDRY_CONFIG`` is set in the environment, so the repository's
    ``.env`` (which forge loads without overriding what is set) cannot point elsewhere."""
    config_dir = scratch / "forge-config"
    config_dir.mkdir(exist_ok=True)
    config = config_dir / "foundry.toml"
    config.write_text(forge_config(checkout))
    return Prepared(env={"FOUNDRY_CONFIG": str(config)}, protected=(str(config_dir),))


def _versions(*tools: str | None) -> list[list[str]]:
    return [[tool, "--version"] for tool in tools if tool is not None]


NPM = TestSuite(
    policy="npm-test",
    tool=lambda t: t.npm if t.node else None,
    commands=(
        TestCommand("npm ci", ("ci", "--no-audit", "--no-fund")),
        TestCommand("npm test", ("test",)),
    ),
    env=_npm_env,
    toolchain=lambda t: t.node_paths(),
    probes=lambda t: _versions(t.node, t.npm),
)
CARGO = TestSuite(
    policy="cargo-test",
    tool=lambda t: t.cargo,
    commands=(TestCommand("cargo test", ("test",)),),
    env=_cargo_env,
    toolchain=lambda t: t.cargo_paths(),
    probes=lambda t: _versions(t.cargo),
)
FORGE = TestSuite(
    policy="forge-test",
    tool=lambda t: t.forge if t.solc else None,
    commands=(TestCommand("forge test", ("test",)),),
    env=_forge_env,
    toolchain=lambda t: t.forge_paths(),
    probes=lambda t: _versions(t.forge, t.solc),
    prepare=_prepare_forge,
)


@functools.cache
def _runs_in_sandbox(suite: TestSuite, tools: Tooling) -> str | None:
    """Why the suite's tools do not run in the sandbox (one line), or None. Cached per suite
    and toolset: the tools' own probe is cached the same way."""
    return sandbox_error(
        suite.probes(tools),
        read_only=suite.toolchain(tools),
        env=lambda home: minimal_env(
            home, path_dirs=tools.path_dirs(), extra=suite.env(tools, home)
        ),
    )


def suite_available(suite: TestSuite) -> bool:
    """The suite's tools are on this node, the sandbox runs, and the tools run in it: never
    offered where its commands would run unsandboxed, or not at all."""
    tools = probe()
    if tools.git is None or suite.tool(tools) is None:
        return False
    if sandbox_unavailable_reason() is not None:
        return False
    return _runs_in_sandbox(suite, tools) is None


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
    unavailable = sandbox_unavailable_reason()
    if unavailable is not None:
        # Never run unsandboxed: another node may have a working sandbox.
        raise TransientPolicyError(f"{suite.policy}: the sandbox does not run here ({unavailable})")
    settings = ctx.settings
    budget = settings.verifier_command_timeout_seconds
    deadline = time.monotonic() + budget
    scratch = gitrepo.scratch_dir(ctx, f"{suite.policy}-")
    home = scratch / "home"
    home.mkdir()
    checkout = scratch / "src"
    evidence: JsonObject = {
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
    prepared = suite.prepare(checkout, scratch) if suite.prepare else Prepared()
    env = minimal_env(
        home, path_dirs=tools.path_dirs(), extra={**suite.env(tools, home), **prepared.env}
    )
    # The scratch dir (checkout, HOME, TMPDIR) is the only writable host directory.
    sandbox = Sandbox(
        work_dir=scratch,
        read_only=tuple(suite.toolchain(tools)),
        protected=prepared.protected,
    )
    results: list[CommandResult] = []
    reason = "passed"
    for command in suite.commands:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = "timeout"
            break
        try:
            result = await run_sandboxed(
                [tool, *command.args],
                sandbox=sandbox,
                cwd=checkout,
                env=env,
                limits=_limits(ctx, remaining),
            )
        except (SandboxError, OSError) as exc:
            # The node's fault (the command never ran): retried, never a verdict.
            raise TransientPolicyError(f"{suite.policy}: {exc}") from exc
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
    raw: JsonObject = {
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
