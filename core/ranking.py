"""Hybrid ranking: the one module that ranks episodic entries and recalled thread messages.

A search runs in two steps.

1. Candidates. A BM25 score computed in PostgreSQL over the scope's tsvectors
   (`bm25_sql`), and the nearest vectors of the scope (`vector_sql`), each up to
   `weights.pool` rows. The vector plan is routed by the scope's size and its share of
   the table (`vector_plan`, `exact_scope_max`): an exact sort over the B-tree-filtered
   scope while that is cheaper, HNSW with iterative scan beyond, because filtering after
   a plain HNSW scan loses true neighbours of a small scope. When the query names a
   speaker of the pool's rows, the vector candidates are fetched again with the query as
   that speaker would say it (`first_person`).
2. Fusion (`fuse`). Every candidate's channel scores (BM25, cosine of the text vector,
   cosine of the vector of the text read after its predecessor) are z-normalized over
   the candidate pool and summed with `RankingWeights`; a message then gains
   `neighbor` times the fused scores of the messages just before and after it in its
   thread, and `neighbor2` times those two steps away (answers often sit next to the
   turn the question matches); a recency
   term `recency * 2^(-age / half_life)` is added; finally the issue 19 re-rank terms: a
   bonus when the query names the candidate's speaker (or when nothing says who its
   speaker is, so that only other speakers' rows fall behind), the best score of the
   other candidates of its session (group), and a bonus when the query names the
   year/month it was written in (docs/episodic.md, "Issue 19 experiments").

Score fusion is used instead of reciprocal rank fusion: on LoCoMo, rank fusion discards
how far ahead the best lexical match is, and scored 0.607 recall@10 against 0.69 for
z-score fusion of the same two channels (docs/episodic.md).
"""

import logging
import math
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from django.conf import settings

from core.embeddings import (
    EmbeddingError,
    LocalEmbeddingProvider,
    embed_query_started,
    embedding_awaited,
    embedding_provider_for,
)
from core.errors import ApplicationError
from core.lib.local_models import LOCAL_MODELS
from core.lib.replica import read_connection
from core.lib.side_reads import side_read_started, side_reads_enabled

logger = logging.getLogger(__name__)

BM25_K1 = 1.2
BM25_B = 0.75
# Rows read to estimate the average document length of a scope.
BM25_AVGDL_SAMPLE = 2000

PLAN_EXACT = "exact"
PLAN_HNSW = "hnsw"
# Models with an HNSW index (a partial index per model, see core.lib.vectors.hnsw_index).
HNSW_MODELS = {model.name: model.dimensions for model in LOCAL_MODELS.values()}


@dataclass(frozen=True)
class RankingWeights:
    """Weights of the fused score. Chosen on two LoCoMo conversations, checked on two others
    (the re-rank terms likewise, issue 19)."""

    lexical: float = 0.4
    vector: float = 0.3
    context: float = 0.3
    neighbor: float = 0.2
    neighbor2: float = 0.05
    recency: float = 0.1
    half_life_days: float = 180.0
    # Candidates taken from each channel before fusion (messages and entries take 50:
    # threads.selectors.MESSAGE_WEIGHTS, episodic.selectors.ENTRY_WEIGHTS).
    pool: int = 100
    # Issue 19 re-rank terms, added after the neighbour term (0 switches one off):
    # `speaker` when the query names the candidate's speaker (a message's `name`), or the
    # candidate's speaker is unknown (an entry without a source);
    # `coverage` times the z-scored share of the query's lexemes the candidate holds;
    # `diversity` subtracted per better-ranked hit of the same group (thread) when the
    # top `diversity_depth` are re-ordered greedily.
    # `session` times the z-scored best fused score among the other candidates of the same
    # group (a session's other hits lift it).
    # `dated` when the query names a year (and month) the candidate was written in.
    speaker: float = 1.5
    coverage: float = 0.0
    session: float = 0.2
    dated: float = 1.0
    diversity: float = 0.0
    diversity_depth: int = 50

    def as_dict(self) -> dict:
        return {
            "lexical": self.lexical,
            "vector": self.vector,
            "context": self.context,
            "neighbor": self.neighbor,
            "neighbor2": self.neighbor2,
            "recency": self.recency,
            "half_life_days": self.half_life_days,
            "pool": self.pool,
            "speaker": self.speaker,
            "coverage": self.coverage,
            "session": self.session,
            "dated": self.dated,
            "diversity": self.diversity,
            "diversity_depth": self.diversity_depth,
        }


DEFAULT_WEIGHTS = RankingWeights()

MODE_HYBRID = "hybrid"
MODE_LEXICAL = "lexical"
MODE_VECTOR = "vector"
MODES = (MODE_HYBRID, MODE_LEXICAL, MODE_VECTOR)


def weights_for_mode(mode: str, weights: RankingWeights = DEFAULT_WEIGHTS) -> RankingWeights:
    """The same ranking with one family of channels switched off (benchmarks, debugging)."""
    if mode == MODE_LEXICAL:
        return replace(weights, vector=0.0, context=0.0)
    if mode == MODE_VECTOR:
        return replace(weights, lexical=0.0)
    return weights


@dataclass
class Candidate:
    id: object
    created_at: datetime | None = None
    lexical: float | None = None
    vector: float | None = None
    context: float | None = None
    prev_id: object | None = None
    next_id: object | None = None
    prev2_id: object | None = None
    next2_id: object | None = None
    # False for neighbours fetched only to score the candidates beside them.
    rankable: bool = True
    # Share of the query's distinct lexemes the row holds (from the BM25 query).
    coverage: float | None = None
    # Who said it (a message's name) and the group it belongs to (a message's thread), read
    # with the rest of its row (`Corpus.describe_sql`). "" is a speaker known to have no name
    # (an agent's message without one); None, a row nothing says the speaker of.
    speaker: str | None = None
    group: object | None = None
    extra: dict = field(default_factory=dict)


def _zscores(values: list[float | None]) -> list[float] | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    floor = min(present)
    filled = [floor if v is None else v for v in values]
    mean = sum(filled) / len(filled)
    std = math.sqrt(sum((v - mean) ** 2 for v in filled) / len(filled))
    if std < 1e-9:
        return [0.0] * len(filled)
    return [(v - mean) / std for v in filled]


def recency_term(created_at: datetime | None, *, now: datetime | None, weights: RankingWeights) -> float:
    """The recency part of a fused score: `recency * 2^(-age / half_life)`."""
    if weights.recency <= 0 or now is None or created_at is None:
        return 0.0
    age_days = max(0.0, (now - created_at).total_seconds() / 86400)
    return weights.recency * 2 ** (-age_days / weights.half_life_days)


def whole_word(name: str) -> str:
    """A pattern matching `name` as text, not inside a longer word."""
    return r"(?<!\w)" + re.escape(name) + r"(?!\w)"


def named_speakers(query: str, speakers) -> set[str]:
    """The speakers (names, compared case-insensitively) that `query` names as a whole word."""
    found = set()
    for speaker in {s for s in speakers if s}:
        if re.search(whole_word(speaker), query, flags=re.IGNORECASE):
            found.add(speaker.casefold())
    return found


MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]


def named_dates(query: str) -> tuple[set[int], set[int]]:
    """Years (1900-2099) and months (by English name) that `query` names."""
    years = {int(y) for y in re.findall(r"\b((?:19|20)\d\d)\b", query)}
    words = set(re.findall(r"[a-z]+", query.lower()))
    # "may" is a verb far more often than a month: counted only beside a year or a day.
    months = {i + 1 for i, m in enumerate(MONTHS) if m in words and m != "may"}
    if re.search(r"\bmay\s+(?:\d|(?:19|20)\d\d)|\d\s+may\b", query, flags=re.IGNORECASE):
        months.add(5)
    return years, months


