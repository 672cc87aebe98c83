"""The ``read_result`` tool: page back any result a layer shortened (restorable compression).

Offloaded results are read from their file; results that a later layer cleared or marked
as noise are read from the session's own recorded event, which no layer ever edits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxwright.compaction.offload import ResultFiles
from ctxwright.core.events import ToolEvent
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool

if TYPE_CHECKING:
    from ctxwright.core.session import Session

MAX_PAGE_CHARS = 8_000


class ResultReader:
    """Binds the tool to a session and its offload folder (set when the session is known)."""

    def __init__(self) -> None:
        self.session: Session | None = None
        self.files: ResultFiles | None = None

    def bind(self, session: Session, files: ResultFiles) -> None:
        self.session, self.files = session, files

    def read(self, result_id: str, offset: int = 0, limit: int = 4000) -> str:
        """Read part of an earlier tool result that was shortened, offloaded or cleared.

        Args:
            result_id: the result_id named in the shortened result
            offset: the first character to return
            limit: how many characters to return (at most 8000)
        """
        if self.session is None or self.files is None:
            raise RuntimeError("read_result is not bound to a session")
        limit = max(1, min(int(limit), MAX_PAGE_CHARS))
        offset = max(0, int(offset))
        if self.files.exists(result_id):
            page, total = self.files.read(result_id, offset, limit)
        else:
            text = self._recorded(result_id)
            if text is None:
                raise ValueError(
                    f"no result with result_id {result_id!r} in this session; use the result_id "
                    "quoted in a shortened or cleared result"
                )
            page, total = text[offset : offset + limit], len(text)
        end = offset + len(page)
        more = (
            f'; next: read_result(result_id="{result_id}", offset={end}, limit={limit})'
            if end < total
            else "; this is the end"
        )
        return f"[result {result_id}: characters {offset:,}-{end:,} of {total:,}{more}]\n{page}"

    def _recorded(self, result_id: str) -> str | None:
        assert self.session is not None
        for ev in reversed(self.session.events):
            if isinstance(ev, ToolEvent) and ev.result_id == result_id:
                return ev.message.content
        return None

    def tool(self) -> Tool:
        return Tool.from_function(
            self.read,
            name="read_result",
            description="Read part of an earlier tool result that was shortened, "
            "offloaded or cleared, by its result_id.",
            # the page may be an untrusted tool's text: marked as external content, like its preview
            trust="untrusted",
            effects="read",
        )


class ReaderComponent(Component):
    """``read_result`` in the prefix: offloaded and cleared results paged back. The agent
    binds the reader to its session's offload folder; a child agent reads its own results."""

    name = "read_result"

    def __init__(self) -> None:
        self.reader = ResultReader()

    def add_tools(self, build: Build) -> None:
        register_core(build.tools, [self.reader.tool()], "read_result (read_result=)")

    def own_tools(self) -> list[Tool]:
        return [self.reader.tool()]

    def fork(self) -> Component | None:
        return ReaderComponent()
