"""The arms of a prompt ablation: the full prompt, and the prompt with one section left out.

Why leave-one-out rather than add-one-in: the question a prompt's author asks is "does this
section earn its tokens in the prompt I actually ship?", which is the full prompt against the
full prompt minus that section, everything else equal. An optional ``empty`` arm (no system
prompt at all) is the floor: what the model does with the tools and the task alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwright.ablation.sections import SectionedPrompt

__all__ = ["EMPTY", "FULL", "Arm", "make_arms"]

FULL = "full"
EMPTY = "empty"


@dataclass(frozen=True)
class Arm:
    """One arm: its name (``full``, ``empty`` or ``without <section>``), the section it
    removes (``None`` for ``full`` and ``empty``) and the system prompt it runs with."""

    name: str
    removed: str | None
    system: str


def make_arms(prompt: SectionedPrompt, only: Sequence[str] = (), *, empty: bool = False) -> list[Arm]:
    """``full``, then one arm per section in prompt order (only those named in ``only``, when
    given; an unknown name is an :class:`~ctxwright.errors.AblationInputError`), then
    ``empty`` if asked for."""
    names = [prompt.section(n).name for n in only] if only else prompt.names()
    names = list(dict.fromkeys(names))  # a section named twice is one arm
    arms = [Arm(FULL, None, prompt.render())]
    arms += [Arm(f"without {n}", n, prompt.render(without=n)) for n in names]
    if empty:
        arms.append(Arm(EMPTY, None, ""))
    return arms
