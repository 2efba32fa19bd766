"""The text at LangGraph's index paths ("$", "a.b", "list[0]", "list[-1]", "list[*].text")."""

import json
import re

WHOLE_VALUE = "$"
PATH_MAX_LENGTH = 500
PATH_INVALID = "Not a valid index path: {path!r}."

# A field name (anything but ".", "[" and "]"), or a bracketed index: a number or "*".
_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+|\*)\]")


def path_tokens(path: str) -> list:
    """The steps of `path`: field names (str), list positions (int) and "*" (every element).

    Raises ValueError for anything that is not a path.
    """
    if not isinstance(path, str) or not path or len(path) > PATH_MAX_LENGTH:
        raise ValueError(PATH_INVALID.format(path=path))
    if path == WHOLE_VALUE:
        return []
    tokens: list = []
    position = 0
    while position < len(path):
        if path[position] == "." and tokens and position + 1 < len(path):
            position += 1
        match = _TOKEN.match(path, position)
        if match is None:
            raise ValueError(PATH_INVALID.format(path=path))
        name, index = match.groups()
        if name is not None:
            tokens.append(name)
        elif index == "*":
            tokens.append("*")
        else:
            tokens.append(int(index))
        position = match.end()
    return tokens


def _as_text(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _walk(value, tokens: list) -> list:
    if not tokens:
        return [] if value is None else [value]
    head, rest = tokens[0], tokens[1:]
    if head == "*":
        if not isinstance(value, list):
            return []
        return [found for element in value for found in _walk(element, rest)]
    if isinstance(head, int):
        if not isinstance(value, list) or not -len(value) <= head < len(value):
            return []
        return _walk(value[head], rest)
    if not isinstance(value, dict) or head not in value:
        return []
    return _walk(value[head], rest)


def texts_at_paths(value: dict, paths: list[str]) -> list[str]:
    """Every text `paths` select in `value`, in path order; missing fields are skipped (as
    LangGraph does). Strings are taken as they are, anything else as its JSON."""
    texts = []
    for path in paths:
        texts.extend(_as_text(found) for found in _walk(value, path_tokens(path)))
    return [text for text in texts if text.strip()]
