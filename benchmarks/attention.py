"""Experiments 2-2 and 2-7: where the model's attention goes, read from llama.cpp itself.

**2-2, a long handbook.** A support handbook of 16 Markdown sections (about 1,500 tokens) is
the system prompt; one section holds the fact a question asks for, and it is placed first,
in the middle or last. The question is the last message. Teacher forced with the right
answer, the rows that write the fact's value are read (``ctxwright attention``'s pipeline,
``attention/shares.py``): per layer, the share of non-sink attention on the answer section,
against the share of the prompt's tokens it holds (``lift`` = share ÷ token fraction: 1 is
what reading everything evenly would give), the same slot's share in the prompts where it
holds a section the question is not about (the control: position alone), the probability the model gives the value there
and whether the value's first token is its top choice (``top = value``: what greedy decoding
would write after ``{"answer": "``).

**2-7, the status bar.** A support session of 12 tool turns, three of them calls to the
tool the user then asks about ("How many times did I call refund_lookup?"). Arms: no status
bar, and status bars whose counter lines are named differently. The row that writes the count
(after ``{"answer": "``) is read: the share of non-sink attention on the status block and on
the counted tool's turns (their calls and results), in layers 15-24 by default, the
probability the model gives the right count there, and whether it is its top choice.

Attention needs the weights in-process: it runs on the embedded model or any GGUF chat model
(``--gguf``); a served model's API returns no attention.

    python benchmarks/attention.py [--quick] [--gguf PATH] [--layers 15-24] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from statistics import mean
from typing import Any

from common import console, machine, save, table
from ctxwright.attention.capture import AttentionReader
from ctxwright.attention.model import parse_layers
from ctxwright.attention.shares import attention_map
from ctxwright.attention.spans import answer_text
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.status.bar import OPERATING_MANUAL, STATUS_CLOSE, STATUS_OPEN

# -- 2-2: the handbook -------------------------------------------------------------------------
#: (heading, body, question, value): the value appears once in the whole handbook
SECTIONS: list[tuple[str, str, str | None, str | None]] = [
    (
        "Returns",
        "Unopened items can be returned within 45 days of delivery for a full refund. Opened items are "
        "accepted only when faulty. The customer pays return shipping unless the item arrived damaged. Refunds go back to the original payment method within five business days of the warehouse receiving the item. Bundles are returned whole; a single item from a bundle is refunded at its share of the bundle price.",
        "How many days do customers have to return an unopened item?",
        "45",
    ),
    (
        "Shipping",
        "Standard shipping takes 5 to 7 business days. Express shipping costs 19 dollars and arrives in two "
        "business days. Orders placed after 3 pm ship the next business day. Large appliances ship on a pallet and the carrier calls to book a delivery window. We do not ship to parcel lockers, and island deliveries may take longer than the standard estimate.",
        "How much does express shipping cost, in dollars?",
        "19",
    ),
    (
        "Warranty",
        "Every appliance carries a warranty of 24 months from the purchase date. The warranty covers parts "
        "and labour but not damage from misuse, power surges or unauthorised repairs. A warranty claim needs the order number and a short description of the fault. The agent books a technician visit or sends a prepaid label, depending on the size of the appliance.",
        "How many months does the appliance warranty last?",
        "24",
    ),
    (
        "Loyalty points",
        "Members earn 3 points per dollar spent. Points expire after 18 months without a purchase and can be "
        "redeemed at checkout in blocks of 500 points. Points are not earned on gift card purchases or on shipping fees. A returned item removes the points it earned; points already redeemed on that order are restored to the account.",
        "How many loyalty points do members earn per dollar?",
        "3",
    ),
    (
        "Price matching",
        "We match a competitor's advertised price within 14 days of purchase if the item is identical and in "
        "stock at the competitor. Marketplace sellers and clearance prices are excluded. The customer shows the competitor's offer on a phone or sends a link. One price match is allowed per item, and the difference is refunded to the original payment method.",
        "Within how many days of purchase can a customer ask for a price match?",
        "14",
    ),
    (
        "Gift cards",
        "Gift cards never expire and can be used online and in stores. A lost gift card can be replaced once "
        "with the original receipt; the replacement fee is 7 dollars. A gift card cannot be exchanged for cash except where the law requires it. The balance is shown on the receipt after every purchase and on the account page.",
        "What is the replacement fee for a lost gift card, in dollars?",
        "7",
    ),
    (
        "Store hours",
        "Stores open from nine in the morning until nine at night on weekdays, and close early on Sundays. "
        "Holiday hours are posted on each store's page a week ahead. Customers can collect online orders at the service desk during opening hours. Parking is free for the first two hours at every store with a car park.",
        None,
        None,
    ),
    (
        "Account security",
        "Agents never ask for a customer's password. A customer who forgot the password resets it from the "
        "sign-in page; the reset link is valid for one hour. Suspicious sign-ins trigger an email to the customer. Agents may lock an account on the customer's request and unlock it only after checking the identity again.",
        None,
        None,
    ),
    (
        "Order changes",
        "An order can be changed until it is packed. After that, the customer must wait for delivery and "
        "return the item. Address changes after dispatch go through the carrier. Cancelling an order that has not been packed is free and refunds the full amount. A change of colour or size is handled as a cancellation and a new order.",
        None,
        None,
    ),
    (
        "Damaged deliveries",
        "A delivery that arrives damaged must be reported with photos. The agent opens a claim and sends a "
        "replacement or a refund, whichever the customer prefers. The customer keeps the damaged item until the carrier collects it. Claims must be opened within a week of delivery; later claims go to the warranty team.",
        None,
        None,
    ),
    (
        "Installation",
        "Installation is offered for large appliances in most regions. The installer removes the packaging and "
        "the old appliance on request. Gas connections need a certified technician. The installer checks that the appliance works before leaving and shows the customer the basic settings. Wall mounting of televisions is booked as a separate service.",
        None,
        None,
    ),
    (
        "Payment methods",
        "We accept major credit cards, debit cards and bank transfers. Cash on delivery is not offered. A "
        "declined card is never retried without the customer's consent. Instalment plans are offered on orders above a minimum amount through our finance partner. A refund for an instalment order reduces the remaining balance first.",
        None,
        None,
    ),
    (
        "Privacy",
        "Customer data is used only to fulfil orders and is never sold. A customer may ask for a copy of the "
        "data held about them, or for its deletion, from the account page. Marketing emails stop within two days of unsubscribing. Call recordings are kept for training and quality checks and deleted after a fixed period.",
        None,
        None,
    ),
    (
        "Escalation",
        "An agent escalates to a supervisor when a customer asks twice, when a refund exceeds the agent's "
        "limit, or when a safety problem is reported. The supervisor answers the same day during business hours. The agent writes a short summary of the case so the customer never has to repeat the story.",
        None,
        None,
    ),
    (
        "Business accounts",
        "Business accounts get invoices with tax details and can add several buyers. Bulk orders are quoted "
        "by the sales team within two working days. Payment terms for business accounts are agreed with the sales team. Tax-exempt customers upload their certificate once, and it applies to every later order.",
        None,
        None,
    ),
    (
        "Tone",
        "Be polite and brief. Use the customer's name once. Do not promise what the policy does not allow; "
        "say what can be done instead. Write in plain language without jargon. Close every conversation by asking whether anything else is needed, and thank the customer for their patience.",
        None,
        None,
    ),
]
POSITIONS = ("start", "middle", "end")


def handbook_request(target: int, position: str) -> tuple[ChatRequest, str, str]:
    """The handbook with section ``target`` moved to ``position``; the question last."""
    head, _, question, value = SECTIONS[target]
    assert question is not None and value is not None
    others = [s for i, s in enumerate(SECTIONS) if i != target]
    at = {"start": 0, "middle": len(others) // 2, "end": len(others)}[position]
    order = [*others[:at], SECTIONS[target], *others[at:]]
    system = "You are a customer support agent. Answer from this handbook only.\n\n" + "\n\n".join(
        f"# {h}\n{b}" for h, b, _, _ in order
    )
    req = ChatRequest(
        messages=(
            Message(role="system", content=system),
            Message(role="user", content=f"{question} Answer with the number only."),
        )
    )
    return req, f"system § {head}", value


def value_rows(reader: AttentionReader, value: str) -> tuple[list[int], list[str]]:
    """The answer rows that write ``value`` inside ``{"answer": "VALUE"}``, and the answer's tokens."""
    shown = answer_text(value)
    pieces = [reader.piece(t).decode("utf-8", "replace") for t in reader.tokenize(shown)]
    v0 = shown.index('"answer": "') + len('"answer": "')
    v1 = v0 + len(value)
    rows, at = [], 0
    for i, piece in enumerate(pieces):
        if at < v1 and at + len(piece) > v0:
            rows.append(i)
        at += len(piece)
    return rows, pieces


