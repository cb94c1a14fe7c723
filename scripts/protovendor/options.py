"""Option values (``[(validate.rules).string.min_len = 1]``) as ``.proto`` source.

Turns the ``*Options`` messages of descriptors, custom options included, back into
the ``name = value`` assignments protoc parses to the same message, spelt the way
the upstream sources spell them. Used by the printer for every kind of option.
"""

# google.protobuf is imported lazily, inside the functions: only the worker, in
# the interpreter that has xds-protos, calls them. The protobuf runtime ships no
# type information (types-protobuf is not a dependency), so descriptor objects
# are handled as Any.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import math
from typing import Any

from .symbols import Scope
from .syntax import LABEL_REPEATED

# --------------------------------------------------------------------------- #
# Option values
# --------------------------------------------------------------------------- #


def quote(data: bytes) -> str:
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
        return quote(value.encode("utf-8"))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return quote(value)
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
