"""Procedures learned from episodes: propose a procedure when runs with the same trigger keep
succeeding, and count later runs into the success rate of the procedures they used.

The trigger signature of a closed episode (`episode_signature`) is
`"<trigger_type>|<rule>:<key>"`, lowercased:

- rule `task`: `trigger_payload.task` is a non-empty string (the caller names the task);
  the key is that text with whitespace collapsed.
- rule `goal`: otherwise the goal text, the first non-empty string of `input` (itself, or
  its `goal`, `task`, `message`, `text`, `query`, `prompt`), then of `trigger_payload`
  (same keys); the key is its salient words: runs of letters of 3 or more characters that
  are not stop words, the first `SIGNATURE_WORDS` of them, sorted. Numbers never count, so
  "refund order 4411" and "Refund the order 5522" share the key "order refund".

An episode without goal text, or whose text has no salient word, has no signature.
Episodes are grouped per agent: one agent's runs never feed another agent's proposal.

A pass (`procedures_learn`) reads the workspace's closed episodes started in the last
PROCEDURE_LEARN_WINDOW_DAYS (newest PROCEDURE_LEARN_EPISODE_LIMIT) and:

1. counts each episode once (a `ProcedureRun` row) as a run of the procedure it names in
   `trigger_payload.procedure_id` (one usable by its agent in its workspace), else of the
   self-learned procedure of its agent and signature, if any: success or failure, its
   duration, and a successful one is appended to the learned procedure's evidence
   (`source_episode_ids`, at most EVIDENCE_MAX);
2. proposes a procedure for a group (agent, signature) with no proposal yet whose
   successes reach PROCEDURE_LEARN_MIN_SUCCESSES at a success ratio of at least
   PROCEDURE_LEARN_MIN_SUCCESS_RATIO: origin `self_learned`, inactive until an operator
   activates it, evidence = the group's successes, its counts = the group's runs. Episodes
   that name a procedure never feed a proposal.
"""

import logging
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import OperationalError, transaction
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from redis.exceptions import RedisError

from core.errors import ConflictError, transaction_lost
from core.models import AuditEvent
from core.services import audit_record
from episodes.models import Episode
from procedures.models import Procedure, ProcedureLearningState, ProcedureRun
from procedures.services.procedures import procedure_create, procedure_lineage_lock

logger = logging.getLogger(__name__)

LEARNING_ACTOR = "system:learning"
SIGNATURE_WORDS = 5
# Evidence kept on a learned procedure; the counters go on counting past it.
EVIDENCE_MAX = 100
# Actions compared per episode when deriving the common tool sequence (LCS is O(n*m)).
ACTIONS_MAX = 50
EXAMPLES_MAX = 3
EXAMPLE_CHARS = 500
GOAL_KEYS = ("goal", "task", "message", "text", "query", "prompt")
# An episode closed in a transaction that commits just after a pass started has an audit
# time before it: the cursor stays this far behind so the next nudge still sees it.
CURSOR_MARGIN = timedelta(seconds=5)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NUDGE_KEY = "procedures:learn:nudged:{workspace_id}"
# While a nudged pass is queued, further commits of the workspace queue none.
NUDGE_DEBOUNCE_SECONDS = 60
# Runs of a pass the database aborted as a deadlock victim: each aborted run lost to a
# concurrent writer, so three in a row means a busy workspace, left to the next nudge or sweep.
LEARN_ATTEMPTS = 3

_STOP_WORDS_TEXT = """
    about above after again all also and any are because been before being below between both
    but can could did does doing down during each few for from further had has have having her
    here hers him his how into its just let like more most much must need needs not now off once
    only other our ours out over own please same she should some such than that the their theirs
    them then there these they this those through too under until very want wants was were what
    when where which while who whom why will with would you your yours
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD = re.compile(r"[^\W\d_]+")
_SPACES = re.compile(r"\s+")


def _first_text(value) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        for key in GOAL_KEYS:
            if isinstance(value.get(key), str) and value[key].strip():
                return value[key].strip()
    return ""


def salient_words(text: str) -> list[str]:
    """The first SIGNATURE_WORDS distinct salient words of `text`, in order."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) >= 3 and word not in STOP_WORDS and word not in words:
            words.append(word)
            if len(words) == SIGNATURE_WORDS:
                break
    return words


