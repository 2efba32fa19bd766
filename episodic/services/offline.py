"""Extraction without a model: candidates from patterns of the transcript, for when no chat endpoint is set.

Two kinds, each quoting one sentence of the transcript as its evidence:

- a first-person statement of the person ("I moved to…", "my X is Y", "we use…") or a
  description of a symptom ("the error happens when…"): `user_assertion`;
- a finding of the assistant that the person's next message confirms ("yes, that fixed it",
  "that's right"): `verified_assistant_finding`.

Stated preferences ("I prefer…", "my favourite…") become profile facts, not entries. The
candidates then pass the same validation, relevance checks and dedupe as a model's. What the
method misses is measured by bench/extraction_offline.py (figures in docs/episodic.md).
"""

import re

from episodic.models import EpisodicEntry
from episodic.services.candidates import (
    ADVICE,
    HEDGE,
    PREFERENCE,
    TASK_REQUEST,
    _agent_rule,
    _confirms,
    _preference_fact,
    _reply_after,
    _sentences,
)

# Filler or a confirmation that may open a sentence before its subject ("So, I moved…",
# "Yes, that fixed it: I updated…").
_OPENER = re.compile(
    r"^(?:(?:ok(?:ay)?|so|well|also|and|but|actually|btw|by the way|oh|hmm|yes|yep|yeah|yup|no|right|"
    r"anyway|update|fyi|for context|context|exactly|correct|indeed|confirmed|thanks|thank you|"
    r"(?:that|this|it)(?:'s| is| was) (?:it|right|correct)|(?:that|this|it) (?:fixed|solved|worked|did)"
    r"(?: it)?)\b\s*[,:;!.\u2014\u2013-]*\s*)+",
    re.I,
)
_FIRST_PERSON = re.compile(r"^(i|i'm|i've|i'd|i am|i have|i had|i was|we|we're|we've|we are|our|my)\b", re.I)
# A symptom or an outcome of the situation, whoever its subject ("the export fails when…").
_SITUATION = re.compile(
    r"\b(fixed|resolved|solved|went away|go away|stopped|works now|working again|"
    r"error|errors|fails?|failed|failing|crash(?:es|ed)?|happens (?:when|if|on|after)|only happens|"
    r"broken|doesn'?t work|does not work|stopped working|returns?|returned|times? out|timed out|"
    r"exception|status (?:code )?\d+|declined|rejected|bounced?|stuck|shows?|showed|drops?|dropped|"
    r"reboots?|restarts?|freezes|hangs|unmatched|since|every (?:day|night|morning|time|\d+))\b",
    re.I,
)
# First-person openings that carry no situation: feelings, politeness, the current request.
_NOT_A_STATEMENT = re.compile(
    r"^(i'?m|i am) (fine|good|great|ok|okay|happy|glad|sorry|not sure|sure|here|back|just|curious|"
    r"wondering|looking for|trying to (?:understand|figure)|asking)\b|"
    r"^i (see|know|agree|understand|hope|wonder|guess|think|feel|mean|bet|suppose|believe|was wondering|"
    r"want|need|would like|'d like|wanted|appreciate|love it|got it|will|'ll|can'?t wait)\b|"
    r"^(i'?ll|i'?d|we'?ll|we'?d|we should|we could|we need|we want|my bad|my pleasure)\b|"
    r"^i (told|asked|said|mentioned) (you|that)\b",
    re.I,
)
_PLEASANTRY = re.compile(
    r"\b(happy to help|glad (?:it|that|to)|let me know|you'?re welcome|hope this helps|good luck|"
    r"sorry (?:for|about|to hear)|anything else)\b",
    re.I,
)
_FINDING = re.compile(
    r"\b(because|caused|cause|due to|the (?:issue|problem|error|cause|reason|bug|culprit)|set to|expects?|"
    r"expected|mismatch|match(?:es)?|instead of|points? to|expired|found|checked|shows?|showed|turned out|"
    r"missing|wrong|outdated|enabled|disabled|was|were|is still|has been|had been|belongs? to|"
    r"stored|records?|uses|is using|was using|still|changed|reads?|sends?|signs?|only|"
    r"does not|doesn'?t|did not|didn'?t|never)\b",
    re.I,
)
MIN_WORDS = 4
MAX_FINDINGS_PER_MESSAGE = 2


def _statement(sentence: str) -> str:
    """`sentence` without its filler opening when it is a situation statement of the person, else ""."""
    core = _OPENER.sub("", sentence).strip()
    if len(core.split()) < MIN_WORDS or core.endswith("?"):
        return ""
    if TASK_REQUEST.search(core) or _agent_rule(core) or HEDGE.search(core):
        return ""
    if _NOT_A_STATEMENT.search(core):
        return ""
    if _FIRST_PERSON.search(core) or _SITUATION.search(core):
        return core
    return ""


def _finding(sentence: str) -> bool:
    if sentence.endswith("?") or len(sentence.split()) < MIN_WORDS + 1:
        return False
    if ADVICE.search(sentence) or _PLEASANTRY.search(sentence) or TASK_REQUEST.search(sentence):
        return False
    return bool(_FINDING.search(sentence))


def offline_candidates(transcript: list[dict]) -> tuple[list[dict], list[dict]]:
    """(entries, facts) proposed from `transcript` without a model, in transcript order."""
    entries: list[dict] = []
    facts: list[dict] = []
    for message in transcript:
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            for sentence in _sentences(content):
                if PREFERENCE.search(sentence) and not sentence.endswith("?"):
                    facts.append(_preference_fact(sentence, evidence=sentence))
                    continue
                statement = _statement(sentence)
                if statement:
                    entries.append(
                        {
                            "content": f'The person said: "{statement}"',
                            "source": EpisodicEntry.Source.USER_ASSERTION,
                            "evidence": statement,
                        }
                    )
        elif role == "assistant" and _confirms(_reply_after(transcript, message)):
            # The reply confirms what the message asserts, not an aside it hedged.
            findings = [s for s in _sentences(content) if _finding(s)]
            findings = [s for s in findings if not HEDGE.search(s)] or findings
            findings = findings[:MAX_FINDINGS_PER_MESSAGE]
            entries.extend(
                {
                    "content": f"Confirmed by the person: {finding}",
                    "source": EpisodicEntry.Source.VERIFIED_FINDING,
                    "evidence": finding,
                }
                for finding in findings
            )
    return entries, facts
