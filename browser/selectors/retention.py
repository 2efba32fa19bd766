"""Reads of the Retention page: its rules in tier order, the agents, the people under a legal
hold, and a person named by id or canonical id, all within the operator's workspace."""

import uuid

from django.db.models import Case, IntegerField, Value, When

from core.models import Agent
from identities.models import MemoryUser
from identities.selectors import memory_user_survivor_ids
from retention.models import RetentionRule, Tier

HELD_PEOPLE_SHOWN = 100


def held_people(*, workspace) -> list[MemoryUser]:
    """The workspace's legal holds as the records they were placed on, each with `survivor`:
    the person whose data the hold covers, whose page lists it and where it is released (the
    record itself, or the person it was merged into; merges keep chains one hop deep). Grouped
    by survivor, the group of the newest hold first; within a group as
    identities.selectors.memory_user_legal_holds lists them (own first, then oldest)."""
    holds = list(
        MemoryUser.objects.filter(workspace=workspace, legal_hold_at__isnull=False).order_by(
            "-legal_hold_at", "pk"
        )[:HELD_PEOPLE_SHOWN]
    )
    # The end of each merged record's chain (older data may hold A into B into C): one query
    # for the chains and one for the survivors, and none when no held record was merged.
    survivors = memory_user_survivor_ids(ids=[hold.pk for hold in holds if hold.merged_into_id])
    people = {person.pk: person for person in MemoryUser.objects.filter(pk__in=set(survivors.values()))}
    groups: dict = {}
    for hold in holds:
        hold.survivor = people.get(survivors.get(hold.pk), hold)
        groups.setdefault(hold.survivor.pk, []).append(hold)
    shown = []
    for group in groups.values():
        group.sort(key=lambda hold: (hold.pk != hold.survivor.pk, hold.legal_hold_at, str(hold.pk)))
        shown.extend(group)
    return shown


def person_find(*, workspace, reference: str) -> MemoryUser | None:
    """The workspace's person with this id or canonical id (`telegram:1001`), or None."""
    reference = reference.strip()
    people = MemoryUser.objects.filter(workspace=workspace)
    try:
        return people.filter(pk=uuid.UUID(reference)).first()
    except ValueError:
        return people.filter(canonical_id=reference).first()


def retention_rules_shown(*, workspace) -> list[RetentionRule]:
    """The workspace's rules in the order of the tiers, the workspace's rule before agents'."""
    tier_order = Case(
        *[When(tier=tier, then=Value(i)) for i, tier in enumerate(Tier.values)], output_field=IntegerField()
    )
    rules = RetentionRule.objects.filter(workspace=workspace).select_related("agent")
    return list(rules.order_by(tier_order, "agent__slug", "pk"))


def workspace_agents(*, workspace) -> list[Agent]:
    return list(Agent.objects.filter(workspace=workspace).order_by("slug").only("slug"))
