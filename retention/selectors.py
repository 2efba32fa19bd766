"""Reads of retention: the rules of a workspace, the rule each agent ends up with for each tier,
the rows a rule would delete now, and the preview of the next run."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from core.access import Principal
from core.errors import NotFoundError
from core.memory_settings import memory_settings_for
from core.models import Agent
from retention.models import RetentionRule, RetentionRun, Tier
from retention.targets import TARGETS, Target

RULE_NOT_FOUND = "Retention rule not found."


@dataclass(frozen=True)
class EffectiveRule:
    """One limit applied to a set of agents' rows of one tier.

    `agent_id` None with `excluded_agents`: the workspace rule, for every agent without its
    own rule for the tier. `legacy`: the agent's `retention_days` memory setting (threads
    only), used while no rule names the threads tier for that agent or the workspace.
    """

    tier: str
    workspace_id: object
    agent_id: object
    excluded_agents: tuple
    max_age_days: int | None
    keep_latest: int | None
    rule_id: object = None
    legacy: bool = False


def retention_rule_list(*, workspace) -> list[RetentionRule]:
    return list(RetentionRule.objects.filter(workspace=workspace).select_related("agent"))


def retention_rule_get(*, principal: Principal, rule_id) -> RetentionRule:
    rule = (
        RetentionRule.objects.filter(workspace=principal.workspace, pk=rule_id)
        .select_related("agent")
        .first()
    )
    if rule is None:
        raise NotFoundError(RULE_NOT_FOUND)
    return rule


def retention_rules_effective(*, workspace) -> list[EffectiveRule]:
    """Every limit the engine applies in `workspace`: agent rules, then workspace rules
    (leaving out the agents with their own), then the legacy per-agent thread retention."""
    rules = retention_rule_list(workspace=workspace)
    own = {}
    for rule in rules:
        if rule.agent_id is not None:
            own.setdefault(rule.tier, []).append(rule.agent_id)
    effective = []
    for rule in rules:
        effective.append(
            EffectiveRule(
                tier=rule.tier,
                workspace_id=workspace.pk,
                agent_id=rule.agent_id,
                excluded_agents=() if rule.agent_id else tuple(own.get(rule.tier, ())),
                max_age_days=rule.max_age_days or None,
                keep_latest=rule.keep_latest or None,
                rule_id=rule.pk,
            )
        )
    # The setting stands for an agent no threads rule covers: none of its own, and no
    # workspace rule (which covers every agent without its own).
    if not any(rule.tier == Tier.THREADS and rule.agent_id is None for rule in rules):
        agents = Agent.objects.filter(workspace=workspace).exclude(pk__in=own.get(Tier.THREADS, ()))
        for agent in agents.only("id", "memory_settings", "workspace_id"):
            days = memory_settings_for(agent).retention_days
            if days > 0:
                effective.append(
                    EffectiveRule(
                        tier=Tier.THREADS,
                        workspace_id=workspace.pk,
                        agent_id=agent.pk,
                        excluded_agents=(),
                        max_age_days=days,
                        keep_latest=None,
                        legacy=True,
                    )
                )
    return effective


def _scoped(target: Target, rule: EffectiveRule):
    rows = target.model.objects.filter(workspace_id=rule.workspace_id)
    if rule.agent_id is not None:
        rows = rows.filter(**{target.agent: rule.agent_id})
    elif rule.excluded_agents:
        rows = rows.exclude(**{f"{target.agent}__in": rule.excluded_agents})
    if target.person:
        # Legal hold: nothing of a held person is touched, nor of one a held person was merged
        # into (their rows moved there; erasure is refused on the same ground).
        rows = rows.exclude(**{f"{target.person}__legal_hold_at__isnull": False}).exclude(
            **{f"{target.person}__merged_from__legal_hold_at__isnull": False}
        )
    return rows


def retention_candidates(*, rule: EffectiveRule, now=None, limit_kind: str, eligible_only: bool = True):
    """Primary keys of the rows `rule` deletes now for one of its limits (`age` or `count`).

    Age and count are two queries: PostgreSQL cannot OR a window function's rank with a
    plain condition in one filter. "Keep the newest N" ranks the rows the rule may delete,
    so rows it may not (held persons, unsummarized messages) never count against N.
    """
    now = now or timezone.now()
    target = TARGETS[rule.tier]
    rows = _scoped(target, rule)
    if eligible_only and target.eligible is not None:
        rows = rows.filter(target.eligible())
    if limit_kind == "age":
        if not rule.max_age_days:
            return rows.none().values_list("pk", flat=True)
        cutoff = now - timedelta(days=rule.max_age_days)
        return (
            rows.filter(**{f"{target.age_field}__lt": cutoff})
            .order_by(target.age_field)
            .values_list("pk", flat=True)
        )
    if not rule.keep_latest:
        return rows.none().values_list("pk", flat=True)
    if rule.max_age_days:
        # Rows past the age limit go by age first: ranked among the rest, the preview counts
        # what a run deletes (its age pass has removed them when it ranks) even where the age
        # order and the rank order differ (checkpoints by client id, messages by seq).
        rows = rows.filter(**{f"{target.age_field}__gte": now - timedelta(days=rule.max_age_days)})
    ranked = rows.annotate(
        position=Window(
            RowNumber(),
            partition_by=[F(field) if isinstance(field, str) else field for field in target.group],
            order_by=[
                F(name[1:]).desc() if name.startswith("-") else F(name).asc() for name in target.newest_first
            ],
        )
    )
    return ranked.filter(position__gt=rule.keep_latest).values_list("pk", flat=True)


def _rule_count(rule: EffectiveRule, *, now, eligible_only: bool = True) -> int:
    """Rows past either limit of `rule`, each counted once."""
    model = TARGETS[rule.tier].model
    by_age = retention_candidates(rule=rule, now=now, limit_kind="age", eligible_only=eligible_only)
    by_count = retention_candidates(rule=rule, now=now, limit_kind="count", eligible_only=eligible_only)
    return by_age.count() + model.objects.filter(pk__in=by_count).exclude(pk__in=by_age).count()


def retention_preview(*, workspace, now=None) -> dict:
    """What the next run would delete per tier, and the messages it must leave until a
    summary holds them."""
    now = now or timezone.now()
    deletes = dict.fromkeys(Tier.values, 0)
    waiting = 0
    for rule in retention_rules_effective(workspace=workspace):
        count = _rule_count(rule, now=now)
        deletes[rule.tier] += count
        if TARGETS[rule.tier].eligible is not None:
            waiting += _rule_count(rule, now=now, eligible_only=False) - count
    return {"deletes": deletes, "messages_waiting_for_summary": waiting}


def retention_run_list(*, workspace, limit: int = 20) -> list[RetentionRun]:
    return list(RetentionRun.objects.filter(workspace=workspace)[:limit])


def retention_run_latest(*, workspace) -> RetentionRun | None:
    return RetentionRun.objects.filter(workspace=workspace).first()
