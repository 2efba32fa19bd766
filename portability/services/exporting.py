"""The export writer: one header line, then one JSON record per line, read with server-side cursors."""

import base64
import datetime
import json
import uuid
from collections.abc import Iterator

from django.db import connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from core.embeddings import embedding_provider_for
from portability.registry import TYPES, Scope, record_key, ref_type

FORMAT = "memory-export"
VERSION = 1
# Rows fetched per round trip of the server-side cursor: 500 messages of ~2 KB, or 500
# 384-d vectors (~1.5 MB as JSON), keep the writer's memory flat whatever the export's size.
EXPORT_CHUNK = 500


def export_header(scope: Scope) -> dict:
    provider = embedding_provider_for(scope.workspace)
    return {
        "format": FORMAT,
        "version": VERSION,
        "embedding_model": provider.model_name,
        "dimensions": provider.dimensions,
        "scope": scope.describe(),
        "exported_at": timezone.now().isoformat(),
        "source": str(scope.workspace.pk),
    }


def _line(record: dict) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _plain(value):
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # a pgvector array
        return [float(x) for x in value.tolist()]
    return value


def _filtered_types(scope: Scope) -> set:
    """Types some of whose rows of the workspace an export leaves out: a foreign key to one of
    them is written only when the row it names is exported too, so a file names nothing it
    does not hold."""
    if scope.kind == "workspace":
        return set() if scope.history else {"fact", "episodic_entry"}
    return {t.name for t in TYPES}


def _records(record_type, scope: Scope, chunk_size: int) -> Iterator[dict]:
    fields = record_type.fields()
    by_name = {t.name: t for t in TYPES}
    filtered = _filtered_types(scope)
    queryset = record_type.rows(scope).order_by(*record_type.order)
    columns = []
    annotations = {}
    for f in fields:
        target = ref_type(f) if f.is_relation else None
        if target and f.null and target in filtered:
            alias = f"_in_scope_{f.attname}"
            in_scope = by_name[target].rows(scope).values("pk")
            annotations[alias] = Case(
                When(**{f"{f.attname}__in": in_scope}, then=F(f.attname)),
                default=Value(None),
                output_field=f.target_field.__class__(),
            )
            columns.append(alias)
        else:
            columns.append(f.attname)
    if annotations:
        queryset = queryset.annotate(**annotations)
    for row in queryset.values_list("pk", *columns).iterator(chunk_size=chunk_size):
        record = {"type": record_type.name, "id": str(row[0])}
        for f, value in zip(fields, row[1:], strict=True):
            key = record_key(f)
            if value is None:
                record[key] = None
            elif f.is_relation:
                record[key] = str(value)
            else:
                record[key] = _plain(value)
        yield record


def export_lines(*, scope: Scope, chunk_size: int = EXPORT_CHUNK) -> Iterator[bytes]:
    """The export of `scope`, line by line, in the order of portability.registry.TYPES.

    Meant to run in one REPEATABLE READ transaction (the callers open it), so every table is
    read at the same instant and the file names no row that appeared or vanished meanwhile.
    The last line, {"type": "end", "count": n}, tells a reader the file is whole.
    """
    yield _line(export_header(scope))
    count = 0
    for record_type in TYPES:
        if record_type.vectors and not scope.vectors:
            continue
        if record_type.history_only and not scope.history:
            continue
        for record in _records(record_type, scope, chunk_size):
            count += 1
            yield _line(record)
    yield _line({"type": "end", "count": count})


def export_stream(*, scope: Scope, chunk_size: int = EXPORT_CHUNK) -> Iterator[bytes]:
    """export_lines in one REPEATABLE READ transaction: one consistent snapshot of every table.

    A generator, so a streamed response holds the transaction only while it is being sent.
    Inside a transaction already open (tests, a caller's own) it reads in that one.
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield from export_lines(scope=scope, chunk_size=chunk_size)
