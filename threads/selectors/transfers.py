"""Reads of transfers: the list of a thread, and what a transfer hides from the agent that made it."""

from threads.lib.tree import ancestor_at_depth
from threads.models import Message, Thread, Transfer


def transfer_list(*, thread: Thread):
    return Transfer.objects.filter(thread=thread).order_by("message_depth", "id")


def transfer_handed_away(*, thread: Thread, viewer: str, scope: str, leaf=None) -> tuple[str, int] | None:
    """(viewer, depth) when `viewer`'s view of this branch hides other agents' later turns.

    Of the transfers on the branch ending at `leaf` (default: the newest message of the
    scope) that involve `viewer`, the latest decides: a transfer *from* the viewer (not
    `shared`) hides the turns of every other agent deeper than its message; a transfer *to*
    the viewer hands it the whole conversation up to its message, so nothing is hidden.
    None when nothing is hidden. A transfer is on the branch when its message is an
    ancestor of the leaf (or the leaf), checked through jump pointers.
    """
    transfers = list(
        Transfer.objects.filter(thread=thread, from_agent=viewer, shared=False).union(
            Transfer.objects.filter(thread=thread, to_agent=viewer)
        )
    )
    if not transfers:
        return None
    if leaf is None:
        leaf = (
            Message.objects.filter(thread=thread, node_id=scope)
            .order_by("-seq")
            .values_list("id", flat=True)
            .first()
        )
        if leaf is None:
            return None
    for transfer in sorted(transfers, key=lambda t: (t.message_depth, t.pk), reverse=True):
        if ancestor_at_depth(start_id=leaf, target_depth=transfer.message_depth) != transfer.message_id:
            continue
        if transfer.to_agent == viewer:
            return None
        return viewer, transfer.message_depth
    return None
