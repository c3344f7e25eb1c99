"""A local anvil devnet process (the binary from the ``@foundry-rs/anvil`` npm package).

anvil writes its cache under ``$HOME/.foundry``, so the child runs with ``HOME`` set to the data
directory. Its log goes to ``<data_dir>/anvil.log``. The kernel sends anvil SIGTERM when the
process that started it dies, so no orphaned anvil keeps writing its state.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from marketplace_devstack.embedded.procs import SupervisedChild, child_options, free_port

ANVIL_BIN_ENV = "MARKETPLACE_ANVIL_BIN"
# devstack/marketplace_devstack/devnet/anvil.py: the repository is three levels up.
REPO_ROOT = Path(__file__).resolve().parents[3]
NPM_ANVIL_BIN = REPO_ROOT / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"

# anvil's default mnemonic ("test test ... junk"); accounts 0..9 are funded with 10000 ETH.
ANVIL_MNEMONIC = "test test test test test test test test test test test junk"


class AnvilError(RuntimeError):
    """anvil could not be found or did not start."""


def find_anvil_binary() -> Path:
    """``$MARKETPLACE_ANVIL_BIN`` if set, else the npm-installed binary under
    ``node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil``, else ``anvil`` on ``PATH``."""
    override = os.environ.get(ANVIL_BIN_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise AnvilError(f"{ANVIL_BIN_ENV}={override} is not an executable file")
        return path
    if NPM_ANVIL_BIN.is_file() and os.access(NPM_ANVIL_BIN, os.X_OK):
        return NPM_ANVIL_BIN
    found = shutil.which("anvil")
    if found:
        return Path(found)
    raise AnvilError(
        f"anvil not found: set {ANVIL_BIN_ENV}, run `npm install` at the repository root, "
        "or put anvil on PATH"
    )


class AnvilProcess(SupervisedChild):
    """Start/stop one anvil devnet.

    ``port=0`` picks a free port at :meth:`start`. ``block_time=None`` mines a block per
    transaction (automine); a number mines on that interval in seconds. anvil's output goes to
    :attr:`log_path`; ``silent=True`` passes ``--silent`` (startup/errors only, no per-tx log).
    """

    label = "anvil"

    def __init__(
        self,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        chain_id: int = 31337,
        block_time: float | None = None,
        *,
        binary: Path | None = None,
        startup_timeout: float = 15.0,
        silent: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.chain_id = chain_id
        self.block_time = block_time
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.silent = silent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def rpc_url(self) -> str:
        if not self.port:
            raise AnvilError("anvil has no port yet; call start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "anvil.log"

    def command(self) -> list[str]:
        binary = self.binary or find_anvil_binary()
        cmd = [
            str(binary),
            "--host", self.host,
            "--port", str(self.port),
            "--chain-id", str(self.chain_id),
        ]  # fmt: skip
        if self.block_time is not None:
            cmd += ["--block-time", _format_seconds(self.block_time)]
        if self.silent:
            cmd.append("--silent")
        return cmd

    def start(self) -> str:
        """Launch anvil and wait until it answers ``eth_chainId``; returns :attr:`rpc_url`."""
        if self.running:
            return self.rpc_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        env = dict(os.environ, HOME=str(self.data_dir))
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.data_dir,
                **child_options(signal.SIGTERM),
            )
        except BaseException:
            log.close()
            raise
        self._log = log
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.rpc_url

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AnvilError(
                    f"anvil exited with code {self._proc.returncode}; see {self.log_path}"
                )
            try:
                chain_id = rpc_call(self.rpc_url, "eth_chainId", [], timeout=1.0)
            except (OSError, urllib.error.URLError, ValueError):
                chain_id = None
            if chain_id is not None:
                if not isinstance(chain_id, str) or int(chain_id, 16) != self.chain_id:
                    raise AnvilError(f"unexpected chain id {chain_id} at {self.rpc_url}")
                return
            if time.monotonic() > deadline:
                raise AnvilError(f"anvil did not answer within {self.startup_timeout}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log, self._log = self._log, None
        if log is not None:
            log.close()

    def __enter__(self) -> AnvilProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def rpc_call(url: str, method: str, params: list[object], *, timeout: float = 5.0) -> object:
    """One JSON-RPC call with the standard library (used before web3 is set up)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        payload = json.loads(response.read())
    if "error" in payload:
        raise ValueError(f"{method} failed: {payload['error']}")
    return payload["result"]


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
