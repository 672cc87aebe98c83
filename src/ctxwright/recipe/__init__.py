"""The recipe: every option of an agent, declared once, resolved, recorded and checked.

Layer: above the mechanisms whose config types it holds (compaction, defence, status,
skills, MCP, tool deferral), below the agent that runs with it. ``Harness`` keywords,
``ctxwright run`` flags, the record stored with a session (versioned, with a migration for
records written before versions), the resume check and ``docs/options.md`` all come from
the declaration in ``recipe/options.py``.
"""

from ctxwright.recipe.check import check_resume, flag_for
from ctxwright.recipe.declare import BY_BACKEND, Flag, OptionSpec, opt, options
from ctxwright.recipe.defaults import (
    BACKENDS,
    BackendDefaults,
    backend_defaults,
    backend_name,
    check_same_model,
    implied_backend,
)
from ctxwright.recipe.docs import harness_doc, harness_parameters, options_table, write_options_table
from ctxwright.recipe.flags import add_arguments, flag_names, given_from_args
from ctxwright.recipe.options import (
    MAX_RESULT_CHARS,
    CompactionOptions,
    DefenceOptions,
    DeferralOptions,
    DelegateOptions,
    Limits,
    McpOptions,
    ModelOptions,
    ReasoningOptions,
    Recipe,
    RuntimeOptions,
    SkillsOptions,
    StatusOptions,
    TelemetryOptions,
    TodoOptions,
    result_cap_help,
)
from ctxwright.recipe.record import (
    DELEGATE_TOOL,
    FILE_TOOLS,
    READ_RESULT_TOOL,
    RECORD_KEY,
    TODO_TOOLS,
    VERSION,
    migrate,
    to_record,
    with_backend,
)
from ctxwright.recipe.resolve import compaction_from_dict, compaction_overrides, compaction_to_dict, resolve

__all__ = [
    "BACKENDS",
    "BY_BACKEND",
    "DELEGATE_TOOL",
    "FILE_TOOLS",
    "MAX_RESULT_CHARS",
    "READ_RESULT_TOOL",
    "RECORD_KEY",
    "TODO_TOOLS",
    "VERSION",
    "BackendDefaults",
    "CompactionOptions",
    "DefenceOptions",
    "DeferralOptions",
    "DelegateOptions",
    "Flag",
    "Limits",
    "McpOptions",
    "ModelOptions",
    "OptionSpec",
    "ReasoningOptions",
    "Recipe",
    "RuntimeOptions",
    "SkillsOptions",
    "StatusOptions",
    "TelemetryOptions",
    "TodoOptions",
    "add_arguments",
    "backend_defaults",
    "backend_name",
    "check_resume",
    "check_same_model",
    "compaction_from_dict",
    "compaction_overrides",
    "compaction_to_dict",
    "default",
    "flag_for",
    "flag_names",
    "given_from_args",
    "harness_doc",
    "harness_parameters",
    "implied_backend",
    "migrate",
    "opt",
    "options",
    "options_table",
    "resolve",
    "result_cap_help",
    "to_record",
    "with_backend",
    "write_options_table",
]


def default(keyword: str) -> object:
    """The declared default of the ``Harness`` keyword ``keyword`` (a new session's value on
    a served model when it is not given): e.g. ``AgentConfig``'s defaults come from here."""
    for spec in options(Recipe):
        if spec.keyword == keyword:
            return spec.default
    raise KeyError(f"no option has the keyword {keyword!r}")
