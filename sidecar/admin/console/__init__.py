"""The memory console: an operator's web pages for one user's memory
(:mod:`sidecar.admin.console.routes`)."""
