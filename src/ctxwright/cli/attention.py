"""``ctxwright attention``: where the model's attention went when it gave an answer.

Two sources, one pipeline (``attention/shares.py``):

* ``ctxwright attention SESSION_ID [--call N]`` -- a stored session run on the embedded
  model: the request of call N rebuilt by the one renderer (``core/render.py``, as the audit
  and ``export --requests`` rebuild it) and the raw text the model generated for it. The map
  is stored with the session, so ``ctxwright report`` shows it.
* ``ctxwright attention --request REQ.json --answer TEXT`` -- any OpenAI chat request body and
  the answer to explain, on the embedded model or ``--gguf`` another GGUF chat model.

It prints one row per span (messages, then system-prompt sections and status-bar lines):
tokens, the share of non-sink attention averaged over ``--layers``, and the sink share; it
writes the HTML view (``-o``, default ``attention.html``), a PNG with ``--png`` (the
``attention`` extra) and the map as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from ctxwright.errors import BackendUnavailable, CtxwrightError

#: a request file larger than this is refused before it is read (the model's window is
#: 8,192 tokens; a request that fills it is well under a megabyte)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: an ``--answer`` longer than this is refused (the reader explains at most 512 tokens)
MAX_ANSWER_CHARS = 16_000
_SURROGATE = re.compile("[\ud800-\udfff]")


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = (
    "show where the model's attention went when it answered: per layer, per message, "
    "status-bar line and system-prompt section (embedded model)"
)


def add_attention_parser(sub: Any) -> None:
    """Register ``attention`` on the ``ctxwright`` subcommand parser."""
    ap = sub.add_parser(
        "attention",
        help=HELP,
    )
    ap.add_argument(
        "session",
        nargs="?",
        help="a stored session ID (a unique start is enough) run on the embedded model (a run session: one recorded "
        "from the wire is explained through --request)",
    )
    ap.add_argument("--call", type=int, metavar="N", help="which call of the session (default: its last)")
    ap.add_argument("--request", metavar="REQ.json", help="an OpenAI chat request body to explain instead of a session")
    ap.add_argument("--answer", metavar="TEXT", help="with --request: the answer the model gave to it")
    ap.add_argument("--gguf", metavar="PATH", help="read another GGUF chat model (default: the embedded SmolLM2-135M)")
    ap.add_argument(
        "--layers",
        default="all",
        metavar="A-B",
        help="the layers to average and show, e.g. 15-24 or 3,5,7-9 (default: all)",
    )
    ap.add_argument(
        "-o", "--output", metavar="PATH", help="the HTML view to write (default: attention.html; none with --json)"
    )
    ap.add_argument("--png", metavar="PATH", help="also write the layer × span heatmap as PNG (the attention extra)")
    ap.add_argument("--json", action="store_true", help="print the attention map as JSON instead of the table")
    ap.set_defaults(func=cmd_attention)


def cmd_attention(args: argparse.Namespace) -> int:
    from ctxwright.attention.model import parse_layers
    from ctxwright.cli.common import console

    try:
        from ctxwright.attention.capture import AttentionReader
        from ctxwright.attention.shares import attention_map
    except ImportError as exc:  # numpy comes with llama-cpp-python
        raise BackendUnavailable(
            "attention is read from llama.cpp in-process: install the embedded extra "
            "(`pip install 'ctxwright[embedded]'`, or run `make demo`)"
        ) from exc

    out = _output(args)
    if args.session is not None and args.request is not None:
        raise CtxwrightError("name one thing to explain: a SESSION_ID or --request FILE, not both")
    if args.request is not None:
        if args.answer is None:
            raise CtxwrightError('--request needs --answer TEXT: the answer to explain, e.g. --answer "Paris"')
        if args.call is not None:
            raise CtxwrightError("--call picks a call of a stored session; a --request file is one call")
        request, meta = _request_file(args.request), {"source": f"request {args.request}"}
        answer, store, session_id, call_index = _answer_arg(args.answer), None, None, None
    else:
        if args.answer is not None:
            raise CtxwrightError("--answer goes with --request; a stored session's answer is the one it recorded")
        _run_session_only(args)
        store, session_id, call_index, request, answer, meta = _stored_call(args)
    try:
        with AttentionReader(args.gguf) as reader:
            layers = parse_layers(args.layers, reader.n_layer)
            amap = attention_map(reader, request, answer, strip_layers=layers, meta=meta)
        if store is not None and session_id is not None and call_index is not None:
            store.save_attention(session_id, call_index, amap.to_json())
    finally:
        if store is not None:
            store.close()
    shown = amap.restrict(layers)
    if args.json:
        print(json.dumps(shown.to_json(), ensure_ascii=False))
    else:
        _print_table(console, shown)
    if out is not None:
        from ctxwright.attention.view import write_html

        # the page's heading is "ctxwright attention · <title>": the source alone, not "attention" again
        write_html([shown], out, title=meta["source"])
        console.print(f"attention view written to {out}", highlight=False, markup=False)
    if args.png:
        from ctxwright.attention.view import write_png

        png = write_png(shown, Path(args.png).expanduser())
        console.print(f"heatmap written to {png}", highlight=False, markup=False)
    return 0


def _output(args: argparse.Namespace) -> Path | None:
    """The HTML path, checked before the model runs (a bad path should not cost a pass)."""
    if args.output is None and args.json:
        return None
    out = Path(args.output or "attention.html").expanduser()
    if out.is_dir():
        raise CtxwrightError(f"-o {out} is a folder: give a file name, e.g. {out / 'attention.html'}")
    if not out.parent.is_dir():
        raise CtxwrightError(f"-o {out}: the folder {out.parent} does not exist; create it or write elsewhere")
    return out


def _answer_arg(text: str) -> str:
    if not text.strip():
        raise CtxwrightError("--answer is empty: give the text the model answered")
    at = _lone_surrogate(text)
    if at is not None:  # bytes of the command line that are not UTF-8 arrive as surrogates
        raise CtxwrightError(
            f"--answer holds a character that is not text at position {at} ({text[at]!r}: bytes that are not "
            "UTF-8, or half of a UTF-16 pair); give the answer as UTF-8 text"
        )
    if len(text) > MAX_ANSWER_CHARS:
        raise CtxwrightError(
            f"--answer is {len(text):,} characters; explain at most {MAX_ANSWER_CHARS:,} (a shorter answer)"
        )
    return text


def _request_file(path_text: str) -> Any:
    """An OpenAI chat completions body as a :class:`ChatRequest`: ``messages`` and ``tools``."""
    from ctxwright.core.messages import Message
    from ctxwright.core.request import ChatRequest, ToolSpec

    path = Path(path_text).expanduser()
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise CtxwrightError(f"--request {path_text} is not a file; name a JSON file with a chat request body")
        if size > MAX_REQUEST_BYTES:
            raise CtxwrightError(
                f"--request {path_text} is {size:,} bytes, over {MAX_REQUEST_BYTES:,}; no request that fits "
                "the model's window is that large"
            )
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CtxwrightError(f"--request {path_text}: no such file") from None
    except OSError as exc:
        raise CtxwrightError(f"--request {path_text} cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CtxwrightError(f"--request {path_text} is not JSON ({exc}); give an OpenAI chat request body") from None
    except RecursionError:  # [[[[...]]]]: nested deeper than the parser recurses
        raise CtxwrightError(f"--request {path_text} nests too deeply to be a chat request body") from None
    where = _surrogate_path(body)
    if where is not None:
        raise CtxwrightError(
            f"--request {path_text}: {where} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without "
            "its pair), which is not text a model can read; fix that escape or write the character itself"
        )
    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise CtxwrightError(
            f'--request {path_text} has no "messages" list of objects; give an OpenAI chat request body '
            '({"messages": [{"role": "user", "content": "..."}]})'
        )
    tools = body.get("tools") or []
    try:
        messages = tuple(Message.from_wire(_text_content(m)) for m in msgs)
        specs = tuple(ToolSpec.from_wire(t) for t in tools if isinstance(t, dict))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CtxwrightError(f"--request {path_text}: a message or tool is malformed ({exc})") from None
    return ChatRequest(messages=messages, tools=specs)


def _lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a surrogate code point, else ``None``. JSON's ``\\ud83d\\ude00``
    pairs are joined into one character by the parser, so any surrogate left is half a pair
    (or an undecodable byte of argv), and the model's tokenizer cannot encode it as UTF-8."""
    found = _SURROGATE.search(text)
    return found.start() if found is not None else None


