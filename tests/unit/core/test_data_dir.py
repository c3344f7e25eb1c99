"""What production commands read of a `marketplace up` data dir (marketplace/config/data_dir.py)
agrees with what the dev stack writes there."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from marketplace.config.data_dir import (
    DataDirNotFound,
    UpRun,
    embedded_postgres_dsn,
    locate_data_dir,
    running,
)
from marketplace_devstack.embedded.postgres import EmbeddedPostgres
from marketplace_devstack.embedded.state import forget_run, record_run


def _postmaster_pid(data_dir: Path, port: int) -> None:
    # PostgreSQL's postmaster.pid: pid, data dir, start time, port, socket dir, listen address...
    pgdata = data_dir / "postgres"
    pgdata.mkdir(parents=True, exist_ok=True)
    lines = ["4242", str(pgdata), "1700000000", str(port), str(pgdata), "127.0.0.1", "", "ready"]
    (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_the_dsn_read_from_a_data_dir_is_the_embedded_servers(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path, port=54329)  # not started: creates its password
    _postmaster_pid(tmp_path, 54329)
    dsn = embedded_postgres_dsn(tmp_path)
    assert dsn == server.dsn
    assert dsn is not None
    parts = urlsplit(dsn)
    assert (parts.hostname, parts.port, parts.path) == ("127.0.0.1", 54329, "/marketplace")
    assert unquote(parts.password or "") == server.password


def test_no_dsn_where_no_embedded_server_runs(tmp_path: Path) -> None:
    assert embedded_postgres_dsn(tmp_path) is None  # nothing there
    (tmp_path / "postgres-password").write_text("secret")
    assert embedded_postgres_dsn(tmp_path) is None  # no postmaster.pid: not running
    _postmaster_pid(tmp_path, 5432)
    (tmp_path / "postgres-password").unlink()
    assert embedded_postgres_dsn(tmp_path) is None  # never a data dir of `up`
    assert not (tmp_path / "postgres-password").exists()  # and reading created nothing


def test_a_run_up_records_is_the_data_dir_others_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MARKETPLACE_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataDirNotFound, match="no data dir found"):
        locate_data_dir(None)
    data_dir = tmp_path / "run"
    data_dir.mkdir()
    run = UpRun(
        pid=os.getpid(), dataDir=str(data_dir), url="http://127.0.0.1:1/v1/", chainRpcUrl=""
    )
    record_run(run)
    try:
        assert [r.dataDir for r in running()] == [str(data_dir)]
        assert locate_data_dir(None) == data_dir
    finally:
        forget_run(run.pid)
    assert running() == []
    with pytest.raises(DataDirNotFound):
        locate_data_dir(None)