def run_handbook(reader: AttentionReader, targets: list[int], layers: tuple[int, ...]) -> dict[str, Any]:
    arms: dict[str, list[dict[str, Any]]] = {p: [] for p in POSITIONS}
    for target in targets:
        for position in POSITIONS:
            req, label, value = handbook_request(target, position)
            rows, pieces = value_rows(reader, value)
            amap = attention_map(reader, req, value, rows=rows)
            sec = next(s for s in amap.spans if s.label == label)
            frac = sec.tokens / amap.prompt_tokens
            # the handbook's sections in order (the intro before the first heading left out)
            heads = {f"system § {h}" for h, _, _, _ in SECTIONS}
            secs = [s for s in amap.spans if s.kind == "section" and s.label in heads]
            slots = {"start": secs[0], "middle": secs[(len(secs) - 1) // 2], "end": secs[-1]}
            arms[position].append(
                {
                    "slot_share_in_band": {
                        slot: round(mean(x.share_by_layer[k] for k in layers), 4) for slot, x in slots.items()
                    },
                    "slot_is_answer": {slot: x.label == label for slot, x in slots.items()},
                    "question": SECTIONS[target][2],
                    "value": value,
                    "section_tokens": sec.tokens,
                    "prompt_tokens": amap.prompt_tokens,
                    "token_fraction": round(frac, 4),
                    "share_by_layer": [round(x, 4) for x in sec.share_by_layer],
                    "sink_by_layer": [round(x, 4) for x in amap.sink_share_by_layer],
                    "p_value": round(math.exp(sum(amap.answer_logprobs[r] for r in rows)), 4),
                    "top": amap.answer_top_tokens[rows[0]],
                    "correct": amap.answer_top_tokens[rows[0]] == pieces[rows[0]],
                }
            )
    n_layers = len(reader_layers(reader))
    out: dict[str, Any] = {}
    for position, runs in arms.items():
        per_layer = [mean(r["share_by_layer"][k] for r in runs) for k in range(n_layers)]
        frac = mean(r["token_fraction"] for r in runs)
        band = [per_layer[k] for k in layers]
        peak = max(range(n_layers), key=lambda k: per_layer[k])
        # the control: the same slot in the other positions' prompts, where it holds a section
        # the question is not about -- how much of the share is the slot's, not the lookup's
        control = [
            r["slot_share_in_band"][position]
            for other, rs in arms.items()
            if other != position
            for r in rs
            if not r["slot_is_answer"][position]
        ]
        out[position] = {
            "control_share_in_band": round(mean(control), 4) if control else None,
            "lift_over_control": round(mean(band) / mean(control), 2) if control and mean(control) else None,
            "runs": runs,
            "share_by_layer": [round(x, 4) for x in per_layer],
            "token_fraction": round(frac, 4),
            "share_in_band": round(mean(band), 4),
            "lift_in_band": round(mean(band) / frac, 2) if frac else None,
            "peak_layer": peak,
            "peak_share": round(per_layer[peak], 4),
            "mean_sink": round(mean(mean(r["sink_by_layer"]) for r in runs), 4),
            "p_value": round(mean(r["p_value"] for r in runs), 4),
            "correct": round(mean(1.0 if r["correct"] else 0.0 for r in runs), 3),
        }
    return out


def reader_layers(reader: AttentionReader) -> tuple[int, ...]:
    return tuple(range(reader.n_layer))


# -- 2-7: the status bar ------------------------------------------------------------------------
COUNTED = "refund_lookup"
OTHERS = ("order_status", "shipping_quote", "web_search", "inventory_check")
TOOLS = tuple(
    ToolSpec.create(
        name,
        f"{name.replace('_', ' ').capitalize()} for an order.",
        {"type": "object", "properties": {"order": {"type": "string"}}},
    )
    for name in (COUNTED, *OTHERS)
)


def _line(style: str, tool: str, n: int) -> str:
    """One counter line in a naming style (the key naming the arms vary)."""
    return {
        # the status bar's default (status/bar.py): calls.<tool>: N call(s)
        "default": f"calls.{tool}: {n} call{'s' if n != 1 else ''}",
        # <tool>_calls: N -- two such keys differ only before a shared suffix
        "suffix": f"{tool}_calls: {n}",
        # the tool's name alone
        "bare": f"{tool}: {n}",
        # a sentence naming the tool and the unit
        "sentence": f"you called {tool} {n} time{'s' if n != 1 else ''}",
    }[style]


#: arm -> (status style or None, which lines: ``all`` tools in first-call order (the status
#: bar's order), the counted tool's line ``first`` or ``last`` of them, or ``one``: its line alone)
ARMS: dict[str, tuple[str | None, str]] = {
    "no_status": (None, "all"),
    "default": ("default", "all"),
    "suffix": ("suffix", "all"),
    "bare": ("bare", "all"),
    "sentence": ("sentence", "all"),
    "default_counted_first": ("default", "first"),
    "default_counted_last": ("default", "last"),
    "default_one_line": ("default", "one"),
}


def session_request(seed: int, arm: str) -> tuple[ChatRequest, int, list[int]]:
    """12 tool turns, ``count`` of them calls to :data:`COUNTED`; the question, then the status."""
    rng = random.Random(seed)
    count = rng.choice([2, 3, 4, 5])
    names = [COUNTED] * count + [rng.choice(OTHERS) for _ in range(12 - count)]
    rng.shuffle(names)
    msgs: list[Message] = [
        Message(
            role="system", content="You are a customer support agent for an appliance store.\n\n" + OPERATING_MANUAL
        ),
        Message(role="user", content="Order 7741 arrived damaged and I want my money back. Sort it out."),
    ]
    counted_msgs: list[int] = []
    for k, name in enumerate(names):
        cid = f"call_{k}"
        order = f"77{41 + k % 3}"
        if name == COUNTED:
            counted_msgs += [len(msgs), len(msgs) + 1]
        msgs.append(
            Message(
                role="assistant",
                content=None,
                tool_calls=(ToolCall(id=cid, name=name, arguments=json.dumps({"order": order})),),
            )
        )
        result = {
            "order": order,
            "tool": name,
            "status": rng.choice(["pending", "found", "no record", "processing"]),
            "note": rng.choice(
                [
                    "checked the warehouse log",
                    "customer record updated",
                    "no change since yesterday",
                    "waiting for the carrier",
                    "ticket attached to the order",
                ]
            ),
        }
        msgs.append(Message(role="tool", tool_call_id=cid, content=json.dumps(result)))
    msgs.append(
        Message(role="user", content=f"How many times did you call {COUNTED} so far? Answer with the number only.")
    )
    style, which = ARMS[arm]
    if style is not None:
        counts = {n: names.count(n) for n in dict.fromkeys(names)}
        others = {n: c for n, c in counts.items() if n != COUNTED}
        if which == "one":
            counts = {COUNTED: count}
        elif which == "first":
            counts = {COUNTED: count, **others}
        elif which == "last":
            counts = {**others, COUNTED: count}
        lines = [_line(style, n, c) for n, c in counts.items()]
        msgs.append(Message(role="user", content="\n".join([STATUS_OPEN, *lines, STATUS_CLOSE])))
    return ChatRequest(messages=tuple(msgs), tools=TOOLS), count, counted_msgs


def run_status(reader: AttentionReader, seeds: list[int], layers: tuple[int, ...]) -> dict[str, Any]:
    """Per seed, every arm in turn: the arms share the session and differ only in its last
    message, so the reader prefills the shared part once per seed."""
    per_arm: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for seed in seeds:
        for arm in ARMS:
            req, count, counted = session_request(seed, arm)
            rows, pieces = value_rows(reader, str(count))
            amap = attention_map(reader, req, str(count), rows=rows)
            status = [s for s in amap.spans if s.kind == "message" and s.label.endswith("status bar")]
            turns = [s for s in amap.spans if s.kind == "message" and s.message_index in counted]
            in_band = amap.restrict(layers)
            status_share = sum(in_band.mean_share(s) for s in status)
            turns_share = sum(in_band.mean_share(s) for s in turns)
            line = next((s for s in in_band.spans if s.kind == "status_line" and COUNTED in s.label), None)
            per_arm[arm].append(
                {
                    "seed": seed,
                    "count": count,
                    "prompt_tokens": amap.prompt_tokens,
                    "status_tokens": sum(s.tokens for s in status),
                    "turn_tokens": sum(s.tokens for s in turns),
                    "status_share": round(status_share, 4),
                    "counted_line_share": round(in_band.mean_share(line), 4) if line else None,
                    "turns_share": round(turns_share, 4),
                    "p_right": round(math.exp(sum(amap.answer_logprobs[r] for r in rows)), 4),
                    "top": amap.answer_top_tokens[rows[0]],
                    "right": amap.answer_top_tokens[rows[0]] == pieces[rows[0]],
                }
            )
    out: dict[str, Any] = {}
    for arm, runs in per_arm.items():
        out[arm] = {
            "runs": runs,
            "prompt_tokens": round(mean(r["prompt_tokens"] for r in runs)),
            "status_tokens": round(mean(r["status_tokens"] for r in runs)),
            "status_share": round(mean(r["status_share"] for r in runs), 4),
            "counted_line_share": _mean_or_none([r["counted_line_share"] for r in runs]),
            "turns_share": round(mean(r["turns_share"] for r in runs), 4),
            "p_right": round(mean(r["p_right"] for r in runs), 4),
            "right": round(mean(1.0 if r["right"] else 0.0 for r in runs), 3),
        }
    return out


def _mean_or_none(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(mean(vals), 4) if vals else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", help="another GGUF chat model (default: the embedded SmolLM2-135M)")
    p.add_argument("--layers", default="15-24", help="the layer band the status-bar shares average (default 15-24)")
    p.add_argument("--handbook-layers", default="3-9", help="the layer band the handbook shares average (default 3-9)")
    p.add_argument("--questions", type=int, default=6, help="handbook questions (each at 3 positions; at most 6)")
    p.add_argument("--seeds", type=int, default=12, help="status-bar scenarios per arm")
    p.add_argument("--quick", action="store_true", help="2 questions and 3 scenarios per arm")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args()
    if args.quick:
        args.questions, args.seeds = 2, 3
    t0 = time.perf_counter()
    with AttentionReader(args.gguf) as reader:
        band = parse_layers(args.layers, reader.n_layer)
        hb_band = parse_layers(args.handbook_layers, reader.n_layer)
        targets = [i for i, s in enumerate(SECTIONS) if s[2] is not None][: max(1, min(6, args.questions))]
        handbook = run_handbook(reader, targets, hb_band)
        status = run_status(reader, list(range(args.seeds)), band)
        model = reader.model
    elapsed = time.perf_counter() - t0

    console.print(
        table(
            f"2-2 · handbook ({len(targets)} questions): attention on the answer section, layers {args.handbook_layers}",
            [
                "position",
                "section share",
                "token fraction",
                "lift",
                "same slot, not asked",
                "lift over it",
                "peak layer",
                "peak share",
                "sink",
                "p(value)",
                "top = value",
            ],
            [
                [
                    pos,
                    r["share_in_band"],
                    r["token_fraction"],
                    r["lift_in_band"],
                    r["control_share_in_band"],
                    r["lift_over_control"],
                    r["peak_layer"],
                    r["peak_share"],
                    r["mean_sink"],
                    r["p_value"],
                    r["correct"],
                ]
                for pos, r in handbook.items()
            ],
        )
    )
    console.print(
        table(
            f"2-7 · status bar ({args.seeds} scenarios per arm): the row writing the count, layers {args.layers}",
            [
                "arm",
                "prompt tok",
                "status tok",
                "share status",
                "share counted line",
                "share counted turns",
                "p(right)",
                "top = right",
            ],
            [
                [
                    arm,
                    r["prompt_tokens"],
                    r["status_tokens"],
                    r["status_share"],
                    r["counted_line_share"],
                    r["turns_share"],
                    r["p_right"],
                    r["right"],
                ]
                for arm, r in status.items()
            ],
        )
    )
    console.print(f"[dim]{model}, {elapsed:.0f} s[/]")
    save(
        args,
        {
            "benchmark": "attention",
            "experiments": ["2-2", "2-7"],
            "machine": machine(),
            "model": model,
            "elapsed_s": round(elapsed, 1),
            "handbook": {"layers": list(hb_band), "positions": handbook},
            "status_bar": {"layers": list(band), "counted_tool": COUNTED, "arms": status},
        },
    )


if __name__ == "__main__":
    main()