def _surrogate_path(body: Any) -> str | None:
    """The JSON path (``messages[2].content``) of the first string, key or value, in ``body``
    that holds a lone surrogate; walked without recursion (the body may nest deeply)."""
    stack: list[tuple[str, Any]] = [("the body", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _lone_surrogate(value) is not None:
                return path
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if _lone_surrogate(key) is not None:
                    return f"a key of {path}"
                stack.append((key if path == "the body" else f"{path}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


def _text_content(m: dict[str, Any]) -> dict[str, Any]:
    """Content given as a list of parts becomes its text (the embedded model reads text only)."""
    content = m.get("content")
    if isinstance(content, list):
        text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return {**m, "content": text}
    return m


def _run_session_only(args: argparse.Namespace) -> None:
    """SESSION_ID may name a session of any kind (``cli/sessions.py``); only a run's calls are
    rebuilt and answered in-process, so one recorded from the wire is refused in one line."""
    from ctxwright.cli.sessions import SessionRef, named, refuse

    ref = named(args, args.session, files=False, usage="ctxwright attention SESSION_ID")
    if isinstance(ref, SessionRef) and ref.from_the_wire:
        raise refuse(
            ref,
            "attention",
            "it was recorded from the wire; give one of its requests with --request FILE --answer TEXT "
            f"(`ctxwright export {ref.id}` prints them)",
        )
    if isinstance(ref, SessionRef):
        args.session = ref.id


def _stored_call(args: argparse.Namespace) -> tuple[Any, str, int, Any, str, dict[str, Any]]:
    """The request of call N of a stored session, rebuilt by the one renderer, and its answer."""
    from ctxwright.cli.common import existing_store as _store
    from ctxwright.core.prefix import Prefix
    from ctxwright.core.render import RenderSettings, replay_calls
    from ctxwright.core.request import ChatRequest

    if args.session is None:
        raise CtxwrightError(
            'name what to explain: a SESSION_ID (see `ctxwright sessions`), or --request FILE --answer "TEXT"'
        )
    store = _store(args)
    try:
        row = store.get_session(args.session)
        if row.backend != "embedded" and args.gguf is None:
            raise CtxwrightError(
                f"session {row.id[:12]} ran on {row.backend or 'an unknown backend'} ({row.model or '?'}); attention is "
                "read from a GGUF model run in-process: pass --gguf PATH of the model that answered"
            )
        prefix = Prefix.from_dict(row.prefix)
        events = store.events(row.id)
        calls = list(replay_calls(events, RenderSettings.from_meta(row.meta), tools_in_use=bool(prefix.tools)))
        if not calls:
            raise CtxwrightError(f"session {row.id[:12]} has no model call to explain yet")
        indexes = [c.reply.call_index for c in calls]
        want = args.call if args.call is not None else indexes[-1]
        picked = next((c for c in calls if c.reply.call_index == want), None)
        if picked is None:
            raise CtxwrightError(
                f"session {row.id[:12]} has no call {want}; its calls are {indexes[0]}-{indexes[-1]} "
                "(`ctxwright show ID` lists them)"
            )
        record = next((c for c in store.calls(row.id) if c.call_index == want), None)
        raw = (record.usage.get("raw") or {}) if record is not None else {}
        answer = raw.get("raw_text") if isinstance(raw, dict) else None
        if not isinstance(answer, str) or not answer.strip():
            from ctxwright.backends.embedded import shown_text

            answer = shown_text(picked.reply.message, {})
        request = ChatRequest(messages=(prefix.system_message(), *picked.messages), tools=prefix.tools)
    except BaseException:
        store.close()
        raise
    meta = {"source": f"session {row.id[:12]} call {want}", "session": row.id, "call": want}
    return store, row.id, int(want if want is not None else 0), request, answer, meta


def _print_table(console: Any, amap: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    first, last = amap.layers[0], amap.layers[-1]
    span = f"layer {first}" if first == last else f"layers {first}-{last}"
    console.print(
        f"{amap.model}: {amap.prompt_tokens:,} prompt tokens, answer of {len(amap.answer_tokens)} tokens; "
        f"{span}; sink (first token) share {amap.mean_sink():.2f}",
        highlight=False,
        markup=False,
    )
    t = Table(title="share of non-sink attention, averaged over the answer's tokens")
    for name, justify in (
        ("span", "left"),
        ("role", "left"),
        ("tokens", "right"),
        ("share", "right"),
        ("sink", "right"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in amap.spans:
        indent = "" if s.in_partition else "  "
        # labels hold message text (headings, tool names): never read as rich markup
        sink = sum(s.sink_share_by_layer) / len(s.sink_share_by_layer) if s.sink_share_by_layer else 0.0
        t.add_row(Text(indent + s.label), Text(s.role), f"{s.tokens:,}", f"{amap.mean_share(s):.3f}", f"{sink:.3f}")
    console.print(t)
