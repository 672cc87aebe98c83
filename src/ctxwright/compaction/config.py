"""The one config object of the compaction layers; every default is documented here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwright.compaction.survival import Keep

#: ``CompactionConfig.policy`` values (planner.py).
POLICIES = ("cost", "eager")


@dataclass
class CompactionConfig:
    """Settings of the layers that need no LLM.

    Token counts are the session's counter's (the backend's tokenizer when it has one).
    """

    #: Master switch; off means the loop sends the trajectory as recorded (still refusing a
    #: request that cannot fit, with a clear error).
    enabled: bool = True
    #: The model's context window in tokens; ``None``: the backend's own (``n_ctx`` on the
    #: embedded model) or 128,000 for a served model that does not say.
    window_tokens: int | None = None
    #: Tokens kept free for the reply; the *effective* window is window - reserve.
    reserve_output_tokens: int = 512

    # -- layer 1: tool-result budget ---------------------------------------------------
    #: Cap per tool result in tokens (the book: 25,000). Per tool overrides in ``per_tool_cap``.
    result_cap_tokens: int = 25_000
    per_tool_cap: dict[str, int] = field(default_factory=dict)
    #: A single result may never take more than this share of the effective window, whatever
    #: the cap says -- on an 8K model a 25K cap would let one result overflow the window.
    max_result_share: float = 0.15
    #: Characters of the head and of the tail shown in an offloaded result's preview.
    preview_head_chars: int = 1_200
    preview_tail_chars: int = 400
    #: Where offloaded results go: ``<results_dir>/<session id>/``. ``None``: a
    #: ``ctxwright-results`` folder next to the database; without a store, a fresh private
    #: temporary folder, removed when the session's agent is gone (``compaction/offload.py``).
    results_dir: Path | None = None
    #: Before anything is cut, the lossless compressors (``compress/``) rewrite a result that
    #: is a JSON listing, a repeat of an earlier result or a log with repetitive lines (and,
    #: over the cap only, source code as an outline); the original is offloaded, readable
    #: with ``read_result``. Off: results are recorded as they are, or previewed.
    compress: bool = True

    # -- layer 2: noise ----------------------------------------------------------------
    #: A new result identical to an earlier one of the same tool becomes a one-line pointer.
    dedupe: bool = True
    #: At a trigger, results that no later step used become one-line markers (rule in noise.py).
    drop_unused: bool = True
    #: A result counts as unused only after this many later assistant turns ignored it.
    unused_after_turns: int = 3

    # -- when to compact (planner.py) ---------------------------------------------------
    #: ``"cost"``: the planner's rule -- compact when the window needs it (the request would
    #: not fit one more call's growth) or when the stale tokens have cost more than the
    #: re-prefill (α·D·N/2 ≥ (1−α)·R), and then deeply, every tier down to
    #: ``trim_target_ratio``. ``"eager"``: at ``trigger_ratio``, each tier only while over it
    #: (more, shallower compactions; each re-prefills what follows its cut).
    policy: str = "cost"
    #: α, cached ÷ uncached input price, for the cost rule. ``None``: the harness fills it
    #: with the status bar's ``cache_price_ratio`` (0.1 served, 0 embedded); 0.1 if nothing does.
    cache_price_ratio: float | None = None

    # -- layer 3: clearing ------------------------------------------------------------
    #: (policy eager) Run the layers when the request passes this share of the effective
    #: window (the book: 0.55).
    trigger_ratio: float = 0.55
    #: Clearing keeps the newest K tool results as they are ...
    keep_recent_results: int = 4
    #: ... as long as together they stay under this share of the effective window: on a small
    #: window four capped results would fill it, and clearing would then run every few turns.
    keep_recent_share: float = 0.2
    #: Results shorter than this (in tokens) are not worth a placeholder.
    min_clear_tokens: int = 64
    #: At least this many model calls between two compactions: batches, never every turn.
    #: (A request over the window itself is compacted whatever the spacing.)
    min_calls_between: int = 3
    #: When noise and clearing are not enough, trim drops the oldest turns until the request
    #: is under this share of the effective window -- well under the trigger, so that the
    #: next compaction is many turns away.
    trim_target_ratio: float = 0.4
    #: (policy cost) How deep a compaction goes: every tier runs while the request is over
    #: this share of the effective window, so the next stretch has the rest of it.
    target_ratio: float = 0.25

    # -- skills (skills.py) ------------------------------------------------------------
    #: Full compaction and trim re-attach the instructions of the skills loaded so far
    #: (newest first) after their note, up to this many tokens in all; skills that do not
    #: fit are named, so the model can load them again with ``Skill(name)``.
    skill_budget_tokens: int = 5_000
    #: ... and never more than this share of the effective window (an 8K model's window
    #: would otherwise be half skills).
    skill_budget_share: float = 0.25

    # -- LLM layers -------------------------------------------------------------------
    #: Result-compression strategy of experiment 2-9 (strategies.py): none, per_result,
    #: combined, context_aware, context_aware_cited, adaptive, extractive.
    strategy: str = "none"
    #: ``adaptive`` compresses every uncompressed result once the request passes this share.
    adaptive_ratio: float = 0.8
    #: Layer 4: old tool rounds get one LLM summary each (instead of a bare placeholder).
    archival_summaries: bool = False
    #: Layer 5: two-stage LLM compaction of the older trajectory before trimming.
    full_compaction: bool = False
    #: The summarizer's own budget: input tokens (longer inputs are cut first), reply tokens,
    #: and seconds before a summary counts as failed.
    summary_input_tokens: int = 3_000
    summary_max_tokens: int = 256
    summary_timeout_s: float = 120.0
    #: Circuit breaker (breaker.py): open after this many failures in a row, try again after
    #: this many model calls.
    breaker_threshold: int = 3
    breaker_cooldown_calls: int = 10

    # -- the survival contract (survival.py) ---------------------------------------------
    #: What must survive every compaction: ``"task"``, ``"todos"`` (open TODO items),
    #: ``"files"`` (paths in tool calls and results), ``"errors"`` (failed results not fixed
    #: since), ``"constraints"`` (sentences of user messages with must, never, always, only,
    #: don't...), a regular expression, or ``Keep(name, pattern)``. After each compaction the
    #: declared items it hid are checked to be still in view (note, summary, kept messages,
    #: system prompt) and the result is recorded in its ledger (``show ID --compactions``).
    #: Empty: no check.
    keep: list[str | Keep] = field(default_factory=list)

    # -- the providers' compaction --
    #: The provider's own context management, sent by the Anthropic and Responses backends
    #: (``compaction/provider.py``): ``None`` off; ``"clear"`` Anthropic's context editing
    #: (``clear_tool_uses_20250919``, with ``clear_thinking_20251015`` first when thinking is
    #: on); ``"compact"`` server-side compaction (Anthropic's ``compact_20260112``, the
    #: Responses API's ``context_management`` compaction). ``compaction="provider"`` is
    #: ``"compact"`` with ctxwright's own tiers off.
    provider: str | None = None
    #: Input tokens at which the provider acts. ``None``: the provider's default (Anthropic:
    #: 100,000 for clearing, 150,000 for compaction); the Responses API documents none, so
    #: there it is 80% of the window.
    provider_trigger_tokens: int | None = None
    #: Clearing keeps the newest this many tool uses (Anthropic's default: 3).
    provider_keep_tool_uses: int = 3
    #: Clearing happens only if it removes at least this many tokens (``None``: any amount).
    provider_clear_at_least: int | None = None
    #: Tools whose uses clearing never touches.
    provider_exclude_tools: list[str] = field(default_factory=list)
    #: Clearing also clears the tool calls' inputs.
    provider_clear_inputs: bool = False

    # -- no stalls (background.py) -------------------------------------------------------
    #: Prepare the LLM summary (full compaction's stage 1, else the archival rounds) on a
    #: background thread once the request passes ``soft_ratio`` of the effective window, while
    #: the loop goes on; it is applied at the first call boundary after it is ready, if the
    #: events it summarised are still in view unchanged (else it is discarded and a
    #: ``summary_failed`` event with reason ``stale`` says so). A pass that reaches the trigger
    #: while it runs waits for it (at most ``summary_timeout_s``) instead of starting another.
    #: Off: every summary is written inside the call that needs it, and the loop waits.
    background: bool = False
    #: The share of the effective window at which the background summary starts; under the
    #: trigger (``trigger_ratio``, or the planner's under policy ``cost``), so that it is ready
    #: before the trigger is reached.
    soft_ratio: float = 0.45

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"compaction policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        if not 0 < self.soft_ratio <= 1:
            raise ValueError(f"compaction soft_ratio must be in (0, 1], not {self.soft_ratio!r}")
        if self.keep:  # a bad declaration fails here, not at the first compaction
            from ctxwright.compaction.survival import contract

            contract(self.keep)

    @property
    def alpha(self) -> float:
        """The cost rule's α: ``cache_price_ratio``, or 0.1 (Anthropic's and GPT-5's) when unset."""
        return 0.1 if self.cache_price_ratio is None else self.cache_price_ratio

    @property
    def uses_llm(self) -> bool:
        from ctxwright.compaction.strategies import LLM_STRATEGIES

        return self.strategy in LLM_STRATEGIES or self.archival_summaries or self.full_compaction

    def skill_budget(self, effective_window: int) -> int:
        """Tokens of skill instructions a dropping layer re-attaches at most."""
        return max(0, min(self.skill_budget_tokens, int(effective_window * self.skill_budget_share)))

    def cap_for(self, tool_name: str, effective_window: int) -> int:
        cap = self.per_tool_cap.get(tool_name, self.result_cap_tokens)
        return max(64, min(cap, int(effective_window * self.max_result_share)))
