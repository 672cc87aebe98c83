"""MCP servers' tools as ctxwright :class:`~ctxwright.tools.registry.Tool` objects.

What this module decides:

* **Names.** A tool is offered as ``SERVER__TOOL`` (the server's name from its
  ``initialize`` answer), made safe for OpenAI-compatible APIs, which accept only
  ``[A-Za-z0-9_-]{1,64}`` (MCP names may hold dots, slashes, spaces): other characters
  become ``_``, and a name over 64 characters is cut and given a short hash of the original
  so two long names stay apart. Two sources of one name -- two servers of the same name,
  two tools that sanitize alike, a server tool and a local tool -- are refused, naming both,
  never silently renamed: the model's view of a tool must not depend on start order.
* **Schemas verbatim.** The server's ``inputSchema`` becomes the tool's parameters byte for
  byte (canonical JSON, like every tool); arguments are checked against it with
  ``jsonschema`` before the call is sent (``Tool.from_schema``).
* **Results are external content.** Every MCP tool is ``trust="untrusted"``, so its result
  is marked as ``<external_content ...>`` where it is recorded (``defence/``). Its
  ``effects`` are ``external``, MCP's own default (``destructiveHint`` and ``openWorldHint``
  default to true: a server's tool may send, delete or pay), unless the user trusts the
  server (``mcp_trust``): only then do its annotations count (:func:`effects_of`). Text blocks are
  joined; an image, audio clip or binary resource becomes a one-line description (the chat
  APIs take no images in a ``tool`` message); ``isError`` becomes a tool error.
* **A changing tool list never touches the prefix.** When a server sends
  ``tools/list_changed``, :meth:`McpTools.refresh` lists it again; tools it adds become
  deferred tools (callable, searchable, never in the frozen ``tools`` array) and tools it
  removes answer with a clear error. The harness appends a ``<system-reminder>`` user
  message (:func:`reminder`) saying what changed, the way it announces skills.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import mcp.types as mt

from ctxwright.core.messages import canonical_json
from ctxwright.core.progress import EventSink, McpWarning, ignore
from ctxwright.core.request import ToolSpec
from ctxwright.core.skills_catalog import REMINDER_CLOSE, REMINDER_OPEN
from ctxwright.errors import McpServerError, McpToolError
from ctxwright.mcp.connection import (
    DEFAULT_RESULT_CAP_MB,
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    McpConnection,
)
from ctxwright.tools.registry import Effects, Tool

__all__ = ["SEPARATOR", "McpTools", "describe_content", "effects_of", "reminder", "safe_name", "tool_name"]

#: Between the server's name and the tool's: ``github__create_issue``.
SEPARATOR = "__"
_MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
#: Seconds the harness gives an MCP tool call beyond the SDK's own timeout, so the SDK's
#: clearer timeout error answers before the agent loop abandons the call.
_LOOP_MARGIN_S = 5.0


def safe_name(text: str) -> str:
    """``text`` with every run of characters outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _UNSAFE.sub("_", text).strip("_") or "tool"


def effects_of(annotations: mt.ToolAnnotations | None, *, trusted: bool) -> Effects:
    """A server tool's ``effects``: ``external`` unless the user ``trusted`` its server; then
    from its MCP annotations: ``readOnlyHint`` -> ``read``; otherwise ``openWorldHint`` false
    -> ``write`` (it changes only its own environment); otherwise -- nothing said, or an
    open world -- ``external``.

    Why trust decides: the hints are the server's own claims, and ``read`` takes a tool out
    of the confirmation gate -- a server that says ``readOnlyHint: true`` of its
    ``send_email`` would otherwise be waved through (the MCP spec itself says clients must
    treat annotations as untrusted unless they come from trusted servers). Its results stay
    untrusted either way."""
    if annotations is None or not trusted:
        return "external"
    if annotations.read_only_hint is True:
        return "read"
    if annotations.open_world_hint is False:
        return "write"
    return "external"


