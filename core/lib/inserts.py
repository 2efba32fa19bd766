"""Rows of several models inserted together.

`bulk_create` makes one round trip per model and compiles each through a QuerySet. A write
that stores rows of three tables at once (an episodic entry, its vector and its audit event)
then waits on three, each 0.5-0.8 ms as the later statements of a request (docs/speed.md,
"The embedding beside the lock, and one INSERT for three tables"). `rows_insert` sends them
one of two ways:

- One row a table: each table's INSERT is compiled as `bulk_create` would and they are sent
  as one statement: every INSERT but the last becomes a data-modifying WITH, which
  PostgreSQL runs to completion whether or not the main statement reads it. The values are
  sent apart from the statement's text (`_cursor`).
- More: a binary COPY a table, in one transaction. Django's compiler, psycopg's quoting of
  a statement's thousands of values and PostgreSQL's parsing of it took 28-30 ms for a
  batch's 100 entries, vectors and events; the three COPYs take 12-14 ms (docs/speed.md,
  "A batch's rows by binary COPY"). A table a COPY cannot write (a value PostgreSQL computes,
  a column type psycopg has no binary dumper for) is written by the statement instead.
"""

import weakref
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import numpy as np
from django.db import connections, router, transaction
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import AutoField
from django.db.models.expressions import DatabaseDefault
from django.db.models.sql import InsertQuery
from pgvector import Vector
from pgvector.django import VectorField
from psycopg import ProgrammingError, pq

from core.lib.vectors import VectorText

# A table of fewer rows goes in the one statement: a COPY is two round trips, and for one
# row of each of three tables the statement was faster (0.90 against 1.05 ms); from two
# rows on, COPY was (1.7 against 1.2 ms).
COPY_ROWS_MIN = 2


def rows_insert(*groups) -> None:
    """INSERT the objects of each (model, objects) of `groups`, together.

    As with `bulk_create`: a primary key with a default is set before the insert, `pre_save`
    runs (auto_now), signals are not sent and the objects are marked saved. Unlike it, an
    auto-increment key is not read back (it stays None).

    The groups' rows are written in one statement or one COPY a table, in no order to rely
    on, so a row must not depend on another group's row being in the table first: a foreign
    key between the groups' rows is checked at commit, as Django's deferred foreign keys on
    PostgreSQL are. Either every row is stored or none is.
    """
    groups = [(model, list(objs)) for model, objs in groups if objs]
    if not groups:
        return
    alias = router.db_for_write(groups[0][0])
    for model, _ in groups:
        if router.db_for_write(model) != alias:
            raise ValueError(f"{model.__name__} is written to another database than {groups[0][0].__name__}.")
    fields = [_fields_sent(model, objs) for model, objs in groups]
    connection = connections[alias]
    copies = None
    if max(len(objs) for _, objs in groups) >= COPY_ROWS_MIN:
        copies = _copies(connection, groups, fields)
    if copies is not None:
        with transaction.atomic(using=alias, savepoint=False), connection.cursor() as cursor:
            for copy in copies:
                copy.send(cursor)
    else:
        _statement_send(alias, groups, fields)
    for _, objs in groups:
        for obj in objs:
            obj._state.adding = False
            obj._state.db = alias


def _fields_sent(model, objs) -> list:
    """The fields of `model` whose values are sent for `objs`, once their keys are set."""
    opts = model._meta
    for parent in opts.all_parents:
        if parent._meta.concrete_model is not opts.concrete_model:
            raise ValueError(f"{model.__name__}: a multi-table inherited model takes one INSERT per table.")
    for obj in objs:
        if obj.pk is None:
            obj.pk = opts.pk.get_pk_value_on_save(obj)
        obj._prepare_related_fields_for_save(operation_name="rows_insert")
    # A column every object leaves to its database default is left out, as DEFAULT would fill it
    # (Django sends DEFAULT for each row, resolving the expression once an object).
    fields = [f for f in opts.concrete_fields if not f.generated and not _left_to_default(f, objs)]
    keys_set = {obj.pk is not None for obj in objs}
    if keys_set == {False}:
        fields = [f for f in fields if not isinstance(f, AutoField)]
    elif len(keys_set) > 1:
        raise ValueError(f"{model.__name__}: some objects have a primary key and some do not.")
    return fields


def _left_to_default(field, objs) -> bool:
    """Whether every one of `objs` leaves `field` to its database default."""
    if not field.has_db_default():
        return False
    return all(isinstance(getattr(obj, field.attname), DatabaseDefault) for obj in objs)


# The one statement -----------------------------------------------------------------------


def _statement_send(alias, groups, fields) -> None:
    statements, params = [], []
    for (model, objs), sent in zip(groups, fields, strict=True):
        statement, values = _insert_sql(model, objs, sent, alias)
        statements.append(statement)
        params.extend(values)
    *withs, main = statements
    if withs:
        main = "WITH " + ", ".join(f"rows_{n} AS ({sql})" for n, sql in enumerate(withs)) + " " + main
    with _cursor(alias, len(params)) as cursor:
        cursor.execute(main, params)


