"""Writes of retention: rules, and the engine that applies every rule of a workspace.

The engine deletes in batches, each its own transaction, so a killed run loses nothing and
the next run (which selects afresh) continues where it stopped. Two runs of one workspace
never overlap (one `running` row per workspace, a stale one is abandoned after
RETENTION_RUN_LEASE), and two engines racing on the same rows each take the rows it can lock.
"""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from core.access import Principal, require_workspace_key, require_write
from core.errors import ApplicationError, ConflictError
from core.models import Agent, AuditEvent, Workspace
from core.services import audit_record, audit_record_deletes
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import EffectiveRule, retention_candidates, retention_rules_effective
from retention.targets import TARGETS
from threads.models import Message, NodeSummary, Thread
from threads.services import thread_compact_request
from threads.services.compaction import COMPACTION_REQUEST_TTL

RETENTION_ACTOR = "system:retention"
# A run that has not written a heartbeat for this long is taken to be dead.
RETENTION_RUN_LEASE = timedelta(minutes=10)

RULE_NEEDS_A_LIMIT = "A rule needs max_age_days or keep_latest (a positive number)."
RULE_AGENT_UNKNOWN = "No agent with this slug in the workspace."
RUN_ALREADY_RUNNING = "A retention run of this workspace is already running."


def _rule_limits_clean(max_age_days, keep_latest) -> tuple[int | None, int | None]:
    max_age_days = max_age_days or None
    keep_latest = keep_latest or None
    if max_age_days is None and keep_latest is None:
        raise ApplicationError(
            RULE_NEEDS_A_LIMIT,
            fields={"max_age_days": [RULE_NEEDS_A_LIMIT], "keep_latest": [RULE_NEEDS_A_LIMIT]},
        )
    return max_age_days, keep_latest


def retention_rule_set(
    *,
    principal: Principal,
    tier: str,
    agent_slug: str | None = None,
    max_age_days: int | None = None,
    keep_latest: int | None = None,
) -> RetentionRule:
    """Create or replace the rule of `tier` for the workspace (no agent) or one agent."""
    require_workspace_key(principal)
    require_write(principal)
    max_age_days, keep_latest = _rule_limits_clean(max_age_days, keep_latest)
    agent = None
    if agent_slug:
        agent = Agent.objects.filter(workspace=principal.workspace, slug=agent_slug).first()
        if agent is None:
            raise ApplicationError(
                RULE_AGENT_UNKNOWN, code="agent_unknown", fields={"agent": [RULE_AGENT_UNKNOWN]}
            )
    with transaction.atomic():
        rule = (
            RetentionRule.objects.select_for_update(of=("self",))
            .filter(workspace=principal.workspace, tier=tier, agent=agent)
            .first()
        )
        before = {"max_age_days": rule.max_age_days, "keep_latest": rule.keep_latest} if rule else None
        if rule is None:
            try:
                with transaction.atomic():
                    rule = RetentionRule.objects.create(
                        workspace=principal.workspace,
                        agent=agent,
                        tier=tier,
                        max_age_days=max_age_days,
                        keep_latest=keep_latest,
                        changed_by=principal.actor,
                    )
            except IntegrityError:
                # A concurrent request created it first: replace that one.
                rule = RetentionRule.objects.select_for_update(of=("self",)).get(
                    workspace=principal.workspace, tier=tier, agent=agent
                )
        rule.max_age_days, rule.keep_latest, rule.changed_by = max_age_days, keep_latest, principal.actor
        rule.save()
        audit_record(
            workspace=principal.workspace,
            actor=principal.actor,
            action=AuditEvent.Action.CREATE if before is None else AuditEvent.Action.UPDATE,
            entity_type="retention_rule",
            entity_id=rule.pk,
            changes={
                "tier": tier,
                "agent": agent.slug if agent else None,
                "before": before,
                "after": {"max_age_days": max_age_days, "keep_latest": keep_latest},
            },
        )
    return rule


def retention_rule_delete(*, principal: Principal, rule: RetentionRule) -> None:
    require_workspace_key(principal)
    require_write(principal)
    with transaction.atomic():
        audit_record(
            workspace=principal.workspace,
            actor=principal.actor,
            action=AuditEvent.Action.DELETE,
            entity_type="retention_rule",
            entity_id=rule.pk,
            changes={"tier": rule.tier, "agent": rule.agent.slug if rule.agent_id else None},
        )
        rule.delete()


