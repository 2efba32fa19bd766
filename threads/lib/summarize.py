"""Summaries for rolling compaction: an LLM prompt and the deterministic extractive fallback."""

import re

from core.lib.escaping import strip_invisible
from core.lib.tokens import count_tokens

SUMMARY_SYSTEM_PROMPT = (
    "You maintain the running summary of a conversation between a user and an AI agent. "
    "Merge the new messages into the current summary. Keep every name, number, date, "
    "decision, preference, commitment and open question; drop small talk. Write short "
    "bullet points in the conversation's language. Reply with the updated summary only."
)

# Messages longer than this are cut in the transcript sent to the summarizer.
TRANSCRIPT_MESSAGE_CHARS = 2_000

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_DECISION = re.compile(
    r"\b(decid\w*|agree\w*|chose|choose|will|won't|going to|plan\w*|must|need\w*|prefer\w*|"
    r"confirm\w*|book\w*|order\w*|deadline|remember|always|never|todo|action)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d")
# A capitalized word that is not the first word of the sentence: a name, place or product.
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-zA-Z]+")


def transcript(messages: list[dict]) -> str:
    lines = []
    for message in messages:
        # The transcript is a prompt, and what the summarizer copies becomes the summary.
        text = strip_invisible(message["content"] or "")
        if message.get("tool_calls"):
            calls = ", ".join(
                f"{c['name']}({strip_invisible(c['arguments'])[:200]})" for c in message["tool_calls"]
            )
            text = f"{text} [calls {calls}]".strip()
        if len(text) > TRANSCRIPT_MESSAGE_CHARS:
            text = text[:TRANSCRIPT_MESSAGE_CHARS] + " …"
        lines.append(f"{message['role']}: {text}")
    return "\n".join(lines)


def summary_prompt(*, previous: str, messages: list[dict]) -> list[dict]:
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": (
                f"Current summary:\n{strip_invisible(previous) or '(none yet)'}\n\n"
                f"New messages:\n{transcript(messages)}"
            ),
        },
    ]


def _salient(sentence: str) -> bool:
    stripped = sentence.strip()
    if len(stripped) < 3:
        return False
    return bool(
        stripped.endswith("?")
        or _NUMBER.search(stripped)
        or _DECISION.search(stripped)
        or _NAME.search(stripped)
    )


def summary_extractive(*, previous: str, messages: list[dict], max_tokens: int) -> str:
    """Keep the sentences that carry names, numbers, decisions and questions.

    Deterministic: the same input always gives the same summary. The previous summary
    comes first; when the result is over `max_tokens`, the oldest lines go first.
    """
    lines = [line for line in strip_invisible(previous or "").splitlines() if line.strip()]
    seen = set(lines)
    for message in messages:
        if message["role"] == "tool":
            continue
        for sentence in _SENTENCE_SPLIT.split(strip_invisible(message["content"] or "")):
            sentence = " ".join(sentence.split())
            if not _salient(sentence):
                continue
            line = f"- {message['role']}: {sentence[:300]}"
            if line not in seen:
                seen.add(line)
                lines.append(line)
    while len(lines) > 1 and count_tokens("\n".join(lines)) > max_tokens:
        lines.pop(0)
    return "\n".join(lines)
