"""A task's environment: fresh tools and state for every run, and the state read back by code.

Why a factory and not a list of tools: tools that change something (a refund, a cancelled
order) leave state behind, and a run that started from the last run's state would be scored on
someone else's work; with ``trials`` and arms run one after another, that would mix arms. So a
task names a factory (``"env": "domain.py:make_env"``), called once per run, that returns an
:class:`Environment`: the tools over a freshly built state, and a function that reads that state
as plain JSON-like data for ``expected_state``.

``env`` is ``file.py:factory`` (a path relative to the tasks file, so a domain's folder holds
its tasks and tools together and runs from anywhere) or ``package.module:factory`` (imported
as ``--tool`` imports: the current directory first). The factory may return an
:class:`Environment`, or any object with ``tools`` and a ``state()`` method.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ctxwright.errors import AblationInputError
from ctxwright.tools.imported import import_from_cwd

__all__ = ["Environment", "EnvironmentFactory", "load_factory", "load_object", "make_environment"]


@dataclass
class Environment:
    """What one run of a task works on: its tools (functions or :class:`~ctxwright.tools.registry.Tool`)
    and ``state``, a function returning the state after the run (nested dicts and lists of
    plain values; ``expected_state`` paths walk it)."""

    tools: Sequence[Any]
    state: Callable[[], Mapping[str, Any]] = field(default=lambda: {})


EnvironmentFactory = Callable[[], Any]

_modules: dict[Path, ModuleType] = {}


def _load_file(path: Path, spec: str, where: str) -> ModuleType:
    """The module of a ``.py`` file, loaded once per process under a private name."""
    path = path.resolve()
    if path in _modules:
        return _modules[path]
    if not path.is_file():
        raise AblationInputError(
            f"{where}: {spec!r}: no file {path}; a relative path starts at the tasks file's folder"
        )
    name = f"ctxwright_ablation_env_{len(_modules)}_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise AblationInputError(f"{where}: {spec!r}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and typing look a module up by name while it runs
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise AblationInputError(f"{where}: {spec!r}: running {path.name} raised {type(exc).__name__}: {exc}") from None
    _modules[path] = module
    return module


def load_object(spec: str, *, base: Path | None = None, where: str = "env") -> Any:
    """The object named by ``spec``: ``file.py:attr`` (relative to ``base``) or ``module:attr``."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target.strip() or not attr.strip():
        raise AblationInputError(f"{where}: {spec!r}: write it as file.py:attr or module:attr")
    if target.endswith(".py"):
        module = _load_file((base or Path.cwd()) / Path(target).expanduser(), spec, where)
    else:
        try:
            module = import_from_cwd(target)
        except Exception as exc:
            raise AblationInputError(
                f"{where}: {spec!r}: importing {target} failed ({type(exc).__name__}: {exc}); check the "
                "name, or give the file as path/to/file.py:factory"
            ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AblationInputError(f"{where}: {spec!r}: {target} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_factory(spec: str, *, base: Path | None = None, where: str = "env") -> EnvironmentFactory:
    """The environment factory named by ``spec`` (see :func:`load_object`)."""
    obj = load_object(spec, base=base, where=where)
    if not callable(obj):
        raise AblationInputError(f"{where}: {spec!r} is a {type(obj).__name__}, not a factory")
    factory: EnvironmentFactory = obj
    return factory


def make_environment(factory: EnvironmentFactory, spec: str) -> Environment:
    """Call ``factory`` and check what it returned has ``tools`` and ``state()``."""
    made = factory()
    if isinstance(made, Environment):
        return made
    tools, state = getattr(made, "tools", None), getattr(made, "state", None)
    if tools is None or not callable(state):
        raise AblationInputError(
            f"env {spec!r} returned a {type(made).__name__}: return ctxwright.ablation.Environment(tools=[...], "
            "state=...) or an object with .tools and .state()"
        )
    return Environment(list(tools), state)