def _delete_batch(*, rule: EffectiveRule, ids: list, run: RetentionRun) -> int:
    """Delete the rows `ids` that this transaction can lock; returns how many went."""
    target = TARGETS[rule.tier]
    with transaction.atomic():
        # Another engine (a second worker) may be deleting the same rows: each takes the ones
        # it can lock, so every row is deleted and audited once.
        rows = target.model.objects.filter(pk__in=ids)
        if target.owner_lock is not None:
            rows = rows.filter(target.owner_lock(ids))
        if target.eligible is not None:
            # Tested again under the lock: an append that forked from a held message
            # meanwhile has cleared its mark, and PostgreSQL re-reads a locked row's new version.
            rows = rows.filter(target.eligible())
        # Key order, SKIP LOCKED: a batch never waits for a row it deletes.
        ids = list(rows.order_by("pk").select_for_update(skip_locked=True).values_list("pk", flat=True))
        if target.before_delete is not None and ids:
            ids = target.before_delete(ids)
        if not ids:
            return 0
        if target.delete is not None:
            target.delete(ids)
        else:
            target.model.objects.filter(pk__in=ids).delete()
        workspace = Workspace(pk=rule.workspace_id)
        if target.audit_entity:
            audit_record_deletes(
                workspace=workspace, actor=RETENTION_ACTOR, entity_type=target.audit_entity, ids=ids
            )
        audit_record(
            workspace=workspace,
            actor=RETENTION_ACTOR,
            action=AuditEvent.Action.DELETE,
            entity_type="retention_run",
            entity_id=run.pk,
            changes={
                "tier": rule.tier,
                "deleted": len(ids),
                "rule": str(rule.rule_id) if rule.rule_id else ("retention_days" if rule.legacy else None),
                "agent": str(rule.agent_id) if rule.agent_id else None,
            },
        )
        RetentionRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())
    return len(ids)


def _apply_rule(*, rule: EffectiveRule, run: RetentionRun, now) -> int:
    batch = settings.RETENTION_BATCH
    deleted = 0
    for kind in ("age", "count"):
        while True:
            ids = list(retention_candidates(rule=rule, now=now, limit_kind=kind)[:batch])
            if not ids:
                break
            went = _delete_batch(rule=rule, ids=ids, run=run)
            deleted += went
            if went == 0:
                break  # another engine holds them all and goes on with them
    return deleted


def _compaction_may_help(*, now) -> Q:
    """Threads a compaction request may help: none is pending (or the pending one is older
    than COMPACTION_REQUEST_TTL: lost with its worker, or failed), and no compaction read the
    branch since the thread's last append.

    A compaction that read it since ("compacted" or "up_to_date" both set
    `compaction_checked_at`) would answer "up_to_date" again: messages read by two branches,
    those of an abandoned branch, or turns the recent window still shows wait until new
    messages move the window, not until the next run asks.

    `compaction_checked_at` is the `last_activity_at` the compaction saw, so "since" is
    equality: appends stamp with the web host's clock, and an order between two hosts' clocks
    would keep a thread out after an append from a host whose clock runs behind.
    """
    checked_since = Q(compaction_checked_at=F("last_activity_at"))
    not_pending = Q(compaction_requested_at__isnull=True) & ~checked_since
    return not_pending | Q(compaction_requested_at__lt=now - COMPACTION_REQUEST_TTL)


def _node_compaction_may_help(*, now) -> Q:
    """`_compaction_may_help` for messages of a node (a sub-agent's), read from their node's
    `NodeSummary`: a filter on Message rows, so it runs in SQL before any batch limit."""
    settled = NodeSummary.objects.filter(thread_id=OuterRef("thread_id"), node_id=OuterRef("node_id")).filter(
        Q(compaction_requested_at__gte=now - COMPACTION_REQUEST_TTL)
        | Q(
            compaction_requested_at__isnull=True,
            compaction_checked_at=OuterRef("thread__last_activity_at"),
        )
    )
    return ~Exists(settled)


