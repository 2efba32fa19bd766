"""The context preview's builder, registered by runtime in its `AppConfig.ready()`.

The /memories context preview shows what POST /api/v1/context/ would return, built by
runtime's own code (`runtime.selectors.context_preview`). Browser and runtime sit side by
side in the layers and neither imports the other, so the browser asks for the builder here,
as identities asks core.holdings for the tiers above it.
"""

from collections.abc import Callable

PREVIEW_UNAVAILABLE = "The context preview needs the runtime app installed."

_builder: Callable | None = None


def context_preview_register(builder: Callable | None) -> None:
    """Build previews with `builder(principal=, agent=, memory_user=, thread=, node=, message=,
    token_budget=)`; None unregisters."""
    global _builder
    _builder = builder


def context_preview(**kwargs):
    """The preview `runtime.selectors.context_preview` builds for these arguments."""
    if _builder is None:
        raise RuntimeError(PREVIEW_UNAVAILABLE)
    return _builder(**kwargs)
