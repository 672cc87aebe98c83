"""Import layering: a lower layer never imports a higher one.

Layers, low to high (docs/architecture.md explains each)::

    errors < core < {backends, cache, store} < tools < defence < {audit, status, compaction, skills, mcp}
        < {recipe, progress} < {agent, proxy, report, telemetry} < {harness, ci} < cli

Within a rank some arrows are forbidden too (:data:`FORBIDDEN`): ``telemetry`` never imports
``agent``, no CLI command module imports ``cli/main.py``, and the compaction pipeline never
imports its manager. And provider usage is read in ``core/usage.py`` alone: the cache package
reads no provider's usage field and picks no shape itself.

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
    # the progress events with data of the layers above core (a compaction's report, the gate's
    # decision) and the call report: below the agent that emits them and the telemetry and CLI
    # that read them, so an observer never imports the agent
    "progress": 6,
    "agent": 7,
    "proxy": 7,
    "report": 7,
    # where a model's attention goes (``attention/``): its views draw into the report's page, and
    # the report draws a session's saved maps with them, so the two share a rank
    "attention": 7,
    # OpenTelemetry export: it turns the agent's progress events (ctxwright/progress.py) and the proxy's
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


#: Arrows forbidden inside a rank, where the ranks alone allow them: (importer prefix, imported
#: prefix, why). A prefix names a module and everything under it.
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (
        "ctxwright.telemetry",
        "ctxwright.agent",
        "telemetry observes the agent from beside it: the events and the call report it reads live "
        "below both (ctxwright/progress.py), so the agent can open telemetry without a circle",
    ),
    (
        "ctxwright.cli",
        "ctxwright.cli.main",
        "cli/main.py builds the parser from every command module; what they share (consoles, the "
        "store, explain()) is in cli/common.py, which main imports too",
    ),
    (
        "ctxwright.compaction.pipeline",
        "ctxwright.compaction.manager",
        "the manager runs the pipeline's tiers; the tiers see the manager through the Compactor "
        "protocol declared in pipeline.py",
    ),
)


def _under(dotted: str, prefix: str) -> bool:
    return dotted == prefix or dotted.startswith(prefix + ".")


def forbidden(edge: Edge) -> str | None:
    """Why ``edge`` is one of the :data:`FORBIDDEN` arrows, or None (a module importing itself
    is no arrow: cli/main.py is under ``ctxwright.cli``)."""
    if edge.importer == edge.imported:
        return None
    for importer, imported, why in FORBIDDEN:
        if _under(edge.importer, importer) and _under(edge.imported, imported):
            return why
    return None


def test_forbidden_arrows_within_a_rank():
    found = [f"{e.path}:{e.line}: {e.importer} imports {e.imported} -- {forbidden(e)}" for e in edges() if forbidden(e)]
    assert not found, "\n".join(found)


def test_compaction_manager_and_pipeline_do_not_import_each_other():
    pairs = {(e.importer, e.imported) for e in edges()}
    manager, pipeline = "ctxwright.compaction.manager", "ctxwright.compaction.pipeline"
    assert not ((manager, pipeline) in pairs and (pipeline, manager) in pairs)
    assert (pipeline, manager) not in pairs


#: The fields of the providers' usage objects whose meaning differs by provider (what the
#: input count includes, where cache reads and writes are): read in ``core/usage.py`` alone.
PROVIDER_USAGE_FIELDS = frozenset(
    {
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "cache_creation",
        "prompt_cache_hit_tokens",
        "prompt_cache_miss_tokens",
        "prompt_tokens_details",
        "input_tokens_details",
        "cache_write_tokens",
    }
)
#: ``core/usage.py``'s readers of one provider's shape: the cache package asks for a call's
#: whole reading (``raw_cache_usage``) once instead of choosing a shape and reading it itself
SHAPE_READERS = frozenset({"read_cache_usage", "usage_provider"})


def usage_shape_reads(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each read of a provider usage field (``u["cache_read_input_tokens"]``,
    ``u.get(...)``, ``"..." in u``) and each import of a per-shape reader of ``core/usage.py``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        key: object = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
            key = node.left.value
        elif isinstance(node, ast.ImportFrom) and node.module == "ctxwright.core.usage":
            out.extend((node.lineno, f"imports {a.name}") for a in node.names if a.name in SHAPE_READERS)
        if key in PROVIDER_USAGE_FIELDS:
            out.append((node.lineno, f"reads {key!r}"))
    return out


def test_the_cache_package_reads_provider_usage_only_through_core_usage():
    """A reply's usage is read in one module: ``cache/reported.py`` used to pick the provider's
    shape and read it through ``core/usage.py`` piece by piece, and back again."""
    found = [
        f"{path.relative_to(SRC.parent.parent)}:{line}: {what}"
        for path in sorted((SRC / "cache").rglob("*.py"))
        for line, what in usage_shape_reads(path.read_text(encoding="utf-8"))
    ]
    assert not found, "read the call's usage with core/usage.py: raw_cache_usage(raw):\n" + "\n".join(found)


# -- the checker itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "importer,imported,bad",
    [
        ("ctxwright.telemetry.spans", "ctxwright.agent.progress", True),
        ("ctxwright.telemetry.spans", "ctxwright.progress", False),
        ("ctxwright.agent.wiring", "ctxwright.telemetry.spans", False),
        ("ctxwright.cli.gate", "ctxwright.cli.main", True),
        ("ctxwright.cli.gate", "ctxwright.cli.common", False),
        ("ctxwright.cli.main", "ctxwright.cli.main", False),
        ("ctxwright.__main__", "ctxwright.cli.main", False),
        ("ctxwright.compaction.pipeline", "ctxwright.compaction.manager", True),
        ("ctxwright.compaction.manager", "ctxwright.compaction.pipeline", False),
    ],
)
def test_the_forbidden_arrows(importer, imported, bad):
    assert (forbidden(Edge(importer, imported, "x.py", 1)) is not None) is bad


def test_usage_shape_reads_are_seen():
    source = """
from ctxwright.core.usage import as_object, read_cache_usage
def f(u, raw):
    a = u["cache_read_input_tokens"]
    b = u.get("prompt_cache_hit_tokens")
    c = "cache_creation" in u
    out = {"cache_read_input_tokens": 3}  # writing a body is no read
    return raw_cache_usage(raw), u.get("input_tokens")
"""
    assert [line for line, _ in usage_shape_reads(source)] == [2, 4, 5, 6]


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
        ("ctxwright.progress", "ctxwright.compaction.pipeline", False),
        ("ctxwright.progress", "ctxwright.agent.context", True),
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
