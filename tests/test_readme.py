"""The README's shell commands work in a fresh clone.

Every fenced shell block of README.md (bash, sh, shell, zsh, console) has a marker on the
line right before its fence, an HTML comment that does not show when rendered:

    <!-- readme-test: run -->                every command runs in the default suite
    <!-- readme-test: slow 1,5-6; run -->     commands 1, 5 and 6 run with ``-m slow``
    <!-- readme-test: run 1-2; skip: WHY -->  commands 1 and 2 run, the others never

A command is a line that is neither blank nor a comment (a line ending in a backslash
goes on to the next; in a console block, a line starting with ``$``). Commands are
numbered from 1 in each block. A clause without numbers takes the commands no other
clause names; ``skip``, with its reason, comes last. A shell block without a marker, a
command in no clause or in two, a skip without a reason, a reason naming a test file that
does not exist, a marker before no shell block, or an unlabelled block that reads like
commands fails ``test_every_shell_block_is_classified``: a new command cannot escape.

The commands run as a reader runs them: in a ``git clone`` of this repository (plus the
uncommitted changes to the files git tracks, a new one once ``git add``-ed; untracked files
are not there) at
``<tmp>/main``, with this checkout's virtual environment as ``.venv`` and nothing of it on
``PATH``; the clone's own code is imported (``PYTHONPATH``), not the checkout's, which the
venv's editable install points to. One clone serves the module, block after block in
README order, so a block may use what an earlier one made (``sidecar.yaml``). A block's
chosen commands run as one bash script under ``set -euo pipefail``; background jobs
(``cmd &``) are killed when it ends.

The third-party datasets are not in the repository: commands read them from
``../shared/data`` beside it, and ``<tmp>/shared`` links there. A command that names
``../shared`` needs them; without them such a command is left out of the default run (the
block's other commands still run) and a slow block that needs them is skipped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHARED = ROOT.parent / "shared"
SHELLS = frozenset({"bash", "sh", "shell", "zsh", "console", "shell-session"})
KINDS = ("run", "slow", "skip")
#: Seconds a block's chosen commands may take together (the default run's take up to about
#: 40 s on 2 cores, the slow ones about 2 minutes).
TIMEOUT_S = {"run": 240, "slow": 900}

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
MARKER = re.compile(r"^\s*<!--\s*readme-test:(?P<text>.*?)-->\s*$")
NUMBERS = r"\d+(?:-\d+)?(?:\s*,\s*\d+(?:-\d+)?)*"
TEST_FILE = re.compile(r"\b(?:scripts/)?tests/[\w/.-]+?\.py\b")
#: How commands start, to catch them in a fence with no language.
COMMANDISH = ("$ ", "./", ".venv/", "sidecar ", "python", "pip ", "curl ", "envoy ", "git ")
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


class MarkerError(ValueError):
    """A marker that cannot be read, or one that leaves a command unclassified."""


@dataclass(frozen=True, slots=True)
class Block:
    line: int  # the opening fence's, 1-based
    language: str
    commands: tuple[str, ...]
    marker: str | None  # the text after ``readme-test:``; None: no marker

    @property
    def name(self) -> str:
        return f"README.md:{self.line}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What happens to each command of a block: ``kinds[i]`` for command ``i + 1``."""

    kinds: tuple[str, ...]
    reason: str = ""

    def numbers(self, kind: str) -> tuple[int, ...]:
        return tuple(i + 1 for i, k in enumerate(self.kinds) if k == kind)


@dataclass(slots=True)
class Readme:
    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def commands_of(language: str, lines: list[str]) -> tuple[str, ...]:
    if language in {"console", "shell-session"}:
        return tuple(line.strip()[1:].strip() for line in lines if line.strip().startswith("$"))
    commands: list[str] = []
    pending = ""
    for line in lines:
        text = pending + line.strip() if pending else line.strip()
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = ""
        if text and not text.startswith("#"):
            commands.append(text)
    if pending.strip():
        commands.append(pending.strip())
    return tuple(commands)


def parse_readme(text: str) -> Readme:
    """Every fenced block's commands and marker, and what is wrong with the markers'
    placement (their contents are read by :func:`parse_plan`)."""
    readme = Readme()
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            if MARKER.match(lines[index]) and not (
                index + 1 < len(lines) and FENCE.match(lines[index + 1])
            ):
                readme.problems.append(
                    f"README.md:{index + 1}: a readme-test marker not right before a fence"
                )
            index += 1
            continue
        line = index + 1
        fence, indent = opening["fence"], len(opening["indent"])
        language = opening["info"].lower()
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence) and not closing.lstrip(fence[0]):
                break
            raw = lines[index]
            body.append(raw[min(indent, len(raw) - len(raw.lstrip())) :])
            index += 1
        previous = MARKER.match(lines[line - 2]) if line >= 2 else None
        marker = previous["text"].strip() if previous else None
        if language in SHELLS:
            readme.blocks.append(Block(line, language, commands_of(language, body), marker))
        elif marker is not None:
            readme.problems.append(
                f"README.md:{line}: a readme-test marker on a {language!r} block"
            )
        elif not language and any(row.lstrip().startswith(COMMANDISH) for row in body):
            readme.problems.append(
                f"README.md:{line}: a block without a language reads like commands: "
                "label it ```bash and give it a readme-test marker"
            )
        index += 1
    return readme


