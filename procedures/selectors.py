"""Reads of procedures, and `procedure_match`: which procedures fire for a goal."""

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from django.db.models import BooleanField, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.filters import every_word_first, filterset_apply, text_search_relaxed
from procedures.filters import ProcedureFilter
from procedures.models import Procedure, ProcedureEmbedding

PROCEDURE_NOT_FOUND = "Procedure not found."
# Conditions are evaluated in Python over the active procedures in scope; a workspace with
# thousands of procedures is still a single indexed fetch of small rows.
MATCH_CANDIDATE_LIMIT = 5000


def procedure_scope(principal: Principal):
    """Workspace procedures; an agent-bound key sees its agent's and the workspace-wide ones."""
    return scope_to_principal(Procedure.objects.all(), principal, shared=True)


def procedure_get(*, principal: Principal, procedure_id) -> Procedure:
    procedure = procedure_scope(principal).select_related("agent", "parent").filter(pk=procedure_id).first()
    if procedure is None:
        raise NotFoundError(PROCEDURE_NOT_FOUND)
    return procedure


def procedure_list(*, principal: Principal, filters=None):
    queryset = procedure_scope(principal).select_related("agent", "parent")
    return filterset_apply(ProcedureFilter, filters, queryset)


def procedure_search(
    *, workspace, query: str, agent=None, limit: int = 10, query_vector=None, model: str = ""
) -> list:
    """Active procedures usable by `agent` whose text holds every word of `query` or, when
    none does, the `limit` holding the most of its words; most successful first, then those
    holding more of its words. Then (when a query vector is given) those semantically close to
    it, each with a `similarity` attribute."""
    from django.conf import settings
    from pgvector.django import CosineDistance

    queryset = Procedure.objects.filter(workspace=workspace).active().for_agent(agent)
    # "how do I reset my password when I am locked out": no procedure may hold every word.
    found = every_word_first(
        list(
            text_search_relaxed(queryset, query)
            .select_related("agent", "parent")
            .order_by("-every_word", "-words_held", "-success_count", "-times_used", "name")[:limit]
        )
    )
    found.sort(key=lambda p: (-p.success_count, -p.times_used, -p.words_held, p.name))
    if query_vector is None or len(found) >= limit:
        return found
    close = (
        ProcedureEmbedding.objects.filter(procedure__in=queryset, model=model, dimensions=len(query_vector))
        .exclude(procedure__in=[p.pk for p in found])
        .annotate(distance=CosineDistance("embedding", query_vector))
        .filter(distance__lte=1 - settings.RECALL_SEMANTIC_MIN_SIMILARITY)
        .order_by("distance")
        .values_list("procedure_id", "distance")[: limit - len(found)]
    )
    distances = dict(close)
    by_id = Procedure.objects.select_related("agent", "parent").in_bulk(list(distances))
    for procedure_id, distance in sorted(distances.items(), key=lambda item: item[1]):
        procedure = by_id[procedure_id]
        procedure.similarity = round(1 - distance, 4)
        found.append(procedure)
    return found


@dataclass(frozen=True)
class ProcedureMatch:
    procedure: Procedure
    score: float
    matched: list


GOAL_KEYS = ("goal_contains", "goal_contains_all", "goal_excludes")
# The ASCII whitespace GOAL_PREFILTER_SQL collapses too; other spaces (no-break, ideographic)
# become U+0020 under NFKC first.
_SPACES = re.compile(r"[ \t\n\r\f\v]+")


