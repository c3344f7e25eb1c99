"""A devnet laid out exactly as ``marketplace up`` lays it out (``start_devnet`` in a temporary
data dir), driven through ``marketplace.cli.main``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from marketplace.cli import main
from marketplace.config import Settings
from marketplace_devstack.devnet.client import DevnetClient
from marketplace_devstack.devnet.node import start_devnet


@dataclass
class Devnet:
    data_dir: Path
    rpc_url: str
    client: DevnetClient


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    data_dir = tmp_path_factory.mktemp("devnet-cli")
    started: list[Any] = []
    try:
        settings = start_devnet(Settings(data_dir=data_dir, chain_rpc_url=""), started)
        client = DevnetClient.from_data_dir(data_dir)
        yield Devnet(data_dir, settings.chain_rpc_url, client)
        client.close()
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def cli(devnet: Devnet, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``cli("create", "--milestones", "2")``: runs ``marketplace devnet create ... --data-dir D
    --json`` and returns its exit code and output."""

    def run(*args: str, as_json: bool = True, data_dir: Path | None = None) -> CliResult:
        capsys.readouterr()
        argv = ["devnet", *args, "--data-dir", str(data_dir or devnet.data_dir)]
        if as_json:
            argv.append("--json")
        code = main(argv)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
