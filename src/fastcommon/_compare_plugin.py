"""`python -m fastcommon compare`'s pytest plugin: each test's outcome, as pytest counts it, appended to a file.

compare names this module in PYTEST_PLUGINS, and the file in FASTCOMMON_COMPARE_OUTCOMES, for both runs. The first
pytest of a program records, one JSON line per report that pytest counts: {"nodeid": ..., "outcome": category}. It
takes the variable out of its environment, so that a pytest it starts in turn (pytester, a subprocess) records
nothing; a pytest-xdist worker records nothing either, as its controller sees every report.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

OUTCOMES_VARIABLE = "FASTCOMMON_COMPARE_OUTCOMES"


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.pop(OUTCOMES_VARIABLE, None)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(config, path), "fastcommon-compare-recorder")


class Recorder:
    """Appends each counted outcome to the file, one line in one write: processes never interleave their lines."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category:  # "" for what pytest does not count: a setup or teardown that passed
            self.record(report.nodeid, category)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.record(report.nodeid, "error")
        elif report.skipped:  # a module skipped as a whole (pytest.importorskip): pytest counts it skipped
            self.record(report.nodeid, "skipped")

    def pytest_unconfigure(self) -> None:
        os.close(self.descriptor)

    def record(self, nodeid: str, outcome: str) -> None:
        os.write(self.descriptor, (json.dumps({"nodeid": nodeid, "outcome": outcome}) + "\n").encode())
