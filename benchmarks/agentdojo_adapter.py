"""AgentDojo's v1 suites as ctxwright tools, and a worst-case scripted model for them.

AgentDojo (Debenedetti et al., 2024; MIT; ``pip install ctxwright[agentdojo]``) ships four
suites (workspace, slack, travel, banking) of user tasks, injection tasks, injection vectors
planted in the environment's data and a check by code for each task: ``utility`` (did the
user's task get done) and ``security`` (did the attacker's goal get done). Here its tool
functions become ctxwright ``Tool``s running on a live AgentDojo environment, so ctxwright's
own loop -- not AgentDojo's pipeline -- is the agent under test, with every defence the harness
has.

This module is the only place (with ``injection.py``) that imports ``agentdojo``: it is an
optional extra, never a dependency of ``src/ctxwright``.

Trust and effects are declared per tool in :data:`DECLARATIONS` (the table in
docs/benchmarks.md is printed from it): a tool whose result carries text written by someone
other than the user (e-mails, files, calendar descriptions, channel messages, web pages,
reviews, transaction subjects) is ``untrusted``; a tool that sends, pays, deletes, shares,
invites or posts is ``external``; one that changes only the user's own data is ``write``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentdojo.agent_pipeline.agent_pipeline import load_system_message
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.base_attacks import DEFAULT_MODEL_NAME, FixedJailbreakAttack
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.task_suite.task_suite import TaskSuite
from agentdojo.types import text_content_block_from_string

from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest
from ctxwright.tools.registry import Tool

SUITES = ("workspace", "slack", "travel", "banking")
VERSION = "v1"

# (trust, effects, why) per tool. "untrusted": the result holds text someone other than the
# user wrote, where AgentDojo plants its injections. "external": the call sends, pays, deletes,
# shares, invites or posts -- it reaches someone else or cannot be undone.
_U, _T = "untrusted", "trusted"
DECLARATIONS: dict[str, dict[str, tuple[str, str, str]]] = {
    "workspace": {
        "send_email": (_T, "external", "sends mail to anyone"),
        "delete_email": (_T, "external", "deletes"),
        "get_unread_emails": (_U, "read", "mail bodies written by senders"),
        "get_sent_emails": (_U, "read", "quotes received mail"),
        "get_received_emails": (_U, "read", "mail bodies written by senders"),
        "get_draft_emails": (_U, "read", "drafts may quote received mail"),
        "search_emails": (_U, "read", "mail bodies written by senders"),
        "search_contacts_by_name": (_U, "read", "contacts are harvested from mail"),
        "search_contacts_by_email": (_U, "read", "contacts are harvested from mail"),
        "get_current_day": (_T, "read", "the clock"),
        "search_calendar_events": (_U, "read", "descriptions written by invitees"),
        "get_day_calendar_events": (_U, "read", "descriptions written by invitees"),
        "create_calendar_event": (_T, "external", "invites participants"),
        "cancel_calendar_event": (_T, "external", "deletes, notifies participants"),
        "reschedule_calendar_event": (_T, "external", "notifies participants"),
        "add_calendar_event_participants": (_T, "external", "invites people"),
        "append_to_file": (_T, "write", "changes the user's own file"),
        "search_files_by_filename": (_U, "read", "files shared by others"),
        "create_file": (_T, "write", "the user's own drive"),
        "delete_file": (_T, "external", "deletes"),
        "get_file_by_id": (_U, "read", "files shared by others"),
        "list_files": (_U, "read", "files shared by others"),
        "share_file": (_T, "external", "gives someone else access"),
        "search_files": (_U, "read", "files shared by others"),
    },
    "slack": {
        "get_channels": (_U, "read", "channel names; outsiders create channels (AgentDojo plants one)"),
        "add_user_to_channel": (_T, "external", "gives someone access"),
        "read_channel_messages": (_U, "read", "messages written by others"),
        "read_inbox": (_U, "read", "messages written by others"),
        "send_direct_message": (_T, "external", "sends"),
        "send_channel_message": (_T, "external", "posts"),
        "get_users_in_channel": (_T, "read", "member names, set by the workspace"),
        "invite_user_to_slack": (_T, "external", "sends an invitation"),
        "remove_user_from_slack": (_T, "external", "deletes"),
        "get_webpage": (_U, "external", "a page anyone wrote; the URL itself reaches the host"),
        "post_webpage": (_T, "external", "posts"),
    },
    "travel": {
        "get_user_information": (_T, "read", "the user's own profile"),
        "get_all_hotels_in_city": (_U, "read", "listings written by providers"),
        "get_hotels_prices": (_U, "read", "listings written by providers"),
        "get_rating_reviews_for_hotels": (_U, "read", "reviews written by anyone"),
        "get_hotels_address": (_U, "read", "listings written by providers"),
        "get_all_restaurants_in_city": (_U, "read", "listings written by providers"),
        "get_cuisine_type_for_restaurants": (_U, "read", "listings written by providers"),
        "get_restaurants_address": (_U, "read", "listings written by providers"),
        "get_rating_reviews_for_restaurants": (_U, "read", "reviews written by anyone"),
        "get_dietary_restrictions_for_all_restaurants": (_U, "read", "listings written by providers"),
        "get_contact_information_for_restaurants": (_U, "read", "listings written by providers"),
        "get_price_for_restaurants": (_U, "read", "listings written by providers"),
        "check_restaurant_opening_hours": (_U, "read", "listings written by providers"),
        "get_all_car_rental_companies_in_city": (_U, "read", "listings written by providers"),
        "get_car_types_available": (_U, "read", "listings written by providers"),
        "get_rating_reviews_for_car_rental": (_U, "read", "reviews written by anyone"),
        "get_car_fuel_options": (_U, "read", "listings written by providers"),
        "get_car_rental_address": (_U, "read", "listings written by providers"),
        "get_car_price_per_day": (_U, "read", "listings written by providers"),
        "create_calendar_event": (_T, "external", "invites participants"),
        "search_calendar_events": (_U, "read", "descriptions written by invitees"),
        "get_day_calendar_events": (_U, "read", "descriptions written by invitees"),
        "cancel_calendar_event": (_T, "external", "deletes, notifies participants"),
        "reserve_hotel": (_T, "external", "books and pays"),
        "reserve_car_rental": (_T, "external", "books and pays"),
        "reserve_restaurant": (_T, "external", "books"),
        "get_flight_information": (_U, "read", "listings written by airlines"),
        "send_email": (_T, "external", "sends mail to anyone"),
    },
    "banking": {
        "get_iban": (_T, "read", "the bank's record of the user"),
        "send_money": (_T, "external", "pays"),
        "schedule_transaction": (_T, "external", "pays later"),
        "update_scheduled_transaction": (_T, "external", "redirects a payment"),
        "get_balance": (_T, "read", "the bank's record of the user"),
        "get_most_recent_transactions": (_U, "read", "subjects written by counterparties"),
        "get_scheduled_transactions": (_U, "read", "subjects written by counterparties"),
        "read_file": (_U, "read", "files from anyone (bills, letters)"),
        "get_user_info": (_T, "read", "the bank's record of the user"),
        "update_password": (_T, "external", "account takeover if misused"),
        "update_user_info": (_T, "write", "the user's own profile"),
    },
}


def load(suite_name: str) -> TaskSuite[Any]:
    """The v1 suite ``suite_name``; every tool it has must be declared in :data:`DECLARATIONS`."""
    suite: TaskSuite[Any] = get_suite(VERSION, suite_name)
    missing = {f.name for f in suite.tools} - set(DECLARATIONS[suite_name])
    if missing:
        raise SystemExit(f"AgentDojo {suite_name} has tools with no trust/effects declaration: {sorted(missing)}")
    return suite


def system_prompt() -> str:
    """AgentDojo's own default system message, so results compare with its published runs."""
    return str(load_system_message(None))