def parse_numbers(spec: str, count: int) -> set[int]:
    numbers: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        first, last = int(low), int(high or low)
        if not 1 <= first <= last <= count:
            raise MarkerError(f"commands {part.strip()}: the block has commands 1 to {count}")
        numbers.update(range(first, last + 1))
    return numbers


def parse_plan(text: str, count: int) -> Plan:
    """Read a marker's clauses for a block of ``count`` commands; every command must land
    in exactly one clause."""
    skip = re.search(r"(?:^|;)\s*skip\b", text)
    head, tail = (text[: skip.start()], text[skip.end() :]) if skip else (text, None)
    clauses: list[tuple[str, set[int] | None, str]] = []
    for part in head.split(";"):
        if not part.strip():
            continue
        found = re.fullmatch(rf"\s*(run|slow)(?:\s+({NUMBERS}))?\s*", part)
        if found is None:
            raise MarkerError(f"cannot read {part.strip()!r}: expected run, slow or skip [N]: WHY")
        numbers = parse_numbers(found[2], count) if found[2] else None
        clauses.append((found[1], numbers, ""))
    reason = ""
    if tail is not None:
        found = re.fullmatch(rf"\s*({NUMBERS})?\s*:\s*(.*\S)\s*", tail, re.DOTALL)
        if found is None:
            raise MarkerError("a skip needs a reason: 'skip [N]: WHY'")
        reason = found[2]
        clauses.append(("skip", parse_numbers(found[1], count) if found[1] else None, reason))
    if not clauses:
        raise MarkerError("an empty marker: say run, slow or skip [N]: WHY")
    if sum(numbers is None for _, numbers, _ in clauses) > 1:
        raise MarkerError("two clauses without numbers: which takes the other commands?")
    kinds: dict[int, str] = {}
    for kind, numbers, _ in clauses:
        for number in sorted(numbers or ()):
            if number in kinds:
                raise MarkerError(f"command {number} is in two clauses")
            kinds[number] = kind
    for kind, numbers, _ in clauses:
        if numbers is None:
            kinds.update({n: kind for n in range(1, count + 1) if n not in kinds})
    missing = [n for n in range(1, count + 1) if n not in kinds]
    if missing:
        raise MarkerError(f"commands {missing} are neither run nor skipped")
    for kind, _, _ in clauses:
        if kind not in kinds.values():
            raise MarkerError(f"the {kind!r} clause takes no command")
    for named in TEST_FILE.findall(reason):
        if not (ROOT / named).is_file():
            raise MarkerError(f"the reason names {named}, which does not exist")
    return Plan(tuple(kinds[n] for n in range(1, count + 1)), reason)


def classify(readme: Readme) -> Iterator[tuple[Block, Plan]]:
    """Each block with its plan; a block whose marker is missing or wrong adds a problem."""
    for block in readme.blocks:
        if block.marker is None:
            readme.problems.append(
                f"{block.name}: a {block.language} block without a readme-test marker "
                "(say on the line before it whether it runs: run, slow or skip [N]: WHY)"
            )
            continue
        if not block.commands:
            readme.problems.append(f"{block.name}: a {block.language} block with no command")
            continue
        try:
            yield block, parse_plan(block.marker, len(block.commands))
        except MarkerError as exc:
            readme.problems.append(f"{block.name}: {exc}")


def needs_shared(command: str) -> bool:
    return "../shared" in command


README_TEXT = README.read_text(encoding="utf-8")
PLANNED = list(classify(parse_readme(README_TEXT)))
CASES = [
    pytest.param(
        block,
        plan,
        kind,
        id=f"line{block.line}-{kind}",
        marks=[pytest.mark.slow] * (kind == "slow"),
    )
    for block, plan in PLANNED
    for kind in KINDS
    if kind in plan.kinds
]


# --- the markers ---------------------------------------------------------------------------


def test_every_shell_block_is_classified() -> None:
    readme = parse_readme(README_TEXT)
    planned = list(classify(readme))
    assert readme.problems == [], "\n".join(readme.problems)
    assert planned, "README.md has no shell block with a readme-test marker"
    assert any("run" in plan.kinds for _, plan in planned)


SAMPLE = """\
Intro.
<!-- readme-test: run 1; skip 2: starts a server (tests/test_readme.py) -->
```bash
.venv/bin/sidecar --help   # a comment stays with its command
# a comment line is no command
.venv/bin/sidecar serve \\
  --config sidecar.yaml
```
"""


def test_a_marker_classifies_each_command() -> None:
    readme = parse_readme(SAMPLE)
    ((block, plan),) = classify(readme)
    assert readme.problems == []
    assert block.line == 3
    assert block.commands == (
        ".venv/bin/sidecar --help   # a comment stays with its command",
        ".venv/bin/sidecar serve  --config sidecar.yaml",
    )
    assert plan.numbers("run") == (1,)
    assert plan.numbers("skip") == (2,)
    assert plan.reason == "starts a server (tests/test_readme.py)"


