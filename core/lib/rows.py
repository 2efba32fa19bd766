"""Model instances from a statement built once, without a RawQuerySet's set-up on every call.

`Model.objects.raw(sql, params)` builds a compiler, reads the cursor's description, maps
columns to fields and looks up every field's converters each time it runs: about 0.35 ms
for ten search hits and 0.2 ms for one memory user, against 0.1-0.2 ms for the statement
itself (docs/speed.md, "Fixed costs of a search"). `ModelRows` does that mapping once, for
a fixed list of columns, and then only runs the statement, converts the values (JSON
fields, as Django would) and builds the instances with `Model.from_db`, as the ORM does.
Forward relations named in `related` are joined into the same statement and cached on
the instances, as `select_related` caches them.
"""

from django.db import connections, router


class _Part:
    """One model's columns in the statement: the model's own, or a joined relation's."""

    def __init__(self, model, alias: str, *, deferred: tuple[str, ...] = (), only=None, relation=None):
        self.model = model
        self.alias = alias
        self.relation = relation  # The forward field of the main model; None for the main model.
        # A field is named by its name or its column's attribute ("agent" or "agent_id").
        deferred = {model._meta.get_field(name).name for name in deferred}  # FieldDoesNotExist
        kept = None if only is None else {model._meta.get_field(name).name for name in only}
        self.fields = [
            f
            for f in model._meta.concrete_fields
            if f.name not in deferred and (kept is None or f.primary_key or f.name in kept)
        ]
        self.attnames = [f.attname for f in self.fields]
        self.cols = [f.get_col(alias) for f in self.fields]
        self.pk_index = self.attnames.index(model._meta.pk.attname)
        self.start = 0  # Position of its first column in a row, set by ModelRows.


class ModelRows:
    """`fetch(where, params)`: instances of `model` for `SELECT <columns> FROM <table> <where>`.

    The columns are every concrete field's but those named in `deferred`, or only the primary
    key and those named in `only`; the others stay deferred on the instances (read on first
    access, as with `defer()` and `only()`). Unknown names raise FieldDoesNotExist. The
    database is the model's read database (`router.db_for_read`), chosen per call, as a
    RawQuerySet chooses it.

    `related` names forward foreign keys of `model`: each is joined (all its model's concrete
    columns; an outer join for a key that may be NULL, as the ORM joins) and set on the
    instance as `select_related` sets it (None when the key is NULL). With joins, `where` must
    name the model's columns with its table's name, since the joined tables may have columns
    of the same names.
    """

    def __init__(
        self,
        model,
        *,
        deferred: tuple[str, ...] = (),
        only: tuple[str, ...] | None = None,
        related: tuple[str, ...] = (),
    ):
        self.model = model
        table = model._meta.db_table
        main = _Part(model, table, deferred=deferred, only=only)
        self._parts = [main]
        for index, name in enumerate(related):
            relation = model._meta.get_field(name)
            if not (relation.many_to_one or relation.one_to_one) or relation.auto_created:
                raise ValueError(f"{model.__name__}.{name} is not a forward foreign key.")
            self._parts.append(_Part(relation.related_model, f"r{index}", relation=relation))
        position = 0
        for part in self._parts:
            part.start = position
            position += len(part.fields)
        # Kept for callers that read them: the main model's.
        self.fields, self.attnames = main.fields, main.attnames
        self._select: dict[str, str] = {}
        self._converters: dict[str, list] = {}

    def _select_sql(self, alias: str) -> str:
        sql = self._select.get(alias)
        if sql is None:
            quote = connections[alias].ops.quote_name
            main, *joined = self._parts
            columns = ", ".join(
                f"{quote(part.alias)}.{quote(f.column)}" if joined else quote(f.column)
                for part in self._parts
                for f in part.fields
            )
            sql = f"SELECT {columns} FROM {quote(main.alias)}"
            for part in joined:
                table, alias_sql = quote(part.model._meta.db_table), quote(part.alias)
                target = f"{alias_sql}.{quote(part.relation.target_field.column)}"
                key = f"{quote(main.alias)}.{quote(part.relation.column)}"
                join = "LEFT JOIN" if part.relation.null else "JOIN"
                sql += f" {join} {table} {alias_sql} ON {target} = {key}"
            self._select[alias] = sql
        return sql

    def _converters_for(self, alias: str) -> list:
        """[(position, converters, column)] of the columns whose values Django converts,
        found as `SQLCompiler.get_converters` finds them."""
        converters = self._converters.get(alias)
        if converters is None:
            connection = connections[alias]
            converters = []
            for part in self._parts:
                for offset, col in enumerate(part.cols):
                    found = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
                    if found:
                        converters.append((part.start + offset, found, col))
            self._converters[alias] = converters
        return converters

    def fetch(self, where: str, params) -> list:
        alias = router.db_for_read(self.model)
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(f"{self._select_sql(alias)} {where}", params)
            rows = cursor.fetchall()
        converters = self._converters_for(alias)
        main, *joined = self._parts
        from_db, model_attnames, width = self.model.from_db, main.attnames, len(main.fields)
        instances = []
        for row in rows:
            if converters:
                row = list(row)
                for position, found, col in converters:
                    value = row[position]
                    for converter in found:
                        value = converter(value, col, connection)
                    row[position] = value
            instance = from_db(alias, model_attnames, row[:width] if joined else row)
            for part in joined:
                values = row[part.start : part.start + len(part.fields)]
                # A NULL key joins nothing: every column, the primary key included, is NULL.
                related = None
                if values[part.pk_index] is not None:
                    related = part.model.from_db(alias, part.attnames, values)
                part.relation.set_cached_value(instance, related)
                if related is not None and part.relation.unique:
                    # A one-to-one's reverse side, as select_related sets it.
                    part.relation.remote_field.set_cached_value(related, instance)
            instances.append(instance)
        return instances