def first_person(query: str, named: set[str], *, addressed: set[str] = frozenset()) -> str:
    """`query` with each of the `named` speakers as they would speak of themselves:
    "What do Melanie's kids like?" -> "What do my kids like?", "Where did Melanie go?" ->
    "Where did I go?".

    A speaker's own messages say "my kids", not their name: a query vector that carries
    the name looks for messages that address or mention them instead (docs/episodic.md,
    "Issue 19: speakers in the first person").

    `addressed`: speakers the query's writer speaks to, as "you" and "your" ("What book did I
    recommend to Melanie?" asked by Caroline of Melanie -> "What book did I recommend to
    you?"; docs/episodic.md, "Issue 19: the other speaker in the person's own words").
    """
    text = query
    forms = dict.fromkeys(named, ("my", "I"))
    forms.update(dict.fromkeys(addressed, ("your", "you")))
    for name in sorted(forms, key=len, reverse=True):
        possessive, plain = forms[name]
        word = r"(?<!\w)" + re.escape(name)
        text = re.sub(word + r"['\u2019]s(?!\w)", possessive, text, flags=re.IGNORECASE)
        text = re.sub(word + r"(?!\w)", plain, text, flags=re.IGNORECASE)
    return text


def first_named(query: str, named: set[str]) -> tuple[set[str], set[str]]:
    """The `named` speakers split into the one `query` names first (with the names that are a
    part of theirs: "Caroline" in "Caroline Rivera") and the others.

    A question naming two speakers ("What book did Caroline recommend to Melanie?") asks about
    a turn between them, and in it the first said "I" and spoke to the other as "you"
    (docs/episodic.md, "Issue 19: the other speaker in the person's own words").
    """

    def place(name: str) -> tuple[int, int]:
        found = re.search(whole_word(name), query, flags=re.IGNORECASE)
        return (found.start() if found else len(query), -len(name))

    first = min(named, key=place)
    own = {name for name in named if re.search(whole_word(name), first, flags=re.IGNORECASE)}
    return own, named - own


# What a person without a display name is called in their own memory: the role their
# unnamed turns are indexed under (threads.selectors.person_speaker).
UNNAMED_PERSON = "user"
# How an agent speaks of the person it serves: "the user", "user's", "this user"; not "users",
# "username", "user-facing", nor the compounds that name no one ("user interface", "user id").
# A search scoped to one person reads it as that person (`person_mentioned`).
USER_MENTION = re.compile(
    r"(?<![\w-])(?:(?:the|this|that|our)\s+)?user(?![\w-])"
    r"(?!\s+(?:interfaces?|experiences?|agents?|ids?|names?|base|research|stor(?:y|ies)|testing"
    r"|manuals?|guides?|groups?|space|mode|land)\b)",
    re.IGNORECASE,
)
# What "user" names as its owner when it stands before it: "the user preferences" are the
# person's preferences ("Ada's preferences", in their own words "my preferences"), where "the
# user likes tea" keeps "user" the subject. Only nouns that are rarely verbs: "the user needs
# help" and "the user plans a trip" stay as they are.
USER_OWNED = re.compile(
    r"\s+(?:preferences?|settings?|profiles?|details?|info|information|data|accounts?|history"
    r"|goals?|interests?|feedback|questions?|issues?|problems?|concerns?|schedules?|location"
    r"|timezone|languages?|emails?|address(?:es)?|birthday|age|job|occupation|background"
    r"|habits?|hobby|hobbies|favou?rites?|opinions?|memor(?:y|ies)|messages?|notes?"
    r"|allerg(?:y|ies)|diet|family|friends?|pets?|projects?|tasks?|requirements?|context"
    r"|persona)(?!\w)",
    re.IGNORECASE,
)
# The words a writer uses of themselves: in a query the person wrote ("Can you remind me what my
# sister is called?") they are the person (`hybrid_search`'s `asked_by_person`). Not "i.e.".
FIRST_PERSON_WORDS = re.compile(r"(?<![\w.])(?:i|me|my|mine|myself)(?!\w|\.\w)", re.IGNORECASE)
# The first words of a display name that are not the person's given name.
NAME_TITLES = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "dame", "lady", "lord"})


def _given_name_as_person(query: str, person: str) -> str:
    """`query` with the given name of a `person` of several words as their whole name:
    "Where did Ada go?" -> "Where did Ada Lovelace go?" for "Ada Lovelace".

    A channel's profile gives the full name, and agents say the first. The given name counts
    as written in the display name (capitalised; "will" is not "Will Smith"), and at the start
    of a sentence only as a possessive ("Will's car", not "Will the user come?").
    """
    words = person.split()
    given = words[0] if len(words) > 1 else ""
    if len(given) < 2 or not given.isalpha() or given.casefold() in NAME_TITLES:
        return query
    rest = r"\s+".join(re.escape(word) for word in words[1:])
    pattern = whole_word(given) + r"(?!\s+" + rest + r"(?!\w))"

    def whole(match: re.Match) -> str:
        before = query[: match.start()].rstrip()
        possessive = query.startswith(("'s", "\u2019s"), match.end())
        return person if possessive or (before and before[-1] not in ".!?") else match.group(0)

    return re.sub(pattern, whole, query)


def person_mentioned(query: str, person: str | None) -> str:
    """`query` with "the user" (and a person's given name alone) as the searched `person`,
    by the name their rows speak with.

    "What are the user's hobbies?" (or "the user hobbies": `USER_OWNED`) ranks as "What are
    Caroline's hobbies?" would: the speaker term lifts Caroline's rows, and the vectors look
    for "my hobbies" when the pool holds her own words (`first_person`; docs/episodic.md,
    "Issue 19: the person as "the user""). `person` None: the corpus is not one person's, and
    the query stays as it is.
    """
    if not person:
        return query

    def as_person(match: re.Match) -> str:
        return f"{person}'s" if USER_OWNED.match(query, match.end()) else person

    return _given_name_as_person(USER_MENTION.sub(as_person, query), person)


def person_named_whole(named: set[str], query: str, person: str | None) -> set[str]:
    """{the searched `person`} when `query` names them whole and one of the `named` speakers
    is a part of that name, else {}: their turns may speak as "Caroline" while their display
    name is "Caroline Rivera", and the first-person rewrite must take the whole name for the
    speaker ("Caroline Rivera's class" -> "my class", not "I Rivera's class")."""
    if not person or not named_speakers(query, [person]) or not named_speakers(person, named):
        return set()
    return {person.casefold()}


def person_unsaid(query: str, person: str | None) -> str:
    """`query` (as asked, before `person_mentioned`) without the searched `person`: their
    name and "the user", for the lexical channel.

    In one person's memory their name is not what a row is about: their own turns say "I",
    and the turns that hold the name are mostly the other side's ("Caroline, how was it?").
    The speaker term lifts the person's rows; BM25 on the name only pulled the mentions up
    (docs/episodic.md, "Issue 19: the person as "the user""). A query that is only the person
    keeps it, and with `person` None the query is unchanged.
    """
    if not person:
        return query
    possessive = r"(?:['\u2019]s(?!\w))?"
    rest = re.sub(USER_MENTION.pattern + possessive, " ", query, flags=re.IGNORECASE)
    if person.casefold() != UNNAMED_PERSON:
        rest = _given_name_as_person(rest, person)
        rest = re.sub(whole_word(person) + possessive, " ", rest, flags=re.IGNORECASE)
    return rest if re.search(r"\w", rest) else query


def date_match(created_at: datetime | None, years: set[int], months: set[int]) -> float:
    """1 when the row's date matches every part the query names (year, month), else 0."""
    if created_at is None or not (years or months):
        return 0.0
    if years and created_at.year not in years:
        return 0.0
    if months and created_at.month not in months:
        return 0.0
    return 1.0


def diversify(ranked: list[tuple], *, penalty: float, depth: int) -> list[tuple]:
    """Greedy re-order of the top `depth`: each pick costs the rest of its group `penalty`.

    The scores returned are the adjusted ones; rows past `depth` and rows without a group
    keep theirs.
    """
    head, tail = ranked[:depth], ranked[depth:]
    taken: dict = {}
    out = []
    while head:
        best_index, best_score = 0, None
        for index, (candidate, score) in enumerate(head):
            adjusted = (
                score - penalty * taken.get(candidate.group, 0) if candidate.group is not None else score
            )
            if best_score is None or adjusted > best_score:
                best_index, best_score = index, adjusted
        candidate, _score = head.pop(best_index)
        if candidate.group is not None:
            taken[candidate.group] = taken.get(candidate.group, 0) + 1
        out.append((candidate, best_score))
    return out + tail