def _compaction_request_for_waiting(*, rule: EffectiveRule, now) -> int:
    """Ask for a compaction of the threads whose expired messages no summary holds yet, so
    the next run may delete them without the conversation losing its gist; returns how many
    were asked. A sub-agent's messages are held by its node's summary, so their node's
    compaction is asked for."""
    asked = 0
    for kind in ("age", "count"):
        eligible = retention_candidates(rule=rule, now=now, limit_kind=kind)
        every = retention_candidates(rule=rule, now=now, limit_kind=kind, eligible_only=False)
        waiting = Message.objects.filter(pk__in=every).exclude(pk__in=eligible)
        # Filtered before the limit: threads that wait for good never crowd out the others.
        due = Thread.objects.filter(pk__in=waiting.filter(node_id="").values("thread_id")).filter(
            _compaction_may_help(now=timezone.now())
        )
        for thread in due[: settings.RETENTION_BATCH]:
            thread_compact_request(thread=thread)
            asked += 1
        pairs = list(
            waiting.exclude(node_id="")
            .filter(_node_compaction_may_help(now=timezone.now()))
            .values_list("thread_id", "node_id")
            .order_by("thread_id", "node_id")
            .distinct()[: settings.RETENTION_BATCH]
        )
        threads = Thread.objects.in_bulk({thread_id for thread_id, _ in pairs})
        for thread_id, node in pairs:
            thread = threads.get(thread_id)
            if thread is not None:
                thread_compact_request(thread=thread, node=node)
                asked += 1
    return asked


def _run_claim(*, workspace, trigger: str) -> RetentionRun | None:
    now = timezone.now()
    RetentionRun.objects.filter(
        workspace=workspace, state=RetentionRun.State.RUNNING, heartbeat_at__lt=now - RETENTION_RUN_LEASE
    ).update(state=RetentionRun.State.ABANDONED, finished_at=now)
    try:
        with transaction.atomic():
            return RetentionRun.objects.create(workspace=workspace, trigger=trigger)
    except IntegrityError:
        return None  # one is running


def retention_run(*, workspace, trigger: str = "schedule", now=None) -> RetentionRun | None:
    """Apply every retention rule of `workspace` once; None when a run is already going."""
    run = _run_claim(workspace=workspace, trigger=trigger)
    if run is None:
        return None
    now = now or timezone.now()
    deleted = {}
    try:
        for rule in retention_rules_effective(workspace=workspace):
            count = _apply_rule(rule=rule, run=run, now=now)
            deleted[rule.tier] = deleted.get(rule.tier, 0) + count
            RetentionRun.objects.filter(pk=run.pk).update(deleted=deleted, heartbeat_at=timezone.now())
            if rule.tier == Tier.MESSAGES:
                _compaction_request_for_waiting(rule=rule, now=now)
    except Exception as exc:
        RetentionRun.objects.filter(pk=run.pk).update(
            state=RetentionRun.State.FAILED,
            finished_at=timezone.now(),
            deleted=deleted,
            error=str(exc)[:2000],
        )
        raise
    RetentionRun.objects.filter(pk=run.pk).update(
        state=RetentionRun.State.DONE, finished_at=timezone.now(), deleted=deleted
    )
    run.refresh_from_db()
    return run


def retention_run_request(*, principal: Principal) -> None:
    """Queue a run of the caller's workspace now (after commit)."""
    from retention.tasks import retention_run_task

    require_workspace_key(principal)
    require_write(principal)
    if RetentionRun.objects.filter(
        workspace=principal.workspace,
        state=RetentionRun.State.RUNNING,
        heartbeat_at__gte=timezone.now() - RETENTION_RUN_LEASE,
    ).exists():
        raise ConflictError(RUN_ALREADY_RUNNING, code="retention_running")
    retention_run_task.delay_on_commit(str(principal.workspace.pk), principal.actor)


def retention_workspaces_due() -> list:
    """Workspaces with a rule, or with an agent keeping threads for `retention_days`."""
    with_rules = set(RetentionRule.objects.values_list("workspace_id", flat=True).distinct())
    legacy = set(
        Agent.objects.filter(memory_settings__retention_days__gt=0)
        .values_list("workspace_id", flat=True)
        .distinct()
    )
    if settings.MEMORY_DEFAULTS.get("retention_days", 0) > 0:
        legacy |= set(Workspace.objects.values_list("pk", flat=True))
    return sorted(with_rules | legacy, key=str)
