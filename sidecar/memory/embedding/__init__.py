"""Embeddings: the :class:`Embedder` protocol and its backends (sentence-transformers,
ONNX fp32/int8, CUDA graphs, the shared encoder service of a host)."""