def fuse(
    candidates: list[Candidate],
    *,
    weights: RankingWeights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    query: str = "",
    asker: str | None = None,
) -> list[tuple[Candidate, float]]:
    """Rank `candidates` (best first) with the fused score described in the module docstring.

    A channel no candidate has (entries have no context vector, rows not embedded yet) is
    skipped; a candidate missing one channel gets that channel's lowest pool value. `asker`:
    the name of a speaker the query speaks as ("my sister"), named by it for the speaker term.
    """
    if not candidates:
        return []
    base = [0.0] * len(candidates)
    for name in ("lexical", "vector", "context"):
        weight = getattr(weights, name)
        if weight <= 0:
            continue
        values = [getattr(c, name) for c in candidates]
        if name == "lexical":
            # No matching term is a real zero, not a missing value.
            values = [v or 0.0 for v in values]
        scores = _zscores(values)
        if scores is None:
            continue
        base = [b + weight * s for b, s in zip(base, scores, strict=True)]

    by_id = {c.id: b for c, b in zip(candidates, base, strict=True)}
    floor = min(base)
    bonus = [0.0] * len(candidates)
    if weights.coverage > 0:
        scores = _zscores([c.coverage or 0.0 for c in candidates])
        if scores is not None:
            bonus = [b + weights.coverage * s for b, s in zip(bonus, scores, strict=True)]
    if weights.session > 0:
        best: dict = {}
        for c, b in zip(candidates, base, strict=True):
            if c.group is not None and c.rankable:
                best.setdefault(c.group, []).append(b)
        tops = {g: sorted(v, reverse=True)[:2] for g, v in best.items()}
        others = []
        for c, b in zip(candidates, base, strict=True):
            top = tops.get(c.group, [])
            # The best of the group's other candidates (the second best when c is the best).
            other = [v for v in top if v != b] or top[1:]
            others.append(other[0] if other else None)
        scores = _zscores(others)
        if scores is not None:
            bonus = [x + weights.session * s for x, s in zip(bonus, scores, strict=True)]
    if weights.dated > 0 and query:
        years, months = named_dates(query)
        if years or months:
            bonus = [
                b + weights.dated * date_match(c.created_at, years, months)
                for b, c in zip(bonus, candidates, strict=True)
            ]
    if weights.speaker > 0 and query:
        named = named_speakers(query, (c.speaker for c in candidates))
        if asker:
            # The speakers whose name is the asker's ("Caroline" for "Caroline Rivera").
            named |= named_speakers(asker, (c.speaker for c in candidates))
        if named:
            # A row of no known speaker (None: an entry written without a source) may hold
            # what the named speaker said: the term sets apart the rows of the others.
            bonus = [
                b + (weights.speaker if c.speaker is None or c.speaker.casefold() in named else 0.0)
                for b, c in zip(bonus, candidates, strict=True)
            ]
    ranked = []
    for candidate, score, extra in zip(candidates, base, bonus, strict=True):
        score += extra
        if not candidate.rankable:
            continue
        if weights.neighbor > 0:
            # A missing neighbour (thread start or end) adds nothing; one outside the pool
            # counts as the weakest pool member.
            for neighbour in (candidate.prev_id, candidate.next_id):
                if neighbour is not None:
                    score += weights.neighbor * by_id.get(neighbour, floor)
            for neighbour in (candidate.prev2_id, candidate.next2_id):
                if neighbour is not None and weights.neighbor2 > 0:
                    score += weights.neighbor2 * by_id.get(neighbour, floor)
        score += recency_term(candidate.created_at, now=now, weights=weights)
        ranked.append((candidate, score))
    ranked.sort(key=lambda pair: pair[1], reverse=True)
    if weights.diversity > 0:
        ranked = diversify(ranked, penalty=weights.diversity, depth=weights.diversity_depth)
    return ranked


def bm25_sql(
    scope_sql: str, *, materialized: bool = False, stats_given: bool = False, terms_person: str | None = None
) -> str:
    """BM25 over the tsvectors of a scope, best first.

    `scope_sql` selects `id`, `tsv` (a tsvector) and `created_at` of the rows to rank, with named
    parameters; the returned SQL adds `%(query)s` (raw text) and `%(limit)s`, and answers
    `id, score, coverage, n, avgdl`: coverage is the share of the query's distinct lexemes the
    row holds, `n` and `avgdl` the scope's row count and average length the scores used. Terms
    are the query's own lexemes under the `english` configuration, so stemming and stop words
    match the stored vectors. Document frequency and average length are those of the
    scope: a term common in this person's history weighs little.

    `stats_given=True` takes `n` and `avgdl` from `%(bm25_n)s` and `%(bm25_avgdl)s` (a large
    scope's, remembered from an earlier search: `_bm25_stats_known`) instead of counting the
    scope and reading the newest rows' lengths, 2.7 ms of 6.6 at 5,000 rows (docs/speed.md).
    A term's document frequency is always counted; the count used is never below it, so a
    scope that grew since `n` was read still weighs every term positively.

    `materialized=False` lets PostgreSQL push the match into the scope query (a stored
    tsvector with a GIN index); `materialized=True` reads the scope once, for a scope query
    that is costly to repeat (a join, or tsvectors computed at query time).

    `terms_person` names the parameter of a person whose rows the scope selects, when it also
    answers `terms`: the row's lexemes keyed by that person (`<person id>:<lexeme>`, as
    `episodic_person_terms` indexes them). The match then reads the person's own postings of
    the query's terms, whatever the table's size, and tests `@@` only on what they find; the
    test is written so that the table-wide GIN index cannot serve it, which the planner would
    otherwise intersect too (docs/speed.md, "Each person's own postings").
    """
    cte = "MATERIALIZED" if materialized else "NOT MATERIALIZED"
    if stats_given:
        stats = "SELECT %(bm25_n)s::float8 AS n, greatest(%(bm25_avgdl)s, 1)::float8 AS avgdl"
    else:
        stats = f"""
            SELECT (SELECT count(*) FROM scope)::float8 AS n,
                   -- The average length is estimated from the newest rows: reading every
                   -- tsvector of a large scope would cost more than the whole search, and
                   -- the scope index yields them in this order.
                   greatest((
                       SELECT avg(length(tsv)) FROM (
                           SELECT tsv FROM scope ORDER BY created_at DESC LIMIT {BM25_AVGDL_SAMPLE}
                       ) newest
                   ), 1)::float8 AS avgdl
        """
    match = "s.tsv @@ (SELECT tsq FROM qt)"
    if terms_person:
        keys = f"(SELECT array_agg(%({terms_person})s::uuid::text || ':' || lexeme) FROM q)"
        match = f"s.terms && {keys} AND ({match}) IS TRUE"
    return f"""
        WITH scope AS {cte} ({scope_sql}),
        q AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(query)s))),
        qt AS (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS tsq FROM q),
        -- Materialized: referenced twice (the score and the output columns), it would
        -- otherwise count the scope and sample its lengths twice.
        stats AS MATERIALIZED ({stats}),
        -- The query's terms as a subquery, not a join: PostgreSQL builds them once (an
        -- InitPlan), whether it finds the matches through the GIN index or tests each row of
        -- the scope. Joined, they were built again for every row of the scope whenever it
        -- took the second plan, as it does for a person newer than the table's statistics
        -- (estimated at one row): 9.3 against 3.6 ms at 4,500 rows (docs/speed.md).
        matched AS (SELECT s.id, s.tsv FROM scope s WHERE {match}),
        hits AS (
            SELECT m.id, u.lexeme, coalesce(array_length(u.positions, 1), 1)::float8 AS tf,
                   length(m.tsv)::float8 AS dl
            -- Only the query's lexemes are unnested: setweight marks them A in the stored
            -- vector (whose lexemes all carry the default weight D) and ts_filter keeps
            -- those, instead of expanding every lexeme of every matched row.
            FROM matched m CROSS JOIN LATERAL unnest(
                ts_filter(setweight(m.tsv, 'A', ARRAY(SELECT lexeme FROM q)), '{{a}}')
            ) u
        ),
        df AS (SELECT lexeme, count(*)::float8 AS df FROM hits GROUP BY lexeme)
        SELECT h.id, sum(
            ln(1 + (greatest(stats.n, df.df) - df.df + 0.5) / (df.df + 0.5))
            * h.tf * {BM25_K1 + 1} / (h.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * h.dl / stats.avgdl))
        ) AS score,
        -- The share of the query's distinct lexemes the row holds (the coverage re-rank term).
        count(*)::float8 / greatest((SELECT count(*) FROM q), 1) AS coverage,
        stats.n, stats.avgdl
        FROM hits h JOIN df USING (lexeme) CROSS JOIN stats
        GROUP BY h.id, stats.n, stats.avgdl
        ORDER BY score DESC, h.id
        LIMIT %(limit)s
    """


