"""Rows the browser tests need from tiers whose own factories are not shared."""

from episodic.models import EpisodicEntry
from episodic.services import entry_content_hash, entry_normalize
from identities.services import memory_user_create


def memory_user_make(workspace, canonical_id="telegram:1", display_name="Ada"):
    return memory_user_create(workspace=workspace, canonical_id=canonical_id, display_name=display_name)


def entry_make(*, agent, memory_user, content="Ada moved to Lisbon in May.", **kwargs):
    """An active, not yet embedded episodic entry (lexical search finds it at once)."""
    content = entry_normalize(content)
    return EpisodicEntry.objects.create(
        workspace=agent.workspace,
        agent=agent,
        memory_user=memory_user,
        content=content,
        content_hash=entry_content_hash(content),
        source=kwargs.pop("source", EpisodicEntry.Source.USER_ASSERTION),
        evidence=kwargs.pop("evidence", content),
        **kwargs,
    )
