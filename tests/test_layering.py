"""Import layering: a lower layer never imports a higher one.

Layers, low to high (docs/architecture.md explains each)::

    errors < core < {backends, cache, store} < tools < defence < {audit, status, compaction, skills, mcp} < recipe
        < {agent, proxy, report, telemetry} < {harness, ci} < cli

``audit``, ``status``, ``compaction``, ``skills`` and ``mcp`` share a layer and must not import each other.

``store`` (persistence: sessions, events, calls, leases, migrations, recovery files) sits just
above ``core``, not in it: it reads the model to migrate and export (events, prefix, the
renderer), while the session in ``core`` must write every event the moment it happens. So
``core`` declares what it needs from a store (``core/records.py: SessionStore``, the typed
``CallRecord``) and ``store.sessions.Store`` implements it -- ``core`` never imports ``store``,
and the two are not one layer importing each other. ``store`` shares its rank with
``backends``: neither needs the other.
Importing within one's own layer is fine (core modules import each other). The package's
``__init__.py`` may import anything; importing the package root itself (``from ctxwright
import Harness``) counts as the top layer, because the root re-exports the public API.

Every ``import`` statement counts, at any depth: module level, inside functions (lazy
imports still create the dependency), and under ``if TYPE_CHECKING:`` (a type that needs a
higher layer is a sign the rule lives in the wrong place).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "ctxwright"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

#: Rank of each layer; a module may import only its own rank or lower ones.
RANKS: dict[str, int] = {
    "errors": 0,
    "core": 1,
    "backends": 2,
    # the providers' cache rules (breakpoints, TTL, prices, miss causes): read by the backends
    # that send them, the audit that explains them and the report that prices them
    "cache": 2,
    "store": 2,
    "tools": 3,
    "defence": 4,
    "audit": 5,
    "status": 5,
    "compaction": 5,
    "skills": 5,
    "mcp": 5,
    # the one declaration of the agent's options: it holds the mechanisms' config types
    # (CompactionConfig, Features, DeferConfig, CatalogEntry...), and the agent, the harness
    # and the CLI read their keywords, defaults and flags from it
    "recipe": 6,
    # the logs agents keep (Claude Code, Codex): read with the audit's reader caps, judged with the
    # cache's causes and prices; the CLI and the status line read them
    "agent_logs": 6,
    "agent": 7,
    "proxy": 7,
    "report": 7,
    # where a model's attention goes (``attention/``): its views draw into the report's page, and
    # the report draws a session's saved maps with them, so the two share a rank
    "attention": 7,
    # OpenTelemetry export: it turns the agent's progress events (agent/progress.py) and the proxy's
    # recorded exchanges (proxy/recorder.py) into spans, so it sits beside both; the wiring
    # (agent/wiring.py) opens it for a Harness or Context, and neither agent nor proxy needs more of it
    "telemetry": 7,
    # answering an agent from a recording: it reads proxy sessions (proxy/log.py), stored
    # sessions (store/export.py) and the audit's reader and conversations; the CI gate builds on it
    "replay": 7,
    "harness": 8,
    # judging a run against a recording, for CI (segments of the prefix, the lock, the gate): it
    # reads proxy sessions (proxy/log.py) and stored sessions, and the gate drives the replay
    # server, so it sits above them, beside the harness it can run as the agent under test
    "ci": 8,
    # prompt ablation: an experiment on the harness (one Harness session per run), above it
    "ablation": 8,
    # ctxwright under agent frameworks: the proxy's recorder in process (proxy/recorder.py), the
    # store; the adapters are above every mechanism they plug into a framework
    "integrations": 8,
    "cli": 9,
    # the gate as a pytest assertion (``from ctxwright.testing import gate``): a user-facing
    # entry point like the CLI, over ``ci``
    "testing": 9,
    "__main__": 9,
}
PEERS = frozenset(
    {"audit", "status", "compaction", "skills", "mcp"}
)  # one layer, packages that never import each other
ROOT_RANK = 9  # the package root re-exports the public API (Harness), so it sits at the top

#: Known violations, (importing module, imported module) -> why it is tolerated for now.
#: Every entry is a debt: the stale-entry test below fails once the import is gone, so the
#: entry is removed with the fix.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module name
    imported: str  # dotted module name, resolved
    path: str
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imports_in(source: str, importer: str, is_package: bool = False) -> list[tuple[str, int]]:
    """``(imported ctxwright module, line)`` for every import statement in ``source``, at any depth."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                module = _resolve_relative(importer, is_package, node.level, node.module)
            else:
                module = node.module or ""
            # `from ctxwright import core` / `from ctxwright.compaction import full` import modules
            targets = [f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names]
        out.extend((t, node.lineno) for t in targets if t == PACKAGE or t.startswith(PACKAGE + "."))
    return out