def vector_plan(*, scope_size: int, model: str, dimensions: int, exact_max: int | None = None) -> str:
    """`exact` while an exact sort of the scope is the cheaper plan, else `hnsw` if the model
    has an index.

    The exact sort over a B-tree-filtered scope is always exact and costs about 1.3 us a
    vector. HNSW filtered after the scan keeps only 0.47-0.78 of the true top 10 for a
    small scope, so it runs with iterative scan, whose walk visits about pool x table /
    scope rows to keep `pool` of them: it pays only for a scope that is large and a large
    share of its table. `exact_max` is the largest exact scope (`exact_scope_max`);
    EPISODIC_EXACT_SCOPE_MAX when not given.
    """
    if exact_max is None:
        exact_max = settings.EPISODIC_EXACT_SCOPE_MAX
    if scope_size <= exact_max:
        return PLAN_EXACT
    if HNSW_MODELS.get(model) != dimensions:
        return PLAN_EXACT
    return PLAN_HNSW


# Vector tables' row estimates read recently, per process: {table: (monotonic time, rows)}.
_table_sizes: dict = {}


def exact_scope_max(cursor, *, table: str, model: str, dimensions: int) -> int:
    """The largest scope of `table` searched by exact sort: where the HNSW walk's estimated
    cost, EPISODIC_HNSW_FIXED_COST_ROWS + EPISODIC_HNSW_RATIO_COST_ROWS x table / scope
    (in rows of exact sort), falls under the exact sort's, and never under
    EPISODIC_EXACT_SCOPE_MAX.

    Measured on 120,000 MiniLM vectors, 100 nearest: a scope of 6,000 took 7-9 ms exact
    against 44-46 ms through HNSW, 12,000 15.5 against 22.5, 24,000 33 against 16.5, the
    whole table 136-151 against 11 (docs/speed.md). The break-even is then about 17,000 in
    a table of 120,000, 41,000 in 1M, 121,000 in 10M. The table's size is PostgreSQL's
    estimate (pg_class.reltuples, every model's vectors), read at most every
    SEARCH_SCOPE_SIZE_CACHE_SECONDS per process; a model without an HNSW index needs none.
    """
    floor = settings.EPISODIC_EXACT_SCOPE_MAX
    if HNSW_MODELS.get(model) != dimensions:
        return floor
    cached = _table_sizes.get(table)
    if cached is None or time.monotonic() - cached[0] >= settings.SEARCH_SCOPE_SIZE_CACHE_SECONDS:
        cursor.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s::regclass", [table]
        )
        cached = _table_sizes[table] = (time.monotonic(), cursor.fetchone()[0])
    fixed, ratio = settings.EPISODIC_HNSW_FIXED_COST_ROWS, settings.EPISODIC_HNSW_RATIO_COST_ROWS
    # exact = scope, HNSW = fixed + ratio x table / scope: equal where
    # scope^2 - fixed x scope - ratio x table = 0.
    break_even = (fixed + math.sqrt(fixed * fixed + 4 * ratio * cached[1])) / 2
    return max(floor, int(break_even))


def vector_sql(
    *, table: str, id_column: str, scope_where: str, plan: str, column: str = "embedding", dimensions: int = 0
) -> str:
    """Nearest rows by cosine distance; parameters `%(qvec)s`, `%(model)s`, `%(limit)s`.

    The exact plan orders by the raw column, which no index covers, so the planner sorts
    the B-tree-filtered scope. The HNSW plan walks the graph for the scope's rows that are
    in it, repeating the index's cast to the model's `dimensions` and its model and
    `in_graph` conditions so the partial index on that model is usable, and sorts the
    scope's other rows exactly (core.lib.vectors): the nearest of both are the answer.
    """
    if plan == PLAN_HNSW:
        if not dimensions:
            raise ValueError("The HNSW plan needs the model's dimensions.")
        dims = int(dimensions)
        graph = f"({column}::vector({dims})) <=> %(qvec)s::vector({dims})"
        exact = f"{column} <=> %(qvec)s::vector"
        where = f"{scope_where} AND model = %(model)s AND {column} IS NOT NULL"
        return f"""
            SELECT id, 1 - distance AS similarity FROM (
                (SELECT {id_column} AS id, {graph} AS distance FROM {table}
                 WHERE {where} AND in_graph ORDER BY {graph} LIMIT %(limit)s)
                UNION ALL
                (SELECT {id_column} AS id, {exact} AS distance FROM {table}
                 WHERE {where} AND NOT in_graph ORDER BY {exact} LIMIT %(limit)s)
            ) nearest
            ORDER BY distance, id
            LIMIT %(limit)s
        """
    # The distance is named in a subquery: written in both the output and the ORDER BY, it
    # was computed twice for every row of the scope (docs/speed.md).
    return f"""
        SELECT id, 1 - distance AS similarity FROM (
            SELECT {id_column} AS id, {column} <=> %(qvec)s::vector AS distance
            FROM {table}
            WHERE {scope_where} AND model = %(model)s AND {column} IS NOT NULL
            ORDER BY distance
            LIMIT %(limit)s
        ) nearest
        ORDER BY distance, id
    """


def queryset_scope_sql(queryset, *, prefix: str = "scope") -> tuple[str, dict]:
    """The ids of `queryset` as SQL with named parameters, for a Corpus whose scope is
    built with the ORM (scoping, FilterSets) rather than written by hand."""
    sql, params = queryset.order_by().values("id").query.sql_with_params()
    counter = iter(range(len(params)))
    named = re.sub(r"(?<!%)%s", lambda _match: f"%({prefix}_{next(counter)})s", sql)
    return named, {f"{prefix}_{i}": value for i, value in enumerate(params)}


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


# Scope sizes counted recently, per process: {(sql, params, model): (monotonic time, size)}.
_scope_sizes: dict = {}
_SCOPE_SIZES_MAX = 10_000


def _scope_size(cursor, corpus: "Corpus", params: dict, *, model: str) -> int:
    """The scope's vector count for plan routing, counted up to the exact-plan threshold + 1
    (`params["count_cap"]`; counting 5,001 index entries is ~1 ms per search), and remembered
    for SEARCH_SCOPE_SIZE_CACHE_SECONDS (`_scope_size_known` decides when to count)."""
    cursor.execute(corpus.scope_size_sql, params)
    size = cursor.fetchone()[0]
    _scope_size_remember(corpus, params, model=model, size=size)
    return size


# A large scope's BM25 statistics read recently, per process: {key: (monotonic time, n, avgdl)}.
_bm25_stats: dict = {}
# Smaller scopes are counted by every search: exactly, in under half a millisecond.
BM25_STATS_CACHE_MIN_ROWS = 1000


def _bm25_stats_known(corpus: "Corpus") -> tuple[float, float] | None:
    """(n, avgdl) of the corpus's lexical scope if a search read them within
    SEARCH_SCOPE_SIZE_CACHE_SECONDS and the scope held at least BM25_STATS_CACHE_MIN_ROWS.

    A scope's row count and average length move by a fraction of a percent in that time, and
    BM25 uses them only to weigh terms and lengths; document frequencies are always counted.
    """
    cached = _bm25_stats.get(_bm25_stats_key(corpus))
    if cached is None or time.monotonic() - cached[0] >= settings.SEARCH_SCOPE_SIZE_CACHE_SECONDS:
        return None
    return cached[1], cached[2]


def _bm25_stats_remember(corpus: "Corpus", rows: list) -> None:
    """Keep the statistics a BM25 statement answered with its rows (`bm25_sql`)."""
    if not rows or rows[0][3] < BM25_STATS_CACHE_MIN_ROWS:
        return
    if len(_bm25_stats) >= _SCOPE_SIZES_MAX:
        _bm25_stats.clear()
    key = _bm25_stats_key(corpus)
    _bm25_stats[key] = (time.monotonic(), float(rows[0][3]), float(rows[0][4]))


