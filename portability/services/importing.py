"""The import reader: line by line, batch by batch, into one transaction (all or nothing).

A run that a concurrent writer aborted (PostgreSQL's deadlock detection or a serialization
failure: nothing of it stored) runs again from the first line, up to IMPORT_ATTEMPTS times.

Ids are remapped through ImportIdMap, in the database: the map of a huge file never sits in
memory, and a second run of the same export finds the rows the first one made and skips
them. Rows that already exist in the target under a natural key (an agent's slug, a
person's canonical id, a channel identity, a procedure's name and version or its learned
signature, a store item's namespace and key) are reused and reported; a current fact whose
key and scope is already held becomes a version of it.
"""

import base64
import binascii
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, IntegrityError, OperationalError, connection, models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from pgvector.django import VectorField

from core.embeddings import embedding_provider_for
from core.errors import ApplicationError, transaction_lost
from core.parsers import JSONRefused, json_loads_checked
from core.services import audit_record
from facts.models import Fact, FactKey
from portability.models import ImportIdMap
from portability.registry import AUDIT_ENTITY_TYPES, BY_NAME, EMBEDDED_TYPES, record_key, ref_type
from portability.services.exporting import FORMAT, VERSION
from procedures.services import procedure_lineage_lock, procedure_runs_person_fill
from store.services import ttl_clean
from threads.services.compaction import thread_summary_held_rebuild

# Records written per INSERT: 500 messages (~25 columns) stay far under PostgreSQL's 65,535
# parameters, and a batch's map lookups are one indexed query per type it names.
IMPORT_BATCH = 500
# Runs of one import in all when a concurrent writer aborts it: two imports bringing the same
# procedure lineages in opposite batch orders, or one and a learning pass, can each hold a key
# the other waits for (_Importer._procedure_lineages_lock), and PostgreSQL aborts one; the run
# again waits for the other's commit, so a third abort needs a third writer.
IMPORT_ATTEMPTS = 3
HEADER_KEYS = {"format", "version", "embedding_model", "dimensions", "scope", "exported_at", "source"}
MAX_CONFLICTS_LISTED = 200

HEADER_REQUIRED = "The first line must be the export header (docs/export.md)."
UNSUPPORTED_VERSION = "Unsupported export format version {version}; this server reads version {supported}."
LINE_TOO_LONG = "The line is longer than {limit} bytes."
NOT_A_RECORD = "A record must be a JSON object with a string `type` and `id`."
UNKNOWN_TYPE = "Unknown record type '{type}'."
UNKNOWN_FIELDS = "Unknown fields for a {type} record: {names}."
DUPLICATE_ID = "The {type} {id} appears twice in this file."
MISSING_ROW = "The {type} {id} is named here but never appears in the file."
NO_END = 'The file ends without its closing line ({{"type": "end"}}): it is incomplete.'
AFTER_END = "Nothing may follow the closing line."
COUNT_MISMATCH = "The closing line counts {expected} records; the file holds {found}."
REUSED_REFERENCED = (
    "The {type} {id} matches a row already in this workspace, but earlier lines named it "
    "before it appeared; put it before the rows that name it."
)
ROW_REFUSED = "The row cannot be stored: {detail}"
IMPORT_CHANGED = (
    "The import met concurrent changes to the same memories and was not stored; nothing of it "
    "was kept. Run it again."
)


class ImportFailed(ApplicationError):
    """A line that stops the run; nothing of the run is stored."""

    def __init__(
        self, message: str, *, line: int, code: str = "invalid_import", fields=None, status_code: int = 400
    ):
        text = f"Line {line}: {message}" if line else message
        super().__init__(
            text, code=code, fields={"line": [str(line)], **(fields or {})}, status_code=status_code
        )
        self.line = line


class _Lines:
    """The lines of a binary stream (see lines_read); `restart` reads them again from where
    the first reading began, for a run that is tried again."""

    def __init__(self, stream, *, limit: int, code: str):
        self.stream = stream
        self.limit = limit
        self.code = code
        self.start = stream.tell() if stream.seekable() else None
        self.number = 0
        self.done = 0

    def __iter__(self):
        return self

    def __next__(self) -> tuple[int, bytes, int]:
        raw = self.stream.readline(self.limit + 1)
        if not raw:
            raise StopIteration
        self.number += 1
        self.done += len(raw)
        if len(raw) > self.limit:
            raise ImportFailed(LINE_TOO_LONG.format(limit=self.limit), line=self.number, code=self.code)
        return self.number, raw, self.done

    def restart(self) -> bool:
        """Go back to the first line; False for a stream that cannot seek (a pipe)."""
        if self.start is None:
            return False
        self.stream.seek(self.start)
        self.number = 0
        self.done = 0
        return True


