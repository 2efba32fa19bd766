"""The context preview page's read: what POST /api/v1/context/ would return for an agent, a
person, a thread and a message, explained, shaped for the template.

The context is built by runtime (`runtime.selectors.context_preview`, reached through the
core.context_preview registry since browser never imports runtime): the same `context_build`
the API runs, in a read-only transaction that is rolled back.
"""

from dataclasses import dataclass

from core import context_preview as previews

# The blocks in prompt order: (name in the API's body, the tag the model reads, what an
# item's single score is in this block).
BLOCKS = (
    ("user_profile", "<user-profile>", "Confidence"),
    ("session_memory", "<session-memory>", "Confidence"),
    ("memory", "<memory>", "Fused score"),
    ("procedures", "<procedures>", "Condition score"),
)
# The allocation bar's parts, in the order the budget is spent.
PARTS = (
    ("message", "Incoming message"),
    ("user_profile", "User profile"),
    ("session_memory", "Session memory"),
    ("memory", "Memory"),
    ("procedures", "Procedures"),
    ("history", "History"),
    ("unused", "Unused"),
)


@dataclass(frozen=True)
class AllocationPart:
    key: str
    label: str
    tokens: int
    # The most the part could use: a block's cap, the history's share left by the blocks,
    # None for the message (reserved whole) and the unused rest.
    cap: int | None
    percent: str  # of the budget, for the bar's CSS width


def _percent(tokens: int, budget: int) -> str:
    return f"{100 * tokens / budget:.2f}" if budget else "0"


def _allocation(data: dict) -> list[AllocationPart]:
    budget = data["token_budget"]
    allocation = data["allocation"]
    spent = {name: data[name]["tokens"] for name, _tag, _score in BLOCKS}
    spent["message"] = data["message_tokens"]
    spent["history"] = data["history"]["tokens"]
    spent["unused"] = max(0, budget - data["tokens"])
    parts = []
    for key, label in PARTS:
        tokens = spent[key]
        if key in ("message", "unused") and not tokens:
            continue
        cap = allocation.get(key) if key not in ("message", "unused") else None
        parts.append(AllocationPart(key, label, tokens, cap, _percent(tokens, budget)))
    return parts


def _blocks(data: dict, explanation: dict) -> list[dict]:
    blocks = []
    for name, tag, score_label in BLOCKS:
        block = data[name]
        why = explanation[name]
        blocks.append(
            {
                "name": name,
                "tag": tag,
                "score_label": score_label,
                "scored": name == "memory",
                "text": block["text"],
                "tokens": block["tokens"],
                "cap": block["cap"],
                "omitted": block["omitted"],
                "chosen": why["chosen"],
                "cut": why["cut"],
                "note": why["note"],
            }
        )
    return blocks


def context_preview_page(
    *, principal, agent: str, memory_user=None, thread=None, node=None, message: str, token_budget: int
) -> dict:
    """The preview for the page: the API's body (`data`), each block with its explanation,
    the history and the allocation bar's parts. Raises the API's errors (NotFoundError for
    an id out of scope)."""
    preview = previews.context_preview(
        principal=principal,
        agent=agent,
        memory_user=memory_user,
        thread=thread,
        node=node or None,
        message=message,
        token_budget=token_budget,
    )
    data = preview.data
    history = data["history"]
    return {
        "data": data,
        "blocks": _blocks(data, preview.explanation),
        "history": {**history, "explain": preview.explanation["history"]},
        "allocation": _allocation(data),
        "thread_found": preview.thread_found,
        "thread": preview.result.context.thread,
        "memory_user": preview.result.context.memory_user,
        "agent": preview.result.context.agent,
    }
