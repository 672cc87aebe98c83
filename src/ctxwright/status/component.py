"""The status bar as a component: its operating manual in the system prompt, an
``<agent_status>`` message computed by code before each call.

Cache rule protected: the manual is a global section at the end of the system prompt (the
same bytes in every session that has the bar), and the changing values go to the end of the
trajectory (``status/bar.py`` chooses replace or append by the cost model), never into the
prefix. A resume must keep the bar as the session was started: the manual is in its prefix.
"""

from __future__ import annotations

from pathlib import Path

from ctxwright.core.prefix import Prefix
from ctxwright.errors import PrefixMismatch
from ctxwright.status.bar import OPERATING_MANUAL, StatusBar, StatusConfig
from ctxwright.status.todo import TodoComponent
from ctxwright.tools.component import Component
from ctxwright.tools.registry import ToolRegistry

__all__ = ["StatusComponent"]


class StatusComponent(Component):
    """The manual's section and the bar the context records before each call."""

    name = "status"

    def __init__(self, config: StatusConfig, *, todo: TodoComponent | None, cwd: Path | None) -> None:
        self.config = config
        self.todo = todo
        self.cwd = str(cwd or Path.cwd())
        self.bar = StatusBar(config, todo=todo.todo if todo is not None else None, cwd=self.cwd)

    def sections(self, tools: ToolRegistry) -> list[tuple[str, str]]:
        return [("status_manual", OPERATING_MANUAL)]

    def check_prefix(self, prefix: Prefix, session_id: str) -> None:
        if not prefix.system_prompt.endswith(OPERATING_MANUAL):
            raise PrefixMismatch(
                f"session {session_id} was started without the status bar, whose manual is part of its system "
                "prompt; continue it without the status bar (status=False), or start a new session"
            )

    def fork_with(self, todo: TodoComponent | None) -> StatusComponent:
        """The child's bar: the same manual (shared prefix), the child's own TODO list."""
        return StatusComponent(self.config, todo=todo, cwd=Path(self.cwd))
