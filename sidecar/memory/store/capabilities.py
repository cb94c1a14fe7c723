"""What the store's engine can do, asked once when the store opens.

The same code runs on milvus-lite (a file, or an embedded server's ``unix:`` socket)
and on a Milvus server by URI, and the engines differ in what they offer:

* **full-text search** — the BM25 function and its sparse field — arrived in Milvus
  2.5 (milvus-lite 2.5 has it). The product's own BM25 runs in process over each
  scope's corpus (:mod:`sidecar.memory.corpus.bm25`) and needs nothing of the store;
  only the measurement strategy ``bm25-milvus`` searches the store's. On an older
  server the memory collection is created without the function, and
  ``bm25-milvus`` is unavailable;
* **partition keys**: servers before the fix of milvus-io/milvus#30607 (February
  2024, in 2.4) route an *upserted* row by the wrong field, and a filter on the
  owner then finds none of that owner's rows (seen on 2.3.5); the sidecar takes
  partition keys from 2.4 (milvus-lite has none);
* **upsert**, which every write uses, needs 2.3: an older server is refused at start
  with the version it needs, never a traceback at the first write.

A server is asked its version (``GetVersion``); milvus-lite does not implement that
call, and reports the version of the ``milvus_lite`` package it runs from.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from sidecar.config import StoreConfig
from sidecar.errors import StoreError
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

Version = tuple[int, int, int]

#: The oldest server the sidecar runs on (``upsert``).
MINIMUM_SERVER: Version = (2, 3, 0)
#: The first version with the BM25 function and sparse vectors.
FULL_TEXT_SINCE: Version = (2, 5, 0)
#: The first server version whose upserts place partition-keyed rows correctly.
PARTITION_KEY_SINCE: Version = (2, 4, 0)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def dotted(version: Version) -> str:
    return ".".join(str(part) for part in version)


def parse_version(text: str) -> Version | None:
    """``(major, minor, patch)`` of a version string such as ``v2.3.5`` or
    ``2.5.4-gpu``; None when there is none."""
    found = _VERSION.search(text)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The engine behind ``store.uri`` and what it offers."""

    engine: Literal["milvus-lite", "milvus"]
    version: Version

    @property
    def full_text(self) -> bool:
        """The BM25 function (sparse vectors) exists."""
        return self.version >= FULL_TEXT_SINCE

    @property
    def partition_key(self) -> bool:
        return self.engine == "milvus" and self.version >= PARTITION_KEY_SINCE

    def __str__(self) -> str:
        return f"{self.engine} {dotted(self.version)}"


def lite_capabilities() -> Capabilities:
    """milvus-lite, at the version of the installed package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = parse_version(version("milvus-lite"))
    except PackageNotFoundError:
        found = None
    return Capabilities("milvus-lite", found or FULL_TEXT_SINCE)


def detect(client: Any, config: StoreConfig) -> Capabilities:
    """Ask the engine behind ``client`` what it is (blocking). Raises
    :class:`StoreError` for a server the sidecar cannot run on, naming the version
    it needs."""
    if config.is_local_file:
        return lite_capabilities()
    try:
        answer = client.get_server_version(timeout=config.timeout_s)
    except Exception as exc:  # grpc.RpcError or MilvusException, by pymilvus version
        if _unimplemented(exc):  # milvus-lite's embedded server behind a socket
            return lite_capabilities()
        raise StoreError(
            f"cannot ask the store at {config.uri} its version: {type(exc).__name__}"
        ) from exc
    version = parse_version(str(answer))
    if version is None:
        raise StoreError(f"the store at {config.uri} reports no version ({answer!r})")
    found = Capabilities("milvus", version)
    if version < MINIMUM_SERVER:
        raise StoreError(
            f"the store at {config.uri} is Milvus {dotted(version)}; the sidecar needs "
            f"Milvus {dotted(MINIMUM_SERVER)} or newer (upsert)"
        )
    if config.partition_key and not found.partition_key:
        raise StoreError(
            f"store.partition_key needs Milvus {dotted(PARTITION_KEY_SINCE)} or newer; "
            f"the store at {config.uri} is {found}"
        )
    return found


def _unimplemented(exc: BaseException) -> bool:
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            return getattr(code(), "name", "") == "UNIMPLEMENTED"
        except Exception:  # a MilvusException's code is an int attribute, not a call
            return False
    return "unimplemented" in str(exc).lower()


def announce(found: Capabilities, full_text: bool, metrics: Metrics) -> None:
    """One log line and ``memory_sidecar_store_engine`` say what the store runs on and
    where BM25 runs (``full_text``: the collection has Milvus' BM25 function)."""
    metrics.store_engine.labels(
        engine=found.engine,
        version=dotted(found.version),
        full_text="milvus" if full_text else "in_process",
    ).set(1)
    if full_text:
        where = "in process, and Milvus' full-text search for bm25-milvus"
    else:
        why = "" if found.full_text else f": needs Milvus {dotted(FULL_TEXT_SINCE)}"
        where = (
            f"in process only (no BM25 function in this collection{why}); "
            "the bm25-milvus strategy is unavailable"
        )
    log.info("store: %s; BM25 %s", found, where)


def full_text_error(found: Capabilities) -> StoreError:
    """What a full-text search on a collection without the BM25 function raises."""
    return StoreError(
        f"full-text search needs the BM25 function: Milvus {dotted(FULL_TEXT_SINCE)} or "
        f"newer, and a collection made there ({found})"
    )
