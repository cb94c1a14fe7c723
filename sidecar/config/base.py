"""What every configuration model shares: the strict, frozen base model, the
constrained number types and the validators several sections use.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")

Port = Annotated[int, Field(ge=0, le=65535)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _on_off(value: object) -> object:
    """YAML 1.1 reads an unquoted ``on``/``off`` as true/false: a switch that takes
    ``"on"``/``"off"`` reads them as meant."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


def _header_name(value: str) -> str:
    lowered = value.strip().lower()
    if not _HEADER_NAME.match(lowered):
        raise ValueError(f"not a valid HTTP header name: {value!r}")
    return lowered
