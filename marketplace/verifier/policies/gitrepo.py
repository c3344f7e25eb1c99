"""Git repository references (``https://HOST/OWNER/REPO[.git]@REF`` or ``OWNER/REPO@REF``):
parsing, resolving the ref with ``git ls-remote``, and fetching one commit.

Every git command runs with a minimal environment (no credentials, no global or system config,
no terminal prompt), redirects off, only the protocols the base URL needs, and the host's
checked address pinned with ``http.curloptResolve`` (:mod:`marketplace.verifier.net`).

Failures: a git error is transient unless its message says the repository or the ref does not
exist. A transient error mistaken for "not found" would sign a wrong verdict; the reverse only
costs a retry.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from yarl import URL

from marketplace.verifier.net import (
    HostRefused,
    check_bracketed_host,
    check_host_form,
    ip_literal,
    resolve_checked,
)
from marketplace.verifier.policies.tooling import probe
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    PolicyContext,
    PolicySettings,
    TransientPolicyError,
)
from marketplace.verifier.sandbox import CommandResult, Limits, minimal_env, run_bounded

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# ls-remote prints one ref per line; a repository with many tags needs more than a log's bound.
_GIT_OUTPUT_BYTES = 4 * 1024 * 1024
_NOT_FOUND = (
    "repository not found",
    "does not appear to be a git repository",
    "could not read username",  # GitHub answers 401 for a repository that does not exist
    "authentication failed",
    "returned error: 404",
    "not our ref",
    "couldn't find remote ref",
)
_NOT_FOUND_RE = re.compile(r"repository '.*' not found")


class RepositoryNotFound(Exception):
    """The git host answered that the repository (or the wanted object) does not exist."""


@dataclass(frozen=True)
class RepoRef:
    owner: str
    repo: str
    ref: str
    # Where git fetches it from: ``<verifier_git_base_url>/OWNER/REPO.git``.
    url: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.repo}"


@dataclass(frozen=True)
class ResolvedRef:
    # refs/heads/..., refs/tags/... or None for a commit named by its hash.
    ref_name: str | None
    kind: str  # branch | tag | ref | commit
    commit: str


def _authority(url: URL) -> str:
    host = (url.host or "").lower()
    return host if url.explicit_port is None else f"{host}:{url.explicit_port}"


def _check_name(value: str, what: str) -> str:
    if not _NAME.fullmatch(value) or value in (".", ".."):
        raise InvalidDeliveryRef(f"{what} {value!r} is not a repository name")
    return value


def _check_ref(ref: str) -> str:
    if (
        not _REF.fullmatch(ref)
        or ".." in ref
        or "//" in ref
        or ref.endswith(("/", ".", ".lock"))
        or "@{" in ref
    ):
        raise InvalidDeliveryRef(f"{ref!r} is not a git ref (branch, tag or full commit hash)")
    return ref


def _parse_url(text: str) -> URL:
    """yarl reads brackets, ports and the like lazily: a malformed one must be the client's 400
    here, not a ValueError later."""
    check_bracketed_host(text)
    try:
        url = URL(text)
        _ = (url.host, url.port, url.path, url.user, url.password)
    except ValueError as exc:
        raise InvalidDeliveryRef(f"not a URL: {exc}") from None
    return url


def parse_repo_ref(text: str, settings: PolicySettings) -> RepoRef:
    value = text.strip()
    if not value or any(c.isspace() for c in value) or "@" not in value:
        raise InvalidDeliveryRef("expected OWNER/REPO@REF or https://HOST/OWNER/REPO[.git]@REF")
    location, ref = value.rsplit("@", 1)
    base = URL(settings.verifier_git_base_url)
    if "://" in location:
        url = _parse_url(location)
        schemes = ("https", "http") if settings.verifier_allow_private_hosts else ("https",)
        if url.scheme not in schemes:
            raise InvalidDeliveryRef(f"the repository URL must be {' or '.join(schemes)}://")
        check_host_form(url)
        if base.scheme == "file" or _authority(url) != _authority(base):
            raise InvalidDeliveryRef(
                f"repositories are fetched from {settings.verifier_git_base_url}; "
                "use OWNER/REPO@REF or a URL on that host"
            )
        if url.user or url.password or url.query_string or url.fragment:
            raise InvalidDeliveryRef("the repository URL may not carry credentials or a query")
        path = url.path.strip("/")
    else:
        path = location
    parts = path.split("/")
    if len(parts) != 2:
        raise InvalidDeliveryRef(f"{path!r} is not OWNER/REPO")
    owner, repo = parts
    repo = repo.removesuffix(".git")
    _check_name(owner, "owner")
    _check_name(repo, "repository")
    return RepoRef(
        owner=owner,
        repo=repo,
        ref=_check_ref(ref),
        url=f"{settings.verifier_git_base_url}/{owner}/{repo}.git",
    )


async def transport_args(url: str, settings: PolicySettings) -> list[str]:
    """``git -c`` options for fetching ``url``: protocols, no redirects, the checked address
    pinned. Raises :class:`HostRefused` for a private host or ``file://`` when private hosts are
    not allowed."""
    parsed = URL(url)
    allow_private = settings.verifier_allow_private_hosts
    args = ["-c", "http.followRedirects=false", "-c", "credential.helper="]
    if parsed.scheme == "file":
        if not allow_private:
            raise HostRefused("file:// repositories are read only when private hosts are allowed")
        return [*args, "-c", "protocol.allow=never", "-c", "protocol.file.allow=always"]
    if parsed.scheme not in ("https", "http") or not parsed.host:
        raise HostRefused(f"{parsed.scheme}:// repositories are not fetched")
    args += ["-c", "protocol.allow=never", "-c", f"protocol.{parsed.scheme}.allow=always"]
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    addresses = await resolve_checked(parsed.host, port, allow_private=allow_private)
    if ip_literal(parsed.host) is None:
        # Every checked address (curl falls back through them), and no others.
        pinned = ",".join(a if ":" not in a else f"[{a}]" for a in addresses)
        args += ["-c", f"http.curloptResolve={parsed.host}:{port}:{pinned}"]
    return args


def git_env(home: Path, settings: PolicySettings) -> dict[str, str]:
    protocols = "https:http:file" if settings.verifier_allow_private_hosts else "https"
    return minimal_env(
        home,
        path_dirs=probe().path_dirs(),
        extra={
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ALLOW_PROTOCOL": protocols,
            "GIT_PROTOCOL_FROM_USER": "0",
        },
    )


def git_limits(settings: PolicySettings, timeout_s: float) -> Limits:
    return Limits(
        timeout_s=timeout_s,
        cpu_seconds=settings.verifier_command_cpu_seconds,
        memory_mb=settings.verifier_command_memory_mb,
        max_output_bytes=_GIT_OUTPUT_BYTES,
    )


def _failure(result: CommandResult, what: str) -> Exception:
    text = result.output.decode("utf-8", errors="replace")
    lowered = text.lower()
    if not result.timed_out and (
        any(p in lowered for p in _NOT_FOUND) or _NOT_FOUND_RE.search(lowered)
    ):
        return RepositoryNotFound(text.strip()[-500:])
    reason = "timed out" if result.timed_out else f"exit {result.exit_code}"
    return TransientPolicyError(f"{what} failed ({reason}): {text.strip()[-500:]}")


async def _git(
    args: list[str], *, cwd: Path, env: dict[str, str], limits: Limits, what: str
) -> str:
    git = probe().git
    if git is None:
        raise TransientPolicyError("git is not installed on this node")
    result = await run_bounded([git, *args], cwd=cwd, env=env, limits=limits)
    if not result.ok:
        raise _failure(result, what)
    return result.output.decode("utf-8", errors="replace")


def scratch_dir(ctx: PolicyContext, prefix: str) -> Path:
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=ctx.work_dir))


async def ls_remote(ref: RepoRef, ctx: PolicyContext, home: Path) -> dict[str, str]:
    """The remote's refs named like ``ref.ref`` (and ``HEAD``), peeled tags as ``name^{}``.
    Raises :class:`RepositoryNotFound`, :class:`HostRefused`, :class:`TransientPolicyError`."""
    settings = ctx.settings
    transport = await transport_args(ref.url, settings)
    # The peeled entry of an annotated tag matches only a pattern that names it.
    patterns = ["HEAD"] if _COMMIT.fullmatch(ref.ref) else [ref.ref, f"{ref.ref}^{{}}"]
    output = await _git(
        [*transport, "ls-remote", "--", ref.url, *patterns],
        cwd=home,
        env=git_env(home, settings),
        limits=git_limits(settings, settings.verifier_http_timeout_seconds),
        what="git ls-remote",
    )
    refs: dict[str, str] = {}
    for line in output.splitlines():
        sha, _, name = line.partition("\t")
        if _COMMIT.fullmatch(sha) and name:
            refs[name] = sha
    return refs


def match_ref(wanted: str, refs: dict[str, str]) -> ResolvedRef | None:
    """git's own precedence (gitrevisions): ``refs/NAME``, then tags, then branches."""
    for name in (wanted, f"refs/tags/{wanted}", f"refs/heads/{wanted}"):
        if name.startswith("refs/") and name in refs:
            kind = (
                "tag"
                if name.startswith("refs/tags/")
                else "branch"
                if name.startswith("refs/heads/")
                else "ref"
            )
            return ResolvedRef(
                ref_name=name, kind=kind, commit=refs.get(f"{name}^{{}}", refs[name])
            )
    return None


