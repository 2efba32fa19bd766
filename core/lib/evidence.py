"""When a quote counts as evidence: the one rule for every claim stored with a quote of its source.

Extracted entries (episodic.services.extraction), the profile facts an extraction hands on
(episodic.services.facts_handoff) and facts learned from an episode
(facts.services.episode_extraction) each check that their quote occurs in the source; this
module decides whether a quote that occurs there also says enough to prove anything.
docs/episodic.md ("Evidence that says something") gives the reasons for each threshold.
"""

import json
import re

# The rejection reason of a candidate whose quote is found but too weak, on every path.
EVIDENCE_TOO_WEAK = "evidence_too_weak"

# Words that name nothing on their own; also used for the content words of notes
# (episodic.services.candidates).
# fmt: off
STOPWORDS = frozenset((
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by", "from",
    "is", "are", "was", "were", "be", "been", "it", "its", "this", "that", "these", "those", "as", "i",
    "me", "my", "we", "our", "you", "your", "he", "she", "they", "them", "their", "his", "her", "has",
    "have", "had", "do", "does", "did", "not", "no", "so", "if", "then", "than", "there", "here",
    "when", "what", "which", "who", "how", "person", "user", "said", "just", "also", "very",
))
# Replies and fillers that answer a turn without stating anything ("yes", "ok, thanks"), and
# contractions of stopwords, which the quote tokenizer keeps whole.
_EMPTY_WORDS = STOPWORDS | frozenset((
    "yes", "yeah", "yep", "yup", "nope", "nah", "ok", "okay", "sure", "thanks", "thank", "thx", "ty",
    "please", "hi", "hello", "hey", "bye", "right", "correct", "exactly", "indeed", "well", "oh",
    "ah", "hmm", "um", "uh", "cool", "wow", "lol", "im", "i'm", "i've", "i'd", "i'll", "it's",
    "that's", "you're", "we're", "they're", "he's", "she's", "there's", "don't", "doesn't",
    "didn't", "isn't", "wasn't", "can't", "won't", "am", "will", "would", "can", "could",
))
# fmt: on

# A quote needs this many words. One is enough when it names what the claim names: "Lisbon."
# is how a person answers "where do you live?", and the rules below still refuse "I", "yes"
# and a word the claim does not name.
MIN_QUOTE_WORDS = 1
# Letters and digits of its content words: "ok no" or "是的" ("yes") carries fewer. Not asked
# of a quote with a word the claim names exactly, a number or a word of two letters or more:
# "I'm 34", "Jo", "US" are how people answer.
MIN_CONTENT_CHARS = 4
# A quote shorter than this many words must name something the claim names: "the
# printer" proves nothing about "Ada moved to Lisbon". A longer quote is a statement on its
# own, and a claim is a third-person rewording (often in another language) that need not
# repeat its words.
SELF_STANDING_WORDS = 4
# Two words match when they share this many first letters: "moved"/"move", "colour"/"color".
_STEM = 4

# Identifiers keep inner dots, dashes and apostrophes ("shop.io", "E-42", "22.04", "don't").
_WORD = re.compile(r"[^\W_]+(?:['\u2019.\-][^\W_]+)*")
# Scripts written without spaces between words: each character counts as a word.
_UNSPACED = re.compile(
    "([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f\u0e80-\u0eff"
    "\u1000-\u109f\u1780-\u17ff])"
)


def _tokens(text: str) -> list[str]:
    text = _UNSPACED.sub(r" \1 ", (text or "").casefold().replace("\u2019", "'"))
    return _WORD.findall(text)


def _content(tokens: list[str]) -> list[str]:
    return [t for t in tokens if t not in _EMPTY_WORDS]


def _same_word(a: str, b: str) -> bool:
    return a == b or (len(a) >= _STEM and len(b) >= _STEM and a[:_STEM] == b[:_STEM])


def claim_text(*parts) -> str:
    """The text of a claim made of several parts (a fact's key and value, any JSON value)."""
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part.replace("_", " "))
        elif part is not None:
            texts.append(json.dumps(part, ensure_ascii=False, default=str))
    return " ".join(texts)


def evidence_too_weak(quote: str, *, claim: str) -> bool:
    """Whether `quote`, found in the source, still proves nothing about `claim`.

    Weak: fewer than MIN_QUOTE_WORDS words, no content word (only stopwords and replies),
    fewer than MIN_CONTENT_CHARS letters of content unless a word of it is one the claim
    names exactly (a number, or two letters or more: not one character of "是的"), or, for a
    quote shorter than SELF_STANDING_WORDS words, no content word shared with the claim.
    """
    tokens = _tokens(quote)
    content = _content(tokens)
    if len(tokens) < MIN_QUOTE_WORDS or not content:
        return True
    claimed = _content(_tokens(claim))
    if sum(len(re.sub(r"\W", "", t)) for t in content) < MIN_CONTENT_CHARS and not any(
        word in claimed and (len(word) >= 2 or word.isdigit()) for word in content
    ):
        return True
    if len(tokens) >= SELF_STANDING_WORDS:
        return False
    return not any(_same_word(word, said) for word in content for said in claimed)
