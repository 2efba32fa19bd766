"""Filters that name a memory user or a thread take what an operator knows, not only an id.

A picker field is a plain text input: without JavaScript it accepts an id, a name, a canonical
id or an external id (a thread: its title), resolved on the server before the API's FilterSet
sees it. htmx turns it into a combobox whose suggestions come from the picker routes.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.urls import reverse

from browser.selectors import (
    Resolved,
    memory_user_resolve,
    memory_user_suggestions,
    thread_resolve,
    thread_suggestions,
)


@dataclass(frozen=True)
class Picker:
    kind: str  # "user" or "thread": the route and the option ids
    noun_plural: str
    placeholder: str
    url_name: str
    suggest: Callable  # (principal, query) -> list[Suggestion]
    resolve: Callable  # (principal, text) -> Resolved


USER_PICKER = Picker(
    kind="user",
    noun_plural="memory users",
    placeholder="Name, canonical or external id",
    url_name="memories:user-pick",
    suggest=lambda principal, query: memory_user_suggestions(principal=principal, query=query),
    resolve=lambda principal, text: memory_user_resolve(principal=principal, text=text),
)
THREAD_PICKER = Picker(
    kind="thread",
    noun_plural="threads",
    placeholder="Title or id",
    url_name="memories:thread-pick",
    suggest=lambda principal, query: thread_suggestions(principal=principal, query=query),
    resolve=lambda principal, text: thread_resolve(principal=principal, text=text),
)
# FilterSet field name -> picker; every tier names these filters the same way.
PICKERS = {"memory_user": USER_PICKER, "thread": THREAD_PICKER}


def picker_url(picker: Picker, workspace_id) -> str:
    return reverse(picker.url_name, kwargs={"workspace_id": workspace_id})


def pickers_resolve(principal, filterset, params) -> tuple[dict, dict[str, Resolved]]:
    """`params` with each picker field's text replaced by the id it names, and what each named.

    A text that names nobody (or several) stays out of the params; its `Resolved.error` says why.
    """
    params = params.copy()
    resolved = {}
    for name, picker in PICKERS.items():
        if name not in filterset.base_filters or not params.get(name):
            continue
        result = picker.resolve(principal, params[name])
        resolved[name] = result
        if result.suggestion is not None:
            params[name] = str(result.suggestion.id)
    return params, resolved


def picker_hints(filterset, params, resolved: dict[str, Resolved]) -> dict[str, str]:
    """The line under each picker field: whom its text names, or how to use it."""
    hints = {}
    for name in PICKERS:
        if name not in filterset.base_filters:
            continue
        result = resolved.get(name)
        if result is None or not params.get(name):
            hints[name] = "A name or an id."
        elif result.suggestion is not None:
            hints[name] = f"{result.suggestion.label} · {result.suggestion.detail}"
        else:
            # An error is shown above the results; an id names nothing the operator may see.
            hints[name] = "" if result.error else "Nothing with this id here."
    return hints