def edges() -> list[Edge]:
    """Every import of a ctxwright module by a ctxwright module."""
    out: list[Edge] = []
    for path in sorted(SRC.rglob("*.py")):
        importer = module_name(path)
        rel = str(path.relative_to(SRC.parent.parent))
        source = path.read_text(encoding="utf-8")
        for target, line in imports_in(source, importer, path.name == "__init__.py"):
            out.append(Edge(importer, target, rel, line))
    return out


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def layer(dotted: str) -> str | None:
    """The layer of a ctxwright module: its first component under the package, or None for the root."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def rank(dotted: str) -> int:
    name = layer(dotted)
    if name is None:
        return ROOT_RANK
    return RANKS[name]


def problem(edge: Edge) -> str | None:
    """Why ``edge`` breaks the layering, or None."""
    if edge.importer == PACKAGE:  # the package __init__ may import anything
        return None
    src, dst = layer(edge.importer), layer(edge.imported)
    if src == dst:
        return None
    if rank(edge.imported) > rank(edge.importer):
        return (
            f"{src} (layer {rank(edge.importer)}) imports higher layer {dst or PACKAGE} (layer {rank(edge.imported)})"
        )
    if src in PEERS and dst in PEERS:
        return f"{src} and {dst} are peers (layer {rank(edge.importer)}) and must not import each other"
    return None


def test_every_module_has_a_layer():
    unknown = sorted(
        {module_name(p) for p in SRC.rglob("*.py") if layer(module_name(p)) not in RANKS and module_name(p) != PACKAGE}
    )
    assert not unknown, (
        "modules outside every layer (add their package to RANKS in tests/test_layering.py and to the "
        f"layer list in docs/architecture.md): {unknown}"
    )


def test_lower_layers_never_import_higher_ones():
    found = []
    for edge in edges():
        why = problem(edge)
        if why and (edge.importer, edge.imported) not in KNOWN:
            found.append(f"{edge.path}:{edge.line}: {edge.importer} imports {edge.imported} -- {why}")
    assert not found, (
        "import layering broken (errors < core < backends < tools < {audit, status, compaction, skills} < recipe < agent "
        "< harness < cli). Move the rule the lower module needs down into its layer (often core), or "
        "pass it in from above:\n" + "\n".join(found)
    )


def test_known_exceptions_are_still_needed():
    present = {(e.importer, e.imported) for e in edges() if problem(e)}
    stale = sorted(set(KNOWN) - present)
    assert not stale, f"these KNOWN entries no longer occur; delete them from tests/test_layering.py: {stale}"


# -- the checker itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "importer,imported,bad",
    [
        ("ctxwright.core.session", "ctxwright.errors", False),
        ("ctxwright.core.session", "ctxwright.core.records", False),
        ("ctxwright.core.session", "ctxwright.store.sessions", True),
        ("ctxwright.store.sessions", "ctxwright.core.events", False),
        ("ctxwright.core.session", "ctxwright.compaction.manager", True),
        ("ctxwright.core.render", "ctxwright.status.bar", True),
        ("ctxwright.status.bar", "ctxwright.audit.compare", True),
        ("ctxwright.compaction.summarizer", "ctxwright.backends.base", False),
        ("ctxwright.agent.loop", "ctxwright.compaction", False),
        ("ctxwright.tools.registry", PACKAGE, True),
        ("ctxwright.cli.main", PACKAGE, False),
        ("ctxwright.harness", "ctxwright.cli.main", True),
        (PACKAGE, "ctxwright.cli.main", False),
    ],
)
def test_the_rule(importer, imported, bad):
    assert (problem(Edge(importer, imported, "x.py", 1)) is not None) is bad


def test_imports_inside_functions_and_type_checking_blocks_are_seen():
    source = """
from typing import TYPE_CHECKING
import json
from ctxwright.errors import CtxwrightError
if TYPE_CHECKING:
    from ctxwright.agent.loop import Agent

def later():
    import ctxwright.status.bar
    from ctxwright.compaction import full
    from . import render
"""
    got = [t for t, _ in imports_in(source, "ctxwright.core.session")]
    assert got == [
        "ctxwright.errors",
        "ctxwright.agent.loop",
        "ctxwright.status.bar",
        "ctxwright.compaction.full",
        "ctxwright.core.render",
    ]


def test_relative_imports_are_resolved():
    assert _resolve_relative("ctxwright.core.session", False, 1, "store") == "ctxwright.core.store"
    assert _resolve_relative("ctxwright.core.session", False, 2, "errors") == "ctxwright.errors"
    assert _resolve_relative("ctxwright.core", True, 1, "store") == "ctxwright.core.store"
    assert _resolve_relative("ctxwright.core", True, 2, None) == "ctxwright"
