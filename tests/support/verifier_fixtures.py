"""Real components for the verifier policy tests: git repositories built with ``git`` in a temp
directory (served over ``file://`` and over git's "dumb" HTTP protocol by a local aiohttp
server), tiny npm and cargo projects with a passing and a failing commit, and a local HTTP server
with images, a mislabelled page, an oversized image, a flaky endpoint and redirects."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from marketplace.config import Settings
from marketplace.verifier.policy import PolicyContext, PolicySettings

# Fixed identity and dates: the same files give the same commit hashes on every run.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "Fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}

# 1x1 transparent PNG.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class GitRepo:
    """A bare repository at ``<root>/<owner>/<name>.git`` and a working clone to commit from."""

    root: Path
    owner: str
    name: str
    commits: dict[str, str] = field(default_factory=dict)

    @property
    def bare(self) -> Path:
        return self.root / self.owner / f"{self.name}.git"

    @property
    def work(self) -> Path:
        return self.root / "_work" / self.owner / self.name

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"

    def init(self) -> GitRepo:
        self.bare.mkdir(parents=True)
        git("init", "-q", "--bare", "-b", "main", str(self.bare), cwd=self.root)
        self.work.mkdir(parents=True)
        git("init", "-q", "-b", "main", cwd=self.work)
        return self

    def commit(self, label: str, files: dict[str, str], *, branch: str = "main") -> str:
        """Commit ``files`` (replacing the tree's files of those names) on ``branch``, push it,
        and remember the commit as ``label``."""
        git("checkout", "-q", "-B", branch, cwd=self.work)
        for path, content in files.items():
            target = self.work / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "--allow-empty", "-m", label, cwd=self.work)
        sha = git("rev-parse", "HEAD", cwd=self.work)
        git("push", "-q", "-f", str(self.bare), f"HEAD:refs/heads/{branch}", cwd=self.work)
        self.commits[label] = sha
        return sha

    def tag(self, name: str, sha: str, *, annotated: bool = False) -> None:
        extra = ["-a", "-m", name] if annotated else []
        git("tag", *extra, name, sha, cwd=self.work)
        git("push", "-q", str(self.bare), f"refs/tags/{name}", cwd=self.work)
        # The "dumb" HTTP protocol reads info/refs, which only this command writes.
        git("update-server-info", cwd=self.bare)

    def serve_info(self) -> None:
        git("update-server-info", cwd=self.bare)


PACKAGE_LOCK = {
    "name": "fixture",
    "version": "1.0.0",
    "lockfileVersion": 3,
    "requires": True,
    "packages": {"": {"name": "fixture", "version": "1.0.0"}},
}


def npm_files(test_js: str) -> dict[str, str]:
    package = {
        "name": "fixture",
        "version": "1.0.0",
        "private": True,
        "scripts": {"test": "node test.js"},
    }
    return {
        "package.json": json.dumps(package, indent=2) + "\n",
        "package-lock.json": json.dumps(PACKAGE_LOCK, indent=2) + "\n",
        "test.js": test_js,
    }


def npm_repo(root: Path) -> GitRepo:
    """Commits ``pass`` (tags ``v-pass`` and the annotated ``v-annotated``), ``fail`` (tag
    ``v-fail``, head of ``main``), ``hang`` (sleeps for a minute, branch ``hang``) and ``flood``
    (writes 300 kB, then passes; branch ``flood``)."""
    repo = GitRepo(root, "acme", "npm-fixture").init()
    passing = repo.commit("pass", npm_files("console.log('ok');\n"))
    repo.tag("v-pass", passing)
    repo.tag("v-annotated", passing, annotated=True)
    repo.tag(
        "v-fail",
        repo.commit("fail", npm_files("console.error('1 failing');\nprocess.exit(1);\n")),
    )
    repo.commit("hang", npm_files("setTimeout(() => {}, 60000);\n"), branch="hang")
    repo.commit(
        "flood",
        npm_files("process.stdout.write('x'.repeat(300000));\nconsole.log('done');\n"),
        branch="flood",
    )
    repo.serve_info()
    return repo


CARGO_TOML = """[package]
name = "fixture"
version = "0.1.0"
edition = "2021"

[dependencies]
"""


def cargo_repo(root: Path) -> GitRepo:
    """Commits ``pass`` (tag ``v-pass``) and ``fail`` (tag ``v-fail``), no dependencies."""
    repo = GitRepo(root, "acme", "cargo-fixture").init()
    lib = (
        "pub fn add(a: u32, b: u32) -> u32 {{ a + b }}\n\n"
        "#[test]\nfn adds() {{ assert_eq!(add(2, 2), {}); }}\n"
    )
    repo.tag("v-pass", repo.commit("pass", {"Cargo.toml": CARGO_TOML, "src/lib.rs": lib.format(4)}))
    repo.tag("v-fail", repo.commit("fail", {"src/lib.rs": lib.format(5)}))
    repo.serve_info()
    return repo


FOUNDRY_TOML = """[profile.default]
src = "src"
test = "test"
"""
COUNTER_SOL = """// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Counter {
    uint256 public count;

    function increment() external {
        count += 1;
    }
}
"""
COUNTER_TEST_SOL = """// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {{Counter}} from "../src/Counter.sol";

