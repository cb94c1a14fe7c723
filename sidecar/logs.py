"""Logging set-up (called only by the entry point) and the request id every log line
carries while a request is being handled.

The request id lives in a :class:`~contextvars.ContextVar`: the ext_proc servicer
sets it per stream (Envoy's ``x-request-id``), the write workers per turn, the
admin API per HTTP request. asyncio copies the context into every task, so the id
follows the request through awaits and into tasks it starts, and never leaks into
another stream. :class:`RequestIdFilter` copies it onto each log record.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

from sidecar.config import LoggingConfig

#: The id of the request being handled in this context ("" outside any request).
REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="")

MAX_REQUEST_ID_CHARS = 128


def new_request_id() -> str:
    """An id for a request that arrived without one."""
    return "sc-" + secrets.token_hex(8)


def clean_request_id(value: str | None) -> str:
    """``value`` cut to a loggable id (printable, at most 128 characters), or a new id."""
    text = "".join(ch for ch in (value or "")[:MAX_REQUEST_ID_CHARS] if ch.isprintable())
    return text.strip() or new_request_id()


@contextmanager
def request_context(request_id: str) -> Iterator[str]:
    """Log lines emitted inside carry ``request_id`` (restored afterwards)."""
    token = REQUEST_ID.set(request_id)
    try:
        yield request_id
    finally:
        REQUEST_ID.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (the current context's, "" when none) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id (while a
    request is handled) and exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", "") or REQUEST_ID.get()
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(config: LoggingConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if config.json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level)
    # Third-party chatter (and anything that might echo payloads) stays quiet.
    for name in ("httpx", "httpx2", "openai", "sentence_transformers", "transformers"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(config.level)))
    _quiet_pymilvus(config)
    # aiohttp's access log would print admin URLs (user ids); the admin API logs itself.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Python warnings become log lines (JSON too), not multi-line text on stderr; the
    # one every start printed (milvus-lite importing pkg_resources) is a dependency's
    # notice the operator can do nothing about.
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
    logging.captureWarnings(True)


#: pymilvus' loggers: its import gives them a handler of their own that prints every
#: failed RPC, with a traceback, straight to stderr (thousands of lines a minute
#: while a server is away, none of them JSON).
PYMILVUS_LOGGERS = ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer")


def _quiet_pymilvus(config: LoggingConfig) -> None:
    """Route pymilvus' records through the handler above, and keep them out unless
    ``debug_content``: its RPC errors may quote a filter, and filters name users.
    The store's failures are logged by the sidecar itself (the exception's type) and
    counted (``store_errors_total``)."""
    import pymilvus  # noqa: F401  (its import installs the handlers replaced here)

    level = (
        max(logging.WARNING, logging.getLevelName(config.level))
        if config.debug_content
        else logging.CRITICAL
    )
    for name in PYMILVUS_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(level)