@dataclass(frozen=True)
class Signature:
    trigger_type: str
    rule: str  # "task" or "goal"
    key: str
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.trigger_type}|{self.rule}:{self.key}"[:300]


def episode_signature(*, trigger_type: str, trigger_payload, input) -> Signature | None:
    """The normalised trigger signature of an episode (module docstring), or None."""
    trigger_type = (trigger_type or "").strip().lower()
    payload = trigger_payload if isinstance(trigger_payload, dict) else {}
    task = payload.get("task")
    if isinstance(task, str) and task.strip():
        text = _SPACES.sub(" ", task.strip().lower())
        words = salient_words(text)
        if not words:
            return None
        return Signature(trigger_type, "task", text[:200], tuple(words))
    words = salient_words(_first_text(input) or _first_text(payload))
    if not words:
        return None
    return Signature(trigger_type, "goal", " ".join(sorted(words)), tuple(sorted(words)))


def _tool_name(action) -> str:
    if not isinstance(action, dict):
        return ""
    for key in ("tool", "name", "tool_name"):
        if isinstance(action.get(key), str) and action[key].strip():
            return action[key].strip()[:200]
    function = action.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return function["name"].strip()[:200]
    return ""


def _lcs(a: list, b: list) -> list:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            table[i][j] = table[i + 1][j + 1] + 1 if a[i] == b[j] else max(table[i + 1][j], table[i][j + 1])
    common, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            common.append(a[i])
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return common


def common_tool_sequence(action_lists: list) -> list[str]:
    """The tool names every run called, in order: the longest common subsequence of the
    runs' tool-name sequences, folded pairwise (oldest run first)."""
    sequences = [
        [name for name in map(_tool_name, (actions or [])[:ACTIONS_MAX]) if name] for actions in action_lists
    ]
    if not sequences:
        return []
    common = sequences[0]
    for sequence in sequences[1:]:
        common = _lcs(common, sequence)
        if not common:
            break
    return common


def _example(output) -> str:
    import json

    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return text[:EXAMPLE_CHARS]


@dataclass
class LearningResult:
    proposed: list = field(default_factory=list)
    runs_counted: int = 0
    evidence_added: int = 0
    episodes_scanned: int = 0


@dataclass
class _Tally:
    # (episode id, success, duration_ms, ended_at, memory user id)
    runs: list = field(default_factory=list)
    evidence: list = field(default_factory=list)

    def add(self, episode) -> None:
        self.runs.append(
            (
                episode.pk,
                episode.outcome == Episode.Outcome.SUCCESS,
                episode.duration_ms,
                episode.ended_at,
                episode.memory_user_id,
            )
        )


def procedure_runs_person_fill(*, episode_ids) -> int:
    """Copy each episode's person onto its runs that have none (runs written without it: an
    import, which derives the column instead of carrying it). Returns the rows filled."""
    person = Episode.objects.filter(pk=OuterRef("episode_id")).values("memory_user_id")[:1]
    return ProcedureRun.objects.filter(episode_id__in=episode_ids, memory_user__isnull=True).update(
        memory_user_id=Subquery(person)
    )


def _runs_apply(procedure_id, tally: _Tally, *, workspace_id, now) -> None:
    """Store the runs (unique per procedure and episode) and add them to the counters in one
    UPDATE with F expressions, as procedure_record_run does."""
    ProcedureRun.objects.bulk_create(
        [
            ProcedureRun(
                workspace_id=workspace_id,
                procedure_id=procedure_id,
                episode_id=pk,
                memory_user_id=memory_user_id,
                success=ok,
                counted_at=now,
            )
            for pk, ok, _, _, memory_user_id in tally.runs
        ]
    )
    successes = sum(1 for _, ok, *_ in tally.runs if ok)
    timed = [duration for _, _, duration, *_ in tally.runs if duration is not None]
    update = {
        "times_used": F("times_used") + len(tally.runs),
        "success_count": F("success_count") + successes,
        "failure_count": F("failure_count") + len(tally.runs) - successes,
        "last_used_at": max(ended for _, _, _, ended, _ in tally.runs),
        "updated_at": now,
    }
    if timed:
        update["total_duration_ms"] = F("total_duration_ms") + sum(timed)
        update["timed_runs"] = F("timed_runs") + len(timed)
    Procedure.objects.filter(pk=procedure_id).update(**update)


