"""Rows of several models inserted in one statement.

`bulk_create` makes one round trip per model. A write that stores rows of three tables at
once (an episodic entry, its vector and its audit event) then waits on three, each
0.5-0.8 ms as the later statements of a request, and compiles each through a QuerySet
(docs/speed.md, "The embedding beside the lock, and one INSERT for three tables"). `rows_insert` compiles
each table's INSERT as `bulk_create` would and sends them as one statement: every INSERT but
the last becomes a data-modifying WITH, which PostgreSQL runs to completion whether or not
the main statement reads it. The values are sent apart from the statement's text (`_cursor`).
"""

from django.db import connections, router
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.models import AutoField
from django.db.models.expressions import DatabaseDefault
from django.db.models.sql import InsertQuery
from pgvector.django import VectorField

from core.lib.vectors import VectorText


def rows_insert(*groups) -> None:
    """INSERT the objects of each (model, objects) of `groups`, in one statement.

    As with `bulk_create`: a primary key with a default is set before the insert, `pre_save`
    runs (auto_now), signals are not sent and the objects are marked saved. Unlike it, an
    auto-increment key is not read back (it stays None).

    The sub-statements share one snapshot and their order is not defined, so a row must not
    depend on another group's row being in the table before the statement ends: a foreign
    key between the groups' rows is checked at commit, as Django's deferred foreign keys on
    PostgreSQL are.
    """
    groups = [(model, list(objs)) for model, objs in groups if objs]
    if not groups:
        return
    alias = router.db_for_write(groups[0][0])
    statements, params = [], []
    for model, objs in groups:
        if router.db_for_write(model) != alias:
            raise ValueError(f"{model.__name__} is written to another database than {groups[0][0].__name__}.")
        statement, values = _insert_sql(model, objs, alias)
        statements.append(statement)
        params.extend(values)
    *withs, main = statements
    if withs:
        main = "WITH " + ", ".join(f"rows_{n} AS ({sql})" for n, sql in enumerate(withs)) + " " + main
    with _cursor(alias, len(params)) as cursor:
        cursor.execute(main, params)
    for _, objs in groups:
        for obj in objs:
            obj._state.adding = False
            obj._state.db = alias


def _insert_sql(model, objs, alias) -> tuple[str, list]:
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


def _left_to_default(field, objs) -> bool:
    """Whether every one of `objs` leaves `field` to its database default."""
    if not field.has_db_default():
        return False
    return all(isinstance(getattr(obj, field.attname), DatabaseDefault) for obj in objs)


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
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection._prepare_cursor(ServerBindingCursor(connection.connection))
