"""The log format: JSON for machines, readable lines for a person watching `marketplace up`
(MARKETPLACE_LOG_FORMAT), and what a readable line holds."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest

from marketplace.logs import (
    AccessLog,
    JsonFormatter,
    TextFormatter,
    request_id_var,
    use_json_logs,
)


@pytest.mark.parametrize(
    ("log_format", "log_json", "interactive", "expected"),
    [
        # auto: a person on a terminal under `up` reads text; anything else gets log_json.
        ("auto", True, True, False),
        ("auto", True, False, True),
        ("auto", False, False, False),
        ("auto", False, True, False),
        # json and text decide alone, whatever MARKETPLACE_LOG_JSON says.
        ("json", True, True, True),
        ("json", False, True, True),
        ("json", False, False, True),
        ("text", True, False, False),
        ("text", True, True, False),
        ("text", False, False, False),
    ],
)
def test_json_or_text(log_format: str, log_json: bool, interactive: bool, expected: bool) -> None:
    assert use_json_logs(log_format, log_json, interactive=interactive) is expected


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("marketplace.up", logging.WARNING, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def test_a_text_line_has_time_level_logger_message_and_fields() -> None:
    token = request_id_var.set("req-7")
    try:
        line = TextFormatter().format(
            record("embedded %s exited", "redis", exit_status=0, pids={"up": 1}, note="two words")
        )
    finally:
        request_id_var.reset(token)
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d\.\d{3} WARNING  marketplace\.up: embedded redis exited  "
        r'request_id=req-7 exit_status=0 pids=\{"up":1\} note="two words"',
        line,
    ), line


def test_a_text_line_without_fields_is_just_the_message() -> None:
    line = TextFormatter().format(record("stopped"))
    assert line.endswith(" WARNING  marketplace.up: stopped"), line
    assert "{" not in line and "=" not in line


def test_a_text_line_carries_the_traceback_below_it() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record("failed")
        failed.exc_info = sys.exc_info()
    first, *rest = TextFormatter().format(failed).splitlines()
    assert first.endswith("marketplace.up: failed")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ValueError: boom"


def test_the_json_line_holds_the_same_record() -> None:
    entry = json.loads(JsonFormatter().format(record("embedded %s exited", "redis", port=5)))
    assert entry["level"] == "warning"
    assert entry["logger"] == "marketplace.up"
    assert entry["msg"] == "embedded redis exited"
    assert entry["port"] == 5


def test_an_access_line_in_text_reads_like_the_other_lines() -> None:
    out = io.StringIO()
    access = AccessLog(out, json_lines=False)
    access.write(
        {
            "level": "info",
            "logger": "marketplace.access",
            "msg": "request",
            "request_id": "req-9",
            "route": "/v1/health",
            "status": 200,
        }
    )
    access.flush()
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d\.\d{3} INFO     marketplace\.access: request  "
        r"request_id=req-9 route=/v1/health status=200\n",
        out.getvalue(),
    ), out.getvalue()