def _proposal_name(*, workspace, agent, signature: Signature, chosen=frozenset()) -> str | None:
    """A free name for the proposal: neither stored for the agent nor in `chosen` (the names
    this pass gives its other proposals of the agent)."""
    base = "Learned: " + (signature.key if signature.rule == "task" else " ".join(signature.words))
    if signature.trigger_type:
        base += f" [{signature.trigger_type}]"
    base = base[:190]
    taken = set(
        Procedure.objects.filter(workspace=workspace, agent=agent, name__startswith=base).values_list(
            "name", flat=True
        )
    )
    taken |= set(chosen)
    for candidate in (base, *(f"{base} ({n})" for n in range(2, 10))):
        if candidate not in taken:
            return candidate
    return None


def _propose(*, workspace, agent, signature: Signature, name: str, episodes: list, now) -> Procedure | None:
    """Create the proposal `name` for `signature`, or None when the signature or the name was
    stored meanwhile (an import, a create): the next pass counts the runs into that row."""
    successes = [e for e in episodes if e.outcome == Episode.Outcome.SUCCESS]
    details = {
        e.pk: e
        for e in Episode.objects.filter(pk__in=[e.pk for e in successes]).only(
            "pk", "actions", "final_output"
        )
    }
    oldest_first = sorted(successes, key=lambda e: e.started_at)
    tools = common_tool_sequence([details[e.pk].actions for e in oldest_first if e.pk in details])
    finished = len(episodes)
    rate = len(successes) / finished
    if tools:
        procedure_type = Procedure.ProcedureType.TOOL_SEQUENCE
        content = [{"tool": name} for name in tools]
    else:
        procedure_type = Procedure.ProcedureType.PROMPT_TEMPLATE
        examples = [
            _example(details[e.pk].final_output)
            for e in reversed(oldest_first)
            if e.pk in details and details[e.pk].final_output not in (None, "")
        ][:EXAMPLES_MAX]
        content = {
            "template": f"Runs for '{signature.key}' succeeded {len(successes)} times; the recent ones "
            "ended as in the examples. Work toward the same kind of result.",
            "examples": examples,
        }
    trigger = f" on {signature.trigger_type}" if signature.trigger_type else ""
    description = (
        f"Proposed from {len(successes)} successful runs of {agent.slug}{trigger} "
        f"({signature.rule} '{signature.key}'), {rate:.0%} of {finished} in the last "
        f"{settings.PROCEDURE_LEARN_WINDOW_DAYS} days. Review it, then activate it."
    )
    try:
        procedure = procedure_create(
            workspace=workspace,
            agent=agent,
            name=name,
            description=description,
            # The goal words only: match callers send a goal, not the trigger type.
            trigger_conditions={"goal_contains_all": list(signature.words)},
            procedure_type=procedure_type,
            content=content,
            origin=Procedure.Origin.SELF_LEARNED,
            source_episode_ids=[e.pk for e in successes][-EVIDENCE_MAX:],
            learned_signature=str(signature),
            actor=LEARNING_ACTOR,
        )
    except ConflictError as exc:
        # procedure_create ran in a savepoint: the pass goes on without this proposal.
        logger.info("Proposal %r of workspace %s not made: %s", name, workspace.pk, exc.message)
        return None
    Procedure.objects.filter(pk=procedure.pk).update(is_active=False)
    procedure.is_active = False
    # Held for review: match never offers it until an operator activates it. The audit event
    # says so, and webhooks send it as `review.waiting`.
    audit_record(
        workspace=workspace,
        actor=LEARNING_ACTOR,
        action=AuditEvent.Action.UPDATE,
        entity_type="procedure",
        entity_id=procedure.pk,
        changes={"is_active": {"from": True, "to": False}, "review": "waiting"},
    )
    tally = _Tally()
    for episode in episodes:
        tally.add(episode)
    _runs_apply(procedure.pk, tally, workspace_id=workspace.pk, now=now)
    procedure.refresh_from_db()
    return procedure