def lines_read(stream, *, limit: int | None = None, code: str = "line_too_long") -> _Lines:
    """(line number, line, bytes read so far) of a binary stream, never holding more than one
    line; a line longer than `limit` bytes stops the run (error `code`) instead of filling memory.
    A seekable stream can be read again from its first line (import_run's retry)."""
    return _Lines(stream, limit=limit or settings.PORTABILITY_LINE_MAX_BYTES, code=code)


def header_check(raw: bytes, line: int) -> dict:
    """The export header of line `line`, or ImportFailed saying what is wrong with it."""
    try:
        header = json_loads_checked(raw)
    except JSONRefused as exc:
        raise ImportFailed(f"{HEADER_REQUIRED} {exc}", line=line, code="malformed_header") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ImportFailed(HEADER_REQUIRED, line=line, code="malformed_header")
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise ImportFailed(f"{HEADER_REQUIRED} Unknown keys: {unknown}.", line=line, code="malformed_header")
    version = header.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ImportFailed(
            UNSUPPORTED_VERSION.format(version=str(version)[:20], supported=VERSION),
            line=line,
            code="unsupported_version",
        )
    problems = {}
    source = header.get("source")
    if not isinstance(source, str) or not 0 < len(source) <= 100:
        problems["source"] = ["A non-empty string of at most 100 characters."]
    model = header.get("embedding_model")
    if not isinstance(model, str) or len(model) > 200:
        problems["embedding_model"] = ["A string of at most 200 characters."]
    dimensions = header.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 0 < dimensions <= 16000
    ):
        problems["dimensions"] = ["A positive integer or null."]
    if not isinstance(header.get("scope", {}), dict):
        problems["scope"] = ["An object."]
    exported_at = header.get("exported_at")
    if not isinstance(exported_at, str) or len(exported_at) > 64 or _datetime(exported_at) is None:
        problems["exported_at"] = ["An ISO 8601 date and time."]
    if problems:
        raise ImportFailed(HEADER_REQUIRED, line=line, code="malformed_header", fields=problems)
    return header


def _datetime(text: str):
    try:
        value = parse_datetime(text)
    except ValueError:
        return None
    if value is None or timezone.is_naive(value):
        return None
    return value


_INTEGERS = {
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "PositiveBigIntegerField",
}


def _field_value(f, value):
    """The column value of a record's field, or ValueError naming what is wrong."""
    if value is None:
        if not f.null:
            raise ValueError("may not be null")
        return None
    kind = f.get_internal_type()
    if isinstance(f, VectorField):
        if not isinstance(value, list) or not value or len(value) > 16000:
            raise ValueError("must be a non-empty list of numbers")
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in value):
            raise ValueError("must be a list of numbers")
        return [float(x) for x in value]
    if isinstance(f, models.JSONField):
        return value
    if isinstance(f, ArrayField):
        if not isinstance(value, list) or any(not isinstance(x, str) for x in value):
            raise ValueError("must be a list of strings")
        return value
    if kind in ("CharField", "TextField", "SlugField"):
        if not isinstance(value, str):
            raise ValueError("must be a string")
    elif kind in _INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be an integer")
    elif kind == "FloatField":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        value = float(value)
    elif kind == "BooleanField":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
    elif kind == "DateTimeField":
        value = _datetime(value) if isinstance(value, str) and len(value) <= 64 else None
        if value is None:
            raise ValueError("must be an ISO 8601 date and time with a zone")
    elif kind == "UUIDField":
        try:
            value = uuid.UUID(value) if isinstance(value, str) and len(value) <= 64 else None
        except ValueError:
            value = None
        if value is None:
            raise ValueError("must be a UUID")
    elif kind == "BinaryField":
        try:
            value = base64.b64decode(value, validate=True) if isinstance(value, str) else None
        except (binascii.Error, ValueError):
            value = None
        if value is None:
            raise ValueError("must be base64 text")
    else:  # pragma: no cover - a column type the registry does not carry yet
        raise ValueError(f"has an unsupported column type {kind}")
    if f.choices and value not in {choice for choice, _ in f.flatchoices} and not (f.blank and value == ""):
        raise ValueError("is not one of the allowed values")
    try:
        f.run_validators(value)
    except DjangoValidationError as exc:
        raise ValueError(" ".join(exc.messages)) from None
    return value


class _Pending:
    """One record of a batch on its way to a row."""

    __slots__ = ("line", "old_id", "new_id", "values", "refs", "map_row", "reused")

    def __init__(self, line, old_id):
        self.line = line
        self.old_id = old_id
        self.new_id = None
        self.values = {}
        # (attname, type, old id, kind): kind "fk" | "column" | "list"
        self.refs = []
        self.map_row = None
        self.reused = None


