"""Benchmarks and load tests run by hand from the repository (not shipped in the wheel)."""