def _procedure_ref(episode):
    payload = episode.trigger_payload if isinstance(episode.trigger_payload, dict) else {}
    value = payload.get("procedure_id")
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def procedures_learn(*, workspace, agent=None, now=None) -> LearningResult:
    """One learning pass over `workspace` (or only `agent`'s episodes): count new runs,
    extend learned procedures' evidence and propose procedures (module docstring).

    Idempotent: an episode counts once per procedure, a signature is proposed once per agent.
    Passes of one workspace are serialised on its ProcedureLearningState row; a
    workspace-wide pass moves the cursor the nudge and the sweep read.

    The pass is one transaction: one the database aborts for a concurrent writer (a deadlock
    victim) left nothing and runs again from its first read, LEARN_ATTEMPTS times in all.
    """
    now = now or timezone.now()
    for attempt in range(LEARN_ATTEMPTS):
        try:
            return _procedures_learn(workspace=workspace, agent=agent, now=now)
        except OperationalError as exc:
            # Inside a caller's transaction the abort undid the caller's work too: only the
            # caller can run it again.
            if not transaction_lost(exc) or transaction.get_connection().in_atomic_block:
                raise
            if attempt == LEARN_ATTEMPTS - 1:
                raise
            logger.info("Learning pass of workspace %s aborted for a concurrent writer; again", workspace.pk)
    raise AssertionError("unreachable")


