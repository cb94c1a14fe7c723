"""Envoy ext_proc gRPC processor and its pure request/response helpers."""