HNSW_SETTINGS_SQL = "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef_search}"


def _namespaced(sql: str, params: dict, prefix: str) -> tuple[str, dict]:
    """`sql` with every `%(name)s` renamed `%(prefix_name)s`, so statements with clashing
    parameter names (two `limit`s) can travel in one batch."""
    used = set(re.findall(r"(?<!%)%\((\w+)\)s", sql))
    renamed = re.sub(r"(?<!%)%\((\w+)\)s", lambda m: f"%({prefix}_{m.group(1)})s", sql)
    return renamed, {f"{prefix}_{k}": params[k] for k in used}


def run_batch(cursor, statements: list[tuple[str, dict]]) -> list[list]:
    """Run `statements` (SQL, params) and return each one's rows ([] for a SET).

    With client-side binding (Django's default for psycopg) they travel as one simple-protocol
    message: one round trip, and PostgreSQL runs them as one implicit transaction, so a
    `SET LOCAL` holds for the statements after it. With server-side binding they run one by
    one inside a transaction (the same settings, more round trips).
    """
    from django.db import transaction

    if len(statements) == 1:
        sql, params = statements[0]
        cursor.execute(sql, params)
        return [cursor.fetchall() if cursor.description else []]
    # The cursor's own connection: a search may read the replica (core.lib.replica).
    if cursor.db.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        results = []
        with transaction.atomic(using=cursor.db.alias):
            for sql, params in statements:
                cursor.execute(sql, params or None)
                results.append(cursor.fetchall() if cursor.description else [])
        return results
    parts, merged = [], {}
    for index, (sql, params) in enumerate(statements):
        sql, params = _namespaced(sql.strip().rstrip(";"), params or {}, f"b{index}")
        parts.append(sql)
        merged.update(params)
    cursor.execute(";\n".join(parts), merged)
    results = []
    for index in range(len(parts)):
        if index:
            cursor.nextset()
        results.append(cursor.fetchall() if cursor.description else [])
    return results


def _statement_key(sql: str, params: dict, *, ignored: tuple[str, ...] = ()) -> tuple:
    """`sql` and the parameters it uses but for `ignored` ones: what a memo of that
    statement's answer is keyed by."""
    used = sorted((k, v) for k, v in params.items() if f"%({k})s" in sql and k not in ignored)
    return (sql, repr(used))


def _scope_size_key(corpus: "Corpus", model: str) -> tuple:
    return (*_statement_key(corpus.scope_size_sql, corpus.params, ignored=corpus.memo_ignored), model)


def _bm25_stats_key(corpus: "Corpus") -> tuple:
    return _statement_key(corpus.lexical_scope_sql, corpus.params, ignored=corpus.memo_ignored)


def _scope_size_remember(corpus: "Corpus", params: dict, *, model: str, size: int) -> None:
    if len(_scope_sizes) >= _SCOPE_SIZES_MAX:
        _scope_sizes.clear()
    _scope_sizes[_scope_size_key(corpus, model)] = (time.monotonic(), size)


def _scope_size_known(
    corpus: "Corpus", params: dict, *, model: str, dimensions: int, exact_max: int
) -> tuple:
    """(size to plan with, whether to count it in the search's first round trip), or
    (None, True) when the plan must wait for a count of its own.

    A scope counted within SEARCH_SCOPE_SIZE_CACHE_SECONDS is not counted again, on either
    side of the threshold (see _scope_size): a count costs ~1 ms per 5,000 vectors, and one
    that has grown past the threshold meanwhile keeps the exact plan, which is exact, for at
    most that long. Once that has passed, a scope last seen under the threshold is recounted
    beside its candidates: when the count has crossed the threshold, the vector query is
    run again on the new plan at once. A model without an HNSW index always takes the exact
    plan, so its count never has to wait.
    """
    cached = _scope_sizes.get(_scope_size_key(corpus, model))
    fresh = cached is not None and time.monotonic() - cached[0] < settings.SEARCH_SCOPE_SIZE_CACHE_SECONDS
    if fresh:
        return cached[1], False
    if cached is not None and cached[1] <= exact_max:
        return cached[1], True
    if HNSW_MODELS.get(model) != dimensions:
        return 0, True
    return None, True


def _vector_statements(
    corpus: "Corpus", plan: str, vparams: dict, weights, pool: int, slots: dict, *, start: int
):
    """The vector candidates' statements on `plan`; `slots` gets each result's index."""
    table, id_column, where = corpus.vector_table, corpus.vector_id_column, corpus.vector_scope_where
    statements = []
    if plan == PLAN_HNSW:
        ef_search = max(pool, settings.EPISODIC_HNSW_EF_SEARCH)
        settings_sql = HNSW_SETTINGS_SQL.format(ef_search=int(ef_search))
        statements.extend((part, {}) for part in settings_sql.split("; "))
    slots["vector"] = start + len(statements)
    dimensions = HNSW_MODELS.get(vparams["model"], 0)
    sql = vector_sql(table=table, id_column=id_column, scope_where=where, plan=plan, dimensions=dimensions)
    statements.append((sql, vparams))
    # The context vectors have no HNSW index: on the exact plan only.
    if corpus.has_context and weights.context > 0 and plan == PLAN_EXACT:
        sql = vector_sql(
            table=table, id_column=id_column, scope_where=where, plan=plan, column="context_embedding"
        )
        slots["context"] = start + len(statements)
        statements.append((sql, vparams))
    return statements


def _hnsw_fetch(cursor, sql: str, params: dict, *, ef_search: int) -> list:
    """Rows of an HNSW query run with iterative scan (pgvector >= 0.8: keep walking the graph
    until `limit` rows pass the scope filter) and `ef_search` candidates, in one round trip
    (see run_batch). Inside a caller's transaction the settings hold until it ends, as any
    SET LOCAL does."""
    settings_sql = HNSW_SETTINGS_SQL.format(ef_search=int(ef_search))
    statements = [(part, {}) for part in settings_sql.split("; ")]
    return run_batch(cursor, [*statements, (sql, params)])[-1]


# Graph requests sent recently, per process: {(table, model, scope): monotonic time}.
_graph_requests: dict = {}


def _graph_request(corpus: "Corpus", params: dict, *, model: str) -> None:
    """Ask a worker to put the rows of the corpus's `graph_scope` into `model`'s HNSW graph
    (`core.services.vector_graph_extend`), at most once per VECTOR_GRAPH_REQUEST_SECONDS a
    scope and process. The search itself never waits for it: rows outside the graph are
    sorted exactly meanwhile (`vector_sql`). A broker that cannot take the task costs the
    next searches time, never this one's answer."""
    scope = {column: params.get(name) for column, name in corpus.graph_scope}
    if not scope or any(value is None for value in scope.values()):
        return
    scope = {column: str(value) for column, value in scope.items()}
    key = (corpus.vector_table, model, tuple(sorted(scope.items())))
    now = time.monotonic()
    sent = _graph_requests.get(key)
    if sent is not None and now - sent < settings.VECTOR_GRAPH_REQUEST_SECONDS:
        return
    if len(_graph_requests) >= _SCOPE_SIZES_MAX:
        _graph_requests.clear()
    _graph_requests[key] = now
    from core.tasks import vector_graph_extend_task

    try:
        vector_graph_extend_task.delay(corpus.vector_table, model, scope)
    except Exception:
        _graph_requests.pop(key, None)
        logger.warning(
            "Could not queue the HNSW graph's extension of %s.", corpus.vector_table, exc_info=True
        )


