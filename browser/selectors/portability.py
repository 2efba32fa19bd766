"""Reads of the Export/Import page: the workspace's agents, a person named by id or canonical
id, and the recent import jobs, all within the operator's workspace."""

import uuid

from core.models import Agent
from identities.models import MemoryUser
from portability.models import ImportJob

JOBS_SHOWN = 10


def export_agents(*, workspace) -> list[tuple[str, str]]:
    return [(a.slug, a.name or a.slug) for a in Agent.objects.filter(workspace=workspace).order_by("slug")]


def export_person_find(*, workspace, reference: str) -> MemoryUser | None:
    reference = reference.strip()
    people = MemoryUser.objects.filter(workspace=workspace)
    try:
        return people.filter(pk=uuid.UUID(reference)).first()
    except ValueError:
        return people.filter(canonical_id=reference).first()


def import_jobs_recent(*, workspace) -> list[ImportJob]:
    return list(ImportJob.objects.filter(workspace=workspace).order_by("-created_at")[:JOBS_SHOWN])
