"""Reads of the Retention page: its rules in tier order, the agents, the people under a legal
hold, and a person named by id or canonical id, all within the operator's workspace."""

import uuid

from django.db.models import Case, IntegerField, Value, When

from core.models import Agent
from identities.models import MemoryUser
from retention.models import RetentionRule, Tier

HELD_PEOPLE_SHOWN = 100


def held_people(*, workspace) -> list[MemoryUser]:
    return list(
        MemoryUser.objects.filter(workspace=workspace, legal_hold_at__isnull=False).order_by(
            "-legal_hold_at"
        )[:HELD_PEOPLE_SHOWN]
    )


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
