"""Tools named as ``module:function``: how ``ctxwright run --tool`` runs your own functions.

Why a spec string: it lets someone give the agent their own tools without writing a
script -- the function's type hints and docstring already say everything the model needs
(:meth:`Tool.from_function` turns them into the schema). Every way the spec can fail (bad
form, module not found, module raising on import, no such attribute, not callable, hints
that make no schema) becomes one :class:`ConfigError` line naming the spec and the fix.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

from ctxwright.errors import ConfigError
from ctxwright.tools.registry import Tool

__all__ = ["import_from_cwd", "import_tool"]


def import_from_cwd(module_name: str) -> ModuleType:
    """Import ``module_name`` with the current directory on ``sys.path`` first, as
    ``python script.py`` has the script's folder: ``mytools`` finds ``./mytools.py``. The
    callers (``--tool``, the ablation's environment factories) turn its errors into theirs."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


def import_tool(spec: str) -> Tool:
    """The tool named by ``spec``, ``module:function`` (``pkg.mod:Class.method`` works too).

    The current directory is put on ``sys.path`` first, as ``python script.py`` does for
    the script's folder, so ``--tool mytools:add`` finds ``./mytools.py``. An attribute
    that already is a :class:`Tool` (decorated with ``@tool``) is used as it is.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ConfigError(f"tool {spec!r}: write it as module:function, e.g. mytools:add for add() in ./mytools.py")
    cwd = os.getcwd()
    try:
        module = import_from_cwd(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(
                f"tool {spec!r}: no module named {exc.name!r} in the current directory ({cwd}) or the installed "
                "packages; run from the folder that holds it, or check the name"
            ) from None
        raise ConfigError(f"tool {spec!r}: importing {module_name} failed: {exc}; install what it needs") from None
    except Exception as exc:
        raise ConfigError(f"tool {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"tool {spec!r}: {module_name} has no attribute {attr!r}; check the function's name")
        obj = getattr(obj, part)
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ConfigError(f"tool {spec!r}: {attr} is a {type(obj).__name__}, not a function")
    try:
        return Tool.from_function(obj)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"tool {spec!r} cannot be a tool: {exc}") from None
