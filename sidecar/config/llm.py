"""The OpenAI-compatible endpoint the sidecar itself calls (``llm``)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from sidecar.config.experimental import LLMExperiments


class LLMConfig(LLMExperiments):
    """The OpenAI-compatible endpoint the sidecar itself calls (extraction, ...).

    With ``base_url`` unset every LLM feature uses its heuristic fallback.
    """

    #: OpenAI-compatible base URL, e.g. ``http://vllm:8000/v1``.
    base_url: str | None = None
    #: Sent as the bearer token (``none`` for servers without auth).
    api_key: SecretStr = SecretStr("none")
    #: Model name sent with each call.
    model: str = "default"
    #: Seconds one call may take.
    timeout_s: float = Field(default=10.0, gt=0)
    #: Sampling temperature (0: deterministic extraction).
    temperature: float = Field(default=0.0, ge=0, le=2)
    #: Most tokens per answer.
    max_tokens: int = Field(default=512, ge=16, le=32768)

    @property
    def configured(self) -> bool:
        return bool(self.base_url)