def _procedures_learn(*, workspace, agent, now) -> LearningResult:
    result = LearningResult()
    window_start = now - timedelta(days=settings.PROCEDURE_LEARN_WINDOW_DAYS)
    with transaction.atomic():
        ProcedureLearningState.objects.get_or_create(workspace=workspace)
        state = ProcedureLearningState.objects.select_for_update().get(workspace=workspace)
        episodes = Episode.objects.filter(
            workspace=workspace, ended_at__isnull=False, started_at__gte=window_start, started_at__lte=now
        ).exclude(outcome="")
        if agent is not None:
            episodes = episodes.filter(agent=agent)
        # Ordered by the episodes_agent_recent / episodes_recent index; actions and outputs
        # are read only for the groups proposed.
        episodes = list(
            episodes.order_by("-started_at").only(
                "pk",
                "agent_id",
                "memory_user_id",
                "trigger_type",
                "trigger_payload",
                "input",
                "outcome",
                "started_at",
                "ended_at",
                "duration_ms",
            )[: settings.PROCEDURE_LEARN_EPISODE_LIMIT]
        )
        result.episodes_scanned = len(episodes)
        counted = set(
            ProcedureRun.objects.filter(episode__in=[e.pk for e in episodes]).values_list(
                "procedure_id", "episode_id"
            )
        )
        counted_episodes = {episode_id for _, episode_id in counted}

        named = {}
        references = {ref for ref in map(_procedure_ref, episodes) if ref is not None}
        usable = {
            p.pk: p.agent_id
            for p in Procedure.objects.filter(workspace=workspace, pk__in=references).only("pk", "agent_id")
        }
        groups: dict[tuple, list] = defaultdict(list)
        for episode in episodes:
            ref = _procedure_ref(episode)
            if ref is not None and ref in usable and usable[ref] in (None, episode.agent_id):
                named[episode.pk] = ref
                continue
            signature = episode_signature(
                trigger_type=episode.trigger_type,
                trigger_payload=episode.trigger_payload,
                input=episode.input,
            )
            if signature is not None:
                groups[(episode.agent_id, str(signature))].append((signature, episode))

        learned = {
            (p.agent_id, p.learned_signature): p
            for p in Procedure.objects.filter(
                workspace=workspace,
                origin=Procedure.Origin.SELF_LEARNED,
                agent_id__in={key[0] for key in groups},
                learned_signature__in={key[1] for key in groups},
            ).only("pk", "agent_id", "learned_signature", "source_episode_ids")
        }
        tallies: dict = defaultdict(_Tally)
        by_id = {e.pk: e for e in episodes}
        for episode_id, procedure_id in named.items():
            if (procedure_id, episode_id) not in counted:
                tallies[procedure_id].add(by_id[episode_id])
        to_propose = []
        for key, members in groups.items():
            procedure = learned.get(key)
            if procedure is None:
                to_propose.append((key, members))
                continue
            evidence = set(procedure.source_episode_ids)
            for _, episode in members:
                if (procedure.pk, episode.pk) in counted:
                    continue
                tallies[procedure.pk].add(episode)
                if episode.outcome == Episode.Outcome.SUCCESS and episode.pk not in evidence:
                    tallies[procedure.pk].evidence.append(episode.pk)

        agents = {a.pk: a for a in workspace.agents.filter(pk__in={key[0] for key, _ in to_propose})}
        proposals = []
        chosen = defaultdict(set)
        for (agent_id, _), members in to_propose:
            # Episodes already counted for some procedure were a run of it, not new evidence.
            fresh = [(s, e) for s, e in members if e.pk not in counted_episodes]
            successes = sum(1 for _, e in fresh if e.outcome == Episode.Outcome.SUCCESS)
            if successes < settings.PROCEDURE_LEARN_MIN_SUCCESSES:
                continue
            if successes / len(fresh) < settings.PROCEDURE_LEARN_MIN_SUCCESS_RATIO:
                continue
            signature = fresh[0][0]
            name = _proposal_name(
                workspace=workspace, agent=agents[agent_id], signature=signature, chosen=chosen[agent_id]
            )
            if name is None:
                continue
            chosen[agent_id].add(name)
            proposals.append((agents[agent_id], signature, name, [e for _, e in fresh]))
        if proposals:
            # Every lineage and signature the pass creates, in one call and before it writes a
            # procedure row: taken later, after the run counts below locked rows, an import
            # holding one of these keys and then locking the versions it brings would wait for
            # this pass while it waits for the import (PostgreSQL aborts one).
            procedure_lineage_lock(
                workspace_id=workspace.pk,
                lineages=[(proposer.pk, name) for proposer, _, name, _ in proposals],
                signatures=[(proposer.pk, str(signature)) for proposer, signature, _, _ in proposals],
            )

        # Key order, all in one statement before the first counter moves, as
        # procedure_lineage_lock takes a lineage's versions: counted in the order the episodes
        # came (newest first), a pass held a newer version while an activation of its lineage,
        # holding the older one, waited for it, and then waited for the older one itself.
        touched = sorted(pk for pk, tally in tallies.items() if tally.runs)
        list(
            Procedure.objects.filter(pk__in=touched)
            .order_by("pk")
            .select_for_update(no_key=True)
            .values_list("pk")
        )
        for procedure_id in touched:
            tally = tallies[procedure_id]
            _runs_apply(procedure_id, tally, workspace_id=workspace.pk, now=now)
            result.runs_counted += len(tally.runs)
            if tally.evidence:
                procedure = (
                    Procedure.objects.select_for_update()
                    .only("pk", "source_episode_ids")
                    .get(pk=procedure_id)
                )
                # Oldest first, so the newest evidence is what the cap keeps.
                added = sorted(tally.evidence, key=lambda pk: by_id[pk].started_at)
                Procedure.objects.filter(pk=procedure_id).update(
                    source_episode_ids=[*procedure.source_episode_ids, *added][-EVIDENCE_MAX:]
                )
                result.evidence_added += len(added)
            successes = sum(1 for _, ok, *_ in tally.runs if ok)
            audit_record(
                workspace=workspace,
                actor=LEARNING_ACTOR,
                action=AuditEvent.Action.UPDATE,
                entity_type="procedure",
                entity_id=procedure_id,
                changes={
                    "runs": len(tally.runs),
                    "successes": successes,
                    "failures": len(tally.runs) - successes,
                    "evidence_added": len(tally.evidence),
                },
            )

        for proposer, signature, name, fresh in proposals:
            procedure = _propose(
                workspace=workspace, agent=proposer, signature=signature, name=name, episodes=fresh, now=now
            )
            if procedure is not None:
                result.proposed.append(procedure)
                result.runs_counted += len(fresh)
        if agent is None:
            state.learned_at = now - CURSOR_MARGIN
            state.checked_at = now
            state.save(update_fields=["learned_at", "checked_at"])
    return result


