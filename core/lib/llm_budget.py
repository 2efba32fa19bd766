"""Per-workspace daily token budgets for LLM work (extraction, compaction, consolidation,
reflection).

`core.llm.chat_complete` asks `llm_budget_check` before every call and hands the provider's
`usage` fields to `llm_usage_record` after it. The ledger is one `LLMUsage` row per
(workspace, UTC day, purpose), raised with `UPDATE ... SET x = x + n` so concurrent workers
never lose a count. The day's spend is the sum over purposes.

Past the budget, the workspace's policy decides:

- `fallback`: `LLMBudgetExceeded` (an `LLMUnavailable`), so every caller takes the offline
  method it already has for "no endpoint configured";
- `wait`: `LLMBudgetWait` (an `LLMError` carrying `retry_at`, the next UTC midnight): queued
  work is deferred, not degraded. Extraction and compaction jobs go back to the fair queue
  with `retry_at` as their not-before time (`core.lib.fair_queue.llm_job_defer`), a
  reflection run goes waiting; the previous result stays meanwhile. Work that cannot wait
  does without the model: a sync extraction reports the refusal and stores the client's
  candidates, a consolidation decision inside a write takes the rule.

The check happens before a call, so the call that crosses the budget completes and is
counted: a day overruns by at most one call per worker.
"""

import contextlib
import contextvars
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.models import LLMBudget, LLMUsage

POLICY_FALLBACK = LLMBudget.Policy.FALLBACK
POLICY_WAIT = LLMBudget.Policy.WAIT
PURPOSE_OTHER = "other"
PURPOSES = ("extraction", "compaction", "consolidation", "reflection", PURPOSE_OTHER)
BUDGET_SPENT = "The workspace's LLM budget of {budget} tokens for {day} is spent."


@dataclass(frozen=True)
class BudgetState:
    daily_tokens: int | None  # None: unlimited
    policy: str
    used: int
    day: date

    @property
    def exhausted(self) -> bool:
        return self.daily_tokens is not None and self.used >= self.daily_tokens

    @property
    def remaining(self) -> int | None:
        return None if self.daily_tokens is None else max(self.daily_tokens - self.used, 0)

    @property
    def percent(self) -> int:
        if not self.daily_tokens:
            return 100 if self.daily_tokens == 0 else 0
        return min(100, round(100 * self.used / self.daily_tokens))

    @property
    def retry_at(self) -> datetime:
        return budget_reset_at(self.day)


def budget_day(now=None) -> date:
    return (now or timezone.now()).astimezone(UTC).date()


def budget_reset_at(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)


def llm_budget_settings(*, workspace) -> tuple[int | None, str]:
    """(daily tokens or None for unlimited, policy) of `workspace`: its LLMBudget row, else settings."""
    row = LLMBudget.objects.filter(workspace=workspace).values("daily_tokens", "policy").first() or {}
    tokens = row.get("daily_tokens")
    if tokens is None:
        # The setting's 0 means "no budget"; a row's 0 blocks every call.
        tokens = settings.LLM_DAILY_TOKEN_BUDGET or None
    return tokens, row.get("policy") or settings.LLM_BUDGET_POLICY


def llm_usage_total(*, workspace, day: date) -> int:
    total = LLMUsage.objects.filter(workspace=workspace, day=day).aggregate(total=Sum("total_tokens"))
    return total["total"] or 0


def llm_budget_state(*, workspace, now=None) -> BudgetState:
    day = budget_day(now)
    tokens, policy = llm_budget_settings(workspace=workspace)
    return BudgetState(
        daily_tokens=tokens, policy=policy, used=llm_usage_total(workspace=workspace, day=day), day=day
    )


def _raise(*, workspace, day: date, purpose: str, **counts) -> None:
    """Add `counts` to the (workspace, day, purpose) row, creating it on first use."""
    increments = {name: F(name) + value for name, value in counts.items()}
    rows = LLMUsage.objects.filter(workspace=workspace, day=day, purpose=purpose)
    if rows.update(**increments):
        return
    try:
        # A savepoint: a concurrent insert of the same row must not break the caller's transaction.
        with transaction.atomic():
            LLMUsage.objects.create(workspace=workspace, day=day, purpose=purpose, **counts)
    except IntegrityError:
        rows.update(**increments)


def _purpose(purpose: str) -> str:
    return (purpose or PURPOSE_OTHER)[:30]


def llm_budget_check(*, workspace, purpose: str, now=None) -> BudgetState:
    """Raise LLMBudgetExceeded or LLMBudgetWait (per the policy) when the day's budget is spent."""
    from core.llm import LLMBudgetExceeded, LLMBudgetWait

    state = llm_budget_state(workspace=workspace, now=now)
    if not state.exhausted:
        return state
    _raise(workspace=workspace, day=state.day, purpose=_purpose(purpose), refused=1)
    message = BUDGET_SPENT.format(budget=state.daily_tokens, day=state.day.isoformat())
    if state.policy == POLICY_WAIT:
        raise LLMBudgetWait(message, retry_at=state.retry_at)
    raise LLMBudgetExceeded(message)


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_tokens(usage) -> tuple[int, int, int]:
    """(prompt, completion, total) from an OpenAI `usage` object; total = prompt + completion
    when the provider leaves it out, and never less than that sum."""
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    return prompt, completion, max(_int(usage.get("total_tokens")), prompt + completion)


_tracked: contextvars.ContextVar[list | None] = contextvars.ContextVar("llm_usage_tracked", default=None)


@contextlib.contextmanager
def llm_usage_tracking():
    """Collect the tokens of the calls made inside the block: `with llm_usage_tracking() as t:`
    then `sum(t)`. Used by work that reports its own spend (a reflection run)."""
    tokens: list[int] = []
    token = _tracked.set(tokens)
    try:
        yield tokens
    finally:
        _tracked.reset(token)


def llm_usage_record(*, workspace, purpose: str, usage, now=None) -> int:
    """Count one call's `usage` into the ledger; returns its total tokens."""
    prompt, completion, total = usage_tokens(usage)
    _raise(
        workspace=workspace,
        day=budget_day(now),
        purpose=_purpose(purpose),
        calls=1,
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
    )
    tracked = _tracked.get()
    if tracked is not None:
        tracked.append(total)
    return total


def llm_usage_days(*, workspace, days: int = 7, now=None) -> list[dict]:
    """The last `days` days' usage of `workspace`, newest first: {day, total, by_purpose, calls, refused}."""
    today = budget_day(now)
    rows = LLMUsage.objects.filter(workspace=workspace, day__gt=today - timedelta(days=days)).order_by(
        "-day", "purpose"
    )
    by_day: dict[date, dict] = {}
    for row in rows:
        entry = by_day.setdefault(
            row.day, {"day": row.day, "total": 0, "calls": 0, "refused": 0, "by_purpose": []}
        )
        entry["total"] += row.total_tokens
        entry["calls"] += row.calls
        entry["refused"] += row.refused
        entry["by_purpose"].append(
            {
                "purpose": row.purpose,
                "calls": row.calls,
                "prompt_tokens": row.prompt_tokens,
                "completion_tokens": row.completion_tokens,
                "total_tokens": row.total_tokens,
                "refused": row.refused,
            }
        )
    return list(by_day.values())