@dataclass(frozen=True)
class Corpus:
    """What `hybrid_search` ranks: SQL fragments over one table family, with named params.

    - `lexical_scope_sql` selects `id`, `tsv` and `created_at` of every rankable row;
    - `scope_size_sql` counts the scope's vectors of `%(model)s`, stopping at
      `%(count_cap)s` (for plan routing);
    - `vector_table` / `vector_id_column` / `vector_scope_where` locate the scope's vectors;
    - `describe_sql` returns `id, created_at, prev_id, next_id, prev2_id, next2_id, similarity,
      context_similarity, speaker, group` for `%(ids)s`: `created_at` in epoch seconds
      (`extract(epoch FROM ...)::float8`: Django's timestamptz loader costs ~10 us a row,
      2.4 ms for a pool of 200), similarities under `%(qvec)s` and `%(model)s` (NULL
      without a vector), and who said it and the group it belongs to (NULL when the corpus
      has neither, and the speaker and session terms do nothing), saving a round trip per
      search;
    - `sources_sql`, when set, makes `describe_sql`'s speaker a reference (a UUID text: the
      row's source) rather than a name: it returns `ref, name, prev_id, next_id, prev2_id,
      next2_id` for the references `%(refs)s` (a `uuid[]`), the speaker of the rows taken
      from that source and the rows taken from the sources around it (NULL for none). It is
      read only when the pool holds references; those that are not UUIDs, and those it does
      not return, leave their rows without a speaker, and with `describe_sql`'s neighbours.
    """

    lexical_scope_sql: str
    scope_size_sql: str
    vector_table: str
    vector_id_column: str
    vector_scope_where: str
    describe_sql: str
    params: dict
    has_context: bool = False
    sources_sql: str = ""
    # The name the searched person's own rows speak with, when the corpus is one person's
    # memory (`person_mentioned`); None when it is not.
    person: str | None = None
    # True when `lexical_scope_sql` is costly to run more than once (see bm25_sql).
    lexical_materialized: bool = False
    # The name in `params` of the person whose rows `lexical_scope_sql` selects with their
    # `terms` (bm25_sql's `terms_person`); None when it answers no `terms`.
    lexical_terms_person: str | None = None
    # (column of `vector_table`, name in `params`) pairs naming the rows that a search on the
    # HNSW plan asks to put in the graph (`_graph_request`): the scope or one enclosing it.
    graph_scope: tuple[tuple[str, str], ...] = ()
    # Names in `params` that change from one search to the next while the scope stays the
    # same for the memos of its size and BM25 statistics (kept SEARCH_SCOPE_SIZE_CACHE_SECONDS):
    # the clock an expiry is tested against, the few ids of a window left out. The memos are
    # keyed without them, so they are not counted again at every search; the statements always
    # use them.
    memo_ignored: tuple[str, ...] = ()
    # The model of the ranked rows: the search reads them where the routers read that model
    # (the replica in a request that may read it, core.lib.replica.read_connection).
    rows_model: type | None = None


@dataclass
class SearchOutcome:
    ranked: list[tuple[Candidate, float]]
    plan: str | None
    scope_size: int | None


def _vector_pool(results: dict, lexical_pool: list) -> tuple[dict, dict, list]:
    """(vector scores, context scores, the pool's ids in order) from the vector statements'
    rows in `results` ("vector", "context") and the lexical candidates."""
    vector = {row[0]: float(row[1]) for row in results.get("vector", ())}
    context = {row[0]: float(row[1]) for row in results.get("context", ())}
    pool_ids = [*lexical_pool, *sorted(vector, key=lambda i: -vector[i]), *context]
    return vector, context, list(dict.fromkeys(pool_ids))


def _describe(
    cursor, corpus: Corpus, params: dict, pool_ids: list, vector: dict, context: dict, sources: dict
):
    """The pool's rows: ({id: (created_at, *neighbour ids)}, {id: (speaker, group)}); the
    similarities of rows that no vector statement returned are added to `vector` and
    `context`."""
    cursor.execute(corpus.describe_sql, {**params, "ids": pool_ids})
    described, features = {}, {}
    for row_id, created_at, *neighbours, sim, ctx_sim, speaker, group in cursor.fetchall():
        if created_at is not None:
            created_at = datetime.fromtimestamp(created_at, UTC)
        described[row_id] = (created_at, *neighbours)
        # The speaker and group are read for the pool's rows only (not their neighbours).
        features[row_id] = (speaker, group)
        if sim is not None:
            vector.setdefault(row_id, float(sim))
        if ctx_sim is not None:
            context.setdefault(row_id, float(ctx_sim))
    if corpus.sources_sql:
        features = _sources_read(cursor, corpus, params, described, features, sources)
    return described, features


_NO_SOURCE = (None, None, None, None, None)


def _sources_read(
    cursor, corpus: Corpus, params: dict, described: dict, features: dict, sources: dict
) -> dict:
    """`features` with each speaker reference replaced by its source's speaker (None when it
    has none); the rows taken from the sources around it become the row's neighbours in
    `described`.

    `sources` ({reference: (name, *neighbour ids)}) holds what an earlier description of the
    same search looked up, and is given what this one looks up."""
    refs = {row_id: _uuid_text(ref) for row_id, (ref, _group) in features.items()}
    wanted = sorted({ref for ref in refs.values() if ref is not None and ref not in sources})
    if wanted:
        cursor.execute(corpus.sources_sql, {**params, "refs": wanted})
        sources.update(dict.fromkeys(wanted, _NO_SOURCE))
        sources.update((ref, tuple(rest)) for ref, *rest in cursor.fetchall())
    named = {}
    for row_id, (_ref, group) in features.items():
        name, *neighbours = sources.get(refs[row_id]) or _NO_SOURCE
        named[row_id] = (name, group)
        if any(neighbours):
            described[row_id] = (described[row_id][0], *neighbours)
    return named


def _uuid_text(value) -> str | None:
    """`value` as a UUID's canonical text, or None when it is not one."""
    try:
        return str(uuid.UUID(value))
    except (TypeError, ValueError, AttributeError):
        return None


def _bm25_beside_wanted(corpus: "Corpus", *, model: str, weights: RankingWeights) -> bool:
    """Whether a search sends its BM25 on a side connection (core.lib.side_reads) while its
    own finds the vector candidates: both channels wanted, and a scope last counted at
    SEARCH_BM25_BESIDE_MIN_ROWS or more. On a small scope both statements take a fraction
    of a millisecond, less than the hand-over to another thread (docs/speed.md). A scope
    never counted under a model with an HNSW index sends it too: its plan waits for a count
    on the request's connection (`_scope_size_known`), which BM25 would otherwise follow."""
    if weights.vector <= 0 and weights.context <= 0:
        return False
    cached = _scope_sizes.get(_scope_size_key(corpus, model))
    if cached is None:
        if model not in HNSW_MODELS:
            return False
    elif cached[1] < settings.SEARCH_BM25_BESIDE_MIN_ROWS:
        return False
    return side_reads_enabled()