class _Importer:
    def __init__(self, *, workspace, source: str, run: uuid.UUID, keep_vectors: bool, model: str):
        self.workspace = workspace
        self.source = source
        self.run = run
        self.keep_vectors = keep_vectors
        self.model = model
        self.created = Counter()
        self.reused = Counter()
        self.skipped = Counter()
        self.vectors_dropped = 0
        self.dangling = 0
        self.versioned = 0
        self.procedures_kept_inactive = 0
        self.conflicts = []
        self.conflict_count = 0
        self.records = 0
        # Threads that got a message or a node summary: their summaries' marks are walked at the
        # end, once every message they name is written. One id a thread, not a row.
        self.threads_touched = set()
        # The file is an export of this very workspace (a restore after a loss).
        self.own_source = source == str(workspace.pk)

    # -- the map -------------------------------------------------------------------------

    def _map(self, type_name: str, old_ids) -> dict:
        return {
            row.old_id: row
            for row in ImportIdMap.objects.filter(
                workspace=self.workspace, source=self.source, type=type_name, old_id__in=list(old_ids)
            )
        }

    def _conflict(self, line, type_name, old_id, rule, detail):
        self.conflict_count += 1
        if len(self.conflicts) < MAX_CONFLICTS_LISTED:
            self.conflicts.append(
                {"line": line, "type": type_name, "id": old_id, "rule": rule, "detail": detail}
            )

    # -- records -------------------------------------------------------------------------

    def _parse(self, record_type, line: int, record: dict) -> _Pending:
        fields = {record_key(f): f for f in record_type.fields()}
        unknown = sorted(set(record) - set(fields) - {"type", "id"})
        if unknown:
            raise ImportFailed(
                UNKNOWN_FIELDS.format(type=record_type.name, names=", ".join(unknown)[:300]), line=line
            )
        pending = _Pending(line, record["id"])
        for name, f in fields.items():
            if name not in record:
                # A field a hand-written file leaves out takes the column's default.
                if f.is_relation and not f.null:
                    raise ImportFailed(f"{name} is required.", line=line, fields={name: ["Required."]})
                pending.values[f.attname] = _default(f)
                continue
            value = record[name]
            target = ref_type(f) if f.is_relation else None
            if f.is_relation:
                if value is None:
                    if not f.null:
                        raise ImportFailed(
                            f"{name} may not be null.", line=line, fields={name: ["Required."]}
                        )
                    pending.values[f.attname] = None
                elif not isinstance(value, str) or not 0 < len(value) <= 64:
                    raise ImportFailed(f"{name} must be an id.", line=line, fields={name: ["Must be an id."]})
                else:
                    pending.refs.append((f.attname, target, value, "fk"))
                continue
            try:
                value = _field_value(f, value)
            except ValueError as exc:
                raise ImportFailed(f"{name} {exc}.", line=line, fields={name: [str(exc)]}) from None
            if f.name in record_type.id_columns and value is not None:
                pending.refs.append((f.attname, record_type.id_columns[f.name], str(value), "column"))
            elif f.name in record_type.id_lists:
                # A JSON column (an entry's source_message_ids) holds whatever a file puts there.
                if not isinstance(value, list) or any(
                    not isinstance(x, str) or not 0 < len(x) <= 64 for x in value
                ):
                    raise ImportFailed(f"{name} must list ids.", line=line, fields={name: ["Must list ids."]})
                pending.refs.append((f.attname, record_type.id_lists[f.name], value, "list"))
            elif f.name in record_type.json_ids:
                pending.values[f.attname] = value
                self._json_ids_parse(record_type, f, name, value, pending)
            else:
                pending.values[f.attname] = value
        if record_type.vectors:
            _vector_lengths_check(record_type, line, pending)
        if record_type.name == "store_item":
            _store_item_check(line, pending)
        if record_type.name == "audit_event":
            entity = AUDIT_ENTITY_TYPES.get(pending.values["entity_type"])
            if entity:
                pending.refs.append(("entity_id", entity, pending.values.pop("entity_id"), "entity"))
        return pending

    def _json_ids_parse(self, record_type, f, name: str, value, pending: _Pending) -> None:
        """The ids an object column holds under known keys, remapped like any plain id column: one
        the file does not hold names nothing in the target, never a row of the source."""
        if not isinstance(value, dict):
            raise ImportFailed(
                f"{name} must be an object.", line=pending.line, fields={name: ["Must be an object."]}
            )
        for key, target in record_type.json_ids[f.name].items():
            old = value.get(key)
            if old is None or old == "":
                continue
            if not isinstance(old, str) or len(old) > 64:
                raise ImportFailed(
                    f"{name}.{key} must be an id.",
                    line=pending.line,
                    fields={name: [f"{key} must be an id."]},
                )
            pending.refs.append(((f.attname, key), target, old, "json"))

    def _restored_id(self, old_id: str) -> str | None:
        """A lost row restored into its own workspace takes its id back, so whatever still names
        it (the audit trail, a client that kept the id) finds it again; elsewhere ids are new."""
        if not self.own_source:
            return None
        try:
            return str(uuid.UUID(old_id))
        except ValueError:
            return None

    def _survivors_take(self, record_type, pendings: list) -> None:
        """Into the workspace the file was exported from, a row whose id is still there is that
        row (reused, as it stands): a restore brings back what was lost, never a second copy of
        what survived."""
        pk = record_type.model._meta.pk
        candidates = {}
        for p in pendings:
            # A row named earlier already has its reserved id in the rows that named it.
            if p.map_row is not None:
                continue
            try:
                candidates[str(pk.to_python(p.old_id))] = p
            except DjangoValidationError:
                continue
        if not candidates:
            return
        found = record_type.model._base_manager.filter(
            workspace=self.workspace, pk__in=list(candidates)
        ).values_list("pk", flat=True)
        for row_id in found:
            p = candidates[str(row_id)]
            p.reused = p.new_id = str(row_id)
            self.reused[record_type.name] += 1

    def _reused_owners_drop(self, record_type, pendings: list) -> list:
        """The vectors of rows that exist and are not reused: a reused row keeps its own vector
        (the file's is of another text, and a second one of the same model breaks the unique
        (row, model) constraint)."""
        owner = record_type.model._meta.get_field(record_type.owner)
        olds = {old for p in pendings for attname, _t, old, _k in p.refs if attname == owner.attname}
        reused = set(
            ImportIdMap.objects.filter(
                workspace=self.workspace,
                source=self.source,
                type=ref_type(owner),
                old_id__in=list(olds),
                state=ImportIdMap.State.REUSED,
            ).values_list("old_id", flat=True)
        )
        if not reused:
            return pendings
        kept = []
        for p in pendings:
            if any(attname == owner.attname and old in reused for attname, _t, old, _k in p.refs):
                self.vectors_dropped += 1
            else:
                kept.append(p)
        return kept

    def batch(self, record_type, items: list[tuple[int, dict]]) -> None:
        pendings = [self._parse(record_type, line, record) for line, record in items]
        if record_type.vectors:
            kept = []
            for p in pendings:
                if self.keep_vectors and p.values.get("model") == self.model:
                    kept.append(p)
                else:
                    self.vectors_dropped += 1
            pendings = kept
            if not pendings:
                return
        name = record_type.name
        seen = {}
        for p in pendings:
            if p.old_id in seen:
                raise ImportFailed(DUPLICATE_ID.format(type=name, id=p.old_id[:64]), line=p.line)
            seen[p.old_id] = p
        existing = self._map(name, seen)
        fresh = []
        for p in pendings:
            row = existing.get(p.old_id)
            if row is not None and row.state != ImportIdMap.State.RESERVED:
                if self._made_this_run(row):
                    raise ImportFailed(DUPLICATE_ID.format(type=name, id=p.old_id[:64]), line=p.line)
                self.skipped[name] += 1
                continue
            p.map_row = row
            if row is not None:
                p.new_id = row.new_id
            elif record_type.uuid_pk:
                p.new_id = self._restored_id(p.old_id) or str(uuid.uuid4())
            fresh.append(p)
        if self.own_source:
            self._survivors_take(record_type, fresh)
        if record_type.owner:
            fresh = self._reused_owners_drop(record_type, fresh)
        if not fresh:
            return
        self._resolve(record_type, fresh, own=False)
        if name == "procedure":
            self._procedure_lineages_lock(fresh)
        self._match_existing(record_type, fresh)
        self._resolve(record_type, fresh, own=True)
        if name == "fact":
            self._version_facts(fresh)
        if name == "procedure":
            self._procedure_actives_keep(fresh)
        self._write(record_type, fresh)

    def _made_this_run(self, row) -> bool:
        return row.state in (ImportIdMap.State.CREATED, ImportIdMap.State.REUSED) and row.run_id == self.run

    def _resolve(self, record_type, pendings, *, own: bool) -> None:
        """Replace the old ids a batch names (of other types first, then of its own type)."""
        wanted = defaultdict(dict)  # type -> old id -> first line
        for p in pendings:
            for _attname, target, old, _kind in p.refs:
                if (target == record_type.name) != own:
                    continue
                for old_id in old if isinstance(old, list) else [old]:
                    wanted[target].setdefault(old_id, p.line)
        resolved = {}
        for target, olds in wanted.items():
            found = {old: row.new_id for old, row in self._map(target, olds).items()}
            if own:
                found.update({p.old_id: p.new_id for p in pendings if p.old_id in olds})
            reserve = []
            required = set()
            for p in pendings:
                for _attname, t, old, kind in p.refs:
                    if t != target or kind == "list" or old in found:
                        continue
                    if kind == "fk":
                        required.add(old)
                    if old not in {r.old_id for r in reserve}:
                        reserve.append(
                            ImportIdMap(
                                workspace=self.workspace,
                                source=self.source,
                                type=target,
                                old_id=old,
                                new_id=str(uuid.uuid4()),
                                state=ImportIdMap.State.RESERVED,
                                line=p.line,
                                run_id=self.run,
                            )
                        )
            for row in reserve:
                row.required = row.old_id in required
            ImportIdMap.objects.bulk_create(reserve)
            found.update({row.old_id: row.new_id for row in reserve})
            # A row named before by a plain id column is now named by a foreign key too.
            if required:
                ImportIdMap.objects.filter(
                    workspace=self.workspace,
                    source=self.source,
                    type=target,
                    old_id__in=list(required),
                    state=ImportIdMap.State.RESERVED,
                    required=False,
                ).update(required=True)
            resolved[target] = found
        for p in pendings:
            for attname, target, old, kind in p.refs:
                if (target == record_type.name) != own:
                    continue
                if kind == "list":
                    ids = [resolved[target][o] for o in old if o in resolved[target]]
                    self.dangling += len(old) - len(ids)
                    p.values[attname] = ids
                elif kind == "json":
                    column, key = attname
                    p.values[column] = {**p.values[column], key: resolved[target][old]}
                else:
                    p.values[attname] = resolved[target][old]

    def _match_existing(self, record_type, pendings) -> None:
        """Rows the target already holds under a natural key are reused, not duplicated."""
        model = record_type.model
        for key in record_type.natural_keys:
            columns = [model._meta.get_field(name).attname for name in key]
            candidates = [
                p for p in pendings if p.reused is None and all(p.values.get(c) != "" for c in columns)
            ]
            if not candidates:
                continue
            condition = Q()
            for p in candidates:
                condition |= Q(**{c: p.values.get(c) for c in columns})
            existing = {
                tuple(str(v) if v is not None else None for v in row[1:]): row[0]
                for row in model.objects.filter(workspace=self.workspace)
                .filter(condition)
                .values_list("pk", *columns)
            }
            for p in candidates:
                found = existing.get(
                    tuple(str(p.values.get(c)) if p.values.get(c) is not None else None for c in columns)
                )
                if found is None:
                    continue
                if p.map_row is not None and p.map_row.new_id != str(found):
                    raise ImportFailed(
                        REUSED_REFERENCED.format(type=record_type.name, id=p.old_id[:64]), line=p.line
                    )
                p.reused = str(found)
                p.new_id = str(found)
                self.reused[record_type.name] += 1
                detail = {c: str(p.values.get(c)) for c in columns}
                self._conflict(p.line, record_type.name, p.old_id, "reused_existing", detail)
                if record_type.name == "channel_identity":
                    self._identity_owner_check(p)

    def _identity_owner_check(self, p) -> None:
        from identities.models import ChannelIdentity

        owner = ChannelIdentity.objects.filter(pk=p.reused).values_list("memory_user_id", flat=True).first()
        if str(owner) != str(p.values["memory_user_id"]):
            self._conflict(
                p.line,
                "channel_identity",
                p.old_id,
                "identity_of_another_person",
                {
                    "channel": p.values["channel"],
                    "external_id": p.values["external_id"],
                    "kept_with": str(owner),
                },
            )

    def _version_facts(self, pendings) -> None:
        """A current fact whose key and scope the target already holds open becomes a version:
        the newer one stays current, the older one is closed and points at it."""
        current = [p for p in pendings if p.reused is None and p.values.get("valid_to") is None]
        if not current:
            return
        columns = ("key", "scope", "memory_user_id", "agent_id", "thread_id")
        condition = Q()
        for p in current:
            condition |= Q(**{c: p.values.get(c) for c in columns})
        held = {}
        for fact in Fact.objects.filter(workspace=self.workspace, valid_to__isnull=True).filter(condition):
            held[tuple(str(getattr(fact, c)) if getattr(fact, c) is not None else None for c in columns)] = (
                fact
            )
        for p in current:
            key = tuple(str(p.values.get(c)) if p.values.get(c) is not None else None for c in columns)
            fact = held.get(key)
            if fact is None:
                continue
            self.versioned += 1
            if fact.valid_from <= p.values["valid_from"]:
                Fact.objects.filter(pk=fact.pk).update(
                    valid_to=p.values["valid_from"], superseded_by=p.new_id
                )
                kept = "imported"
            else:
                p.values["valid_to"] = fact.valid_from
                p.values["superseded_by_id"] = str(fact.pk)
                kept = "existing"
            self._conflict(p.line, "fact", p.old_id, "fact_versioned", {"key": fact.key, "current": kept})

    def _procedure_lineages_lock(self, pendings) -> None:
        """Hold the lineages and learned signatures of the batch's procedures until the import
        ends, with the locks every write of a lineage takes, before the target's versions are
        read: a create, activation, rename or learned proposal into one of them that is running
        meanwhile commits first, and is then reused or reported like any stored version,
        instead of refusing the insert (a 400 for the whole file).

        Each batch takes its own keys, sorted, in one call. Across batches they are not taken in
        one order: two imports into one workspace that bring the same lineages in opposite
        batch orders can each hold a key the other waits for, and PostgreSQL then aborts one,
        which import_run rolls back whole and runs again from the first line once the other
        committed. Holding every key of the workspace from the first batch instead would hold
        every procedure write of the workspace (agents' creates, learning passes, review
        decisions) for the rest of the import; the file's own keys are not known before its
        last procedure line is read."""
        procedure_lineage_lock(
            workspace_id=self.workspace.pk,
            lineages=[(p.values.get("agent_id"), p.values["name"]) for p in pendings],
            signatures=[
                (p.values.get("agent_id"), p.values["learned_signature"])
                for p in pendings
                if p.values.get("learned_signature")
            ],
        )

    def _procedure_actives_keep(self, pendings) -> None:
        """One active version per lineage (the agent's versions of a name): an imported active
        version of a lineage the target already runs, or one this file made active before, is
        stored inactive. The target keeps the version it runs; activating the imported one is
        the user's choice, afterwards."""
        from procedures.models import Procedure

        active = [p for p in pendings if p.reused is None and p.values.get("is_active")]
        if not active:
            return
        condition = Q()
        for p in active:
            condition |= Q(agent_id=p.values.get("agent_id"), name=p.values["name"])
        # The batch's lineages are held (_procedure_lineages_lock): no activation commits
        # between this read and the insert.
        rows = (
            Procedure.objects.filter(workspace=self.workspace)
            .filter(condition)
            .values_list("agent_id", "name", "version", "is_active")
        )
        running = {
            (str(agent) if agent is not None else None, name): version
            for agent, name, version, is_active in list(rows)
            if is_active
        }
        for p in active:
            agent = p.values.get("agent_id")
            lineage = (str(agent) if agent is not None else None, p.values["name"])
            if lineage not in running:
                running[lineage] = p.values["version"]
                continue
            p.values["is_active"] = False
            self.procedures_kept_inactive += 1
            self._conflict(
                p.line,
                "procedure",
                p.old_id,
                "procedure_kept_inactive",
                {
                    "name": p.values["name"],
                    "version": p.values["version"],
                    "active_version": running[lineage],
                },
            )

    def _write(self, record_type, pendings) -> None:
        model = record_type.model
        name = record_type.name
        new = [p for p in pendings if p.reused is None]
        objs = []
        for p in new:
            obj = model(**p.values)
            if record_type.uuid_pk:
                obj.pk = uuid.UUID(p.new_id)
            obj.workspace_id = self.workspace.pk
            if name in ("episodic_entry", "store_item") and not self.keep_vectors:
                obj.embedding_model = ""
            objs.append(obj)
        if objs:
            self._insert(record_type, objs, new)
        if name in ("message", "node_summary"):
            self.threads_touched.update(o.thread_id for o in objs)
        if name == "procedure_run" and objs:
            procedure_runs_person_fill(episode_ids=[o.episode_id for o in objs])
        if name == "fact" and objs:
            FactKey.objects.bulk_create(
                [FactKey(workspace=self.workspace, key_normalized=o.key_normalized) for o in objs],
                ignore_conflicts=True,
            )
        self.created[name] += len(objs)
        # The map: reserved rows are taken, the others are new.
        taken = [p for p in pendings if p.map_row is not None]
        for p in taken:
            p.map_row.state = ImportIdMap.State.REUSED if p.reused else ImportIdMap.State.CREATED
            p.map_row.new_id = p.new_id
            p.map_row.run_id = self.run
        if taken:
            ImportIdMap.objects.bulk_update([p.map_row for p in taken], ["state", "new_id", "run_id"])
        ImportIdMap.objects.bulk_create(
            [
                ImportIdMap(
                    workspace=self.workspace,
                    source=self.source,
                    type=name,
                    old_id=p.old_id,
                    new_id=p.new_id or "",
                    state=ImportIdMap.State.REUSED if p.reused else ImportIdMap.State.CREATED,
                    line=p.line,
                    run_id=self.run,
                )
                for p in pendings
                if p.map_row is None
            ]
        )

    def _insert(self, record_type, objs, pendings) -> None:
        """INSERT as given (raw: auto_now columns keep the exported times); a refused batch is
        retried row by row to name the line that cannot be stored."""
        model = record_type.model
        fields = [
            f
            for f in model._meta.concrete_fields
            if not f.generated and (record_type.uuid_pk or not f.primary_key)
        ]
        if record_type.name == "audit_event":
            for obj in objs:
                obj.txid = None  # imported events are history: never delivered to webhooks again
        try:
            with transaction.atomic():
                model._base_manager._insert(objs, fields=fields, raw=True)
        except (IntegrityError, DatabaseError) as exc:
            if transaction_lost(exc):
                raise  # another transaction's doing, not a row's: import_run runs again
            for obj, p in zip(objs, pendings, strict=True):
                try:
                    with transaction.atomic():
                        model._base_manager._insert([obj], fields=fields, raw=True)
                except (IntegrityError, DatabaseError) as exc:
                    if transaction_lost(exc):
                        raise
                    detail = str(exc).splitlines()[0][:300]
                    raise ImportFailed(
                        ROW_REFUSED.format(detail=detail), line=p.line, code="row_refused"
                    ) from None
            raise  # pragma: no cover - the batch failed but no single row did

    # -- the end -------------------------------------------------------------------------

    def finish(self, last_line: int) -> None:
        missing = (
            ImportIdMap.objects.filter(
                workspace=self.workspace, source=self.source, state=ImportIdMap.State.RESERVED, required=True
            )
            .order_by("line")
            .first()
        )
        if missing is not None:
            raise ImportFailed(
                MISSING_ROW.format(type=missing.type, id=missing.old_id),
                line=missing.line,
                code="missing_reference",
            )
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        except (IntegrityError, DatabaseError) as exc:
            if transaction_lost(exc):
                raise
            detail = str(exc).splitlines()[0][:300]
            raise ImportFailed(
                ROW_REFUSED.format(detail=detail), line=last_line, code="row_refused"
            ) from None
        self._summary_marks_rebuild()
        if self.own_source:
            # A restore finds the rows still there by their ids each time: remembered as reused,
            # one lost again later would be skipped by the next restore as already imported.
            ImportIdMap.objects.filter(
                workspace=self.workspace, source=self.source, state=ImportIdMap.State.REUSED
            ).delete()

    def _summary_marks_rebuild(self) -> None:
        """The messages each imported summary holds alone (what retention may delete) are
        marked by the compaction's own walk, never taken from the file: an old file carries no
        marks, and a wrong one would let retention delete turns no summary holds."""
        thread_summary_held_rebuild(thread_ids=sorted(self.threads_touched, key=str))

    def report(self) -> dict:
        return {
            "records": self.records,
            "created": _ordered(self.created),
            "reused": _ordered(self.reused),
            "already_imported": _ordered(self.skipped),
            "facts_versioned": self.versioned,
            "procedures_kept_inactive": self.procedures_kept_inactive,
            "vectors_dropped": self.vectors_dropped,
            "dangling_ids_dropped": self.dangling,
            "conflict_count": self.conflict_count,
            "conflicts": self.conflicts,
        }