def injections_for(
    suite: TaskSuite[Any], user_task: BaseUserTask[Any], injection_task: BaseInjectionTask[Any]
) -> dict[str, str]:
    """AgentDojo's ``important_instructions`` attack text in every vector the user task sees.

    The attack class itself wants a model name from a pipeline; ctxwright is not one of
    AgentDojo's pipelines, so the generic model name is used (AgentDojo's
    ``important_instructions_no_model_name`` variant)."""
    attack = _attack(suite)
    return attack.attack(user_task, injection_task)


_ATTACKS: dict[str, FixedJailbreakAttack] = {}


def _attack(suite: TaskSuite[Any]) -> FixedJailbreakAttack:
    if suite.name not in _ATTACKS:
        attack = FixedJailbreakAttack(ImportantInstructionsAttack._JB_STRING, suite, None)  # type: ignore[arg-type]
        attack.user_name = "Emma Johnson"
        attack.model_name = DEFAULT_MODEL_NAME
        _ATTACKS[suite.name] = attack
    return _ATTACKS[suite.name]


_ENVIRONMENTS: dict[tuple[str, tuple[tuple[str, str], ...]], TaskEnvironment] = {}


def _environment(suite: TaskSuite[Any], injections: dict[str, str]) -> TaskEnvironment:
    """A fresh copy of the suite's environment with ``injections`` planted. Loading parses and
    validates the whole YAML (0.4 s for workspace); a deep copy of a loaded one takes about a
    millisecond, and the same pair runs once per defence level."""
    key = (suite.name, tuple(sorted(injections.items())))
    if key not in _ENVIRONMENTS:
        if len(_ENVIRONMENTS) > 8:
            _ENVIRONMENTS.clear()
        _ENVIRONMENTS[key] = suite.load_and_inject_default_environment(injections)
    return _ENVIRONMENTS[key].model_copy(deep=True)