def tool_name(server: str, tool: str) -> str:
    """The ctxwright name of ``tool`` of ``server``: ``SERVER__TOOL``, OpenAI-safe, at most
    64 characters (a longer one keeps its start and ends with a hash of the whole)."""
    name = f"{safe_name(server)}{SEPARATOR}{safe_name(tool)}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def describe_content(blocks: Iterable[Any], structured: Any = None) -> str:
    """The text of an MCP result's content blocks, one after another; a non-text block as a
    short description (``[image: image/png, 1.2 KB]``); the structured content as JSON
    when there is no text."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, mt.ImageContent):
            parts.append(f"[image: {block.mime_type}, {_size(block.data)}; not shown]")
        elif isinstance(block, mt.AudioContent):
            parts.append(f"[audio: {block.mime_type}, {_size(block.data)}; not shown]")
        elif isinstance(block, mt.ResourceLink):
            parts.append(f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]")
        elif isinstance(block, mt.EmbeddedResource):
            res = block.resource
            if isinstance(res, mt.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                kind = res.mime_type or "binary"
                parts.append(f"[resource {res.uri}: {kind}, {_size(res.blob)}; not shown]")
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content; not shown]")
    if not parts and structured is not None:
        return canonical_json(structured)
    return "\n".join(parts)


def _size(b64: str) -> str:
    n = len(b64) * 3 // 4
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KB"


@dataclass
class _Source:
    """One ctxwright tool name's origin: which server, under which MCP name."""

    conn: McpConnection
    mcp_name: str