@pytest.mark.parametrize(
    ("marker", "problem"),
    [
        (None, "without a readme-test marker"),
        ("<!-- readme-test: run 1 -->", "commands [2] are neither run nor skipped"),
        ("<!-- readme-test: run 1-2; slow 2 -->", "command 2 is in two clauses"),
        ("<!-- readme-test: run; skip 2 -->", "a skip needs a reason"),
        ("<!-- readme-test: run; slow -->", "two clauses without numbers"),
        ("<!-- readme-test: run 3 -->", "the block has commands 1 to 2"),
        ("<!-- readme-test: walk -->", "cannot read 'walk'"),
        ("<!-- readme-test: skip: tests/e2e/test_nothing_here.py -->", "does not exist"),
    ],
)
def test_a_command_cannot_escape(marker: str | None, problem: str) -> None:
    text = SAMPLE.replace(SAMPLE.splitlines()[1], marker) if marker else SAMPLE
    if marker is None:
        text = text.replace(SAMPLE.splitlines()[1] + "\n", "\n")
    readme = parse_readme(text)
    assert list(classify(readme)) == []
    assert len(readme.problems) == 1
    assert problem in readme.problems[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<!-- readme-test: run -->\n\n```bash\nls\n```\n", "not right before a fence"),
        ("<!-- readme-test: run -->\n```yaml\na: 1\n```\n", "on a 'yaml' block"),
        ("```\n.venv/bin/sidecar --help\n```\n", "reads like commands"),
    ],
)
def test_markers_and_commands_out_of_place(text: str, problem: str) -> None:
    readme = parse_readme(text)
    list(classify(readme))
    assert problem in "\n".join(readme.problems)


# --- a fresh clone -------------------------------------------------------------------------


def git(*args: str, cwd: Path = ROOT, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # never touch the checkout's index
    done = subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}"
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the repository as committed, plus the working tree's changes to
    tracked files, with this venv as .venv and ../shared linked when there is one."""
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: nothing to clone")
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        pytest.skip("the tests do not run in a virtual environment: no .venv for the clone")
    base = tmp_path_factory.mktemp("readme")
    target = base / "main"
    git("clone", "--quiet", str(ROOT), str(target))
    changes = git("diff", "HEAD", "--binary")
    if changes:
        git("apply", "--whitespace=nowarn", cwd=target, stdin=changes)
    (target / ".venv").symlink_to(venv, target_is_directory=True)
    if (SHARED / "data").is_dir():
        (base / "shared").symlink_to(SHARED, target_is_directory=True)
    return target


def reader_env(clone: Path) -> dict[str, str]:
    """The environment of a reader's shell: no venv activated, the clone's code."""
    venv_bins = {(Path(sys.prefix) / "bin").resolve(), (ROOT / ".venv" / "bin").resolve()}
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
    }
    env["PATH"] = os.pathsep.join(
        part
        for part in env.get("PATH", "").split(os.pathsep)
        if part and Path(part).resolve() not in venv_bins
    )
    env["PYTHONPATH"] = str(clone)
    return env


def run_script(commands: list[str], clone: Path, timeout: float) -> tuple[int, str]:
    script = "\n".join(
        ["set -euo pipefail", "trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT", *commands, ""]
    )
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=clone, env=reader_env(clone), start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\n[killed after {timeout:.0f} s]"
    finally:
        with suppress(ProcessLookupError):  # whatever the script left behind
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, output


def test_links_stay_inside_the_repository(clone: Path) -> None:
    broken = []
    for found in LINK.finditer(README_TEXT):
        target = found["target"].split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        path = (clone / target).resolve()
        if not path.is_relative_to(clone.resolve()) or not path.exists():
            broken.append(found[0])
    assert broken == [], f"links to what a fresh clone does not have: {broken}"


@pytest.mark.parametrize(("block", "plan", "kind"), CASES)
def test_readme_block(block: Block, plan: Plan, kind: str, clone: Path) -> None:
    if kind == "skip":
        pytest.skip(f"{block.name} commands {list(plan.numbers('skip'))}: {plan.reason}")
    chosen = [
        command
        for command, its in zip(block.commands, plan.kinds, strict=True)
        if its == "run" or (kind == "slow" and its == "slow")
    ]
    have_shared = (clone.parent / "shared" / "data").is_dir()
    if not have_shared and kind == "slow" and any(map(needs_shared, chosen)):
        pytest.skip(f"{block.name} needs {SHARED / 'data'} (the evaluation data, not checked in)")
    if not have_shared:
        chosen = [command for command in chosen if not needs_shared(command)]
        if not chosen:
            pytest.skip(f"{block.name} needs {SHARED / 'data'} (the evaluation data)")
    code, output = run_script(chosen, clone, TIMEOUT_S[kind])
    assert code == 0, (
        f"{block.name}: a README command failed in a fresh clone (exit {code}):\n"
        + "\n".join(f"  $ {command}" for command in chosen)
        + f"\n--- output (tail) ---\n{output[-4000:]}"
    )
