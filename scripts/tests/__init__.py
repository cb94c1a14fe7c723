"""Tests of the benchmark scripts themselves (their verdicts and warm-up), kept out of
the product suite under tests/; run with it (``testpaths``)."""