@dataclass
class McpTools:
    """Started MCP servers and their tools, by ctxwright name.

    Build with :meth:`start`; :attr:`tools` is every tool made so far (a removed one stays,
    answering with an error, since a frozen prefix may still list it); :meth:`live` the
    names the servers list now.
    """

    connections: list[McpConnection]
    timeout: float = DEFAULT_TIMEOUT_S
    on_event: EventSink = ignore
    tools: dict[str, Tool] = field(default_factory=dict)
    _sources: dict[str, _Source] = field(default_factory=dict)
    _live: set[str] = field(default_factory=set)
    _prefixes: dict[str, McpConnection] = field(default_factory=dict)
    #: the prefixes of the servers whose annotations count (``mcp_trust``)
    _trusted: set[str] = field(default_factory=set)
    _closed: bool = False

    @classmethod
    def start(
        cls,
        commands: Sequence[str | Sequence[str]],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        reserved: Iterable[str] = (),
        on_event: EventSink | None = None,
        trusted: Iterable[str] = (),
        result_cap_mb: float = DEFAULT_RESULT_CAP_MB,
    ) -> McpTools:
        """Start every server (in parallel: each Python server takes a second or two to
        import its SDK), list their tools and build them. If any server fails, the ones
        already started are stopped and :class:`McpServerError` names the failed one.
        ``reserved``: names already taken by other tools (a clash is refused); ``trusted``:
        the servers (by the ``SERVER`` of ``SERVER__TOOL``, or the name the server gives)
        whose annotations count -- a name that is no server's is refused, since a typo
        would leave the user believing a server trusted."""
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(commands)))) as pool:
            futures = [
                pool.submit(
                    McpConnection, c, timeout=timeout, startup_timeout=startup_timeout, result_cap_mb=result_cap_mb
                )
                for c in commands
            ]
        started: list[McpConnection] = []
        errors: list[BaseException] = []
        for f in futures:
            exc = f.exception()
            if exc is None:
                started.append(f.result())
            else:
                errors.append(exc)
        mgr = cls(started, timeout=timeout, on_event=on_event or ignore)
        try:
            if errors:
                raise errors[0]
            taken = set(reserved)
            for conn in started:
                prefix = safe_name(conn.server_name or Path(conn.argv[-1]).stem)
                other = mgr._prefixes.get(prefix)
                if other is not None:
                    raise McpServerError(
                        f"two MCP servers are both named {prefix!r} (`{other.command}` and `{conn.command}`), so their "
                        f"tools would share names ({prefix}{SEPARATOR}...); connect only one of them"
                    )
                mgr._prefixes[prefix] = conn
            mgr._trusted = _trusted_prefixes(mgr._prefixes, trusted)
            for prefix, conn in mgr._prefixes.items():
                for t in conn.tools:
                    name = tool_name(prefix, t.name)
                    clash = mgr._sources.get(name)
                    if clash is not None:
                        raise McpServerError(
                            f"the tools {clash.mcp_name!r} and {t.name!r} of the MCP server `{conn.command}` would both "
                            f"be named {name!r}; tool names must be unique (fix the server's tool names)"
                        )
                    if name in taken:
                        raise McpServerError(
                            f"the tool {t.name!r} of the MCP server `{conn.command}` would be named {name!r}, which "
                            "another tool of this agent already has; rename that tool or drop the server"
                        )
                    made = mgr._make(conn, prefix, t, deferred=None)  # the harness's defer_tools decides
                    if made is not None:
                        mgr._live.add(made.name)
        except BaseException:
            mgr.close()
            raise
        return mgr

    # -- tools --------------------------------------------------------------------------
    def _make(self, conn: McpConnection, prefix: str, t: mt.Tool, *, deferred: bool | None) -> Tool | None:
        """The ctxwright tool for ``t`` (kept in :attr:`tools`), or ``None`` with a warning
        when its schema is not usable."""
        name = tool_name(prefix, t.name)
        description = (t.description or t.title or "").strip() or f"The {t.name} tool of the MCP server {prefix}."
        try:
            made = Tool.from_schema(
                name,
                description,
                dict(t.input_schema),
                self._caller(name),
                timeout_s=self.timeout + _LOOP_MARGIN_S,
                deferred=deferred,
                trust="untrusted",
                effects=effects_of(t.annotations, trusted=prefix in self._trusted),
                source=f"the MCP server `{conn.command}`",
            )
        except ValueError as exc:
            self.on_event(McpWarning(message=f"skipped {t.name!r} of `{conn.command}`: {exc}"))
            return None
        self.tools[name] = made
        self._sources[name] = _Source(conn, t.name)
        return made

    def _caller(self, name: str) -> Callable[..., str]:
        def call(**arguments: Any) -> str:
            src = self._sources[name]
            if name not in self._live:
                raise McpToolError(
                    f"{name} was removed by its MCP server `{src.conn.command}` (it sent tools/list_changed)",
                    error_type="mcp_tool_removed",
                    hint="This tool no longer exists; do not call it again. Use another tool.",
                )
            result = src.conn.call(src.mcp_name, arguments)
            text = describe_content(result.content, result.structured_content)
            if result.is_error:
                raise McpToolError(
                    text or f"{name} failed (its server gave no message)",
                    error_type="mcp_tool_error",
                    hint="The MCP tool reported an error: read it, fix the arguments and retry, or use another tool.",
                    external=True,
                )
            return text

        return call

    def stub(self, spec: ToolSpec) -> Tool:
        """A tool for ``spec`` -- an MCP tool a resumed session's prefix lists but its server
        no longer does -- that answers with the removed-tool error."""
        conn = self._owner(spec.name)
        assert conn is not None, spec.name
        made = Tool.from_schema(
            spec.name, spec.description, spec.parameters, self._caller(spec.name), trust="untrusted", effects="external"
        )
        self.tools[spec.name] = made
        self._sources[spec.name] = _Source(conn, spec.name.split(SEPARATOR, 1)[-1])
        return made

    def owns(self, name: str) -> bool:
        """True if ``name`` is (or would be) the name of one of these servers' tools."""
        return self._owner(name) is not None

    def _owner(self, name: str) -> McpConnection | None:
        if name in self._sources:
            return self._sources[name].conn
        prefix = name.split(SEPARATOR, 1)[0] if SEPARATOR in name else None
        return self._prefixes.get(prefix) if prefix is not None else None

    def live(self) -> list[str]:
        """The names the servers list now, in server then listing order."""
        return [n for n in self.tools if n in self._live]

    def source(self, name: str) -> str:
        """``server`` (``command``) of a tool, for messages."""
        src = self._sources[name]
        return f"{src.conn.server_name or '?'} (`{src.conn.command}`)"

    def refresh(self, reserved: Iterable[str] = ()) -> list[Tool]:
        """List again every server that sent ``tools/list_changed`` since the last refresh;
        update which tools are live and return the tools made for names never seen before
        (deferred). A server that cannot be listed keeps its last listing (warning)."""
        made: list[Tool] = []
        taken = set(reserved)
        for prefix, conn in self._prefixes.items():
            if not conn.changed():
                continue
            try:
                listing = conn.list_tools()
            except McpToolError as exc:
                self.on_event(McpWarning(message=f"could not list the changed tools of `{conn.command}`: {exc}"))
                continue
            now: set[str] = set()
            for t in listing:
                name = tool_name(prefix, t.name)
                if name in now:
                    self.on_event(McpWarning(message=f"skipped {t.name!r} of `{conn.command}`: {name!r} is taken"))
                    continue
                if name not in self.tools:
                    if name in taken:
                        self.on_event(McpWarning(message=f"skipped {t.name!r} of `{conn.command}`: {name!r} is taken"))
                        continue
                    new = self._make(conn, prefix, t, deferred=True)
                    if new is None:
                        continue
                    made.append(new)
                now.add(name)
            mine = {n for n, s in self._sources.items() if s.conn is conn}
            self._live = (self._live - mine) | now
        return made

    def close(self) -> None:
        """Stop every server (in parallel: each may take its shutdown grace period); then,
        for each server that wrote lines that were not JSON-RPC, one warning that counts them."""
        if not self.connections or self._closed:
            return
        self._closed = True
        with ThreadPoolExecutor(max_workers=min(8, len(self.connections))) as pool:
            list(pool.map(lambda c: c.close(), self.connections))
        for conn in self.connections:
            wrote = conn.lines.summary()
            if wrote:
                first = f"; the first: {conn.lines.first!r}" if conn.lines.first else ""
                self.on_event(McpWarning(message=f"{wrote} from the MCP server `{conn.command}`, ignored{first}"))


