"""Loopback simulators of hosted providers' APIs, with their documented cache rules.

No hosted provider can be reached from the tests, so each simulator implements the rules its
provider documents -- and refuses what the provider refuses -- on real HTTP, for the official
SDKs to talk to. Benchmarks import them with ``sys.path.insert(0, ROOT / "tests")``.
"""
