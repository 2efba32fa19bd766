"""The SQL that reads one branch of the message tree: a bounded walk, and the history window's rows."""

import json

from django.conf import settings

from core.lib.replica import read_connection
from threads.models import Message

_WALK_COLUMNS = (
    "id",
    "parent_id",
    "depth",
    "role",
    "content",
    "content_chars",
    "token_count",
    "branch_tokens",
    "tool_calls",
    "tool_call_id",
    "name",
    "files",
    "node_id",
    "delegation_id",
    "author_agent",
    "archived",
    "created_at",
)

# Walks parent links from `start` towards the root, one primary-key lookup per step, and
# stops at `stop` depth (the summary's end). PostgreSQL evaluates a recursive CTE lazily,
# so the outer LIMIT ends the walk as soon as enough rows passed the filters: a window
# never reads more of the branch than it returns (plus filtered-out rows).
_WALK_SQL = """
WITH RECURSIVE walk AS (
    SELECT {select}, 0 AS steps
    FROM threads_message m WHERE m.id = %(start)s AND m.depth > %(stop)s
  UNION ALL
    SELECT {select}, w.steps + 1
    FROM walk w JOIN threads_message m ON m.id = w.parent_id
    WHERE m.depth > %(stop)s AND w.steps < %(cap)s
)
SELECT {columns} FROM walk WHERE {where} LIMIT %(limit)s
"""
_SELECT = (
    "m.id, m.parent_id, m.depth, m.role, "
    "CASE WHEN m.archived THEN left(m.content, %(preview)s) ELSE m.content END AS content, "
    "length(m.content) AS content_chars, m.token_count, m.branch_tokens, m.tool_calls, m.tool_call_id, "
    "m.name, m.files, m.node_id, m.delegation_id, m.author_agent, m.archived, m.created_at"
)
# Another delegation's tool calls and tool results (Inkeep's delegation filtering).
_DELEGATION_WHERE = (
    "NOT (delegation_id <> '' AND delegation_id <> %(delegation)s "
    "AND (role = 'tool' OR jsonb_array_length(tool_calls) > 0))"
)
# Other agents' turns after the viewer handed the thread away (threads.selectors.transfers).
_HANDED_AWAY_WHERE = "NOT (author_agent <> '' AND author_agent <> %(viewer)s AND depth > %(handed_at)s)"
# A walk never takes more steps than this, whatever the filters skip.
WALK_MAX_STEPS = 100_000


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def branch_walk(
    *,
    start_id,
    stop_depth: int = -1,
    limit: int,
    node: str | None = None,
    delegation: str | None = None,
    full_content: bool = False,
) -> list[dict]:
    """Messages of the branch ending at `start_id`, newest first, deeper than `stop_depth`.

    `node` keeps only that node's messages ("" keeps the main conversation); `delegation`
    drops other delegations' tool calls and tool results.
    """
    where = ["TRUE"]
    params = {
        "start": start_id,
        "stop": stop_depth,
        "cap": WALK_MAX_STEPS,
        "limit": limit,
        "preview": 10**9 if full_content else settings.THREADS_TOOL_RESULT_PREVIEW_CHARS,
    }
    if node is not None:
        where.append("node_id = %(node)s")
        params["node"] = node
    if delegation is not None:
        where.append(_DELEGATION_WHERE)
        params["delegation"] = delegation
    sql = _WALK_SQL.format(select=_SELECT, columns=", ".join(_WALK_COLUMNS), where=" AND ".join(where))
    with read_connection(Message).cursor() as cursor:
        cursor.execute(sql, params)
        rows = [dict(zip(_WALK_COLUMNS, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        row["tool_calls"] = _json(row["tool_calls"]) or []
        row["files"] = _json(row["files"]) or []
    return rows


# The whole window in one round trip: resolve the leaf, check through jump pointers that the
# summary's last message is an ancestor of it (O(log n) steps), then walk parent links from
# the leaf down to the summary (or the root) until LIMIT rows passed the filters.
_WINDOW_SQL = """
WITH RECURSIVE
leaf AS ({leaf_sql}),
anc(id, depth, parent_id, jump_id, jump_depth, steps) AS (
    SELECT m.id, m.depth, m.parent_id, m.jump_id, m.jump_depth, 0
    FROM threads_message m JOIN leaf ON m.id = leaf.id
    WHERE %(has_summary)s
  UNION ALL
    SELECT m.id, m.depth, m.parent_id, m.jump_id, m.jump_depth, a.steps + 1
    FROM anc a
    JOIN threads_message m
      ON m.id = CASE WHEN a.jump_depth >= %(sdepth)s AND a.jump_id <> a.id THEN a.jump_id ELSE a.parent_id END
    WHERE a.depth > %(sdepth)s AND a.steps < 256
),
bound AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM anc WHERE depth = %(sdepth)s AND id = %(sid)s)
                THEN %(sdepth)s ELSE -1 END AS stop
),
walk AS (
    SELECT {select}, 0 AS steps
    FROM threads_message m JOIN leaf ON m.id = leaf.id
    WHERE m.depth > (SELECT stop FROM bound)
  UNION ALL
    SELECT {select}, w.steps + 1
    FROM walk w JOIN threads_message m ON m.id = w.parent_id
    WHERE m.depth > (SELECT stop FROM bound) AND w.steps < %(cap)s
)
SELECT (SELECT id FROM leaf), (SELECT stop FROM bound), r.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT {columns} FROM walk WHERE {where} LIMIT %(limit)s) r ON TRUE
"""


def _window_sql(
    *, thread, leaf, scope, summary_id, summary_depth, limit, delegation, handed_away=None
) -> tuple[str, dict]:
    params = {
        "thread": thread.pk,
        "scope": scope,
        "leaf": leaf,
        "has_summary": summary_id is not None,
        "sid": summary_id,
        "sdepth": summary_depth if summary_id is not None else -1,
        "cap": WALK_MAX_STEPS,
        "limit": limit,
        "preview": settings.THREADS_TOOL_RESULT_PREVIEW_CHARS,
    }
    if leaf:
        leaf_sql = "SELECT id FROM threads_message WHERE id = %(leaf)s AND thread_id = %(thread)s"
    else:
        leaf_sql = (
            "SELECT id FROM threads_message WHERE thread_id = %(thread)s AND node_id = %(scope)s "
            "ORDER BY seq DESC LIMIT 1"
        )
    where = ["node_id = %(scope)s"]
    if delegation is not None:
        where.append(_DELEGATION_WHERE)
        params["delegation"] = delegation
    if handed_away is not None:
        # (viewer slug, depth of its transfer): hide other agents' turns deeper than it.
        where.append(_HANDED_AWAY_WHERE)
        params["viewer"], params["handed_at"] = handed_away
    sql = _WINDOW_SQL.format(
        leaf_sql=leaf_sql, select=_SELECT, columns=", ".join(_WALK_COLUMNS), where=" AND ".join(where)
    )
    return sql, params


def _window_rows(**kwargs):
    """(rows newest first, leaf id or None, stop depth) for the history window."""
    sql, params = _window_sql(**kwargs)
    with read_connection(Message).cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    leaf_id, stop = (fetched[0][0], fetched[0][1]) if fetched else (None, -1)
    rows = []
    for record in fetched:
        if record[2] is None:  # the LEFT JOIN's empty row: no message passed the filters
            continue
        row = dict(zip(_WALK_COLUMNS, record[2:], strict=True))
        row["tool_calls"] = _json(row["tool_calls"]) or []
        row["files"] = _json(row["files"]) or []
        rows.append(row)
    return rows, leaf_id, stop