def goal_text_normalize(text: str) -> str:
    """The form goals and goal phrases are compared in: NFKC (a decomposed "é", full-width
    letters and ligatures compare as their plain form), case-folded ("STRASSE" holds
    "Straße"), every whitespace run one space."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text or "").casefold())
    return _SPACES.sub(" ", folded)


def _phrases_in(goal: str, phrases: list) -> list:
    return [p for p in phrases if p in goal]


def _json_equal(a, b) -> bool:
    # Python's == says True == 1 == 1.0; JSON's booleans are not numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@lru_cache(maxsize=4096)
def _conditions_parse(text: str | None) -> dict:
    # The same few hundred conditions are read on every turn: parsed once per process (by
    # their JSON text, so an edit is a new entry), goal phrases normalized once. The result is
    # shared: read it only.
    conditions = (json.loads(text) if text else None) or {}
    if not isinstance(conditions, dict):
        return {}
    parsed = dict(conditions)
    for key in GOAL_KEYS:
        if key in parsed:
            # Rows written around the service may hold a bare string: one phrase, not letters.
            phrases = [parsed[key]] if isinstance(parsed[key], str) else parsed[key]
            phrases = phrases if isinstance(phrases, list) else []
            parsed[key] = [goal_text_normalize(p) for p in phrases if isinstance(p, str) and p]
    return parsed


def _conditions_fire(conditions: dict, *, goal: str, agent_slug: str | None, context: dict):
    """(fires, score, matched condition names). The score rewards specific conditions:
    each matched goal phrase 2, each satisfied agent/channel/context condition 1."""
    score = 0.0
    matched = []
    if "goal_contains" in conditions:
        hits = _phrases_in(goal, conditions["goal_contains"])
        if not hits:
            return False, 0, []
        score += 2 * len(hits)
        matched.append("goal_contains")
    if "goal_contains_all" in conditions:
        if len(_phrases_in(goal, conditions["goal_contains_all"])) != len(conditions["goal_contains_all"]):
            return False, 0, []
        score += 2 * len(conditions["goal_contains_all"])
        matched.append("goal_contains_all")
    if "goal_excludes" in conditions and _phrases_in(goal, conditions["goal_excludes"]):
        return False, 0, []
    if "agents" in conditions:
        if agent_slug not in conditions["agents"]:
            return False, 0, []
        score += 1
        matched.append("agents")
    if "channels" in conditions:
        if context.get("channel") not in conditions["channels"]:
            return False, 0, []
        score += 1
        matched.append("channels")
    expected_context = conditions.get("context")
    for key, expected in (expected_context if isinstance(expected_context, dict) else {}).items():
        if key not in context or not _json_equal(context[key], expected):
            return False, 0, []
        score += 1
        matched.append(f"context.{key}")
    return True, score, matched


# Candidates with a `goal_contains` condition come back only when one of its phrases occurs
# in the (normalized) goal, so a workspace with thousands of procedures does not ship and
# evaluate them all on every turn. Evaluated for ASCII phrases with an ASCII-only lowercase
# and ASCII whitespace runs collapsed (for ASCII text exactly goal_text_normalize, whatever
# the database's locale); a phrase with other characters always passes, and every returned
# candidate is checked exactly by _conditions_fire.
GOAL_PREFILTER_SQL = """
    CASE WHEN jsonb_typeof("procedures_procedure"."trigger_conditions" -> 'goal_contains') = 'array'
    THEN EXISTS (
        SELECT 1
        FROM jsonb_array_elements_text(
            "procedures_procedure"."trigger_conditions" -> 'goal_contains'
        ) AS phrase
        WHERE octet_length(phrase) <> char_length(phrase)
           OR strpos(
               %s,
               regexp_replace(
                   translate(phrase, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),
                   '[ \\t\\n\\r\\f\\v]+', ' ', 'g'
               )
           ) > 0
    )
    ELSE TRUE END
"""


def procedure_match(
    *, workspace, goal: str, agent=None, context: dict | None = None, limit: int = 10
) -> list:
    """Active procedures usable by `agent` whose trigger conditions fire for `goal` and
    `context`, best first: condition score, then Laplace-smoothed success rate
    ((successes + 1) / (finished runs + 2)), then times used."""
    goal = goal_text_normalize(goal)
    context = context or {}
    agent_slug = agent.slug if agent is not None else context.get("agent")
    # Conditions are evaluated on bare tuples: building model instances (with content and
    # joined agent/parent) for every candidate cost ~8 ms per call at 200 procedures,
    # though usually none or a few fire. Only the winners are loaded whole.
    candidates = (
        Procedure.objects.filter(workspace=workspace)
        .active()
        .for_agent(agent)
        .filter(RawSQL(GOAL_PREFILTER_SQL, [goal], output_field=BooleanField()))
        .order_by("-times_used")
        .annotate(conditions_json=Cast("trigger_conditions", TextField()))
        .values_list("pk", "conditions_json", "success_count", "failure_count", "times_used", "name")[
            :MATCH_CANDIDATE_LIMIT
        ]
    )
    fired = []
    for pk, conditions_json, successes, failures, times_used, name in candidates:
        fires, score, matched = _conditions_fire(
            _conditions_parse(conditions_json), goal=goal, agent_slug=agent_slug, context=context
        )
        if fires:
            smoothed = (successes + 1) / (successes + failures + 2)
            fired.append(((-score, -smoothed, -times_used, name), pk, score, matched))
    fired.sort(key=lambda item: item[0])
    fired = fired[:limit]
    if not fired:
        return []
    procedures = Procedure.objects.select_related("agent", "parent").in_bulk([pk for _, pk, _, _ in fired])
    return [
        ProcedureMatch(procedure=procedures[pk], score=score, matched=matched)
        for _, pk, score, matched in fired
        if pk in procedures
    ]
