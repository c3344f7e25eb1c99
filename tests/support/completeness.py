"""A run passes only if every collected test reported an outcome.

A parallel runner that loses a worker (or a test it never ran) must not end green: the controller
records the ids its workers collected and the ids that produced an outcome (a call, or a setup
that failed or skipped), and turns a passing run with a difference into a failure naming the
missing tests. Without xdist the same check runs in the one process.
"""

from __future__ import annotations

from typing import Any

import pytest

SHOWN_MISSING = 20


class Completeness:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collected: set[str] = set()
        self.reported: set[str] = set()

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # An xdist controller collects nothing itself; its workers' ids arrive below.
        self.collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected.update(ids)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.reported.add(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        missing = sorted(self.collected - self.reported)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"completeness: {len(self.collected)} collected, {len(self.reported)} reported"
            )
        if exitstatus == pytest.ExitCode.OK and missing:
            if reporter is not None:
                reporter.write_line(f"completeness: {len(missing)} collected tests never reported:")
                for nodeid in missing[:SHOWN_MISSING]:
                    reporter.write_line(f"  {nodeid}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # a worker: the controller checks the whole run
        config.pluginmanager.register(Completeness(config), "completeness")