def _insert_sql(model, objs, fields, alias) -> tuple[str, list]:
    query = InsertQuery(model)
    query.insert_values(fields, objs)
    # Vectors are written by `vector_text`, not pgvector's per-value loop (a batch of 100
    # spent 10-20 ms there); the objects keep their own values.
    vectors = [
        (obj, f.attname, getattr(obj, f.attname))
        for f in fields
        if isinstance(f, VectorField)
        for obj in objs
    ]
    try:
        for obj, attname, value in vectors:
            if value is not None:
                setattr(obj, attname, VectorText(value))
        compiled = query.get_compiler(using=alias).as_sql()
    finally:
        for obj, attname, value in vectors:
            setattr(obj, attname, value)
    if len(compiled) != 1:
        raise ValueError(f"{model.__name__}: these objects do not fit one INSERT.")
    ((statement, values),) = compiled
    return statement, list(values)


# A Bind message counts its parameters in 16 bits.
_BIND_PARAMS_MAX = 65_535


def _cursor(alias, params: int):
    """A cursor of `alias` that sends the statement's `params` values apart from its text.

    The project's cursors bind on the client (Django's default): psycopg quotes every value
    into the statement's text, scanning each string, which for a batch's 100 vectors of 384
    values and its 3,000 other values took a fifth of the statement's time (docs/speed.md).
    Sent apart, a value is only dumped, and PostgreSQL coerces each to its column's type.
    Past what one Bind message can carry, the values are bound on the client as before.
    Statements are logged and wrapped as through `connection.cursor()`, and not prepared
    (Django turns psycopg's `prepare_threshold` off unless the database's OPTIONS set it).
    """
    connection = connections[alias]
    if params > _BIND_PARAMS_MAX:
        return connection.cursor()
    return connection._prepare_cursor(ServerBindingCursor(_connected(connection)))


def _connected(connection):
    """`connection`'s psycopg connection, checked and opened as `connection.cursor()` does."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection.connection


# Binary COPY ------------------------------------------------------------------------------

_BYTEA_OID = 17


@dataclass
class _Copy:
    """One table's COPY: its statement, the type each column's values are dumped as, and the
    rows."""

    statement: str
    types: list[int]
    rows: list[list]

    def send(self, cursor) -> None:
        """Through `cursor` (Django's), logged and wrapped as its statements are."""
        logged = cursor.debug_sql(self.statement) if isinstance(cursor, CursorDebugWrapper) else nullcontext()
        with logged:
            cursor._execute_with_wrappers(self.statement, None, False, partial(_copy_run, self))


def _copy_run(copy: _Copy, statement, _params, _many, context) -> None:
    """The executor `CursorWrapper._execute_with_wrappers` calls (wrappers see the COPY)."""
    db = context["connection"]
    db.validate_no_broken_transaction()
    with db.wrap_database_errors, context["cursor"].cursor.copy(statement) as out:
        out.set_types(copy.types)
        for row in copy.rows:
            out.write_row(row)


def _copies(connection, groups, fields) -> list[_Copy] | None:
    """A binary COPY for each group, or None when one of them cannot be written by COPY."""
    adapters = _connected(connection).adapters
    copies = []
    for (model, objs), sent in zip(groups, fields, strict=True):
        table = model._meta.db_table
        columns = _column_types(connection, table)
        types, values = [], []
        for field in sent:
            if isinstance(field, VectorField):
                # Sent as pgvector's binary form (`vector_recv` reads it); as bytea, psycopg
                # passes the bytes through.
                types.append(_BYTEA_OID)
                values.append(partial(_vector_value, field.attname))
                continue
            oid = columns.get(field.column)
            if oid is None or not _dumps_binary(adapters, oid):
                return None
            types.append(oid)
            values.append(partial(_field_value, field, connection))
        rows = [[value(obj) for value in values] for obj in objs]
        if any(hasattr(value, "resolve_expression") for row in rows for value in row):
            return None  # Computed by the database (an expression, a default): COPY cannot.
        names = ", ".join(connection.ops.quote_name(f.column) for f in sent)
        statement = f"COPY {connection.ops.quote_name(table)} ({names}) FROM STDIN (FORMAT BINARY)"
        copies.append(_Copy(statement, types, rows))
    return copies


def _field_value(field, connection, obj):
    return field.get_db_prep_save(field.pre_save(obj, True), connection)


def _vector_value(attname, obj):
    """pgvector's binary form of a vector: dimensions and a reserved zero, each a big-endian
    int16, then the values as big-endian float4."""
    value = getattr(obj, attname)
    if value is None or hasattr(value, "resolve_expression"):
        return value
    if isinstance(value, Vector):
        value = value.to_numpy()
    values = np.asarray(value, dtype=">f4")
    if values.ndim != 1 or len(values) > 0xFFFF:
        raise ValueError(f"Not a vector: shape {values.shape}.")
    return np.array([len(values), 0], dtype=">u2").tobytes() + values.tobytes()


def _dumps_binary(adapters, oid: int) -> bool:
    try:
        adapters.get_dumper_by_oid(oid, pq.Format.BINARY)
    except ProgrammingError:
        return False
    return True


# Each open connection's column types, by table and column: read once a connection and table
# (a new connection reads them anew).
_types_read: "weakref.WeakKeyDictionary[object, dict[str, dict[str, int]]]" = weakref.WeakKeyDictionary()


def _column_types(connection, table: str) -> dict[str, int]:
    tables = _types_read.setdefault(connection.connection, {})
    if table not in tables:
        with connection.wrap_database_errors, connection.connection.cursor() as cursor:
            cursor.execute(
                "SELECT attname, atttypid::int FROM pg_attribute"
                " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                [table],
            )
            tables[table] = dict(cursor.fetchall())
    return tables[table]