async def fetch_commit(
    ref: RepoRef,
    resolved: ResolvedRef | None,
    ctx: PolicyContext,
    home: Path,
    into: Path,
    *,
    checkout: bool,
    timeout_s: float,
) -> str:
    """Fetch one commit (depth 1) into a new repository at ``into``; the commit's hash.

    A ref that was resolved is fetched by name and checked against what ls-remote said (a ref
    that moved in between is transient); a bare commit hash is fetched by hash.
    """
    settings = ctx.settings
    env = git_env(home, settings)
    limits = git_limits(settings, timeout_s)
    transport = await transport_args(ref.url, settings)
    await _git(["init", "-q", str(into)], cwd=home, env=env, limits=limits, what="git init")
    wanted = resolved.ref_name if resolved and resolved.ref_name else ref.ref
    fetch = ["fetch", "-q", "--depth=1", "--no-tags", "--", ref.url, wanted]
    await _git(
        [*transport, "-C", str(into), *fetch],
        cwd=home,
        env=env,
        limits=limits,
        what="git fetch",
    )
    commit = (
        await _git(
            ["-C", str(into), "rev-parse", "--verify", "FETCH_HEAD^{commit}"],
            cwd=home,
            env=env,
            limits=limits,
            what="git rev-parse",
        )
    ).strip()
    if resolved is not None and commit != resolved.commit:
        raise TransientPolicyError(f"{wanted} moved while fetching ({resolved.commit} -> {commit})")
    if resolved is None and commit != ref.ref:
        raise RepositoryNotFound(f"fetched {commit}, not {ref.ref}")
    if checkout:
        await _git(
            ["-C", str(into), "-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD"],
            cwd=home,
            env=env,
            limits=limits,
            what="git checkout",
        )
    return commit


async def resolve(
    ref: RepoRef, ctx: PolicyContext, home: Path
) -> tuple[ResolvedRef | None, str | None]:
    """The resolved ref, or None with the reason (``repository_not_found``, ``ref_not_found``).

    A full commit hash that is no ref's name is checked by fetching it (depth 1) into a scratch
    repository: ls-remote lists only ref tips.
    """
    try:
        refs = await ls_remote(ref, ctx, home)
    except RepositoryNotFound:
        return None, "repository_not_found"
    matched = match_ref(ref.ref, refs)
    if matched is not None or not _COMMIT.fullmatch(ref.ref):
        return matched, None if matched else "ref_not_found"
    try:
        commit = await fetch_commit(
            ref,
            None,
            ctx,
            home,
            Path(tempfile.mkdtemp(prefix="probe-", dir=home)),
            checkout=False,
            timeout_s=ctx.settings.verifier_command_timeout_seconds,
        )
    except RepositoryNotFound:
        return None, "ref_not_found"
    return ResolvedRef(ref_name=None, kind="commit", commit=commit), None
