"""Test and benchmark harness, run from the repository."""
