"""The sidecar's exceptions, rooted at :class:`SidecarError`.

::

    SidecarError
    ├── ConfigError          invalid configuration (start-up)
    ├── InvalidInput         a value from a request or an operator was rejected
    │   └── InvalidIdentifier  a user/group/memory id that may not reach a filter
    ├── StoreError           the memory store failed (pymilvus errors, translated)
    │   └── SchemaMismatch     the collection exists with another schema
    ├── EmbeddingError       the embedding model failed to load or run
    ├── JournalError         the durable write journal (SQLite) failed
    │   └── JournalFull        the journal holds ``max_pending`` unwritten turns
    └── LLMError             an LLM call failed
        ├── LLMUnavailable     connection refused, 5xx, not configured
        ├── LLMTimeout         no answer within the budget
        └── LLMBadOutput       the answer could not be parsed

Foreign exceptions are translated inside the adapter that sees them
(``raise StoreError(...) from exc``); callers catch these types only.
"""

from __future__ import annotations


class SidecarError(Exception):
    """Root of every error the sidecar raises on purpose."""


class ConfigError(SidecarError):
    """The configuration is invalid; the message lists every problem with its path."""


class InvalidInput(SidecarError):
    """A value from a request or an operator was rejected."""


class InvalidIdentifier(InvalidInput):
    """An identifier that is not safe to store or to put in a filter."""


class StoreError(SidecarError):
    """The memory store failed."""


class SchemaMismatch(StoreError):
    """The collection exists with a schema this version cannot use."""


class EmbeddingError(SidecarError):
    """The embedding model failed."""


class JournalError(SidecarError):
    """The durable write journal failed (SQLite error, locked by another process)."""


class JournalFull(JournalError):
    """The journal holds its maximum of unwritten turns; a new one is refused."""


class LLMError(SidecarError):
    """An LLM call failed."""


class LLMUnavailable(LLMError):
    """The LLM is not configured or cannot be reached."""


class LLMTimeout(LLMError):
    """The LLM did not answer within the budget."""


class LLMBadOutput(LLMError):
    """The LLM answered with something that could not be parsed."""
