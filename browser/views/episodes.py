"""The Episodes tab: records of past agent runs, with human feedback edited inline."""

from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import EpisodeFeedbackForm
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from episodes.filters import EpisodeFilter
from episodes.selectors import episode_get, episode_list
from episodes.services import episode_batch_delete

EPISODES = TabSpec(
    slug="episodes",
    item="episode",
    noun="episode",
    noun_plural="episodes",
    template="memories/episodes.html",
    filterset=EpisodeFilter,
    list=lambda principal, filters: episode_list(principal=principal, filters=filters),
    get=lambda principal, pk: episode_get(principal=principal, episode_id=pk),
    sorts=[
        Sort("started", "Started", "started_at"),
        Sort("duration", "Duration", "duration_ms"),
        Sort("rating", "Rating", "rating"),
    ],
    default_sort="-started",
    batch_delete=lambda principal, ids: episode_batch_delete(principal=principal, ids=ids),
    edit_form=EpisodeFeedbackForm,
)


@read_replica
@workspace_view()
def episodes_tab(request):
    return tab_list(request, EPISODES)


@read_replica
@workspace_view()
def episode_detail(request, pk):
    return tab_detail(request, EPISODES, pk)


@workspace_view(EDIT)
def episode_edit(request, pk):
    return tab_edit(request, EPISODES, pk)


@require_POST
@workspace_view(EDIT)
def episodes_delete(request):
    return tab_delete(request, EPISODES)
