"""The Episodes tab: records of past agent runs; their feedback is edited inline in the list
and on the detail page, their curatable record on the detail page."""

from dataclasses import replace

from django.db.models import Case, FloatField, Value, When
from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import EpisodeEditForm, EpisodeFeedbackForm
from browser.lib.cards import card_edit
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from episodes.filters import EpisodeFilter
from episodes.models import Episode
from episodes.selectors import episode_get, episode_list, episode_search_hybrid
from episodes.services import episode_batch_delete

# Episodes the search box ranks (hybrid search, as POST /api/v1/episodes/search/ does).
SEARCH_TOP_K = 100


def _search_query(filters) -> str:
    query = (filters or {}).get("q") or ""
    return query.strip() if isinstance(query, str) else ""


def episodes_list(principal, filters):
    """The tab's rows; with text in the search box, the best SEARCH_TOP_K episodes of the
    hybrid search (by meaning and full text) under the other filters, with their score."""
    query = _search_query(filters)
    if not query:
        return episode_list(principal=principal, filters=filters)
    # The FilterSet checks every value first, the search box's too (a NUL is a filter error).
    episode_list(principal=principal, filters=filters)
    rest = filters.copy()
    rest.pop("q", None)
    result = episode_search_hybrid(principal=principal, query=query, filters=rest, top_k=SEARCH_TOP_K)
    scores = {hit.episode.pk: hit.score for hit in result.hits}
    relevance = Case(
        *[When(pk=pk, then=Value(score)) for pk, score in scores.items()],
        default=Value(0.0),
        output_field=FloatField(),
    )
    return episode_list(principal=principal, filters=rest).filter(pk__in=scores).annotate(relevance=relevance)


EPISODES = TabSpec(
    slug="episodes",
    item="episode",
    noun="episode",
    noun_plural="episodes",
    template="memories/episodes.html",
    filterset=EpisodeFilter,
    list=episodes_list,
    get=lambda principal, pk: episode_get(principal=principal, episode_id=pk),
    sorts=[
        Sort("started", "Started", "started_at"),
        Sort("duration", "Duration", "duration_ms"),
        Sort("rating", "Rating", "rating"),
    ],
    default_sort="-started",
    batch_delete=lambda principal, ids: episode_batch_delete(principal=principal, ids=ids),
    model=Episode,
    edit_form=EpisodeFeedbackForm,
)


@read_replica
@workspace_view()
def episodes_tab(request):
    if _search_query(request.GET):
        # Search results come best first unless a column header asks otherwise.
        spec = replace(EPISODES, sorts=[Sort("relevance", "Relevance", "relevance"), *EPISODES.sorts])
        return tab_list(request, replace(spec, default_sort="-relevance"))
    return tab_list(request, EPISODES)


@read_replica
@workspace_view()
def episode_detail(request, pk):
    return tab_detail(request, EPISODES, pk)


@workspace_view(EDIT)
def episode_edit(request, pk):
    """Feedback: the list row's inline edit, or the detail page's feedback card."""
    if request.htmx and request.htmx.target == "episode-feedback":
        return card_edit(
            request, EPISODES, pk, card="feedback", form_class=EpisodeFeedbackForm, label="feedback"
        )
    return tab_edit(request, EPISODES, pk)


@workspace_view(EDIT)
def episode_record_edit(request, pk):
    """The record's trigger, outcome (closed episodes), error, input and output."""
    return card_edit(
        request,
        EPISODES,
        pk,
        card="record",
        form_class=EpisodeEditForm,
        label="episode",
        form_kwargs=lambda episode: {"episode": episode},
    )


@require_POST
@workspace_view(EDIT)
def episodes_delete(request):
    return tab_delete(request, EPISODES)
