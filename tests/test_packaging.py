"""The packaging metadata: what setuptools reads from pyproject.toml, checked without a build."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_the_license_is_an_spdx_expression_with_its_file():
    """PEP 639: ``license = { text = ... }`` is deprecated (setuptools warns on every build, and
    will refuse it); the license is an SPDX expression, the file named by ``license-files``,
    and no ``License ::`` classifier beside them (setuptools refuses the two together)."""
    project = _pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))


def test_the_build_needs_a_setuptools_that_reads_pep_639():
    """An SPDX ``license`` string is read by setuptools 77 and later (earlier ones reject it)."""
    (req,) = [r for r in _pyproject()["build-system"]["requires"] if r.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", req)
    assert match and int(match.group(1)) >= 77
