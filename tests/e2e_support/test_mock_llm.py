"""Running the deterministic mock OpenAI-compatible LLM server (``e2e/mock_llm.py``):
its command line.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


async def test_cli_prints_port_serves_health_and_exits_on_sigterm(
    http: aiohttp.ClientSession,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "e2e.mock_llm",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--latency-ms",
        "1",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        match = re.fullmatch(rb"MOCK_LLM_PORT=(\d+)\n", line)
        assert match is not None, line
        port = int(match[1])
        assert port > 0

        async with http.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
        async with http.get(f"http://127.0.0.1:{port}/_mock/config") as resp:
            assert (await resp.json())["latency_ms"] == 1.0

        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=10)
        assert proc.returncode == 0, stderr.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
