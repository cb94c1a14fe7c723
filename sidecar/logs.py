"""Logging set-up, called only by the entry point."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from sidecar.config import LoggingConfig


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(config: LoggingConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if config.json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level)
    # Third-party chatter (and anything that might echo payloads) stays quiet.
    for name in ("httpx", "openai", "pymilvus", "sentence_transformers", "transformers"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(config.level)))
