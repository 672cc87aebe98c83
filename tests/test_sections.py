"""The cache boundary: dynamic sections refused, variants counted, order advice."""

from __future__ import annotations

import pytest

from ctxwright.core.sections import SystemPromptBuilder
from ctxwright.errors import DynamicSectionInPrefix


def test_dynamic_section_refused_with_name_and_advice():
    b = SystemPromptBuilder().add("role", "You are helpful.").add("clock", "Now: 12:00", scope="dynamic")
    with pytest.raises(DynamicSectionInPrefix) as exc:
        b.build()
    msg = str(exc.value)
    assert "'clock'" in msg and "end of the trajectory" in msg and "status-bar" in msg


def test_build_joins_in_order_and_applies_conditions():
    b = (
        SystemPromptBuilder()
        .add("role", "A")
        .add("beta", "B", condition="beta_tools")
        .add("user", "U", scope="session")
    )
    assert b.build() == "A\n\nU"
    assert b.build({"beta_tools": True}) == "A\n\nB\n\nU"
    with pytest.raises(ValueError, match="unknown condition"):
        b.build({"nope": True})


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_variants_are_two_to_the_n(n):
    b = SystemPromptBuilder().add("base", "x")
    for i in range(n):
        b.add(f"s{i}", f"t{i}", condition=f"c{i}")
    b.add("again", "y", condition="c0") if n else None  # a repeated condition adds no variant
    r = b.variants()
    assert r.variants == 2**n and len(r.conditions) == n
    assert len({b.build({f"c{i}": bool(mask >> i & 1) for i in range(n)}) for mask in range(2**n)}) == 2**n


def test_global_after_session_warns():
    r = SystemPromptBuilder().add("user", "U", scope="session").add("manual", "M").variants()
    assert any("'manual'" in w and "after session" in w for w in r.warnings)


def test_bad_scope_and_duplicates():
    with pytest.raises(ValueError, match="scope"):
        SystemPromptBuilder().add("a", "x", scope="weekly")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        SystemPromptBuilder().add("a", "x").add("a", "y")
