"""The deferred tools a framework adapter offers (``integrations/deferred.py``): the same
``search_tools`` and ``call_tool`` a ctxwright session has, over a framework's own tools."""

from __future__ import annotations

import json

from ctxwright.integrations.deferred import CALL_TOOL, SEARCH_TOOL, DeferredCatalog, FrameworkTool

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WHAT = ["weather", "local time", "population", "mayor", "area", "elevation", "airport code", "currency"]


def _catalog() -> DeferredCatalog:
    def make(what: str) -> FrameworkTool:
        return FrameworkTool(
            f"get_{what.replace(' ', '_')}", f"Get the {what} of a city.", CITY, lambda city: f"{what} of {city}: 42"
        )

    return DeferredCatalog([make(w) for w in WHAT])


def test_search_finds_the_tool_with_its_full_schema_and_call_runs_it() -> None:
    c = _catalog()
    found = json.loads(c.search_tools("what is the weather in a city", 2))
    names = [t["function"]["name"] for t in found["tools"]]
    assert names[0] == "get_weather" and len(names) <= 2
    assert found["tools"][0]["function"]["parameters"] == CITY
    assert c.call_tool("get_weather", {"city": "Oslo"}) == "weather of Oslo: 42"


def test_a_wrong_call_is_the_structured_error_with_the_closest_names() -> None:
    c = _catalog()
    err = json.loads(c.call_tool("get_weather", {"town": "Oslo"}))["error"]
    assert "'city' is a required property" in err["message"] and "Expected for get_weather" in err["hint"]
    err = json.loads(c.call_tool("weather", {"city": "Oslo"}))["error"]
    assert err["message"] == "there is no tool named 'weather'" and "get_weather" in err["hint"]


def test_the_two_tools_are_ctxwrights_own() -> None:
    specs = _catalog().specs
    assert list(specs) == [SEARCH_TOOL, CALL_TOOL]
    assert set(specs[CALL_TOOL].to_wire()["function"]["parameters"]["properties"]) == {"name", "arguments"}
