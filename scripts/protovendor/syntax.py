"""The words and numbers of ``.proto`` source, as descriptors encode them.

Field types and labels by their ``FieldDescriptorProto`` numbers, the bounds
``max`` stands for, the kinds of symbol protoc's name lookup tells apart, and the
keywords a printed name must not start with: one table for the symbol lookup,
the option formatting and the printer alike.
"""

from __future__ import annotations

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
