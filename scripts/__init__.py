"""The benchmark and tooling scripts, a package run from the repository root:
``.venv/bin/python -m scripts.bench_e2e --help``. Shared helpers: :mod:`scripts.benchlib`."""
