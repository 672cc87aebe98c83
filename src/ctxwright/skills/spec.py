"""The rules of the Agent Skills specification, one function or constant each.

Every check returns a list of one-line messages (empty when the value is fine), so the
strict validator can report them all at once and the lenient loader can turn the ones it
tolerates into warnings.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from ctxwright.core.tokens import estimate_tokens

#: The file that makes a folder a skill.
SKILL_FILE = "SKILL.md"

#: License files shipped next to ``SKILL.md``; not counted as resources of the skill.
LICENSE_FILES = frozenset({"LICENSE", "LICENSE.txt", "LICENSE.md"})

#: A name is an identifier the model types back (``Skill(name=...)``) and a folder name on
#: every file system: short, so it costs few tokens in the catalog and fits any path.
NAME_MAX = 64

#: The description is the only text of a skill that sits in the context of every call (the
#: catalog); the specification caps it so a hundred skills still fit.
DESCRIPTION_MAX = 1024

#: ``compatibility`` says what environment the skill needs; a sentence, not a manual.
COMPATIBILITY_MAX = 500

#: The specification's top-level fields. Anything else is a typo or a vendor extension that
#: belongs under ``metadata``, where clients know to ignore it.
ALLOWED_FIELDS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})

#: The body is loaded whole when the skill is used; past this, split it into resource files
#: the model reads on demand (progressive disclosure). A recommendation, so a warning.
BODY_MAX_LINES = 500

#: Same recommendation in tokens (estimated with :func:`ctxwright.core.tokens.estimate_tokens`).
BODY_MAX_TOKENS = 5000

#: A ``SKILL.md`` larger than this is not read at all: no instructions need a megabyte, and
#: reading one into every context would be the bug. Not a spec rule: the loader's guard.
MAX_FILE_BYTES = 1_000_000


def normalize_name(name: str) -> str:
    """NFKC first, as the specification's reference validator does: a full-width ``ｐｄｆ`` or
    a ligature is the same name as its plain form, so compare and check that form."""
    return unicodedata.normalize("NFKC", name)


def check_name(value: Any, folder: str) -> list[str]:
    """``name``: 1-64 lowercase letters, digits and hyphens, no leading, trailing or double
    hyphen, equal to the folder name. Why: the name is how the model and the user refer to the
    skill, and the folder name is how a client finds it again; the two must agree."""
    if value is None:
        return ["name: missing; add `name: <folder name>` to the front matter"]
    if not isinstance(value, str):
        return [f"name: must be a string, got {type(value).__name__}"]
    name = normalize_name(value.strip())
    errors: list[str] = []
    if not name:
        return ["name: empty; it must be 1-64 lowercase letters, digits and hyphens"]
    if len(name) > NAME_MAX:
        errors.append(f"name: {len(name)} characters, the limit is {NAME_MAX}")
    bad = sorted({c for c in name if not (c == "-" or c.isdigit() or (c.isalpha() and c == c.lower()))})
    if bad:
        errors.append(
            f"name: {name!r} has characters other than lowercase letters, digits and hyphens: {''.join(bad)!r}"
        )
    if name.startswith("-") or name.endswith("-"):
        errors.append(f"name: {name!r} starts or ends with a hyphen")
    if "--" in name:
        errors.append(f"name: {name!r} has a double hyphen")
    if name != normalize_name(folder):
        errors.append(f"name: {name!r} differs from its folder name {folder!r}; rename one of them")
    return errors


def check_description(value: Any) -> list[str]:
    """``description``: 1-1,024 characters, counted in Unicode code points (a CJK character is
    one). Why: it is what the model reads to decide whether to use the skill, in every call."""
    if value is None:
        return ["description: missing; say what the skill does and when to use it"]
    if not isinstance(value, str):
        return [f"description: must be a string, got {type(value).__name__}"]
    if not value.strip():
        return ["description: empty; say what the skill does and when to use it"]
    if len(value) > DESCRIPTION_MAX:
        return [f"description: {len(value)} characters, the limit is {DESCRIPTION_MAX}"]
    return []


def check_compatibility(value: Any) -> list[str]:
    """``compatibility`` (optional): 1-500 characters. Why: a short note of what the skill
    needs (a tool, network access), shown to people and clients, not a second body."""
    if value is None:
        return []
    if not isinstance(value, str):
        return [f"compatibility: must be a string, got {type(value).__name__}"]
    if not value.strip() or len(value) > COMPATIBILITY_MAX:
        return [f"compatibility: {len(value)} characters, it must be 1-{COMPATIBILITY_MAX}"]
    return []


def check_license(value: Any) -> list[str]:
    """``license`` (optional): a string (a license name or the name of a bundled file)."""
    if value is None or isinstance(value, str):
        return []
    return [f"license: must be a string, got {type(value).__name__}"]


def check_metadata(value: Any) -> list[str]:
    """``metadata`` (optional): a map of strings to strings. Why: it is the extension point
    every client may ignore, so it must stay flat text anyone can read."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"metadata: must be a map of strings to strings, got {type(value).__name__}"]
    bad = [str(k) for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        return [f"metadata: keys and values must be strings; quote the values of: {', '.join(bad)}"]
    return []


def check_allowed_tools(value: Any) -> list[str]:
    """``allowed-tools`` (optional, experimental): one string of space-separated tool names."""
    if value is None or isinstance(value, str):
        return []
    return [f"allowed-tools: must be one string of space-separated tool names, got {type(value).__name__}"]


def check_fields(front: dict[str, Any]) -> list[str]:
    """Only the specification's top-level fields. Why: an unknown field is usually a typo
    (``descripton``) that silently drops what the author meant; extensions go in ``metadata``."""
    extra = sorted(str(k) for k in front if k not in ALLOWED_FIELDS)
    if not extra:
        return []
    return [
        f"unknown top-level field(s) {', '.join(extra)}; allowed: {', '.join(sorted(ALLOWED_FIELDS))} "
        "(put extensions under metadata)"
    ]


def check_front_matter(front: dict[str, Any], folder: str) -> list[str]:
    """Every front matter rule at once, in the order of the specification."""
    return [
        *check_fields(front),
        *check_name(front.get("name"), folder),
        *check_description(front.get("description")),
        *check_license(front.get("license")),
        *check_compatibility(front.get("compatibility")),
        *check_metadata(front.get("metadata")),
        *check_allowed_tools(front.get("allowed-tools")),
    ]


def body_warnings(body: str) -> list[str]:
    """Over 500 lines or about 5,000 tokens: a warning. Why: the whole body enters the
    context when the skill is used; longer material belongs in files read on demand."""
    out: list[str] = []
    lines = body.count("\n") + (1 if body and not body.endswith("\n") else 0)
    if lines > BODY_MAX_LINES:
        out.append(
            f"body: {lines} lines, the specification recommends at most {BODY_MAX_LINES}; "
            "move detail into resource files"
        )
    tokens = estimate_tokens(body)
    if tokens > BODY_MAX_TOKENS:
        out.append(
            f"body: about {tokens} tokens, the specification recommends at most {BODY_MAX_TOKENS}; "
            "move detail into resource files"
        )
    return out
