"""Facts proposed from an episode's record, each with a quote of it as evidence.

This module only proposes and locates quotes; facts.services.episode_facts_extract (the tier
above) validates the proposals against the episode and stores them.
"""

import json
import re
from dataclasses import dataclass

from core.lib.escaping import strip_invisible
from core.llm import LLMError, LLMUnavailable, chat_complete_json
from episodes.models import Episode

METHOD_LLM = "llm"
METHOD_PATTERNS = "patterns"
METHOD_GIVEN = "given"

# Messages shown to the model, newest last; a run longer than this shows its end.
PROPOSE_MAX_MESSAGES = 200
PROPOSE_MAX_CHARACTERS = 40_000

PROPOSE_PROMPT = """You read the record of one past run of an AI agent: its messages and its
final output. List the stable facts worth remembering for later runs: preferences,
relationships, settings, identifiers and decisions of the person (or, without a person, of
the agent's world). Do not list greetings, questions, guesses, the task's transient steps,
or secrets (passwords, keys, card numbers).

Each fact is {"key": "snake_case_key", "value": "...", "evidence": "..."} where "evidence" is
an EXACT quote, copied character for character, from one message or from the final output,
that states the fact (from a user message for a fact about the person).

Answer with JSON only: {"facts": [...]}. An empty list is fine."""

# "key: value" on a line of its own, as people paste settings ("timezone: Europe/Lisbon").
_KEY_VALUE = re.compile(r"^[ \t]*([A-Za-z][A-Za-z0-9 _-]{0,40}?)[ \t]*:[ \t]*(\S[^\n]{0,200}?)[ \t]*$", re.M)
# "my X is Y" / "my X's Y" up to the end of the clause.
_MY_X_IS = re.compile(r"\b[Mm]y ((?:[A-Za-z][A-Za-z-]*\s){0,3}?[A-Za-z][A-Za-z-]*) is ([^.,;!?\n]{1,120})")
# Keys the patterns would read from URLs, times and chat noise rather than statements.
_IGNORED_KEYS = {"http", "https", "re", "fwd", "note", "ps"}


@dataclass
class EpisodeFactCandidate:
    key: object
    value: object
    evidence: object


@dataclass
class EvidenceSource:
    where: str  # "messages[3]", "input", "final_output"
    role: str  # the message's role, "" for input and final output
    text: str


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # OpenAI-style content parts: their text, in order.
        parts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts)
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def _value_text(value) -> str:
    if value in (None, "", {}, []):
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def episode_evidence_sources(episode: Episode) -> list[EvidenceSource]:
    """Every text of the record a quote may come from: its messages, its input, its output."""
    sources = []
    for index, message in enumerate(episode.messages or []):
        if isinstance(message, dict):
            role = message.get("role") if isinstance(message.get("role"), str) else ""
            text = _content_text(message.get("content"))
        else:
            role, text = "", _content_text(message)
        if text:
            sources.append(EvidenceSource(where=f"messages[{index}]", role=role, text=text))
    for name in ("input", "final_output"):
        text = _value_text(getattr(episode, name))
        if text:
            sources.append(EvidenceSource(where=name, role="", text=text))
    return sources


def _collapse(text: str) -> str:
    # Whitespace and invisible characters do not count: a model copying a quote may change
    # either, and a quote hidden in invisible characters must not pass as evidence.
    return re.sub(r"\s+", " ", strip_invisible(text or "")).strip()


def episode_evidence_find(episode: Episode, evidence: str, *, sources=None) -> list[EvidenceSource]:
    """The sources of `episode` that contain `evidence` (whitespace-insensitive)."""
    return episode_evidence_finder(episode, sources=sources)(evidence)


def episode_evidence_finder(episode: Episode, *, sources=None):
    """`episode_evidence_find` for many quotes of one episode: its sources are read and
    collapsed once (a large episode's text took a quarter of a second a quote)."""
    sources = episode_evidence_sources(episode) if sources is None else sources
    collapsed = [(source, _collapse(source.text)) for source in sources]

    def find(evidence: str) -> list[EvidenceSource]:
        needle = _collapse(evidence)
        if not needle:
            return []
        return [source for source, text in collapsed if needle in text]

    return find


def _pattern_key(raw: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", raw.strip().lower()).strip("_")


def _pattern_candidates(episode: Episode) -> list[EpisodeFactCandidate]:
    """`key: value` lines and "my X is Y" clauses of the user's messages, in order."""
    found: dict[str, EpisodeFactCandidate] = {}
    for source in episode_evidence_sources(episode):
        if source.role != "user":
            continue
        text = strip_invisible(source.text)
        matches = [(m.start(), m.group(1), m.group(2), m.group(0)) for m in _KEY_VALUE.finditer(text)]
        matches += [(m.start(), m.group(1), m.group(2), m.group(0)) for m in _MY_X_IS.finditer(text)]
        for _start, raw_key, raw_value, quote in sorted(matches):
            key, value = _pattern_key(raw_key), raw_value.strip()
            if not key or not value or key in _IGNORED_KEYS or value.startswith("//"):
                continue
            # A later statement of the same key wins, as the person corrected themselves.
            found.pop(key, None)
            found[key] = EpisodeFactCandidate(key=key, value=value, evidence=quote.strip())
    return list(found.values())


def _llm_candidates(episode: Episode) -> list[EpisodeFactCandidate]:
    # Raw apart from invisible characters: the model must quote character for character.
    lines = []
    for source in episode_evidence_sources(episode)[-PROPOSE_MAX_MESSAGES:]:
        label = f"[{source.role or source.where}]"
        lines.append(f"{label} {strip_invisible(source.text)}")
    record = "\n".join(lines)[-PROPOSE_MAX_CHARACTERS:]
    reply = chat_complete_json(
        workspace=episode.workspace,
        messages=[
            {"role": "system", "content": PROPOSE_PROMPT},
            {"role": "user", "content": f"<episode>\n{record}\n</episode>"},
        ],
        purpose="extraction",
    )
    facts = reply.get("facts")
    if not isinstance(facts, list):
        return []
    return [
        EpisodeFactCandidate(key=f.get("key"), value=f.get("value"), evidence=f.get("evidence"))
        for f in facts
        if isinstance(f, dict)
    ]


def episode_facts_propose(*, episode: Episode, use_llm: bool = True) -> tuple[list, str, str]:
    """(candidates, method, llm error) for `episode`: the workspace's chat model when one is
    configured and `use_llm`, else (or when it fails) the deterministic patterns of the
    user's messages. Candidates are unchecked: the caller validates every quote."""
    if use_llm:
        try:
            return _llm_candidates(episode), METHOD_LLM, ""
        except LLMUnavailable:
            pass
        except LLMError as exc:
            return _pattern_candidates(episode), METHOD_PATTERNS, str(exc)
    return _pattern_candidates(episode), METHOD_PATTERNS, ""