def _rows_read(*, sql: str, params: dict, alias: str) -> list:
    """The rows of one statement, on the calling thread's connection to the database `alias`."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _beside_started(statement: tuple[str, dict], *, alias: str) -> Future | None:
    """`statement` running on a side connection to the database `alias` (the one the search
    reads: a pool thread does not inherit the request's choice of server), or None when no
    side thread is free."""
    sql, params = statement
    return side_read_started(_rows_read, sql=sql, params=params, alias=alias)


def _beside_rows(started: Future, cursor, statement: tuple[str, dict]) -> list:
    """The rows of a statement sent on a side connection; read again on `cursor` when that
    connection failed (a refused or broken connection says nothing about the statement). A
    statement that failed by itself (cancelled by its time limit, say) is not run twice."""
    import psycopg
    from django.db import InterfaceError, OperationalError

    try:
        return started.result()[0]
    except (OperationalError, InterfaceError) as exc:
        if isinstance(exc.__cause__, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)):
            raise
        logger.warning("A side connection failed; reading BM25 on the request's own.", exc_info=True)
        cursor.execute(*statement)
        return cursor.fetchall()


def hybrid_search(
    *,
    corpus: Corpus,
    query: str,
    query_vector: list[float] | Future | None,
    model: str,
    weights: RankingWeights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    embed_query: Callable[[str], list[float] | None] | None = None,
    asked_by_person: bool = False,
) -> SearchOutcome:
    """Candidates from each channel, their neighbours, every channel scored exactly, fused.

    `asked_by_person`: the query is the searched person's own words (the message a context is
    built for), so its "I", "me" and "my" name them for the speaker term, as their name would
    (docs/episodic.md, "Issue 19: the person's own questions"). Its vector needs no rewrite
    for them: it is already in their words; another speaker it names is "you" to the vectors.

    `query_vector` may be a Future (`query_vector_for`): while it is computed, BM25 is sent
    on its own, and the vector statements follow once it is there; a failed one searches
    lexically.

    `embed_query` (text -> vector under `model`, or None) lets the vector channels search
    again with the query as the speakers it names would say it (`first_person`); without
    it, or when the query names no speaker of the pool, the query's vector is used.
    """
    # The rows are read where the request reads the corpus's model: the replica when the
    # request may read it (core.lib.replica), as the ORM reads the hits' rows after this.
    connection = read_connection(corpus.rows_model)

    # "the user" is the searched person: ranked from here on as if the query named them
    # (their name then lifts their rows by the speaker term, not lexically: person_unsaid).
    lexical_query = person_unsaid(query, corpus.person)
    asker = corpus.person if asked_by_person and FIRST_PERSON_WORDS.search(query) else None
    query = person_mentioned(query, corpus.person)
    params = dict(corpus.params)
    pool = weights.pool
    lexical: dict = {}
    coverage: dict = {}
    plan = scope_size = None
    vparams: dict = {}
    with connection.cursor() as cursor:
        # First round trip: the scope count (when the plan needs it), the BM25 and the
        # vector candidates (run_batch); second: the pool's rows and re-rank features.
        batch: list[tuple[str, dict]] = []
        slots: dict = {}
        sent: list[list] = []
        bm25_stats = lexical_beside = None
        if weights.lexical > 0 and lexical_query.strip():
            # Scores beyond the pool are kept so vector candidates get their exact BM25.
            lexical_params = {**params, "query": lexical_query, "limit": pool * 10}
            bm25_stats = _bm25_stats_known(corpus)
            if bm25_stats is not None:
                lexical_params.update(bm25_n=bm25_stats[0], bm25_avgdl=bm25_stats[1])
            sql = bm25_sql(
                corpus.lexical_scope_sql,
                materialized=corpus.lexical_materialized,
                terms_person=corpus.lexical_terms_person,
                stats_given=bm25_stats is not None,
            )
            lexical_statement = (sql, lexical_params)
            if query_vector is not None and _bm25_beside_wanted(corpus, model=model, weights=weights):
                # A large scope: BM25 on another connection while this one finds the vectors.
                lexical_beside = _beside_started(lexical_statement, alias=connection.alias)
            if lexical_beside is None:
                slots["lexical"] = len(batch)
                batch.append(lexical_statement)
        if isinstance(query_vector, Future):
            if batch and not query_vector.done():
                # The query is still being embedded (on another core): its BM25 goes now.
                sent = run_batch(cursor, batch)
            query_vector = query_vector_awaited(query_vector)
        use_vectors = query_vector is not None and (weights.vector > 0 or weights.context > 0)
        qvec = vector_literal(query_vector) if use_vectors else None
        if use_vectors:
            dimensions = len(query_vector)
            exact_max = exact_scope_max(cursor, table=corpus.vector_table, model=model, dimensions=dimensions)
            # Counting stops past the threshold: the plan only needs to know which side it is on.
            vparams = {**params, "qvec": qvec, "model": model, "limit": pool, "count_cap": exact_max + 1}
            scope_size, recount = _scope_size_known(
                corpus, vparams, model=model, dimensions=dimensions, exact_max=exact_max
            )
            if scope_size is None:
                # Never counted (or too long ago): the plan waits for the count.
                scope_size = _scope_size(cursor, corpus, vparams, model=model)
                if (
                    # No side thread was free when the search began.
                    "lexical" in slots
                    and not sent
                    and _bm25_beside_wanted(corpus, model=model, weights=weights)
                ):
                    lexical_beside = _beside_started(lexical_statement, alias=connection.alias)
                    if lexical_beside is not None:
                        batch.pop(slots.pop("lexical"))
            elif recount:
                slots["count"] = len(batch)
                batch.append((corpus.scope_size_sql, vparams))
            plan = vector_plan(scope_size=scope_size, model=model, dimensions=dimensions, exact_max=exact_max)
            batch.extend(_vector_statements(corpus, plan, vparams, weights, pool, slots, start=len(batch)))
        results = sent + run_batch(cursor, batch[len(sent) :]) if len(batch) > len(sent) else sent
        named = {name: results[index] for name, index in slots.items()}
        if lexical_beside is not None:
            named["lexical"] = _beside_rows(lexical_beside, cursor, lexical_statement)
        if "count" in named:
            scope_size = named.pop("count")[0][0]
            _scope_size_remember(corpus, vparams, model=model, size=scope_size)
            replanned = vector_plan(
                scope_size=scope_size, model=model, dimensions=dimensions, exact_max=exact_max
            )
            if replanned != plan:
                # The scope grew past the threshold since it was last counted: the plan
                # changes at once, at the cost of this one query.
                plan, rerun_slots = replanned, {}
                statements = _vector_statements(corpus, plan, vparams, weights, pool, rerun_slots, start=0)
                rerun = run_batch(cursor, statements)
                named.pop("context", None)
                named.update({name: rerun[index] for name, index in rerun_slots.items()})
        lexical_pool: list = []
        if "lexical" in named:
            rows = named["lexical"]
            if bm25_stats is None:
                _bm25_stats_remember(corpus, rows)
            lexical = {row[0]: float(row[1]) for row in rows}
            coverage = {row[0]: float(row[2]) for row in rows}
            lexical_pool = [row[0] for row in rows[:pool]]
        vector, context, pool_ids = _vector_pool(named, lexical_pool)
        if not pool_ids:
            return SearchOutcome(ranked=[], plan=plan, scope_size=scope_size)
        describe = {**params, "qvec": qvec, "model": model if use_vectors else ""}
        sources: dict = {}
        described, features = _describe(cursor, corpus, describe, pool_ids, vector, context, sources)
        if use_vectors and embed_query is not None and weights.speaker > 0:
            # The speaker term finds the named speaker's rows; the vectors look for what
            # they said, in their own words (`first_person`): searched again, and the new
            # pool described under the new vector. A query naming no speaker of the pool
            # (or a corpus without speakers) costs nothing more.
            named_now = named_speakers(query, (speaker for speaker, _group in features.values()))
            named_now |= person_named_whole(named_now, query, corpus.person)
            addressed = set()
            if asker:
                # The person's own words already say "I" of them: the other speakers they
                # name are the ones they talk with, "you" to them.
                mine = named_speakers(asker, named_now)
                named_now, addressed = mine, named_now - mine
            elif len(named_now) > 1:
                # Two speakers named: a turn between them, as the first named said it.
                named_now, addressed = first_named(query, named_now)
            rewritten = first_person(query, named_now, addressed=addressed)
            rewritten_vector = embed_query(rewritten) if rewritten != query else None
            if rewritten_vector is not None and len(rewritten_vector) == len(query_vector):
                qvec = vector_literal(rewritten_vector)
                vparams = {**vparams, "qvec": qvec}
                again: dict = {}
                statements = _vector_statements(corpus, plan, vparams, weights, pool, again, start=0)
                rows = run_batch(cursor, statements)
                vector, context, pool_ids = _vector_pool(
                    {name: rows[index] for name, index in again.items()}, lexical_pool
                )
                describe["qvec"] = qvec
                described, features = _describe(cursor, corpus, describe, pool_ids, vector, context, sources)
        neighbour_ids = []
        if weights.neighbor > 0:
            for _created_at, *neighbours in described.values():
                neighbour_ids.extend(i for i in neighbours if i is not None and i not in described)
            neighbour_ids = list(dict.fromkeys(neighbour_ids))
        every_id = pool_ids + neighbour_ids
        if use_vectors and neighbour_ids:
            ctx = "1 - (context_embedding <=> %(qvec)s::vector)" if corpus.has_context else "NULL"
            cursor.execute(
                f"SELECT {corpus.vector_id_column}, 1 - (embedding <=> %(qvec)s::vector), {ctx} "
                f"FROM {corpus.vector_table} WHERE {corpus.vector_id_column} = ANY(%(ids)s) "
                "AND model = %(model)s",
                {"qvec": qvec, "model": model, "ids": neighbour_ids},
            )
            for row_id, sim, ctx_sim in cursor.fetchall():
                vector.setdefault(row_id, float(sim))
                if ctx_sim is not None:
                    context.setdefault(row_id, float(ctx_sim))

    candidates = []
    pool_set = set(pool_ids)
    for row_id in every_id:
        created_at, prev_id, next_id, prev2_id, next2_id = described.get(row_id, (None,) * 5)
        if row_id in pool_set and row_id not in described:
            continue  # Deleted between the two reads.
        candidates.append(
            Candidate(
                id=row_id,
                created_at=created_at,
                lexical=lexical.get(row_id, 0.0),
                vector=vector.get(row_id),
                context=context.get(row_id),
                prev_id=prev_id,
                next_id=next_id,
                prev2_id=prev2_id,
                next2_id=next2_id,
                rankable=row_id in described,
                coverage=coverage.get(row_id, 0.0),
                speaker=features.get(row_id, (None, None))[0],
                group=features.get(row_id, (None, None))[1],
            )
        )
    if plan == PLAN_HNSW:
        _graph_request(corpus, params, model=model)
    ranked = fuse(candidates, weights=weights, now=now, query=query, asker=asker)
    return SearchOutcome(ranked=ranked, plan=plan, scope_size=scope_size)


# --- query input shared by every searched tier ---------------------------------------------------

QUERY_REQUIRED = "The query must not be empty."
QUERY_TOO_LONG = "The query is longer than {limit} characters."
MODE_UNKNOWN = "Mode must be one of: hybrid, lexical, vector."


def query_clean(query) -> str:
    query = (query or "").strip()
    if not query:
        raise ApplicationError(QUERY_REQUIRED, fields={"query": [QUERY_REQUIRED]})
    limit = settings.EPISODIC_QUERY_MAX_LENGTH
    if len(query) > limit:
        message = QUERY_TOO_LONG.format(limit=limit)
        raise ApplicationError(message, fields={"query": [message]})
    return query


def mode_weights(mode: str, weights: RankingWeights | None, *, top_k: int = 0) -> RankingWeights:
    """`weights` (DEFAULT_WEIGHTS when None) for `mode`, with a pool of at least `top_k`: a
    caller asking for more results than a channel's candidates gets that many candidates."""
    if mode not in MODES:
        raise ApplicationError(MODE_UNKNOWN, fields={"mode": [MODE_UNKNOWN]})
    weights = weights_for_mode(mode, weights or DEFAULT_WEIGHTS)
    return replace(weights, pool=top_k) if weights.pool < top_k else weights


