"""Prints one ``FileDescriptorProto`` as ``.proto`` source text.

:class:`ProtoPrinter` walks a file's descriptor (syntax, package, imports,
options, messages with their nested types, oneofs, maps and reserved ranges,
enums, services, ``extend`` blocks) and writes each part in upstream's layout;
what descriptors cannot carry (comments, original formatting) is not there to
print. Names come from :mod:`.symbols`, option values from :mod:`.options`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .config import UPSTREAMS, XDS_PROTOS_VERSION
from .options import format_options, quote
from .symbols import Scope, join_name
from .syntax import (
    ENUM_NUMBER_MAX,
    FIELD_NUMBER_END,
    INDENT,
    LABEL_KEYWORDS,
    LABEL_REPEATED,
    SCALAR_TYPES,
    TYPE_ENUM,
    TYPE_GROUP,
    TYPE_MESSAGE,
)

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
            self.emit(f"import {modifier}{quote(dep.encode())};")
        self.blank()
        if fdp.HasField("options"):
            self.option_statements(fdp.options, join_name(fdp.package, "dummy"))
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
        full = join_name(scope, msg.name)
        if msg.options.message_set_wire_format:
            raise NotImplementedError(f"{full}: message_set_wire_format is not supported")
        map_entries = {
            join_name(full, nested.name): nested
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
            self.emit(f"reserved {', '.join(quote(n.encode()) for n in msg.reserved_name)};")
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
                        self.option_statements(oneof.options, join_name(full, oneof.name))
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
        full = join_name(scope, field.name)
        if field.type == TYPE_GROUP:
            raise NotImplementedError(f"{full}: groups are not supported")
        entry = map_entries.get(field.type_name.removeprefix("."))
        if entry is not None and field.label == LABEL_REPEATED:
            key, value = entry.field
            value_type = self.field_type(
                value, join_name(field.type_name.removeprefix("."), "value")
            )
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
            attributes.append(f"json_name = {quote(field.json_name.encode())}")
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
            return quote(field.default_value.encode("utf-8"))
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
        extendee = self.type_name(first.extendee, join_name(scope, first.name))
        self.open(f"extend {extendee}")
        for ext in extensions:
            self.emit(self.field_text(ext, scope, {}, in_oneof=False))
        self.close()

    # -- enums and services ----------------------------------------------- #

    def print_enum(self, enum: Any, scope: str) -> None:
        full = join_name(scope, enum.name)
        self.open(f"enum {enum.name}")
        if enum.HasField("options"):
            self.option_statements(enum.options, full)
            self.blank()
        if enum.reserved_range:
            ranges = [self.range_text(r.start, r.end, ENUM_NUMBER_MAX) for r in enum.reserved_range]
            self.emit(f"reserved {', '.join(ranges)};")
        if enum.reserved_name:
            self.emit(f"reserved {', '.join(quote(n.encode()) for n in enum.reserved_name)};")
        self.blank()
        for value in enum.value:
            text = f"{value.name} = {value.number}"
            if value.HasField("options"):
                opts = format_options(value.options, self.scope, join_name(scope, value.name))
                if not opts:
                    raise NotImplementedError(f"{full}.{value.name}: empty options")
                text += f" [{', '.join(opts)}]"
            self.emit(text + ";")
        self.close()

    def print_service(self, service: Any) -> None:
        full = join_name(self.fdp.package, service.name)
        self.open(f"service {service.name}")
        if service.HasField("options"):
            self.option_statements(service.options, full)
            self.blank()
        for method in service.method:
            method_full = join_name(full, method.name)
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
