"""Operating the sidecar: the HTTP admin surface and CLI commands."""
