"""Checks shared by extraction and the facts hand-off: rejection reasons, user sources, evidence matching."""

import re

from core.lib.escaping import strip_invisible
from core.lib.evidence import EVIDENCE_TOO_WEAK
from core.lib.evidence import STOPWORDS as _STOPWORDS
from episodic.models import EpisodicEntry

# Per-candidate rejection reasons (the `reason` of each rejected candidate).
REJECT_EMPTY = "empty_content"
REJECT_SOURCE = "unknown_source"
REJECT_NO_EVIDENCE = "evidence_missing"
REJECT_EVIDENCE_NOT_FOUND = "evidence_not_in_transcript"
REJECT_EVIDENCE_NOT_USER = "evidence_not_from_user"
# Found, but saying too little to prove anything (core.lib.evidence).
REJECT_EVIDENCE_TOO_WEAK = EVIDENCE_TOO_WEAK
REJECT_LIMIT = "over_max_entries_per_turn"
REJECT_DUPLICATE_HASH = "duplicate_exact"
REJECT_DUPLICATE_SIMILAR = "duplicate_similar"
REJECT_KNOWN = "already_in_context"
# A candidate held for review that repeats an entry an operator rejected (docs/review.md).
REJECT_REVIEW_REJECTED = "rejected_in_review"

# The sources an extracted candidate may claim: each is proven by a quote of the transcript.
EXTRACTED_SOURCES = {
    EpisodicEntry.Source.USER_ASSERTION,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL,
    EpisodicEntry.Source.VERIFIED_FINDING,
}
USER_SOURCES = {
    EpisodicEntry.Source.USER_ASSERTION,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL,
}


def _collapse(text: str) -> str:
    # Evidence is stored without invisible characters, so it is matched without them too.
    return re.sub(r"\s+", " ", strip_invisible(text or "")).strip()


def _evidence_messages(evidence: str, transcript: list[dict]) -> list[dict]:
    needle = _collapse(evidence)
    return [m for m in transcript if needle and needle in _collapse(m.get("content", ""))]


# What a valid candidate may still be wrong for: checks run on the model's (and the offline
# method's) candidates after validation, so a model that ignores the prompt's rules is caught
# where a rule can be checked without a model (docs/episodic.md, "What is worth keeping").
REJECT_RESTATES_KNOWN = "restates_known_memory"
REJECT_SPECULATION = "unconfirmed_speculation"
REJECT_DENIED = "denied_by_person"
REJECT_GENERIC_ADVICE = "generic_advice"
REJECT_AGENT_RULE = "agent_instruction"
REJECT_TASK_REQUEST = "current_task_request"
REJECT_PREFERENCE = "stable_preference"  # handed to the facts tier instead

HEDGE = re.compile(
    r"\b(maybe|might|may be|could be|possibly|perhaps|probably|likely|i think|i suspect|i guess|"
    r"i believe|it seems|seems to|seems like|looks like|my guess|not sure|presumably|if i had to guess)\b",
    re.I,
)
ADVICE = re.compile(
    r"\b(you should|you could|you might want|you may want|try to|try |make sure|consider|"
    r"it'?s (a )?good (idea|practice)|best practice|in general|generally|i recommend|i'd recommend|"
    r"we recommend|it is recommended|remember to|don't forget)\b",
    re.I,
)
CONFIRM = re.compile(
    r"^\W*(yes|yep|yeah|yup|correct|exactly|right|confirmed|indeed)\b|"
    r"\b(that|this|it) (fixed|solved|worked|did it|was it|did the trick)\b|"
    r"\b(that'?s|that is|you'?re|you are) (right|correct|it|the one)\b|\b(works|working) now\b",
    re.I,
)
DENY = re.compile(
    r"^\W*(no|nope|nah|not really|wrong)\b|\b(didn'?t|did not|doesn'?t|does not|still)\b(?! know)|"
    r"\bnot (it|right|correct|the (issue|problem|case))\b|\bthat'?s wrong\b",
    re.I,
)
NEGATION = re.compile(r"\b(no|not|never|nothing|neither|nor|none)\b|n'?t\b", re.I)
# A rule for the agent: an explicit phrase, or an imperative that addresses the agent or its answers
# ("Keep your answers short"; "Never had this before" is no rule).
AGENT_RULE_PHRASE = re.compile(
    r"\bfrom now on\b|^\W*(please\s+)?(call me|address me)\b|\byour (answers?|replies|responses|tone)\b|"
    r"\b(answer|reply|respond|write|speak|talk) (in|with|to me)\b",
    re.I,
)
AGENT_IMPERATIVE = re.compile(
    r"^\W*(please\s+)?(always|never|don'?t|do not|stop|keep|answer|reply|respond|speak|talk|write|use)\b",
    re.I,
)
AGENT_ADDRESS = re.compile(
    r"\b(you|your|me|answers?|replies|responses|emojis?|bullet points?|language|tone|formal|informal|"
    r"short|shorter|longer)\b",
    re.I,
)
TASK_REQUEST = re.compile(
    r"^\W*(please\b|(can|could|would|will) you\b|help me\b|i need you to\b|i want you to\b|"
    r"write me\b|show me\b|tell me\b|give me\b|explain\b|draft\b|summari[sz]e\b|translate\b)",
    re.I,
)
PREFERENCE = re.compile(
    r"\b(i (really |just |do )?(like|love|prefer|enjoy|adore|hate|dislike|detest|can'?t stand)|"
    r"my favou?rite|i'?m (a )?(vegetarian|vegan)|i am (a )?(vegetarian|vegan))\b",
    re.I,
)