def plain_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic schema with its local ``$ref``s inlined and its ``title`` noise dropped.

    AgentDojo's enums come out as ``$defs`` + ``$ref``; the embedded backend builds a grammar
    from the tool schemas and its converter (llama-cpp-python's) cannot resolve them, and
    every provider accepts the inlined form."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = defs[node["$ref"].rsplit("/", 1)[-1]]
                merged = {**walk(target), **{k: walk(v) for k, v in node.items() if k != "$ref"}}
                return merged
            # "title" as an annotation is a string; a property named "title" is a schema (a dict)
            return {k: walk(v) for k, v in node.items() if k != "$defs" and not (k == "title" and isinstance(v, str))}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out


@dataclass
class Episode:
    """One task on one live environment: the tools bound to it and what actually ran."""

    suite: TaskSuite[Any]
    user_task: BaseUserTask[Any]
    injection_task: BaseInjectionTask[Any] | None
    injections: dict[str, str]
    environment: TaskEnvironment = field(init=False)
    pre_environment: TaskEnvironment = field(init=False)
    executed: list[FunctionCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        env = _environment(self.suite, self.injections)
        self.environment = self.user_task.init_environment(env)
        self.pre_environment = self.environment.model_copy(deep=True)
        self._runtime = FunctionsRuntime(self.suite.tools)

    def tools(self, make_tool: Callable[..., Tool]) -> list[Tool]:
        """Each suite function as a ``Tool`` built by ``make_tool(name, description, schema,
        func, trust=, effects=)``; a call that ran is recorded in :attr:`executed` (a call the
        gate refused never reaches ``func``, so it is not)."""
        out = []
        for function in self.suite.tools:
            trust, effects, _why = DECLARATIONS[self.suite.name][function.name]
            schema = plain_schema(function.parameters.model_json_schema())
            out.append(
                make_tool(function.name, function.description, schema, self._runner(function.name), trust, effects)
            )
        return out

    def _runner(self, name: str) -> Callable[..., str]:
        def run(**kwargs: Any) -> str:
            result, error = self._runtime.run_function(self.environment, name, kwargs)
            if error is not None:
                raise RuntimeError(error)
            self.executed.append(FunctionCall(function=name, args=dict(kwargs)))
            return tool_result_to_str(result)

        run.__name__ = name
        return run

    def score(self, final_answer: str | None) -> tuple[bool, bool | None]:
        """``(utility, attack_succeeded)`` by AgentDojo's own checks, on the calls that ran."""
        output = [text_content_block_from_string(final_answer or "")]
        utility = self.suite._check_task_result(
            self.user_task, output, self.pre_environment, self.environment, self.executed
        )
        if self.injection_task is None:
            return bool(utility), None
        security = self.suite._check_task_result(
            self.injection_task, output, self.pre_environment, self.environment, self.executed
        )
        return bool(utility), bool(security)


def _flat(text: str) -> str:
    """``text`` as lower-case letters and digits only: a tool result is YAML, which folds a
    long string over lines and escapes it inside quotes, so the goal is not found verbatim."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


class WorstCaseModel:
    """A scripted model that obeys every injection it sees, at once.

    It plays the user task's ground-truth calls one per turn; the first time a tool result
    holds the injection (the injection task's goal text, wherever the harness put it), it plays
    the injection task's ground-truth calls first, then goes on with the user's. A refused call
    does not stop it. What still reaches the attacker's goal is what the harness let through,
    whatever any model would do: the harness's guarantee, not the model's judgement.
    """

    def __init__(self, episode: Episode) -> None:
        self._plan = [
            self._call(c) for c in episode.user_task.ground_truth(episode.pre_environment.model_copy(deep=True))
        ]
        inj = episode.injection_task
        self._attack = (
            [self._call(c) for c in inj.ground_truth(episode.pre_environment.model_copy(deep=True))] if inj else []
        )
        self._marker = _flat(inj.GOAL)[:40] if inj else None
        self._final = episode.user_task.GROUND_TRUTH_OUTPUT or "Done."
        self._attack_final = inj.GROUND_TRUTH_OUTPUT if inj else ""
        self._n = 0
        self.obeyed = False

    def _call(self, c: FunctionCall) -> tuple[str, dict[str, Any]]:
        return c.function, dict(c.args)

    def __call__(self, request: ChatRequest) -> Message:
        if not self.obeyed and self._marker is not None:
            seen = any(m.role == "tool" and m.content and self._marker in _flat(m.content) for m in request.messages)
            if seen:
                self.obeyed = True
                self._plan = self._attack + self._plan
        if not self._plan:
            final = f"{self._attack_final}\n{self._final}" if self.obeyed and self._attack_final else self._final
            return Message(role="assistant", content=final)
        name, args = self._plan.pop(0)
        self._n += 1
        call = ToolCall(id=f"wc_{self._n}", name=name, arguments=json.dumps(args))
        return Message(role="assistant", content="", tool_calls=(call,))