def _episodes_changed_since(workspace_id, since=None, *, from_state: bool = False) -> bool:
    """Whether an episode was recorded, closed, edited or rated after `since` (with
    `from_state`: after the workspace's learning cursor, read in the same query). Read from
    the audit trail on its (workspace, -at) index, so it costs the same however many
    episodes the workspace holds."""
    events = AuditEvent.objects.filter(workspace_id=workspace_id, entity_type="episode").exclude(
        action=AuditEvent.Action.DELETE
    )
    if from_state:
        cursor = ProcedureLearningState.objects.filter(workspace_id=workspace_id).values("learned_at")[:1]
        # No pass yet (no row, or no cursor): every episode event is new.
        events = events.filter(at__gt=Coalesce(Subquery(cursor), Value(EPOCH)))
    elif since is not None:
        events = events.filter(at__gt=since)
    return events.exists()


def procedures_learn_listener(workspace_id) -> None:
    """After a commit that wrote audit events (core.events): queue a learning pass when the
    workspace has episodes changed since its last pass and none is queued already. One
    indexed query per commit: ~1.2 ms with 20,000 other audit events since the cursor
    (load average 5); the sweep moves an idle workspace's cursor, which bounds that scan."""
    from procedures.tasks import procedures_learn_task

    if not _episodes_changed_since(workspace_id, from_state=True):
        return
    if cache.add(NUDGE_KEY.format(workspace_id=workspace_id), 1, NUDGE_DEBOUNCE_SECONDS):
        procedures_learn_task.delay(str(workspace_id))


def procedures_learn_nudge_clear(workspace_id) -> None:
    """A queued pass starts: a commit from now on may queue the next one. With the cache
    unreachable the pass still runs; the mark then lapses after NUDGE_DEBOUNCE_SECONDS."""
    try:
        cache.delete(NUDGE_KEY.format(workspace_id=workspace_id))
    except (RedisError, OSError) as exc:
        logger.warning("Learning nudge of workspace %s not cleared: %s", workspace_id, exc)


def procedures_learn_sweep(*, limit: int, now=None) -> dict:
    """The beat task's pass: the `limit` workspaces looked at least recently (never first),
    each learned when its episodes changed since its last pass. Catches nudges that were
    lost and workspaces whose window moved."""
    from core.models import Workspace

    now = now or timezone.now()
    workspaces = list(
        Workspace.objects.annotate(
            checked=ProcedureLearningState.objects.filter(workspace=OuterRef("pk")).values("checked_at")[:1]
        )
        .filter(Q(checked__isnull=True) | Q(checked__lt=now))
        .order_by(F("checked").asc(nulls_first=True), "pk")[:limit]
    )
    learned = proposed = 0
    for workspace in workspaces:
        state, _ = ProcedureLearningState.objects.get_or_create(workspace=workspace)
        if _episodes_changed_since(workspace.pk, state.learned_at):
            proposed += len(procedures_learn(workspace=workspace, now=now).proposed)
            learned += 1
        else:
            # Nothing to learn up to now: the cursor moves, so the nudge's scan of the audit
            # trail stays one sweep period long however many other writes the workspace makes.
            ProcedureLearningState.objects.filter(workspace=workspace).update(
                checked_at=now, learned_at=now - CURSOR_MARGIN
            )
    return {"checked": len(workspaces), "learned": learned, "proposed": proposed}
