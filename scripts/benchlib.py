"""What every benchmark script shares: where the repository is, percentiles, the
``--embedding`` spec and writing a report's JSON.

The scripts are a package: run each as a module from the repository root, e.g.
``.venv/bin/python -m scripts.bench_e2e --help``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The repository root (scripts start subprocesses there).
REPO = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by nearest rank (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def embedding_spec(spec: str) -> dict[str, str]:
    """``backend[@device[/dtype]]`` (e.g. ``torch@cuda/float16``) as embedding settings."""
    backend, _, placement = spec.partition("@")
    device, _, dtype = placement.partition("/")
    return {"backend": backend, "device": device or "cpu", "dtype": dtype or "float32"}


def write_report(path: Path | None, report: Any) -> None:
    """Write ``report`` as indented JSON to ``path`` (parents made); nothing when None."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
