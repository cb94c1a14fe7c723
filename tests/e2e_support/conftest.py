"""Fixtures of the mock LLM's tests: a mock started in the test's event loop, an
OpenAI client pointed at it, and a plain aiohttp session for the wire-level and
``/_mock/*`` routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from openai import AsyncOpenAI

from e2e.mock_llm import MockLLM, start_mock


@pytest.fixture
async def mock() -> AsyncIterator[MockLLM]:
    server = await start_mock()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def client(mock: MockLLM) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=mock.base_url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
