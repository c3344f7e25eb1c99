"""Logs carrying the id of the request being served: JSON lines, or human-readable lines for a
person watching ``marketplace up`` on a terminal (``MARKETPLACE_LOG_FORMAT``)."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None
)

_STANDARD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _context_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The request being served (``request_id``), then the record's ``extra`` fields."""
    fields: dict[str, Any] = {}
    request_id = request_id_var.get()
    if request_id:
        fields["request_id"] = request_id
    for key, value in vars(record).items():
        if key not in _STANDARD_ATTRS and not key.startswith("_"):
            fields[key] = value
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_context_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """One line a person reads: local time, level, logger, message, then the record's extra
    fields (``request_id`` first) as ``key=value``; a traceback follows on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = _text_line(
            f"{stamp}.{int(record.msecs):03d}",
            record.levelname,
            record.name,
            record.getMessage(),
            _context_fields(record),
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_line(stamp: str, level: str, logger: str, message: str, fields: dict[str, Any]) -> str:
    line = f"{stamp} {level:<8} {logger}: {message}"
    if fields:
        line += "  " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
    return line


def _text_value(value: Any) -> str:
    if not isinstance(value, str):
        return json.dumps(value, default=str, separators=(",", ":"))
    # Quoted only when a reader could not tell where it ends.
    return json.dumps(value) if not value or any(c.isspace() for c in value) else value


def _access_text(entry: dict[str, Any]) -> str:
    """An access-log entry as :class:`TextFormatter` would write its record."""
    now = time.time()
    fields = dict(entry)
    level = str(fields.pop("level", "info")).upper()
    logger = fields.pop("logger", "marketplace.access")
    message = fields.pop("msg", "request")
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    return _text_line(stamp, level, logger, message, fields)


def use_json_logs(log_format: str, log_json: bool, *, interactive: bool) -> bool:
    """Whether to write JSON lines, from ``MARKETPLACE_LOG_FORMAT`` (``log_format``),
    ``MARKETPLACE_LOG_JSON`` (``log_json``) and whether a person watches: ``interactive`` is
    true under ``marketplace up`` with stderr a terminal.

    ``json`` and ``text`` decide alone. ``auto`` gives a person text and anything else (a file,
    a pipe, a log collector, ``serve``) what ``log_json`` says, JSON by default.
    """
    if log_format == "json":
        return True
    if log_format == "text":
        return False
    if interactive:
        return False
    return log_json


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except ValueError:  # closed
        return False


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_logs else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class AccessLog:
    """One JSON line per request, written in batches.

    Going through ``logging`` cost about a fifth of a cheap request (a LogRecord, handler locks, a
    write syscall per line); here a line is one ``json.dumps`` appended to a buffer that a
    background task writes every ``interval`` seconds (and on shutdown).
    """

    def __init__(
        self, stream: Any = None, *, enabled: bool = True, json_lines: bool = True
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.json_lines = json_lines
        self._lines: list[str] = []

    def write(self, entry: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.json_lines:
            entry["ts"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self._lines.append(json.dumps(entry))
        else:
            self._lines.append(_access_text(entry))

    def flush(self) -> None:
        if self._lines:
            lines, self._lines = self._lines, []
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
