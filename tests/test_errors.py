"""Every exception ctxwright defines lives in ``ctxwright/errors.py`` under ``CtxwrightError``,
and every message it raises says what to do."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import ctxwright
from ctxwright import errors
from ctxwright.errors import CtxwrightError


def _modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(ctxwright.__path__, prefix="ctxwright.")]


def test_no_exception_class_is_defined_outside_errors_py():
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found.append(f"{name}.{attr}")
    found = [f for f in found if not f.startswith("ctxwright.errors.")]
    assert not found, f"move these exception classes into src/ctxwright/errors.py (under CtxwrightError): {found}"


def test_every_error_is_a_ctxwright_error_with_a_docstring():
    classes = [
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]
    assert classes
    for cls in classes:
        assert issubclass(cls, CtxwrightError), f"{cls.__name__} must derive from CtxwrightError"
        assert (cls.__doc__ or "").strip(), f"{cls.__name__} needs a docstring saying when it is raised"
    assert sorted(errors.__all__) == sorted(c.__name__ for c in classes), "errors.__all__ lists every error"


def test_value_errors_stay_value_errors():
    # callers written before errors.py caught these as ValueError
    for cls in (errors.CalculatorError, errors.TodoError, errors.LogRecordRejected, errors.EventFormatError):
        assert issubclass(cls, ValueError) and issubclass(cls, CtxwrightError)


def test_messages_that_carry_advice():
    failed = errors.SummaryFailed("timeout", "no summary within 5 s")
    assert failed.reason == "timeout" and failed.detail == "no summary within 5 s"
    assert "falls back" in str(failed)
    malformed = errors.MalformedResponse("http://x/v1 answered HTTP 200 with a JSON list, not an object")
    assert str(malformed).endswith(errors.MalformedResponse.HINT)
