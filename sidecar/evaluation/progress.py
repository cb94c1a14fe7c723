"""Progress bars on stderr for long evaluation runs (``tqdm`` when importable)."""

from __future__ import annotations

import sys
from typing import Protocol


class Progress(Protocol):
    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class _NoProgress:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


def progress_bar(total: int, desc: str, *, enabled: bool, unit: str = "it") -> Progress:
    """A ``tqdm`` bar writing to stderr, or a no-op when disabled or not installed."""
    if not enabled:
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    bar: Progress = tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True
    )
    return bar
