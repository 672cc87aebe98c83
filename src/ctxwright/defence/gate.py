"""The confirmation gate: a call to a tool that writes or acts outside (``effects`` ``write``
or ``external``) is checked before it runs.

Why in code: the book's experiment 2-5 shows a warning and tags lower an injection's success
but do not end it -- a model that was talked into sending mail to an attacker will send it.
The gate does not ask the model; it looks at the call: where its targets point (the user's
allowlists, ``defence/policy.py``) and where its values came from (argument provenance,
``defence/provenance.py``). What it finds are *flags*; a call without flags runs without a
prompt, so ordinary work is not slowed down by confirmations nobody reads.

Flags:

* ``outside_allowlist``: a target whose kind has an allowlist that does not cover it;
* ``provenance`` (with provenance on): a value seen in untrusted content and in no trusted
  source, with the tool and call id it came from;
* ``unverified`` (with provenance off -- the book's D4, "tags plus a confirmation step for
  high-risk tools"): a target no allowlist of its kind exists for, or a call with no target at
  all. Without provenance nothing says where such a value came from, so it is confirmed.

The decision, by :class:`ApprovalMode`:

* ``ask`` (the default): no flags -> approve; flags -> the approval callback decides (the CLI's
  y/N prompt on a terminal); without a callback -> deny;
* ``deny``: no flags -> approve; flags -> deny, nobody is asked;
* ``allow-listed``: approve only a call whose every target an allowlist covers and that has no
  flag; deny the rest (a call with no target at all included), nobody is asked.

A callback that raises, returns something that is neither approve nor deny, or does not
answer within ``timeout_s`` is a deny, and the event says which. A denied call is answered
with a ``gate_denied`` tool error the model reads; the loop goes on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxwright.core.events import GateEvent
from ctxwright.defence.policy import GatePolicy, Target, targets_of
from ctxwright.defence.provenance import ProvenanceIndex, Seen, entities_of, flag_reason
from ctxwright.errors import GateRuleError
from ctxwright.tools.registry import Tool

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_APPROVE_TIMEOUT_S",
    "GATED_EFFECTS",
    "ApprovalMode",
    "Approver",
    "FlagKind",
    "Gate",
    "GateDecision",
    "GateFlag",
    "GateRequest",
    "approval_mode",
    "build_gate",
]

ApprovalMode = Literal["ask", "deny", "allow-listed"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("ask", "deny", "allow-listed")
FlagKind = Literal["provenance", "outside_allowlist", "unverified"]
#: The effects a call is gated for (``Tool.effects``).
GATED_EFFECTS = frozenset({"write", "external"})
#: How long an approval callback may take before its silence counts as a deny.
DEFAULT_APPROVE_TIMEOUT_S = 120.0

_YES = frozenset({"approve", "approved", "allow", "yes", "y"})
_NO = frozenset({"deny", "denied", "no", "n", "reject"})


def approval_mode(value: str) -> ApprovalMode:
    """``value`` checked as an approval mode; :class:`GateRuleError` otherwise."""
    if value not in APPROVAL_MODES:
        raise GateRuleError(f"approve={value!r}: give one of {', '.join(APPROVAL_MODES)} or a callback")
    return value


@dataclass(frozen=True)
class GateFlag:
    """Why a call is not approved silently: ``argument`` is where the value sits (``to``,
    ``to[1]``), ``what`` its kind (``email``, ``url``, ``amount``, ``call`` for the whole call),
    ``seen`` where an untrusted value was read."""

    type: FlagKind
    argument: str
    value: str
    what: str
    reason: str
    seen: tuple[Seen, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "argument": self.argument,
            "value": self.value,
            "what": self.what,
            "reason": self.reason,
        }
        if self.seen:
            out["seen"] = [s.to_dict() for s in self.seen]
        return out


@dataclass(frozen=True)
class GateRequest:
    """What an approval callback is asked: the call, its effects, its targets and flags."""

    tool: str
    call_id: str
    arguments: Mapping[str, Any]
    effects: str
    targets: tuple[Target, ...] = ()
    flags: tuple[GateFlag, ...] = ()

    def describe(self) -> str:
        """The request in a few lines, for a person (the CLI prompt)."""
        args = json.dumps(self.arguments, ensure_ascii=False)
        lines = [f"{self.tool} ({self.effects}) wants to run with {args if len(args) <= 400 else args[:400] + '…'}"]
        lines += [f"  - {f.reason}" for f in self.flags]
        return "\n".join(lines)


@dataclass(frozen=True)
class GateDecision:
    """``by``: ``policy`` (no flags), ``allowlist`` (allow-listed mode, covered), ``mode``
    (deny or allow-listed mode refused it), ``callback``, ``no_approver``, ``callback_error``,
    ``callback_timeout``, ``callback_invalid``."""

    decision: Literal["approve", "deny"]
    by: str
    reason: str

    @property
    def approved(self) -> bool:
        return self.decision == "approve"


Approver = Callable[[GateRequest], Any]


@dataclass
class Gate:
    """The policy, the mode and the callback; :meth:`check` turns one resolved call into a
    :class:`GateRequest` and :meth:`decide` into a :class:`GateDecision`."""

    policy: GatePolicy = field(default_factory=GatePolicy)
    mode: ApprovalMode = "ask"
    approver: Approver | None = None
    timeout_s: float = DEFAULT_APPROVE_TIMEOUT_S
    #: argument provenance on (the book's D5) or off (D4: every unverified target is confirmed)
    provenance: bool = True

    def __post_init__(self) -> None:
        approval_mode(self.mode)
        if not self.timeout_s > 0:
            raise GateRuleError(f"approve_timeout={self.timeout_s!r}: give a number of seconds above 0")

    @staticmethod
    def gated(tool: Tool) -> bool:
        """Whether calls to ``tool`` are checked: its effects are ``write`` or ``external``."""
        return tool.effects in GATED_EFFECTS

    def check(
        self, tool: Tool, call_id: str, arguments: Mapping[str, Any], index: ProvenanceIndex | None
    ) -> GateRequest:
        """The flags of one call (``arguments`` as the model sent them, for ``tool``)."""
        schema = tool.parameters
        targets = targets_of(arguments, schema)
        flags: list[GateFlag] = []
        for t in targets:
            covered = self.policy.covers(t)
            if covered is False:
                flags.append(
                    GateFlag(
                        "outside_allowlist", t.argument, t.value, t.type, f"{t.argument}={t.value!r}: {_outside(t)}"
                    )
                )
            elif covered is None and not self.provenance:
                flags.append(
                    GateFlag(
                        "unverified",
                        t.argument,
                        t.value,
                        t.type,
                        f"{t.argument}={t.value!r}: no allowlist covers this {t.type}, and provenance is off",
                    )
                )
        if not targets and not self.provenance:
            flags.append(
                GateFlag(
                    "unverified",
                    "",
                    "",
                    "call",
                    f"{tool.name} has {_effects(tool)} effects and no target an allowlist could cover",
                )
            )
        if self.provenance and index is not None:
            for e in entities_of(arguments, schema):
                seen = index.seen_untrusted(e)
                if seen:
                    flags.append(GateFlag("provenance", e.argument, e.value, e.type, flag_reason(e, seen), seen))
        return GateRequest(tool.name, call_id, dict(arguments), _effects(tool), targets, tuple(flags))

    def decide(self, request: GateRequest) -> GateDecision:
        """The decision for ``request`` by this gate's mode (the module docstring)."""
        if self.mode == "allow-listed":
            covered = [t for t in request.targets if self.policy.covers(t)]
            if request.targets and len(covered) == len(request.targets) and not request.flags:
                return GateDecision("approve", "allowlist", "every target is on an allowlist")
            if request.flags:
                reason = request.flags[0].reason
            elif not request.targets:
                reason = f"{request.tool} has no target an allowlist could cover"
            else:
                t = next(t for t in request.targets if not self.policy.covers(t))
                reason = f"{t.argument}={t.value!r} is on no allowlist"
            return GateDecision("deny", "mode", f"approve=allow-listed approves only allowlisted calls: {reason}")
        if not request.flags:
            return GateDecision(
                "approve", "policy", "no flags: every target allowlisted or unlisted, no untrusted value"
            )
        summary = "; ".join(f.reason for f in request.flags)
        if self.mode == "deny":
            return GateDecision("deny", "mode", f"approve=deny: {summary}")
        if self.approver is None:
            return GateDecision("deny", "no_approver", f"no one to ask (no terminal, no approve callback): {summary}")
        return self._ask(request, summary)

    def _ask(self, request: GateRequest, summary: str) -> GateDecision:
        """Run the callback in a daemon thread with a deadline (a hung callback must not hang
        the agent; the thread is abandoned, as a hung tool's is)."""
        box: list[tuple[bool, Any]] = []
        approver = self.approver
        assert approver is not None

        def run() -> None:
            try:
                box.append((True, approver(request)))
            except BaseException as exc:
                box.append((False, exc))

        worker = threading.Thread(target=run, daemon=True, name=f"approve-{request.tool}")
        worker.start()
        worker.join(self.timeout_s)
        if not box:
            return GateDecision(
                "deny",
                "callback_timeout",
                f"the approval callback did not answer within {self.timeout_s:g} s: {summary}",
            )
        ok, value = box[0]
        if not ok:
            return GateDecision(
                "deny", "callback_error", f"the approval callback raised {type(value).__name__}: {value}; {summary}"
            )
        verdict = _verdict(value)
        if verdict is None:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:60] + "…"
            return GateDecision(
                "deny",
                "callback_invalid",
                f"the approval callback returned {shown}, neither approve nor deny; {summary}",
            )
        if verdict:
            return GateDecision("approve", "callback", f"approved by the callback: {summary}")
        return GateDecision("deny", "callback", f"denied by the callback: {summary}")

    def event(self, request: GateRequest, decision: GateDecision) -> GateEvent:
        """The event that records the decision (``core/events.py``)."""
        return GateEvent(
            call_id=request.call_id,
            tool=request.tool,
            effects=request.effects,
            decision=decision.decision,
            by=decision.by,
            reason=decision.reason,
            mode=self.mode,
            flags=tuple(f.to_dict() for f in request.flags),
        )


