"""Symbol tables and protoc's relative name lookup, to print names as upstream does.

Descriptors hold fully qualified names (``.envoy.config.core.v3.HeaderValue``);
upstream sources write the shortest name that resolves to the same symbol from
where it is used. :class:`Scope` emulates protoc's lookup over the symbols a file
can see, so the printer can pick that name and protoc compiles it back to the
same descriptor.
"""

from __future__ import annotations

from typing import Any

from .syntax import AGGREGATES, ENUM, KEYWORDS, MESSAGE, PACKAGE, SERVICE, TYPES

# --------------------------------------------------------------------------- #
# Symbol tables and protoc's relative name lookup
# --------------------------------------------------------------------------- #


def join_name(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def file_symbols(fdp: Any) -> dict[str, str]:
    """Every symbol a FileDescriptorProto defines, full name -> kind."""
    symbols: dict[str, str] = {}
    parts = fdp.package.split(".") if fdp.package else []
    for i in range(1, len(parts) + 1):
        symbols[".".join(parts[:i])] = PACKAGE

    def add_enum(enum: Any, scope: str) -> None:
        symbols[join_name(scope, enum.name)] = ENUM
        for value in enum.value:  # enum values are siblings of their enum type
            symbols[join_name(scope, value.name)] = "enum_value"

    def add_message(msg: Any, scope: str) -> None:
        full = join_name(scope, msg.name)
        symbols[full] = MESSAGE
        for field in msg.field:
            symbols[join_name(full, field.name)] = "field"
        for oneof in msg.oneof_decl:
            symbols[join_name(full, oneof.name)] = "oneof"
        for ext in msg.extension:
            symbols[join_name(full, ext.name)] = "extension"
        for nested in msg.nested_type:
            add_message(nested, full)
        for enum in msg.enum_type:
            add_enum(enum, full)

    for msg in fdp.message_type:
        add_message(msg, fdp.package)
    for enum in fdp.enum_type:
        add_enum(enum, fdp.package)
    for ext in fdp.extension:
        symbols[join_name(fdp.package, ext.name)] = "extension"
    for service in fdp.service:
        full = join_name(fdp.package, service.name)
        symbols[full] = SERVICE
        for method in service.method:
            symbols[join_name(full, method.name)] = "method"
    return symbols


def visible_symbols(name: str, protos: dict[str, Any]) -> dict[str, str]:
    """Symbols protoc lets ``name`` refer to: its own, its imports', and public re-exports."""
    files = {name}
    pending = list(protos[name].dependency)
    while pending:
        dep = pending.pop()
        if dep in files:
            continue
        files.add(dep)
        dep_proto = protos[dep]
        pending.extend(dep_proto.dependency[i] for i in dep_proto.public_dependency)
    symbols: dict[str, str] = {}
    for file in sorted(files):
        symbols.update(file_symbols(protos[file]))
    return symbols


class Scope:
    """Emulates protoc's ``DescriptorBuilder::LookupSymbol`` to print short names."""

    def __init__(self, symbols: dict[str, str]) -> None:
        self.symbols = symbols

    def lookup(self, name: str, relative_to: str, *, types_only: bool) -> str | None:
        first, _, _ = name.partition(".")
        scope = relative_to
        while True:
            dot = scope.rfind(".")
            if dot < 0:
                return name if name in self.symbols else None
            scope = scope[:dot]
            candidate = f"{scope}.{first}"
            kind = self.symbols.get(candidate)
            if kind is None:
                continue
            if first != name:  # compound name: only its first part was found
                if kind in AGGREGATES:
                    full = f"{scope}.{name}"
                    return full if full in self.symbols else None
            elif not types_only or kind in TYPES:
                return candidate

    def name(
        self, full_name: str, relative_to: str, *, types_only: bool, shortest: bool = True
    ) -> str:
        """A name that resolves to ``full_name`` from ``relative_to``.

        The shortest such name (how upstream writes type references), or with
        ``shortest=False`` the unqualified full name if that resolves (how upstream
        writes custom option names). Names starting with a keyword are avoided, as
        the parser would take them for a statement (``extensions.filters...``).
        """
        full_name = full_name.removeprefix(".")
        parts = full_name.split(".")
        starts = range(len(parts) - 1, -1, -1) if shortest else [0]
        for start in starts:
            if parts[start] in KEYWORDS:
                continue
            candidate = ".".join(parts[start:])
            if self.lookup(candidate, relative_to, types_only=types_only) == full_name:
                return candidate
        return f".{full_name}"
