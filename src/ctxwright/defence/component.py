"""The prompt-injection defence level as a component: its system-prompt section and its
confirmation gate.

Cache rule protected: the level's section is part of the frozen prefix, so it is added only
when some tool's results will be marked (an untrusted tool, deferred ones included) and a
resume with a level whose section differs is refused -- the session's prefix bytes, and the
provider's cache of them, stay as they were started.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxwright.core.prefix import Prefix
from ctxwright.defence.gate import ApprovalMode, Approver, Gate, build_gate
from ctxwright.defence.levels import Features, levels_in
from ctxwright.defence.policy import GatePolicy
from ctxwright.errors import PrefixMismatch
from ctxwright.tools.component import Component
from ctxwright.tools.registry import ToolRegistry

__all__ = ["DefenceComponent"]


class DefenceComponent(Component):
    """The level's features, its section (when a tool is untrusted) and the gate (D4, D5),
    every gate rule checked when the component is made, before the session starts."""

    name = "defence"

    def __init__(
        self,
        feats: Features,
        *,
        approve: ApprovalMode | Approver | None,
        allow: GatePolicy | Mapping[str, Any] | None,
        gate_rules: str | Path | None,
        approve_timeout: float | None,
        workspace: Path | None,
    ) -> None:
        self.features = feats
        self.gate: Gate | None = build_gate(
            enabled=feats.gate,
            provenance=feats.provenance,
            approve=approve,
            allow=allow,
            gate_rules=gate_rules,
            approve_timeout=approve_timeout,
            workspace=workspace,
        )
        self.section: str | None = None

    def sections(self, tools: ToolRegistry) -> list[tuple[str, str]]:
        # the section only when some tool's results will be marked (deferred ones included)
        text = self.features.prompt_section if any(t.trust == "untrusted" for t in tools) else None
        self.section = text
        return [("defence", text)] if text is not None else []

    def check_prefix(self, prefix: Prefix, session_id: str) -> None:
        present = levels_in(prefix.system_prompt)
        section = self.section
        if (section is None and present) or (section is not None and f"\n\n{section}" not in prefix.system_prompt):
            started = f"defence level {present[0]!r}" if present else "no defence section (level 'none')"
            raise PrefixMismatch(
                f"session {session_id} was started with {started} in its system prompt; "
                f"defence={self.features.level!r} would change the prefix. Leave defence out to continue it as "
                "it was started, or start a new session"
            )
