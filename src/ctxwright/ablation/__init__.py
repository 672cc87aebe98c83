"""Prompt ablation: which sections of a system prompt change what the agent does.

``ctxwright ablate --system PROMPT.md --tasks TASKS.jsonl`` runs the agent once per *arm* --
the full prompt, and the prompt with one section removed (``sections.py``, ``arms.py``) -- on
tasks scored by code (``tasks.py``, ``scoring.py``), each run on a fresh environment
(``env.py``), and prints each arm's success rate with its Wilson interval (``stats.py``).
``run.py`` drives it; ``results.py`` writes its JSON as the runs go and reads a stopped one back
to resume it; ``cli/ablate.py`` is the command.

Why a package of its own: it is an experiment *on* the harness (it builds ordinary Harness
sessions), not a part of any session, and none of the agent's modules depend on it.
"""

from ctxwright.ablation.arms import EMPTY, FULL, Arm, make_arms
from ctxwright.ablation.env import Environment, load_factory, make_environment
from ctxwright.ablation.run import AblationResult, ArmSummary, Runner, RunRecord, run_ablation
from ctxwright.ablation.scoring import ActualCall, RunScore, score
from ctxwright.ablation.sections import Section, SectionedPrompt, split_builder, split_markdown
from ctxwright.ablation.stats import wilson
from ctxwright.ablation.tasks import ExpectedCall, Task, load_tasks, parse_task

__all__ = [
    "EMPTY",
    "FULL",
    "AblationResult",
    "ActualCall",
    "Arm",
    "ArmSummary",
    "Environment",
    "ExpectedCall",
    "RunRecord",
    "RunScore",
    "Runner",
    "Section",
    "SectionedPrompt",
    "Task",
    "load_factory",
    "load_tasks",
    "make_arms",
    "make_environment",
    "parse_task",
    "run_ablation",
    "score",
    "split_builder",
    "split_markdown",
    "wilson",
]
