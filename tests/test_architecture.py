"""The package's shape: no import cycles, dependencies that run one way, small modules.

Every module's imports are read from its source (function-level and ``TYPE_CHECKING``
imports included: a cycle hidden inside a function is still a cycle), resolved to the
sidecar modules they name, and checked against the layering that
docs/design/architecture.md draws.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sidecar"
MAX_LINES = 600

#: (importer prefix, forbidden prefix, why)
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    *(
        ("sidecar.memory.records", f"sidecar.memory.{layer}", "records are the bottom layer")
        for layer in ("language", "corpus", "store", "embedding", "read", "write")
    ),
    *(
        ("sidecar.memory.language", f"sidecar.memory.{layer}", "word rules read records only")
        for layer in ("corpus", "store", "embedding", "read", "write")
    ),
    ("sidecar.memory.corpus", "sidecar.memory.read", "the corpus knows no request path"),
    ("sidecar.memory.corpus", "sidecar.memory.write", "the corpus knows no write path"),
    ("sidecar.memory.store", "sidecar.memory.corpus", "the store knows no corpus"),
    ("sidecar.memory.store", "sidecar.memory.read", "the store knows no read path"),
    ("sidecar.memory.store", "sidecar.memory.write", "the store knows no write path"),
    ("sidecar.memory.embedding", "sidecar.memory.read", "embeddings know no read path"),
    ("sidecar.memory.embedding", "sidecar.memory.write", "embeddings know no write path"),
    ("sidecar.memory.embedding", "sidecar.memory.store", "embeddings know no store"),
    ("sidecar.memory.read", "sidecar.memory.write", "the request path never writes rows"),
    ("sidecar.memory.write", "sidecar.memory.read", "the write path keeps the corpus, not reads"),
    ("sidecar.memory", "sidecar.runtime", "memory is built by the runtime, not the reverse"),
    ("sidecar.memory", "sidecar.extproc", "memory knows no transport"),
    ("sidecar.memory", "sidecar.admin", "memory knows no admin API"),
    ("sidecar.memory", "sidecar.evaluation", "memory knows no evaluation"),
    ("sidecar.extproc", "sidecar.runtime", "the transport is built by the runtime"),
    ("sidecar.admin.api", "sidecar.runtime", "the runtime builds admin, not the reverse"),
    ("sidecar.admin.service", "sidecar.runtime", "the runtime builds admin, not the reverse"),
    ("sidecar.admin.console", "sidecar.runtime", "the runtime builds admin, not the reverse"),
    ("sidecar.admin", "sidecar.runtime.server", "admin uses the components, not the server"),
    ("sidecar.evaluation", "sidecar.runtime.server", "eval uses the components, not the server"),
    ("sidecar.config", "sidecar.memory", "configuration is read before anything is built"),
)
#: Where a layer may use its own modules though it forbids its package's others.
SELF_ALLOWED = ("sidecar.memory.records", "sidecar.memory.language")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).with_suffix("")
        if "_proto" in relative.parts:
            continue
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """The sidecar modules ``name`` imports (a package's ``__init__`` for a name that
    is not a module of its own)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target.startswith("sidecar") and target != name and "_proto" not in target:
                yield target


GRAPH = {name: sorted(set(_imports(name, path))) for name, path in MODULES.items()}


def test_the_import_graph_has_no_cycle() -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in GRAPH.get(node, []):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


@pytest.mark.parametrize(("importer", "forbidden", "why"), FORBIDDEN)
def test_dependencies_run_one_way(importer: str, forbidden: str, why: str) -> None:
    broken = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name == importer or name.startswith(importer + ".")
        for target in targets
        if target.startswith(forbidden)
        and not (importer in SELF_ALLOWED and target.startswith(importer))
    ]
    assert not broken, f"{why}: {broken}"


def test_no_module_is_over_the_size_limit() -> None:
    big = {
        name: lines
        for name, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not big, f"split these modules (over {MAX_LINES} lines): {big}"


def test_the_graph_sees_function_level_imports() -> None:
    # The runtime's workers import the server inside the child's entry point.
    assert "sidecar.runtime.server" in GRAPH["sidecar.runtime.workers"]
