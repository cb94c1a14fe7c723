"""constraints.txt (scripts/lock.sh) pins every dependency pyproject.toml names,
so a fresh venv resolves to the versions the suite passed with."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[1]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = version
    return found


def test_every_declared_dependency_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pinned = pins()
    for text in declared:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "torch":  # installed first, as the local CPU wheel (scripts/setup.sh)
            continue
        assert name in pinned, f"{name} is not in constraints.txt: run scripts/lock.sh"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside {requirement.specifier}"
        )
