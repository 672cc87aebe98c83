"""The TODO list: the agent's plan, kept by code, edited by two tools.

Why code keeps it: a plan that lives only in the model's prose drifts and gets lost in a
long context; a list held by the harness is shown in the status bar on every call and
survives compaction and resume. Every change is recorded as a ``todo`` event holding the
whole list (small), so the list is rebuilt exactly from the event log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from ctxwright.core.events import TodoEvent, TodoItem
from ctxwright.errors import TodoError
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool

if TYPE_CHECKING:
    from ctxwright.core.session import Session

Status = Literal["pending", "in_progress", "completed", "cancelled"]
STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "cancelled")


class TodoList:
    """Ordered items with stable ids; at most one ``in_progress`` at a time."""

    def __init__(self, session: Session | None = None, clock: Callable[[], float] = time.time) -> None:
        self.session = session
        self.clock = clock
        self.items: list[TodoItem] = []
        self._next_id = 1
        self._lock = threading.Lock()
        if session is not None:
            self.bind(session)

    def bind(self, session: Session) -> None:
        """Record changes in ``session`` from now on, starting from the list its events hold.

        Separate from construction because the tools must exist (for the prefix) before
        the session does.
        """
        self.session = session
        for ev in session.events:
            if isinstance(ev, TodoEvent):
                self.items = list(ev.items)
                self._next_id = ev.next_id

    def _record(self) -> None:
        if self.session is not None:
            self.session.append(TodoEvent(items=tuple(self.items), next_id=self._next_id))

    def rewrite(self, texts: list[str]) -> list[TodoItem]:
        """Replace the plan. Items whose text is unchanged keep their id, status and times."""
        if not texts:
            raise TodoError("items is empty: send the full list of steps, one short sentence each")
        with self._lock:
            now = self.clock()
            old = {i.text: i for i in self.items}
            new: list[TodoItem] = []
            for t in texts:
                t = str(t).strip()
                if not t:
                    raise TodoError("an item is empty: every item needs a short description")
                if t in old:
                    new.append(old.pop(t))
                else:
                    new.append(TodoItem(self._next_id, t, "pending", now, now))
                    self._next_id += 1
            self.items = new
            self._record()
            return list(self.items)

    def update(self, item_id: int, status: str) -> TodoItem:
        with self._lock:
            if status not in STATUSES:
                raise TodoError(f"unknown status {status!r}: use one of {', '.join(STATUSES)}")
            idx = next((k for k, i in enumerate(self.items) if i.id == item_id), None)
            if idx is None:
                ids = ", ".join(str(i.id) for i in self.items) or "none yet (call rewrite_todo_list first)"
                raise TodoError(f"no TODO item with id {item_id}; the ids are: {ids}")
            if status == "in_progress":
                busy = [i for i in self.items if i.status == "in_progress" and i.id != item_id]
                if busy:
                    raise TodoError(
                        f"item {busy[0].id} ({busy[0].text!r}) is already in_progress; mark it "
                        "completed or cancelled first: only one item may be in progress"
                    )
            it = self.items[idx]
            self.items[idx] = TodoItem(it.id, it.text, status, it.created_at, self.clock())  # type: ignore[arg-type]
            self._record()
            return self.items[idx]

    def render(self) -> str:
        if not self.items:
            return "(empty)"
        mark = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[-]"}
        return "; ".join(f"{mark[i.status]} {i.id}. {i.text}" for i in self.items)

    def tools(self) -> list[Tool]:
        """``rewrite_todo_list`` and ``update_todo_status`` bound to this list."""
        todo = self

        def rewrite_todo_list(items: list[str]) -> str:
            """Replace the TODO list with these steps (the whole plan, in order).

            Args:
                items: every step of the plan, one short sentence each
            """
            todo.rewrite(items)
            return todo.render()

        def update_todo_status(id: int, status: Literal["pending", "in_progress", "completed", "cancelled"]) -> str:
            """Set the status of one TODO item. Only one item may be in_progress.

            Args:
                id: the item's id as shown in the status bar
                status: pending, in_progress, completed or cancelled
            """
            todo.update(id, status)
            return todo.render()

        # the harness's own state: nothing leaves the process
        return [
            Tool.from_function(rewrite_todo_list, trust="trusted", effects="none"),
            Tool.from_function(update_todo_status, trust="trusted", effects="none"),
        ]


class TodoComponent(Component):
    """The TODO tools in the prefix; the list's changes are events of the session, rebuilt
    on resume (:meth:`TodoList.bind`). A child agent gets its own list behind the same bytes."""

    name = "todo"

    def __init__(self) -> None:
        self.todo = TodoList()

    def add_tools(self, build: Build) -> None:
        register_core(build.tools, self.todo.tools(), "the TODO tools (todo=)")

    def own_tools(self) -> list[Tool]:
        return self.todo.tools()

    def bind(self, session: Session) -> None:
        self.todo.bind(session)

    def fork(self) -> Component | None:
        return TodoComponent()
