"""Memory sidecar: long-term memory for OpenAI-compatible LLM traffic via Envoy ext_proc."""

__version__ = "0.1.0"