contract CounterTest {{
    function test_increment() public {{
        Counter counter = new Counter();
        counter.increment();
        require(counter.count() == {}, "count");
    }}
}}
"""


def forge_repo(root: Path) -> GitRepo:
    """A foundry project without libraries (no forge-std): commits ``pass`` (tag ``v-pass``)
    and ``fail`` (tag ``v-fail``)."""
    repo = GitRepo(root, "acme", "forge-fixture").init()
    files = {
        "foundry.toml": FOUNDRY_TOML,
        "src/Counter.sol": COUNTER_SOL,
        "test/Counter.t.sol": COUNTER_TEST_SOL.format(1),
    }
    repo.tag("v-pass", repo.commit("pass", files))
    repo.tag("v-fail", repo.commit("fail", {"test/Counter.t.sol": COUNTER_TEST_SOL.format(2)}))
    repo.serve_info()
    return repo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class WebFixture:
    """A running local HTTP server; ``url(path)`` is its address for ``path``."""

    base: str
    runner: web.AppRunner
    hits: dict[str, int]

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    @property
    def authority(self) -> str:
        return self.base.removeprefix("http://")


def web_app(git_root: Path | None, big_bytes: int) -> tuple[web.Application, dict[str, int]]:
    hits: dict[str, int] = {}

    @web.middleware
    async def count_hits(request: web.Request, handler: Any) -> web.StreamResponse:
        hits[request.path] = hits.get(request.path, 0) + 1
        response: web.StreamResponse = await handler(request)
        return response

    async def png(request: web.Request) -> web.Response:
        return web.Response(body=PNG_1X1, content_type="image/png")

    async def fake_png(request: web.Request) -> web.Response:
        return web.Response(
            body=b"<html><body>not an image</body></html>", content_type="image/png"
        )

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html></html>", content_type="text/html")

    async def big(request: web.Request) -> web.StreamResponse:
        # Streamed without a Content-Length: the policy must stop reading by itself.
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(PNG_1X1[:8])
        chunk = b"\0" * 65_536
        sent = 8
        while sent <= big_bytes:
            await response.write(chunk)
            sent += len(chunk)
        await response.write_eof()
        return response

    async def flaky(request: web.Request) -> web.Response:
        if hits[request.path] == 1:
            return web.Response(status=500, text="try again")
        return web.Response(body=PNG_1X1, content_type="image/png")

    async def figma(request: web.Request) -> web.Response:
        if request.match_info["key"] == "missing":
            return web.Response(status=404, text="not found")
        if request.match_info["key"] == "flaky" and hits[request.path] == 1:
            return web.Response(status=503, text="busy")
        return web.Response(text="<html>figma</html>", content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application(middlewares=[count_hits])
    app.router.add_get("/img/ok.png", png)
    app.router.add_get("/img/fake.png", fake_png)
    app.router.add_get("/img/page.html", html)
    app.router.add_get("/img/big.png", big)
    app.router.add_get("/img/flaky.png", flaky)
    app.router.add_get("/ipfs/{cid}/shot.png", png)
    app.router.add_get("/{kind:file|design|proto}/{key}/{rest:.*}", figma)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/loop", loop)
    if git_root is not None:
        # Git's "dumb" HTTP protocol: the bare repositories as static files.
        app.router.add_static("/git/", git_root)
    return app, hits


@asynccontextmanager
async def web_fixture(
    *, git_root: Path | None = None, big_bytes: int = 300_000, port: int = 0
) -> AsyncIterator[WebFixture]:
    app, hits = web_app(git_root, big_bytes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = port or free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield WebFixture(base=f"http://127.0.0.1:{port}", runner=runner, hits=hits)
    finally:
        await runner.cleanup()


def local_settings(**overrides: Any) -> Settings:
    """Settings for local fixtures: private hosts allowed (they are all on 127.0.0.1)."""
    values: dict[str, Any] = {
        "verifier_allow_private_hosts": True,
        "verifier_http_timeout_seconds": 10.0,
        "verifier_command_timeout_seconds": 120.0,
        "verifier_command_cpu_seconds": 120,
        "verifier_command_memory_mb": 2048,
    }
    values.update(overrides)
    return Settings(**values)


def context(tmp_path: Path, settings: Settings, rpc_url: str = "") -> PolicyContext:
    return PolicyContext(
        settings=PolicySettings.from_settings(settings), rpc_url=rpc_url, work_dir=tmp_path / "work"
    )