def _vector_lengths_check(record_type, line: int, pending: _Pending) -> None:
    """Every vector of a record has its `dimensions` numbers: a vector of another length, once
    stored, fails every cosine distance a search of its model computes (a 500, not a miss)."""
    dimensions = pending.values.get("dimensions")
    for f in record_type.fields():
        vector = pending.values.get(f.attname) if isinstance(f, VectorField) else None
        if vector is not None and len(vector) != dimensions:
            message = f"has {len(vector)} numbers, not its dimensions ({dimensions})"
            raise ImportFailed(f"{record_key(f)} {message}.", line=line, fields={record_key(f): [message]})


def _store_item_check(line: int, pending: _Pending) -> None:
    """The store's own rule for a TTL: past it, now + TTL overflows on every refreshing read."""
    try:
        ttl_clean(pending.values.get("ttl_minutes"))
    except ApplicationError as exc:
        raise ImportFailed(f"ttl_minutes: {exc.message}", line=line, fields={"ttl_minutes": [exc.message]})


def _ordered(counts: Counter) -> dict:
    """Counts per type in the file's order (portability.registry.TYPES)."""
    return {name: counts[name] for name in BY_NAME if counts[name]}


def _default(f):
    if f.has_default():
        return f.get_default()
    return None


def import_run(
    *,
    workspace,
    lines: Iterable[tuple[int, bytes, int]],
    actor: str,
    dry_run: bool = False,
    run: uuid.UUID | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Import the lines of an export (from `lines_read`) into `workspace`; return the report.

    One transaction: a line that cannot be stored raises ImportFailed (its number in the
    message and `fields.line`) and nothing of the run remains. `dry_run` does all the work and
    rolls it back, so its report lists what would be created and every conflict. A second
    run of the same export creates nothing (its rows are `already_imported`).

    A run the database aborted for a concurrent writer's sake (a deadlock, a serialization
    failure) is rolled back whole, which releases its locks and forgets its map rows and
    on-commit work, and runs again from the first line (`lines.restart()`, lines_read's) once
    the other writer committed, up to IMPORT_ATTEMPTS runs; past them, or when the lines cannot
    be read again, it is ImportFailed `changed` (409). Only this transaction is run again: a
    caller's own transaction around it (an import job's) holds no lock the other writer needs.
    """
    run = run or uuid.uuid4()
    for attempt in range(IMPORT_ATTEMPTS):
        try:
            with transaction.atomic():
                report = _import(workspace=workspace, lines=lines, actor=actor, run=run, progress=progress)
                report["dry_run"] = dry_run
                if dry_run:
                    transaction.set_rollback(True)
            break
        except OperationalError as exc:
            if not transaction_lost(exc):
                raise
            restart = getattr(lines, "restart", None)
            if attempt == IMPORT_ATTEMPTS - 1 or restart is None or not restart():
                raise ImportFailed(IMPORT_CHANGED, line=0, code="changed", status_code=409) from None
    if not dry_run and any(report["created"].get(t) for t in EMBEDDED_TYPES):
        from portability.tasks import import_embed_task

        import_embed_task.delay_on_commit(str(workspace.pk), str(run))
    return report


def _import(*, workspace, lines, actor, run, progress) -> dict:
    iterator = iter(lines)
    first = next(iterator, None)
    if first is None:
        raise ImportFailed(HEADER_REQUIRED, line=1, code="malformed_header")
    header = header_check(first[1], first[0])
    provider = embedding_provider_for(workspace)
    keep_vectors = header["embedding_model"] == provider.model_name and header.get("dimensions") in (
        None,
        provider.dimensions,
    )
    importer = _Importer(
        workspace=workspace,
        source=header["source"],
        run=run,
        keep_vectors=keep_vectors,
        model=provider.model_name,
    )
    batch_type, batch = None, []
    ended = None
    last = first[0]
    for number, raw, done in iterator:
        last = number
        if not raw.strip():
            continue
        if ended is not None:
            raise ImportFailed(AFTER_END, line=number, code="after_end")
        try:
            record = json_loads_checked(raw)
        except JSONRefused as exc:
            raise ImportFailed(str(exc), line=number, code="malformed_line", fields=exc.fields) from None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise ImportFailed(NOT_A_RECORD, line=number, code="malformed_line")
        if record["type"] == "end":
            ended = record
            continue
        if not isinstance(record.get("id"), str) or not 0 < len(record["id"]) <= 64:
            raise ImportFailed(NOT_A_RECORD, line=number, code="malformed_line")
        record_type = BY_NAME.get(record["type"])
        if record_type is None:
            raise ImportFailed(
                UNKNOWN_TYPE.format(type=record["type"][:50]), line=number, code="unknown_type"
            )
        importer.records += 1
        if batch and (record_type is not batch_type or len(batch) >= IMPORT_BATCH):
            importer.batch(batch_type, batch)
            batch = []
            if progress:
                progress(done, number)
        batch_type = record_type
        batch.append((number, record))
    if batch:
        importer.batch(batch_type, batch)
    # The header alone is an empty export (what a JSON object body is); a file that holds
    # records must close with its count, or it may have been cut short.
    if ended is None and importer.records:
        raise ImportFailed(NO_END, line=last, code="incomplete_file")
    ended = ended or {}
    count = ended.get("count")
    if count is not None and count != importer.records:
        raise ImportFailed(
            COUNT_MISMATCH.format(expected=str(count)[:20], found=importer.records),
            line=last,
            code="count_mismatch",
        )
    importer.finish(last)
    report = importer.report()
    report["source"] = header["source"]
    report["embedding_model"] = header["embedding_model"]
    report["vectors_kept"] = keep_vectors
    if sum(importer.created.values()) or importer.versioned:
        audit_record(
            workspace=workspace,
            actor=actor,
            action="create",
            entity_type="import",
            entity_id=str(run),
            changes={"source": header["source"], "created": dict(importer.created)},
        )
    return report


def import_embed_missing(*, workspace_id, run, chunk: int = 256) -> int:
    """Embed the rows an import created without a vector of the workspace's model, through
    each tier's own (idempotent) embed service. Reads the ids from the map, page by page."""
    from episodes.services import episode_embed_batch
    from episodic.services import entry_embed_batch
    from facts.services import fact_embed_batch
    from procedures.services import procedure_embed_batch
    from store.services import store_items_embed
    from threads.services import message_embed_batch

    embed = {
        "message": lambda ids: message_embed_batch(message_ids=ids),
        "episode": lambda ids: episode_embed_batch(episode_ids=ids),
        "fact": lambda ids: fact_embed_batch(fact_ids=ids),
        "episodic_entry": lambda ids: entry_embed_batch(entry_ids=ids),
        "procedure": lambda ids: procedure_embed_batch(procedure_ids=ids),
        "store_item": lambda ids: store_items_embed(item_ids=ids),
    }
    written = 0
    for type_name in EMBEDDED_TYPES:
        rows = ImportIdMap.objects.filter(
            workspace_id=workspace_id, run_id=run, type=type_name, state=ImportIdMap.State.CREATED
        ).order_by("pk")
        after = 0
        while True:
            page = list(rows.filter(pk__gt=after).values_list("pk", "new_id")[:chunk])
            if not page:
                break
            after = page[-1][0]
            written += embed[type_name]([new_id for _, new_id in page])
    return written
