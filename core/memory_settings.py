"""Per-agent memory settings: environment defaults overridden by `Agent.memory_settings`.

Every tier reads its settings through `memory_settings_for(agent)`.
"""

from dataclasses import asdict, dataclass, fields

from django.conf import settings
from django.core.exceptions import ValidationError

# What `recall(query=...)` searches; runtime.selectors.MEMORY_TYPES is this tuple.
RECALL_MEMORY_TYPES = ("facts", "procedures", "episodes", "all")
# Which messages a request naming a node reads (threads.selectors.memory_scope): `node` its
# own (Dify's node memory), `conversation` the thread's main conversation.
MEMORY_MODES = ("conversation", "node")
# Which new memories wait for an operator's review before they are recalled (docs/review.md):
# `extracted` holds what extraction (of turns or episodes) and consolidation propose, `all`
# also what the agent or the API stores directly, `off` holds nothing.
REVIEW_MODES = ("off", "extracted", "all")

UNKNOWN_SETTING = "Unknown setting."

# name -> (type, minimum, maximum, help); a str setting names its choices in place of the range.
SETTING_RULES = {
    "recent_messages": (int, 1, 10_000, "Messages in the history window at most."),
    "token_limit": (int, 50, 2_000_000, "Tokens in the history window at most."),
    "compaction_threshold": (
        float,
        0.05,
        1.0,
        "Compact a thread when its branch passes this fraction of the context window.",
    ),
    "model_context_window": (int, 512, 10_000_000, "The agent model's context window in tokens."),
    "semantic_recall": (bool, None, None, "Add related older messages to the history window."),
    "semantic_recall_top_k": (int, 1, 100, "How many related messages semantic recall adds."),
    "episodic_memory": (bool, None, None, "Store and recall episodic entries."),
    "auto_inject": (bool, None, None, "Inject a <memory> block into the context."),
    "auto_inject_top_k": (int, 1, 100, "Episodic entries injected at most."),
    "dedupe_threshold": (float, 0.5, 1.0, "Cosine similarity above which entries are duplicates."),
    "retention_days": (int, 0, 36_500, "Delete threads idle this many days (0: keep forever)."),
    "recall_memory_type": (str, RECALL_MEMORY_TYPES, None, "What the recall tool searches when not told."),
    "recall_limit": (int, 1, 100, "Results of the recall tool when not told."),
    "recall_min_confidence": (float, 0.0, 1.0, "Least confidence of a fact the recall tool returns."),
    "conversation_memory": (
        bool,
        None,
        None,
        "Send the thread's messages as history (off: none are sent; turns are still stored).",
    ),
    "memory_mode": (
        str,
        MEMORY_MODES,
        None,
        "What a request naming a node reads unless it says: its node's messages or the main conversation.",
    ),
    "fallback_window": (
        bool,
        None,
        None,
        "Without a summarizer model, send a fixed window of the newest messages instead of compacting.",
    ),
    "fallback_window_messages": (int, 1, 10_000, "Messages in the fallback window at most."),
    "fallback_window_tokens": (int, 50, 2_000_000, "Tokens in the fallback window at most."),
    "subagent_compress_at": (
        float,
        0.5,
        0.95,
        "Compact a node's (sub-agent's) history when it passes this fraction of the context window.",
    ),
    "review": (
        str,
        REVIEW_MODES,
        None,
        "Hold new memories for review before they are recalled: extracted ones, all, or none (off).",
    ),
}

# Defaults of the settings the environment does not set (settings.MEMORY_DEFAULTS wins).
CODE_DEFAULTS = {
    "recall_memory_type": "all",
    "recall_limit": 10,
    "recall_min_confidence": 0.5,
    "conversation_memory": True,
    "memory_mode": "node",
    # Inkeep's fallback: 50 messages / 8,000 tokens when no summarizer model is configured.
    "fallback_window": False,
    "fallback_window_messages": 50,
    "fallback_window_tokens": 8000,
    # Inkeep compresses a sub-agent's history between 75% and 91% of the model's window.
    "subagent_compress_at": 0.75,
    "review": "off",
}


@dataclass(frozen=True)
class MemorySettings:
    recent_messages: int
    token_limit: int
    compaction_threshold: float
    model_context_window: int
    semantic_recall: bool
    semantic_recall_top_k: int
    episodic_memory: bool
    auto_inject: bool
    auto_inject_top_k: int
    dedupe_threshold: float
    retention_days: int
    recall_memory_type: str
    recall_limit: int
    recall_min_confidence: float
    conversation_memory: bool
    memory_mode: str
    fallback_window: bool
    fallback_window_messages: int
    fallback_window_tokens: int
    subagent_compress_at: float
    review: str

    def as_dict(self) -> dict:
        return asdict(self)


def memory_settings_defaults() -> MemorySettings:
    defaults = {**CODE_DEFAULTS, **settings.MEMORY_DEFAULTS}
    return MemorySettings(**{f.name: defaults[f.name] for f in fields(MemorySettings)})


def memory_settings_for(agent=None) -> MemorySettings:
    values = memory_settings_defaults().as_dict()
    overrides = agent.memory_settings if agent is not None else None
    # The API only stores objects checked by memory_settings_validate; a row edited by hand
    # (admin, SQL) to something else falls back to the defaults rather than failing every read.
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            try:
                values.update(memory_settings_validate({key: value}))
            except ValidationError:
                continue
    return MemorySettings(**values)


def review_holds(agent, *, extracted: bool) -> bool:
    """Whether a memory written now for `agent` waits for review: `extracted` says it was
    proposed by extraction or consolidation rather than stored directly. No agent, no hold."""
    if agent is None:
        return False
    mode = memory_settings_for(agent).review
    return mode == "all" or (mode == "extracted" and extracted)


def memory_settings_merge(current, changes) -> dict:
    """`current` overridden by `changes`, where a null value restores that setting's default;
    the result is validated. A null for a name that is no setting is refused like any unknown
    setting, not dropped in silence."""
    if not isinstance(changes, dict):
        raise ValidationError({"memory_settings": ["Must be an object."]})
    unknown = {
        key: [UNKNOWN_SETTING] for key, value in changes.items() if value is None and key not in SETTING_RULES
    }
    if unknown:
        raise ValidationError(unknown)
    merged = {**(current if isinstance(current, dict) else {}), **changes}
    return memory_settings_validate({key: value for key, value in merged.items() if value is not None})


def memory_settings_validate(data) -> dict:
    """Check an override dict; return it cleaned or raise ValidationError with field errors."""
    if not isinstance(data, dict):
        raise ValidationError({"memory_settings": ["Must be an object."]})
    errors: dict[str, list[str]] = {}
    cleaned = {}
    for key, value in data.items():
        rule = SETTING_RULES.get(key)
        if rule is None:
            errors[key] = [UNKNOWN_SETTING]
            continue
        kind, low, high, _help = rule
        if kind is str:
            if value not in low:
                errors[key] = [f"Must be one of: {', '.join(low)}."]
            else:
                cleaned[key] = value
            continue
        if kind is bool:
            if not isinstance(value, bool):
                errors[key] = ["Must be true or false."]
                continue
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                errors[key] = ["Must be an integer."]
                continue
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            errors[key] = ["Must be a number."]
            continue
        if low is not None and not (low <= value <= high):
            errors[key] = [f"Must be between {low} and {high}."]
            continue
        cleaned[key] = kind(value)
    if errors:
        raise ValidationError(errors)
    return cleaned
