"""An MCP server whose tool list changes, written with the SDK's low-level ``Server``.

It lists its tools two per page (so a client must follow ``nextCursor``), and a call to
``install`` adds the tool ``weather``, removes ``goodbye`` and sends
``notifications/tools/list_changed``. ``broken`` answers with a JSON-RPC error response
instead of a result; ``weird`` has a schema that is not valid JSON Schema. With
``--installed`` it starts as it is after ``install`` (a server upgraded between two runs).
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

PAGE = 2
OBJECT: dict[str, object] = {"type": "object", "properties": {}}
TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            name="hello",
            description="Say hello to someone.",
            input_schema={
                "type": "object",
                "properties": {"who": {"type": "string", "description": "whom to greet"}},
                "required": ["who"],
            },
        ),
        Tool(name="goodbye", description="Say goodbye.", input_schema=OBJECT),
        Tool(name="install", description="Install the weather tool (changes the tool list).", input_schema=OBJECT),
        Tool(name="broken", description="Answers with a JSON-RPC error.", input_schema=OBJECT),
        Tool(
            name="weird",
            description="A schema that is not valid JSON Schema.",
            input_schema={"type": "object", "properties": {"x": {"type": "nonsense"}}},
        ),
    )
}
WEATHER = Tool(
    name="weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


async def list_tools(ctx: object, params: PaginatedRequestParams | None) -> ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    tools = list(TOOLS.values())
    nxt = str(start + PAGE) if start + PAGE < len(tools) else None
    return ListToolsResult(tools=tools[start : start + PAGE], next_cursor=nxt)


async def call_tool(ctx: object, params: CallToolRequestParams) -> CallToolResult:
    args = params.arguments or {}
    if params.name not in TOOLS:
        return CallToolResult(content=[TextContent(type="text", text=f"no tool {params.name}")], is_error=True)
    if params.name == "hello":
        return CallToolResult(content=[TextContent(type="text", text=f"hello, {args.get('who')}")])
    if params.name == "goodbye":
        return CallToolResult(content=[TextContent(type="text", text="goodbye")])
    if params.name == "weather":
        return CallToolResult(content=[TextContent(type="text", text=f"sunny in {args.get('city')}")])
    if params.name == "broken":
        raise MCPError(INVALID_PARAMS, "broken is broken on purpose")
    TOOLS["weather"] = WEATHER
    TOOLS.pop("goodbye", None)
    await ctx.session.send_tool_list_changed()  # type: ignore[attr-defined]
    return CallToolResult(content=[TextContent(type="text", text="installed weather; removed goodbye")])


if "--installed" in sys.argv:
    TOOLS["weather"] = WEATHER
    TOOLS.pop("goodbye")

server = Server("changing", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))


if __name__ == "__main__":
    anyio.run(main)
