"""The memory tabs, in display order. A tab shows once its URL is registered."""

from django.urls import NoReverseMatch, reverse
from django.utils.module_loading import import_string

TABS = [
    # The landing page: workspace_home opens the first tab.
    ("overview", "Overview", "memories:overview"),
    ("facts", "Facts", "memories:facts"),
    ("episodes", "Episodes", "memories:episodes"),
    ("entries", "Episodic entries", "memories:entries"),
    ("threads", "Threads", "memories:threads"),
    ("checkpoints", "Checkpoints", "memories:checkpoints"),
    ("store", "Store", "memories:store"),
    ("procedures", "Procedures", "memories:procedures"),
    ("users", "Users", "memories:users"),
    ("reflection", "Reflection", "memories:reflection"),
    ("review", "Review", "memories:review"),
    ("context", "Context preview", "memories:context-preview"),
]


# Tabs whose label carries a count (a function of the workspace id): the items waiting for review.
TAB_COUNTS = {"review": "browser.selectors.review.review_tab_count"}


def tab_links(workspace_id, active: str | None, *, counts: bool = True) -> list[dict]:
    links = []
    for slug, label, url_name in TABS:
        try:
            url = reverse(url_name, kwargs={"workspace_id": workspace_id})
        except NoReverseMatch:
            continue
        if counts and slug in TAB_COUNTS:
            count = import_string(TAB_COUNTS[slug])(workspace_id)
            label = f"{label} ({count})" if count else label
        links.append({"slug": slug, "label": label, "url": url, "active": slug == active})
    return links


def tab_urls(workspace_id) -> dict:
    """Each tab's list URL by slug; row URLs are built from them (one reverse per tab, not per row)."""
    return {link["slug"]: link["url"] for link in tab_links(workspace_id, None, counts=False)}


def first_tab_url(workspace_id) -> str:
    links = tab_links(workspace_id, None, counts=False)
    if links:
        return links[0]["url"]
    return reverse("memories:members", kwargs={"workspace_id": workspace_id})
