"""Loopback simulators of hosted providers, for tests and benchmarks."""
