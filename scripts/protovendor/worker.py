"""The worker: runs inside an interpreter that has xds-protos, renders and verifies.

Loads the ext_proc service's descriptor closure from the installed xds-protos
modules, prints every file with :mod:`.printer`, writes ``protos/`` (or, with
``--check``, compares it with what is committed), then compiles the tree with
protoc and compares the descriptors, and those embedded in the generated stubs,
with xds-protos'. The launcher starts it with ``--worker``.
"""

# google.protobuf is imported lazily, inside the functions: only the worker, in
# the interpreter that has xds-protos, calls them. The protobuf runtime ships no
# type information (types-protobuf is not a dependency), so descriptor objects
# are handled as Any.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .config import ROOT_MODULE, ROOT_PROTO, WELL_KNOWN_PREFIX, clean_env
from .printer import ProtoPrinter
from .symbols import Scope, visible_symbols

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
        subprocess.run(cmd, check=True, env=clean_env())
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
