"""``server.event_loop``: which loop a sidecar process runs on."""

from __future__ import annotations

import asyncio
import sys
import warnings

import pytest

from sidecar import event_loop
from sidecar.config import ServerConfig
from sidecar.errors import ConfigError


async def running_loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def test_auto_is_the_default() -> None:
    assert ServerConfig().event_loop == "auto"
    with pytest.raises(ValueError, match="event_loop"):
        ServerConfig(event_loop="trio")  # type: ignore[arg-type]


def test_asyncio_forces_the_standard_loop() -> None:
    assert event_loop.run(running_loop_module, "asyncio") == "asyncio"
    assert event_loop.loop_name("asyncio") == "asyncio"


def test_auto_and_uvloop_run_on_uvloop_where_installed() -> None:
    pytest.importorskip("uvloop")
    assert event_loop.run(running_loop_module, "auto") == "uvloop"
    assert event_loop.run(running_loop_module, "uvloop") == "uvloop"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert event_loop.run(running_loop_module, "auto") == "asyncio"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine created and never awaited would warn
        with pytest.raises(ConfigError, match="uvloop is not installed"):
            event_loop.run(running_loop_module, "uvloop")
