"""Helpers, fakes and fixtures' building blocks shared by the test packages."""