def _trusted_prefixes(prefixes: dict[str, McpConnection], names: Iterable[str]) -> set[str]:
    """The prefixes ``names`` designate (a prefix, or a server's own name); a name that
    designates none is :class:`McpServerError`."""
    out: set[str] = set()
    for name in names:
        found = [p for p, c in prefixes.items() if name in (p, c.server_name)]
        if not found:
            known = ", ".join(sorted(prefixes)) or "none"
            raise McpServerError(
                f"--mcp-trust {name!r} names no connected MCP server (connected: {known}); give the SERVER "
                f"of the tools' names SERVER{SEPARATOR}TOOL (library: mcp_trust=)"
            )
        out.update(found)
    return out


def reminder(added: Sequence[Tool], removed: Sequence[str], *, how: str, schemas: bool = False) -> str:
    """The ``<system-reminder>`` user message announcing MCP tools added and removed since the
    session started (or since the last reminder). ``how``: one sentence on calling the added
    ones; ``schemas``: list each one's parameters too (when no ``search_tools`` can show them)."""
    lines = [REMINDER_OPEN, "The tools of a connected MCP server changed."]
    if added:
        lines += [f"New tools, not in your tool list: {how}", "<new_tools>"]
        for t in added:
            params = f"<parameters>{escape(t.spec.parameters_json)}</parameters>" if schemas else ""
            lines.append(
                f"<tool><name>{escape(t.name)}</name><description>{escape(t.description)}</description>{params}</tool>"
            )
        lines.append("</new_tools>")
    if removed:
        lines.append("Removed tools (a call to one fails): " + ", ".join(removed))
    lines.append(REMINDER_CLOSE)
    return "\n".join(lines)
