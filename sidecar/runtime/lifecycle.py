"""How a process of the host starts and lives: freezing what start-up allocated out of
the cyclic GC's reach, and stopping when the supervisor that started it is gone.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os

log = logging.getLogger(__name__)

#: How often a child checks that its supervisor is still its parent.
SUPERVISOR_POLL_S = 1.0


def freeze_startup_objects() -> None:
    """Move everything allocated so far (the embedding model, torch, scikit-learn,
    the gRPC stack: millions of objects) out of the cyclic GC's reach, so that full
    collections do not pause the event loop, on the request path, to scan objects
    that live as long as the process."""
    gc.collect()
    gc.freeze()


async def watch_supervisor(pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` when the process that started this one is gone (its parent
    changed), so a worker never outlives a killed supervisor."""
    while not stop.is_set():
        if os.getppid() != pid:
            log.warning("supervisor %d is gone; stopping", pid)
            stop.set()
            return
        await asyncio.sleep(SUPERVISOR_POLL_S)
