"""The mock LLM's knobs: latency, injected faults and the format of task answers.

:class:`MockConfig` is set at start (``start_mock(**config)``, the command-line
flags) and changed at run time (``POST /_mock/config``, :meth:`MockLLM.configure`);
every change is validated here, in one place, whichever way it comes in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

DEFAULT_MODEL: Final = "mock-llm"

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class MockConfig:
    """Knobs for latency, faults and output format; changeable at run time."""

    model: str = DEFAULT_MODEL
    """Model id listed by ``/v1/models`` (responses echo the request's model)."""
    latency_ms: float = 0.0
    """Delay before answering any chat request."""
    task_latency_ms: float = 0.0
    """Extra delay before answering task prompts only."""
    stream_chunk_delay_ms: float = 0.0
    """Delay between SSE chunks."""
    stream_chunks: int = 16
    """Most content chunks per streamed answer (split at words); 0 = one per word."""
    error_rate: float = 0.0
    """Share of chat requests (0..1) answered with ``error_status``; seeded RNG."""
    error_status: int = 500
    fail_tasks: bool = False
    """Answer every task prompt with ``error_status``."""
    garbage_tasks: bool = False
    """Answer task prompts with non-JSON text."""
    json_fences: bool = False
    """Wrap task answers in a ```json fenced block."""
    think_tags: bool = False
    """Prefix task answers with a ``<think>...</think>`` block."""
    seed: int = 0
    """Seed of the error-injection RNG (re-seeded when set at run time)."""
    max_requests: int = 256
    """How many recorded requests ``/_mock/requests`` keeps."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def updated(self, changes: Mapping[str, Any]) -> MockConfig:
        """A validated copy with ``changes`` applied; raises ``ValueError``."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        values = self.to_dict()
        for key, value in changes.items():
            if key not in fields:
                raise ValueError(f"unknown config key {key!r}; known: {sorted(fields)}")
            values[key] = _coerce(key, value, type(getattr(self, key)))
        new = MockConfig(**values)
        new.validate()
        return new

    def validate(self) -> None:
        for name in ("latency_ms", "task_latency_ms", "stream_chunk_delay_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be within 0..1")
        if not 400 <= self.error_status <= 599:
            raise ValueError("error_status must be an HTTP error status (400..599)")
        if self.stream_chunks < 0:
            raise ValueError("stream_chunks must be >= 0")
        if self.max_requests < 1:
            raise ValueError("max_requests must be >= 1")
        if not self.model:
            raise ValueError("model must not be empty")


def _coerce(key: str, value: object, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is str and isinstance(value, str):
        return value
    raise ValueError(f"config key {key!r} needs a {kind.__name__}, got {value!r}")
