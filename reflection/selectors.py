"""Reads of reflection runs and cached profiles, scoped by core.access: an agent-bound key
sees only its agent's, another workspace's are not found (404)."""

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.filters import filterset_apply
from core.lib.rows import ModelRows
from reflection.filters import ReflectionProfileFilter, ReflectionRunFilter
from reflection.models import ReflectionProfile, ReflectionRun

RUN_NOT_FOUND = "Reflection run not found."


def reflection_run_list(*, principal: Principal, filters=None):
    queryset = scope_to_principal(ReflectionRun.objects.select_related("agent"), principal).order_by(
        "-created_at", "-id"
    )
    return filterset_apply(ReflectionRunFilter, filters, queryset)


def reflection_run_get(*, principal: Principal, run_id) -> ReflectionRun:
    run = reflection_run_list(principal=principal).filter(pk=run_id).first()
    if run is None:
        raise NotFoundError(RUN_NOT_FOUND)
    return run


def reflection_profile_list(*, principal: Principal, filters=None):
    queryset = scope_to_principal(
        ReflectionProfile.objects.select_related("agent", "memory_user"), principal
    ).order_by("-refreshed_at", "-id")
    return filterset_apply(ReflectionProfileFilter, filters, queryset)


# Read by every context of a known person: a statement built once (docs/speed.md, "Thread calls").
_PROFILE = ModelRows(ReflectionProfile)


def reflection_profile_for(*, agent, memory_user) -> ReflectionProfile | None:
    """The cached profile of `memory_user` as `agent` knows them (for the context's profile block)."""
    if agent is None or memory_user is None:
        return None
    # One row at most: (agent, memory user) is unique.
    rows = _PROFILE.fetch("WHERE agent_id = %s AND memory_user_id = %s", [agent.pk, memory_user.pk])
    return rows[0] if rows else None