def query_vector_for(*, workspace, query, weights, provider):
    """(vector, model) of `query` for `weights`' vector channels, or (None, "") when they
    are off or the embedding fails. The vector of the local model may still be being computed
    (a Future, `embed_query_started`): `hybrid_search` sends what does not need it meanwhile."""
    if weights.vector <= 0 and weights.context <= 0:
        return None, ""
    provider = provider or embedding_provider_for(workspace)
    try:
        return embed_query_started(provider, query), provider.model_name
    except EmbeddingError as exc:
        # A search must not fail with the embedding endpoint: it degrades to lexical ranking.
        logger.warning("search: query embedding failed, lexical only: %s", exc)
        return None, ""


def query_vector_started(*, workspace, query, weights):
    """`query_vector_for`'s answer when the local model embeds `query` (started now, on its
    thread), else (None, ""): a caller with work to do before its search (an API resolving
    the agent and the person) lets the vector be computed meanwhile, and passes it to the
    search. An endpoint is left to the search: its call may take seconds, and its failure
    must be met once, by the search."""
    if weights.vector <= 0 and weights.context <= 0:
        return None, ""
    provider = embedding_provider_for(workspace)
    if not isinstance(provider, LocalEmbeddingProvider):
        return None, ""
    return query_vector_for(workspace=workspace, query=query, weights=weights, provider=provider)


def query_vector_awaited(query_vector: list[float] | Future | None) -> list[float] | None:
    """The vector of `query_vector_for`, waited for; None when its embedding failed."""
    if not isinstance(query_vector, Future):
        return query_vector
    try:
        return embedding_awaited(query_vector)
    except EmbeddingError as exc:
        logger.warning("search: query embedding failed, lexical only: %s", exc)
        return None


MEANING_UNAVAILABLE = "The embedding model did not answer, so nothing can be searched by meaning now."
# An operator's search by meaning across a workspace reads this many nearest rows at the most.
WORKSPACE_NEAREST_LIMIT = 100


def workspace_nearest(
    *,
    workspace,
    query: str,
    rows_model: type,
    vector_table: str,
    vector_id_column: str,
    kept: str = "",
    params: dict | None = None,
    agent=None,
    limit: int = WORKSPACE_NEAREST_LIMIT,
    provider=None,
) -> list[tuple[object, float]]:
    """(row id, cosine similarity) of the `limit` rows of `workspace` (of `agent`'s only, when
    given) whose vectors in `vector_table` are nearest to `query`'s, closest first.

    An operator's question across the memory ("who asked about refunds?"), which no person's
    search answers: the vector channel of `hybrid_search`, so the plan is routed by the
    workspace's vector count as a person's search is by its scope's (an exact sort while it is
    small, else the HNSW graph with iterative scan, rows not yet in it sorted beside). The
    vectors' rows, of `rows_model` (its `id`, `created_at` and `workspace_id`), are kept when they
    meet `kept` (SQL over their alias `r`, with `params`), so that what the caller's list would
    not show is left out. Raises ApplicationError (503, `embedding_unavailable`) when the query
    cannot be embedded: a search by meaning has nothing else to rank by.
    """
    query = query_clean(query)
    weights = mode_weights(MODE_VECTOR, replace(DEFAULT_WEIGHTS, recency=0.0, session=0.0), top_k=limit)
    query_vector, model = query_vector_for(
        workspace=workspace, query=query, weights=weights, provider=provider
    )
    query_vector = query_vector_awaited(query_vector)
    if query_vector is None:
        raise ApplicationError(MEANING_UNAVAILABLE, code="embedding_unavailable", status_code=503)
    params = {**(params or {}), "workspace": workspace.pk, "agent": agent.pk if agent is not None else None}
    scope = "workspace_id = %(workspace)s" + (" AND agent_id = %(agent)s" if agent is not None else "")
    corpus = Corpus(
        # Never read: the vector mode switches the lexical channel off.
        lexical_scope_sql="SELECT NULL::uuid AS id, NULL::tsvector AS tsv, now() AS created_at WHERE false",
        scope_size_sql=(
            f"SELECT count(*) FROM (SELECT 1 FROM {vector_table} WHERE {scope} "
            "AND model = %(model)s LIMIT %(count_cap)s) capped"
        ),
        vector_table=vector_table,
        vector_id_column=vector_id_column,
        vector_scope_where=scope,
        graph_scope=(("workspace_id", "workspace"),),
        describe_sql=(
            "SELECT r.id, extract(epoch FROM r.created_at)::float8, NULL, NULL, NULL, NULL, "
            "1 - (v.embedding <=> %(qvec)s::vector), NULL, NULL, NULL "
            f"FROM {rows_model._meta.db_table} r JOIN {vector_table} v "
            f"ON v.{vector_id_column} = r.id AND v.model = %(model)s "
            f"WHERE r.id = ANY(%(ids)s) AND r.workspace_id = %(workspace)s{kept}"
        ),
        params=params,
        rows_model=rows_model,
    )
    outcome = hybrid_search(
        corpus=corpus, query=query, query_vector=query_vector, model=model, weights=weights
    )
    nearest = [(c.id, c.vector) for c, _score in outcome.ranked if c.vector is not None]
    return sorted(nearest, key=lambda pair: -pair[1])[:limit]


def query_embedder(*, workspace, provider, model: str) -> Callable[[str], list[float] | None]:
    """Embeds another text of a search's query under `model` (hybrid_search's `embed_query`):
    None when the workspace's provider now has another model, or fails (the search keeps
    the query's own vector)."""

    def embed(text: str) -> list[float] | None:
        nonlocal provider
        try:
            provider = provider or embedding_provider_for(workspace)
            if not model or provider.model_name != model:
                return None
            return provider.embed_query(text)
        except EmbeddingError as exc:
            logger.warning("search: embedding the rewritten query failed, its vector is kept: %s", exc)
            return None

    return embed
