"""The one search across tiers: a GET form in the header, a results page grouped by tier, and
the live results htmx shows under the header box (the `search-options` partial)."""

from urllib.parse import urlencode

from django.urls import reverse

from browser.access import workspace_view
from browser.lib.listing import Sort, paginate_sorted
from browser.lib.rendering import render_page
from browser.selectors.search import (
    LIVE_PER_TIER,
    TIERS,
    TIERS_BY_SLUG,
    search_everywhere,
    search_query_clean,
)
from browser.tabs import tab_urls
from core.errors import ApplicationError
from core.lib.replica import read_replica

# A tier's own list on this page: best matches first, as in the groups.
SORTS = [Sort("rank", "Best match", "rank")]
# The header box's listbox; htmx names it in HX-Target.
LIVE_TARGET = "site-search-list"


def _group_links(groups, *, urls: dict, search_url: str, query: str) -> None:
    for group in groups:
        tier = group.tier
        if tier.has_tab_search:
            group.more_url = f"{urls[tier.tab]}?{urlencode({'q': query})}"
        else:
            group.more_url = f"{search_url}?{urlencode({'q': query, 'tier': tier.slug})}"
        group.tab_url = urls[tier.tab]


@read_replica
@workspace_view()
def search(request):
    operator = request.operator
    principal = operator.principal
    query = search_query_clean(request.GET.get("q"))
    tier = TIERS_BY_SLUG.get(request.GET.get("tier") or "")
    search_url = reverse("memories:search", kwargs={"workspace_id": operator.workspace.pk})
    urls = tab_urls(operator.workspace.pk)
    context = {
        "tab": "search",
        "query": query,
        "tiers": TIERS,
        "tier": tier,
        "urls": urls,
        "list_url": search_url,
        "search_url": search_url,
        "groups": [],
        "listing": None,
    }
    live = request.htmx and request.htmx.target == LIVE_TARGET
    if query and live:
        context["groups"] = search_everywhere(
            principal=principal, query=query, per_tier=LIVE_PER_TIER, live=True
        )
    elif query and tier is not None:
        try:
            queryset = tier.search(principal, query)
            listing = paginate_sorted(request, queryset, sorts=SORTS, default="-rank")
        except ApplicationError as exc:
            context["error"] = (
                " ".join(str(e) for errors in (exc.fields or {}).values() for e in errors) or exc.message
            )
        else:
            listing.hits = [tier.hit(row) for row in listing.rows]
            context["listing"] = listing
            context["tab_url"] = urls[tier.tab]
    elif query:
        context["groups"] = search_everywhere(principal=principal, query=query)
    _group_links(context["groups"], urls=urls, search_url=search_url, query=query)
    context["found"] = sum(len(group.hits) for group in context["groups"])
    return render_page(
        request,
        "memories/search.html",
        context,
        partials={"main": "search-panel", "results": "search-results", LIVE_TARGET: "search-options"},
    )