def _verdict(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, GateDecision):
        return value.approved
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _YES:
            return True
        if word in _NO:
            return False
    return None


def _effects(tool: Tool) -> str:
    return tool.effects


def _outside(t: Target) -> str:
    lists = {"path": "allowed folders", "email": "allowed e-mail domains and addresses"}
    return f"outside the {lists.get(t.type, 'allowed hosts')}"


def build_gate(
    *,
    enabled: bool,
    provenance: bool,
    approve: ApprovalMode | Approver | None = None,
    allow: GatePolicy | Mapping[str, Any] | None = None,
    gate_rules: str | Path | None = None,
    approve_timeout: float | None = None,
    workspace: str | Path | None = None,
) -> Gate | None:
    """The gate of a defence level (``enabled``: the level has one), from the library's and
    the CLI's options: ``approve`` a mode or a callback (a callback means ``ask``; the default
    mode is ``ask``, which without a callback denies what it would ask about), ``allow`` a
    :class:`GatePolicy` or its mapping (``{"paths": [...], "domains": [...], "hosts": [...]}``),
    ``gate_rules`` a YAML file of the same keys; the workspace is always an allowed folder.

    Every rule is checked here, when the agent is assembled: a malformed one raises
    :class:`GateRuleError` (one line: what, and the fix). Gate options given to a level without
    a gate are refused too -- they would protect nothing.
    """
    if not enabled:
        given = [n for n, v in (("approve", approve), ("allow", allow), ("gate_rules", gate_rules)) if v is not None]
        if given:
            raise GateRuleError(
                f"{', '.join(given)} given but the defence level has no confirmation gate: use defence='gate' "
                "or 'provenance' (CLI: --defence gate|provenance)"
            )
        return None
    policy = GatePolicy()
    if isinstance(allow, GatePolicy):
        policy = allow
    elif allow is not None:
        policy = GatePolicy.from_mapping(allow, "allow")
    if gate_rules is not None:
        policy = policy.merged(GatePolicy.from_file(gate_rules))
    if workspace is not None:
        policy = policy.with_folder(workspace)
    mode: ApprovalMode = "ask"
    approver: Approver | None = None
    if isinstance(approve, str):
        mode = approval_mode(approve)
    elif approve is not None:
        if not callable(approve):
            raise GateRuleError(f"approve={approve!r}: give one of {', '.join(APPROVAL_MODES)} or a callback")
        approver = approve
    timeout = DEFAULT_APPROVE_TIMEOUT_S if approve_timeout is None else approve_timeout
    try:
        return Gate(policy, mode=mode, approver=approver, timeout_s=float(timeout), provenance=provenance)
    except (TypeError, ValueError) as exc:
        raise GateRuleError(str(exc)) from None
