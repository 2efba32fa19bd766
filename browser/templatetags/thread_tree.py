"""The thread page's per-message pieces, built in Python: a page renders up to 50 of them and the
template engine's lookups were most of its time (bench/browser_thread.py)."""

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from browser.templatetags.memories import reltime

register = template.Library()


@register.filter
def message_meta(row):
    """The line above a message: role, name, position, time, tokens, node, author and marks."""
    message = row.message
    parts = [format_html("<strong>{}</strong>", message.role)]
    if message.name:
        parts.append(format_html(" · {}", message.name))
    parts.append(
        format_html(" · #{} · {} · {} tokens", message.seq, reltime(message.created_at), message.token_count)
    )
    if message.node_id:
        parts.append(format_html(" · node {}", message.node_id))
    if message.author_agent:
        parts.append(format_html(" · by {}", message.author_agent))
    if row.in_window:
        parts.append(mark_safe(' · <span class="badge ok">in window</span>'))
    if row.covered:
        parts.append(mark_safe(' · <span class="badge muted">summarised</span>'))
    return format_html('<div class="meta">{}</div>', format_html_join("", "{}", ((p,) for p in parts)))
