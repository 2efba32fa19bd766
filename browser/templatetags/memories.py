"""Small presentation helpers shared by every tab."""

import json

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

register = template.Library()

# Values longer than this are cut in tables; the whole value sits behind a <details>.
PREVIEW_CHARS = 120


@register.filter
def reltime(value):
    """`<time>` with a relative label ("3 hours ago") and the exact UTC time on hover."""
    if not value:
        return mark_safe('<span class="muted">—</span>')
    now = timezone.now()
    if abs((now - value).total_seconds()) < 60:
        label = "just now"
    elif value <= now:
        label = f"{timesince(value, now)} ago"
    else:
        label = f"in {timesince(now, value)}"
    # timesince uses non-breaking spaces; keep the label on one line in narrow columns anyway.
    label = label.split(",")[0]
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        label,
    )


def _as_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def as_text(value) -> str:
    """JSON values as compact JSON, strings as themselves."""
    return _as_text(value)


@register.filter
def pretty(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, default=str)


@register.filter
def expandable(value, limit=PREVIEW_CHARS):
    """A short preview; longer values open in a <details> so tables stay one line per row."""
    text = _as_text(value)
    limit = int(limit)
    if len(text) <= limit:
        return format_html('<span class="value">{}</span>', text)
    return format_html(
        '<details class="expand"><summary><span class="value">{}…</span></summary>'
        '<pre class="value-full">{}</pre></details>',
        text[:limit],
        pretty(value),
    )


@register.simple_tag(takes_context=True)
def tab_url(context, name, **kwargs):
    """A URL in the current workspace: {% tab_url 'memories:facts' %}."""
    from django.urls import reverse

    operator = context["request"].operator
    return reverse(name, kwargs={"workspace_id": operator.workspace.pk, **kwargs})


@register.simple_tag(takes_context=True)
def memory_tabs(context):
    from browser.tabs import tab_links

    operator = context["request"].operator
    return tab_links(operator.workspace.pk, context.get("tab"))


@register.simple_tag(takes_context=True)
def switch_url(context, workspace):
    """The same page in another workspace when it is a list page, else that workspace's home."""
    from django.urls import NoReverseMatch, reverse

    match = context["request"].resolver_match
    if match is not None and set(match.kwargs) == {"workspace_id"}:
        try:
            return reverse(f"{match.namespace}:{match.url_name}", kwargs={"workspace_id": workspace.pk})
        except NoReverseMatch:
            pass
    return reverse("memories:workspace", kwargs={"workspace_id": workspace.pk})


@register.simple_tag(takes_context=True)
def sort_th(context, key, label, css=""):
    """A sortable column header: a link (href + hx-get) that toggles the direction."""
    listing = context.get("listing")
    request = context["request"]
    if listing is None:
        return format_html('<th scope="col" class="{}">{}</th>', css, label)
    query = request.GET.copy()
    query["sort"] = listing.next_sort(key)
    query.pop("page", None)
    url = f"{context['list_url']}?{query.urlencode()}"
    state = listing.sort_state(key)
    aria = {"asc": "ascending", "desc": "descending"}.get(state, "none")
    return format_html(
        '<th scope="col" class="{}" aria-sort="{}"><a class="sort" data-dir="{}" href="{}" hx-get="{}" '
        'hx-target="#results" hx-push-url="true">{}</a></th>',
        css,
        aria,
        state,
        url,
        url,
        label,
    )


@register.simple_tag(takes_context=True)
def page_url(context, number):
    query = context["request"].GET.copy()
    query["page"] = number
    return f"{context['list_url']}?{query.urlencode()}"


@register.filter
def page_window(page, radius=2):
    """Page numbers around the current one, with None where a gap is shown."""
    last = page.paginator.num_pages
    numbers = sorted({1, last, *range(max(1, page.number - radius), min(last, page.number + radius) + 1)})
    out, previous = [], 0
    for number in numbers:
        if number - previous > 1:
            out.append(None)
        out.append(number)
        previous = number
    return out


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.simple_tag(takes_context=True)
def item_url(context, name, pk):
    """URL of a row in another tab of this workspace, or "" while that tab does not exist."""
    from django.urls import NoReverseMatch, reverse

    if not pk:
        return ""
    try:
        return reverse(name, kwargs={"workspace_id": context["request"].operator.workspace.pk, "pk": pk})
    except NoReverseMatch:
        return ""


@register.filter
def child(base, pk):
    """`{{ urls.facts|child:fact.pk }}` -> /memories/<ws>/facts/<pk>/ without a reverse() per row."""
    if not pk or not base:
        return ""
    return f"{base}{pk}/"


# Inline icons instead of glyphs: a star or an emoji is missing from many system fonts and
# shows as an empty box. The icons are decorative; the text next to them says it.
_STAR = (
    '<svg class="icon" viewBox="0 0 20 20" width="14" height="14" aria-hidden="true" focusable="false">'
    '<path fill="currentColor" d="M10 1.5l2.6 5.3 5.9.9-4.3 4.1 1 5.8L10 14.9l-5.2 2.7 1-5.8L1.5 7.7'
    'l5.9-.9z"/></svg>'
)
_COMMENT = (
    '<svg class="icon" viewBox="0 0 20 20" width="14" height="14" aria-hidden="true" focusable="false">'
    '<path fill="currentColor" d="M3 3h14a1 1 0 0 1 1 1v9a1 1 0 0 1-1 1H8l-4 3.5V14H3a1 1 0 0 1-1-1V4'
    'a1 1 0 0 1 1-1z"/></svg>'
)


@register.filter
def rating(value):
    """An episode's rating as "4/5" with a star icon; screen readers hear "Rated 4 out of 5"."""
    if not value:
        return mark_safe('<span class="muted">—<span class="visually-hidden"> not rated</span></span>')
    return format_html(
        '<span class="rating">{}<span aria-hidden="true">{}/5</span>'
        '<span class="visually-hidden">Rated {} out of 5</span></span>',
        mark_safe(_STAR),
        value,
        value,
    )


@register.filter
def comment_icon(text):
    """A feedback comment as an icon whose tooltip and accessible text are the comment."""
    if not text:
        return ""
    return format_html(
        '<span class="comment-icon" title="{}">{}<span class="visually-hidden">Comment: {}</span></span>',
        text,
        mark_safe(_COMMENT),
        text,
    )
