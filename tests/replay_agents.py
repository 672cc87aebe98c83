"""Small tool-calling agents written with the official SDKs, and the goldens they are replayed
against (for the replay server's tests).

Each agent asks one question, runs the one tool (``read_file``, which returns a fixed text)
for every tool call it gets, and stops at the first reply without one. Each golden is what
that agent sent and received once: the request bodies as the SDK sends them, and recorded
replies whose ids (response ids, tool call ids, output item ids) the agent must carry back.
Some replies are recorded as stream events (the form ``ctxwright proxy`` records), so the
replay's reassembly is used too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai

QUESTION = "What does notes.txt say?"
FILE_TEXT = "hello from notes"
FINAL = "notes.txt says: hello from notes"
SYSTEM = "You are a careful assistant. Use the tools."
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
ARGS = '{"path":"notes.txt"}'


def run_tool(name: str, arguments: str) -> str:
    assert name == "read_file", name
    assert json.loads(arguments or "{}") == {"path": "notes.txt"}
    return FILE_TEXT


# -- agents ---------------------------------------------------------------------------------


def chat_agent(base_url: str, *, stream: bool, question: str = QUESTION, rename: str | None = None) -> dict[str, Any]:
    """An agent on chat completions; ``rename`` sends its tool calls back under another name."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    seen_ids: list[str] = []
    for _ in range(6):
        if stream:
            text, calls, rid = "", {}, None
            for chunk in client.chat.completions.create(
                model="gpt-test",
                messages=messages,
                tools=CHAT_TOOLS,
                stream=True,  # type: ignore[arg-type]
            ):
                rid = chunk.id
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                text += d.content or ""
                for tc in d.tool_calls or ():
                    c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function is not None:
                        c["name"] += tc.function.name or ""
                        c["arguments"] += tc.function.arguments or ""
            tool_calls = [calls[i] for i in sorted(calls)]
        else:
            reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=CHAT_TOOLS)  # type: ignore[arg-type]
            rid = reply.id
            msg = reply.choices[0].message
            text = msg.content or ""
            tool_calls = [
                {"id": t.id, "name": t.function.name, "arguments": t.function.arguments}  # type: ignore[union-attr]
                for t in msg.tool_calls or ()
            ]
        seen_ids.append(str(rid))
        if not tool_calls:
            return {"text": text, "ids": seen_ids}
        messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": rename or c["name"], "arguments": c["arguments"]},
                    }
                    for c in tool_calls
                ],
            }
        )
        for c in tool_calls:
            seen_ids.append(c["id"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": run_tool(c["name"], c["arguments"])})
    raise AssertionError("the agent did not stop")


def responses_agent(base_url: str, *, stream: bool, question: str = QUESTION) -> dict[str, Any]:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0)
    items: list[dict[str, Any]] = [{"role": "user", "content": question}]
    seen_ids: list[str] = []
    for _ in range(6):
        if stream:
            with client.responses.stream(
                model="gpt-test",
                instructions=SYSTEM,
                input=items,
                tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
            ) as s:
                resp = s.get_final_response()
        else:
            resp = client.responses.create(model="gpt-test", instructions=SYSTEM, input=items, tools=RESPONSES_TOOLS)  # type: ignore[arg-type]
        seen_ids.append(resp.id)
        calls = [o for o in resp.output if o.type == "function_call"]
        if not calls:
            return {"text": resp.output_text, "ids": seen_ids}
        for c in calls:
            seen_ids += [str(c.id), c.call_id]
            items.append(
                {"type": "function_call", "id": c.id, "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            )
            items.append(
                {"type": "function_call_output", "call_id": c.call_id, "output": run_tool(c.name, c.arguments)}
            )
    raise AssertionError("the agent did not stop")


def anthropic_agent(base_url: str, *, stream: bool, question: str = QUESTION) -> dict[str, Any]:
    client = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    seen_ids: list[str] = []
    for _ in range(6):
        kw: dict[str, Any] = {"model": "claude-test", "max_tokens": 1024, "system": SYSTEM, "tools": ANTHROPIC_TOOLS}
        if stream:
            with client.messages.stream(messages=messages, **kw) as s:  # type: ignore[arg-type]
                msg = s.get_final_message()
        else:
            msg = client.messages.create(messages=messages, **kw)  # type: ignore[arg-type]
        seen_ids.append(msg.id)
        content: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for b in msg.content:
            if b.type == "text":
                content.append({"type": "text", "text": b.text})
            elif b.type == "tool_use":
                seen_ids.append(b.id)
                content.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
                out = run_tool(b.name, json.dumps(b.input))
                results.append({"type": "tool_result", "tool_use_id": b.id, "content": out})
        if not results:
            return {"text": "".join(c["text"] for c in content if c["type"] == "text"), "ids": seen_ids}
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": results})
    raise AssertionError("the agent did not stop")


AGENTS = {"openai_chat": chat_agent, "openai_responses": responses_agent, "anthropic_messages": anthropic_agent}


# -- goldens --------------------------------------------------------------------------------


def chat_golden(question: str = QUESTION, *, tag: str = "1") -> list[dict[str, Any]]:
    """Two calls: a tool call (recorded as the stream chunks a proxy keeps), then the answer."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    call = {"id": f"call_rec_{tag}", "type": "function", "function": {"name": "read_file", "arguments": ARGS}}
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_rec_{tag}", "content": FILE_TEXT},
    ]
    head = {"id": f"chatcmpl-rec-{tag}a", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": f"call_rec_{tag}",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": ""},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            ],
        },
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ARGS[:9]}}]},
                    "finish_reason": None,
                }
            ],
        },
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ARGS[9:]}}]},
                    "finish_reason": None,
                }
            ],
        },
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}},
    ]
    answer = {
        "id": f"chatcmpl-rec-{tag}b",
        "object": "chat.completion",
        "created": 2,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": FINAL}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 70,
            "completion_tokens": 8,
            "total_tokens": 78,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    return [
        {"request": {"messages": first, "model": "gpt-test", "tools": CHAT_TOOLS}, "response": chunks},
        {"request": {"messages": second, "model": "gpt-test", "tools": CHAT_TOOLS}, "response": answer},
    ]


def responses_golden(question: str = QUESTION) -> list[dict[str, Any]]:
    first = [{"role": "user", "content": question}]
    fc = {"type": "function_call", "id": "fc_rec_1", "call_id": "call_rec_r1", "name": "read_file", "arguments": ARGS}
    second = [*first, fc, {"type": "function_call_output", "call_id": "call_rec_r1", "output": FILE_TEXT}]
    r1 = {
        "id": "resp_rec_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-test",
        "output": [{**fc, "status": "completed"}],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 6,
            "total_tokens": 46,
        },
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    msg = {
        "type": "message",
        "id": "msg_rec_2",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": FINAL, "annotations": []}],
    }
    r2 = {**r1, "id": "resp_rec_2", "output": [msg]}
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {**r1, "status": "in_progress", "output": []}},
        {"type": "response.output_item.done", "sequence_number": 1, "output_index": 0, "item": r1["output"][0]},
        {"type": "response.completed", "sequence_number": 2, "response": r1},
    ]
    body = {"model": "gpt-test", "instructions": SYSTEM, "tools": RESPONSES_TOOLS}
    return [
        {"request": {**body, "input": first}, "response": events},
        {"request": {**body, "input": second}, "response": r2},
    ]


def anthropic_golden(question: str = QUESTION) -> list[dict[str, Any]]:
    first = [{"role": "user", "content": question}]
    use = {"type": "tool_use", "id": "toolu_rec_1", "name": "read_file", "input": {"path": "notes.txt"}}
    second = [
        *first,
        {"role": "assistant", "content": [{"type": "text", "text": "Reading it."}, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_rec_1", "content": FILE_TEXT}]},
    ]
    usage = {"input_tokens": 30, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    start = {
        "id": "msg_rec_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " it."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {**use, "input": {}}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "no'},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'tes.txt"}'}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ]
    answer = {
        **start,
        "id": "msg_rec_2",
        "content": [{"type": "text", "text": FINAL}],
        "stop_reason": "end_turn",
        "usage": {**usage, "output_tokens": 9},
    }
    body = {"model": "claude-test", "max_tokens": 1024, "system": SYSTEM, "tools": ANTHROPIC_TOOLS}
    return [
        {"request": {**body, "messages": first}, "response": events},
        {"request": {**body, "messages": second}, "response": answer},
    ]


GOLDENS = {"openai_chat": chat_golden, "openai_responses": responses_golden, "anthropic_messages": anthropic_golden}
#: the ids each agent must have carried: the recorded response ids and tool call ids
RECORDED_IDS = {
    "openai_chat": ["chatcmpl-rec-1a", "call_rec_1", "chatcmpl-rec-1b"],
    "openai_responses": ["resp_rec_1", "fc_rec_1", "call_rec_r1", "resp_rec_2"],
    "anthropic_messages": ["msg_rec_1", "toolu_rec_1", "msg_rec_2"],
}


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