# Share of a candidate's content words found in one line of the known context above which it
# restates that line (a reworded copy, which the exact hash misses).
RESTATE_OVERLAP = 0.66


def _words(text: str) -> set[str]:
    # Identifiers keep their inner dots and dashes ("shop.io", "R-402"), not a final full stop.
    tokens = (w.rstrip("_.:/-") for w in re.findall(r"[a-z0-9][a-z0-9_.:/-]*", (text or "").casefold()))
    return {w for w in tokens if w not in _STOPWORDS}


def _agent_rule(sentence: str) -> bool:
    if AGENT_RULE_PHRASE.search(sentence):
        return True
    return bool(AGENT_IMPERATIVE.search(sentence) and AGENT_ADDRESS.search(sentence))


def _sentences(text: str) -> list[str]:
    """The sentences of a message, each whitespace-collapsed (so each is a quotable substring)."""
    parts = []
    for line in re.split(r"\n+", text or ""):
        parts.extend(re.split(r"(?<=[.!?])\s+(?=[\"'(A-Z0-9])", _collapse(line)))
    return [p.strip() for p in parts if p.strip()]


def _sentence_around(evidence: str, content: str) -> str:
    """The sentence(s) of `content` holding `evidence`, for checks that need its surroundings."""
    needle = _collapse(evidence).casefold()
    held = [s for s in _sentences(content) if needle in s.casefold() or s.casefold() in needle]
    return " ".join(held) or _collapse(evidence)


def _reply_after(transcript: list[dict], message: dict) -> str:
    """The person's next message after `message`, if it comes before another assistant turn."""
    index = next((i for i, m in enumerate(transcript) if m is message), None)
    if index is None:
        return ""
    for later in transcript[index + 1 :]:
        if later.get("role") == "user":
            return later.get("content") or ""
        if later.get("role") == "assistant":
            return ""
    return ""


def _confirms(reply: str) -> bool:
    first = (_sentences(reply) or [""])[0]
    return bool(CONFIRM.search(first)) and not DENY.search(first)


def _confirms_all(reply: str) -> bool:
    """A confirmation without any "not"/"never" in it: enough to confirm a hedged guess, since a
    mixed answer ("yes, the dashes; we never have zeros") confirms one part and denies another."""
    return _confirms(reply) and not NEGATION.search(reply)


def _denies(reply: str) -> bool:
    first = (_sentences(reply) or [""])[0]
    return bool(DENY.search(first)) and not CONFIRM.search(first)


def _specific_detail(text: str) -> bool:
    """Whether `text` names a detail of one situation: a number, an identifier or a quoted value."""
    if re.search(r"[\"'`\u2018\u201c][^\"'`\u2019\u201d]{2,}[\"'`\u2019\u201d]", text or ""):
        return True
    return any(any(c.isdigit() for c in w) or re.search(r"\w[_.:/=]\w", w) for w in (text or "").split())


def _relevance_reason(item: dict, matches: list[dict], transcript: list[dict], known_lines: list[str]):
    """Why a valid candidate does not belong in episodic memory, or None; checked after the model."""
    content, evidence, source = item["content"], item["evidence"], item["source"]
    content_words = _words(content)
    for line in known_lines:
        line_words = _words(line)
        shared = len(content_words & line_words)
        if shared >= 2 and shared >= RESTATE_OVERLAP * len(content_words):
            return REJECT_RESTATES_KNOWN
    user_matches = [m for m in matches if m["role"] == "user"]
    if source == EpisodicEntry.Source.USER_ASSERTION and user_matches:
        sentence = _sentence_around(evidence, user_matches[0]["content"])
        if _agent_rule(sentence):
            return REJECT_AGENT_RULE
        if sentence.rstrip().endswith("?") or TASK_REQUEST.search(sentence):
            return REJECT_TASK_REQUEST
        if PREFERENCE.search(sentence) or PREFERENCE.search(content):
            return REJECT_PREFERENCE
    if source == EpisodicEntry.Source.VERIFIED_FINDING and not user_matches:
        said = matches[0]
        sentence = _sentence_around(evidence, said["content"])
        reply = _reply_after(transcript, said)
        if _denies(reply):
            return REJECT_DENIED
        if HEDGE.search(sentence) and not _confirms_all(reply):
            return REJECT_SPECULATION
        if ADVICE.search(sentence) and not _specific_detail(sentence):
            return REJECT_GENERIC_ADVICE
    return None


def _preference_fact(sentence: str, *, evidence: str) -> dict:
    """A profile fact for a stated preference: a key from its verb and object, the sentence as value."""
    match = re.search(
        r"\b(?:i (?:really |just |do )?(like|love|prefer|enjoy|adore|hate|dislike|detest|can'?t stand)|"
        r"my (favou?rite) ([a-z ]+?) (?:is|are))\b\s*(.*)",
        sentence,
        re.I,
    )
    if match is None:
        return {"key": "preference", "value": sentence, "evidence": evidence}
    verb = (match.group(1) or match.group(2) or "").casefold()
    prefix = {"prefer": "prefers", "hate": "dislikes", "dislike": "dislikes", "detest": "dislikes"}.get(
        verb, "dislikes" if verb.startswith("can") else "favourite" if verb.startswith("favo") else "likes"
    )
    obj = match.group(3) or match.group(4) or ""
    words = [w for w in re.findall(r"[a-z0-9]+", obj.casefold()) if w not in _STOPWORDS][:3]
    key = "_".join([prefix, *words]) if words else prefix
    return {"key": key[:100], "value": sentence, "evidence": evidence}
