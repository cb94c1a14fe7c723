"""The ``sidecar.config`` package: what it exports, and that it stays in modules by
concern of a readable size."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import sidecar.config

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400


def test_all_lists_exactly_the_public_names() -> None:
    """httpx-style: every public name of the package is in ``__all__`` and every name
    in ``__all__`` exists (submodules are not names to import)."""
    public = {
        name
        for name, value in vars(sidecar.config).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert len(sidecar.config.__all__) == len(set(sidecar.config.__all__))
    assert set(sidecar.config.__all__) == public


def test_every_name_imported_from_the_package_is_exported() -> None:
    imported: dict[str, str] = {}
    for folder in ("sidecar", "tests", "scripts", "e2e"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "sidecar.config":
                    for alias in node.names:
                        imported.setdefault(alias.name, str(path.relative_to(ROOT)))
    assert imported  # the scan found the package's users
    missing = {
        name: where for name, where in imported.items() if name not in sidecar.config.__all__
    }
    assert not missing, missing


def test_no_module_of_the_package_is_too_long() -> None:
    package = Path(sidecar.config.__file__).parent
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in package.glob("*.py")}
    assert len(sizes) > 10
    assert all(lines <= MAX_MODULE_LINES for lines in sizes.values()), sizes
