"""The sanitizer: what an untrusted result may not carry into the context.

Each rule answers a way outside text steers a model without the reader (or the user reading
the transcript) seeing it:

* **Unicode tag characters** (U+E0000..U+E007F) are invisible in every renderer, yet
  tokenizers keep them and models read them as ASCII ("ASCII smuggling", reported against
  several assistants in 2024): a page can carry a whole hidden instruction. Removed.
* **Bidirectional overrides and isolates** (U+202A..U+202E, U+2066..U+2069) make text display
  in another order than the model reads it (the "Trojan Source" attacks, CVE-2021-42574), so
  a reviewer sees something else than what was sent. Removed.
* **Zero-width characters** (U+200B..U+200D, U+2060, U+FEFF) hide inside words to slip past
  filters and split tokens. Removed.
* **Chat-template control tokens** of the common model families -- ChatML's ``<|im_start|>``
  and ``<|im_end|>`` (Qwen, SmolLM, many fine-tunes), ``<|endoftext|>`` (GPT-2 family),
  Llama 3's ``<|start_header_id|>``, ``<|eot_id|>``, Llama 2's ``[INST]`` and ``<<SYS>>``,
  Gemma's ``<start_of_turn>`` and ``<end_of_turn>``, Phi's and Zephyr's ``<|system|>``,
  ``<|user|>``, ``<|assistant|>``, ``<|end|>``, DeepSeek's ``<｜User｜>``, the sentence
  markers ``<s>`` and ``</s>`` -- are how a template separates turns. A local runtime that
  renders the prompt itself (llama.cpp, vLLM with ``--chat-template``) may tokenize them as
  the real control tokens, so a tool result could end its own turn and open a system turn;
  where they stay text, a model still reads them as turn boundaries. Neutralised: the
  brackets become parentheses (``(im_start)``), the word stays readable.
* **Lines that imitate a role header** (``system:``, ``### Assistant:``, ``**User:**``,
  ``Human:``) at the start of a line: the plain-text transcript format models were trained
  on, used to fake a new turn inside data. Neutralised: ``System (in data):``.

What changed is counted per kind and recorded in the ``tool`` event (``sanitized``), and
the text as the tool returned it is kept there too: the sanitizer decides what the model
sees, never what the store holds. Every rule is one pass of one regular expression, so the
work is linear in the text (100,000 zero-width characters are one match of one expression).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KINDS", "Sanitized", "sanitize"]

#: The kinds counted, in the order they are applied.
KINDS = ("tag_chars", "bidi", "zero_width", "control_tokens", "role_headers")

_REMOVE: dict[str, re.Pattern[str]] = {
    "tag_chars": re.compile("[\U000e0000-\U000e007f]+"),
    "bidi": re.compile("[\u202a-\u202e\u2066-\u2069]+"),
    "zero_width": re.compile("[\u200b-\u200d\u2060\ufeff]+"),
}
_ANY_REMOVED = re.compile("[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069\u200b-\u200d\u2060\ufeff]")

# <|name|> (ASCII bars) and <｜name｜> (DeepSeek's fullwidth bars), any name without spaces;
# [INST] [/INST] <<SYS>> <</SYS>>; Gemma's turn markers; the sentence markers <s> </s>.
_CONTROL = re.compile(
    r"<\|([^|<>\s]{1,64})\|>"
    r"|<\uff5c([^\uff5c<>\s]{1,64})\uff5c>"
    r"|\[(/?INST)\]"
    r"|<<(/?SYS)>>"
    r"|<(start_of_turn|end_of_turn|/?s|bos|eos)>",
    re.IGNORECASE,
)
_ROLES = "system|assistant|user|developer|human|ai|tool|instruction|response"
# at the start of a line: optional markdown heading or bold, a role word, a colon
_ROLE_LINE = re.compile(rf"(?im)^([ \t]*(?:#{{1,6}}[ \t]*)?(?:\*\*|__)?[ \t]*)({_ROLES})([ \t]*(?:\*\*|__)?[ \t]*:)")


@dataclass(frozen=True)
class Sanitized:
    """The text to show and what was changed: counts per kind (kinds with none left out)."""

    text: str
    counts: tuple[tuple[str, int], ...]

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def _control(m: re.Match[str]) -> str:
    name = next(g for g in m.groups() if g is not None)
    return f"({name})"


def sanitize(text: str) -> Sanitized:
    """Apply every rule to ``text`` (see the module docstring)."""
    counts: list[tuple[str, int]] = []
    if _ANY_REMOVED.search(text):
        for kind, pattern in _REMOVE.items():
            shorter = pattern.sub("", text)
            if len(shorter) != len(text):
                counts.append((kind, len(text) - len(shorter)))
                text = shorter
    text, n = _CONTROL.subn(_control, text)
    if n:
        counts.append(("control_tokens", n))
    text, n = _ROLE_LINE.subn(lambda m: f"{m.group(1)}{m.group(2)} (in data){m.group(3)}", text)
    if n:
        counts.append(("role_headers", n))
    return Sanitized(text, tuple(counts))
