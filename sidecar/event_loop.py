"""Which asyncio event loop runs a sidecar process (``server.event_loop``).

uvloop (libuv) runs the same asyncio code with less work per callback, and the
sidecar's request path is a chain of them: gRPC messages, the hand-off to and from
the inference thread, the reply. Measured through the real Envoy on the 2-core
machine (README, *Latency*): about 1 ms less per read-only request at concurrency 1,
and 10–20 % more requests per second at 16; the do-nothing processor gained nothing.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from sidecar.errors import ConfigError

T = TypeVar("T")

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The uvloop loop factory for ``uvloop`` (and for ``auto`` where uvloop is
    installed); ``None`` for the standard loop. Raises :class:`ConfigError` when
    ``uvloop`` is asked for and cannot be imported."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "server.event_loop: uvloop is not installed (pip install uvloop,"
                " or set event_loop: asyncio)"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(choice: EventLoopChoice) -> str:
    """``uvloop`` or ``asyncio``: what :func:`run` will use for ``choice``."""
    return "asyncio" if loop_factory(choice) is None else "uvloop"


def run(main: Callable[[], Coroutine[Any, Any, T]], choice: EventLoopChoice) -> T:
    """``asyncio.run(main())`` on the chosen loop (the choice is checked before the
    coroutine is created, so a refused choice leaves nothing un-awaited)."""
    factory = loop_factory(choice)
    if factory is None:
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())
