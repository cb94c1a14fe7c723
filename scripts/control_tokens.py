"""Collect the chat-template control tokens of every model family we can install,
for the block-quoting tests (``tests/data/control_tokens.json``).

The tokens are read from the packages themselves, never typed from memory:

- the chat templates and the vocabulary code vendored in llama-cpp-python's source
  distribution (``vendor/llama.cpp/models/templates/*.jinja``: Llama 3, Qwen/ChatML,
  Gemma, DeepSeek, Phi, Granite, gpt-oss, Mistral, Hermes, ...; and
  ``src/llama-vocab.cpp``'s end-of-generation and fill-in-the-middle tokens);
- the tokenizers mistral-common ships (its SentencePiece models v1-v7: ``[INST]``,
  ``[TOOL_RESULTS]``, ``[/SYSTEM_PROMPT]`` ...) and the special tokens its code names
  (Tekken).

Get the two archives with pip, then run this script::

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/tok
    pip download --no-deps mistral-common==1.13.1 -d /tmp/tok
    python -m scripts.control_tokens /tmp/tok/llama_cpp_python-0.3.36.tar.gz \\
        /tmp/tok/mistral_common-1.13.1-py3-none-any.whl --out tests/data/control_tokens.json
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

#: Token shapes: <|name|>, <｜name｜> (fullwidth bars), <name> and </name>, <name|>,
#: [NAME] and [/NAME], <<SYS>>.
TOKEN = re.compile(
    r"<\|[^|<>\s]{1,60}\|>|<｜[^｜<>\s]{1,60}｜>|</?[A-Za-z_][A-Za-z0-9_\-.:▁]{0,40}\|?>"
    r"|\[/?[A-Z][A-Z_]{1,30}\]|<</?SYS>>"
)
#: A quoted token in C++ or Python source.
QUOTED = re.compile(r"\"(" + TOKEN.pattern + r")\"")


def _template_tokens(sdist: Path) -> Iterator[tuple[str, str, list[str]]]:
    with tarfile.open(sdist) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = member.name.split("/", 1)[-1]
            is_template = "/models/templates/" in name and name.endswith(".jinja")
            is_vocab = name.endswith("src/llama-vocab.cpp")
            if not (is_template or is_vocab):
                continue
            handle = archive.extractfile(member)
            if handle is None:
                continue
            text = handle.read().decode("utf-8", "replace")
            found = TOKEN.findall(text) if is_template else QUOTED.findall(text)
            if found:
                yield name, Path(name).stem, sorted(set(found))


def _mistral_tokens(wheel: Path) -> Iterator[tuple[str, str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            if "/data/" in name and ".model" in name:
                data = archive.read(name).decode("latin-1")
                found = re.findall(r"\[/?[A-Z][A-Z_]{1,30}\]|</?[a-z]{1,8}>", data)
            elif name.endswith(".py"):
                found = QUOTED.findall(archive.read(name).decode("utf-8", "replace"))
            else:
                continue
            if found:
                yield name, Path(name).name, sorted(set(found))


def collect(sdist: Path, wheel: Path) -> dict[str, object]:
    """Every token found, and per file: package, version, file, family, tokens."""
    sources: list[dict[str, object]] = []
    every: set[str] = set()
    for package, archive, reader in (
        ("llama-cpp-python", sdist, _template_tokens),
        ("mistral-common", wheel, _mistral_tokens),
    ):
        version = archive.name.split("-")[1].removesuffix(".tar.gz")
        for path, family, tokens in reader(archive):
            every.update(tokens)
            sources.append(
                {"package": package, "version": version, "file": path, "family": family,
                 "tokens": tokens}
            )  # fmt: skip
    return {"about": (__doc__ or "").split("\n\n")[0], "tokens": sorted(every), "sources": sources}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("llama_cpp_sdist", type=Path)
    parser.add_argument("mistral_common_wheel", type=Path)
    parser.add_argument("--out", type=Path, default=Path("tests/data/control_tokens.json"))
    args = parser.parse_args(argv)
    found = collect(args.llama_cpp_sdist, args.mistral_common_wheel)
    args.out.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"control tokens -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
