"""Model instances from a statement built once, without a RawQuerySet's set-up on every call.

`Model.objects.raw(sql, params)` builds a compiler, reads the cursor's description, maps
columns to fields and looks up every field's converters each time it runs: about 0.35 ms
for ten search hits and 0.2 ms for one memory user, against 0.1-0.2 ms for the statement
itself (docs/speed.md, "Fixed costs of a search"). `ModelRows` does that mapping once, for
a fixed list of columns, and then only runs the statement, converts the values (JSON
fields, as Django would) and builds the instances with `Model.from_db`, as the ORM does.
"""

from django.db import connections, router


class ModelRows:
    """`fetch(where, params)`: instances of `model` for `SELECT <columns> FROM <table> <where>`.

    The columns are every concrete field's but those named in `deferred`, which stay deferred
    on the instances (read on first access, as with `defer()`). The database is the model's
    read database (`router.db_for_read`), chosen per call, as a RawQuerySet chooses it.
    """

    def __init__(self, model, *, deferred: tuple[str, ...] = ()):
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if f.name not in deferred]
        self.attnames = [f.attname for f in self.fields]
        table = model._meta.db_table
        self._cols = [f.get_col(table) for f in self.fields]
        self._select: dict[str, str] = {}
        self._converters: dict[str, list] = {}

    def _select_sql(self, alias: str) -> str:
        sql = self._select.get(alias)
        if sql is None:
            quote = connections[alias].ops.quote_name
            columns = ", ".join(quote(f.column) for f in self.fields)
            sql = self._select[alias] = f"SELECT {columns} FROM {quote(self.model._meta.db_table)}"
        return sql

    def _converters_for(self, alias: str) -> list:
        """[(position, converters, column)] of the columns whose values Django converts,
        found as `SQLCompiler.get_converters` finds them."""
        converters = self._converters.get(alias)
        if converters is None:
            connection = connections[alias]
            converters = []
            for position, col in enumerate(self._cols):
                found = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
                if found:
                    converters.append((position, found, col))
            self._converters[alias] = converters
        return converters

    def fetch(self, where: str, params) -> list:
        alias = router.db_for_read(self.model)
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(f"{self._select_sql(alias)} {where}", params)
            rows = cursor.fetchall()
        converters = self._converters_for(alias)
        from_db, model_attnames = self.model.from_db, self.attnames
        instances = []
        for row in rows:
            if converters:
                row = list(row)
                for position, found, col in converters:
                    value = row[position]
                    for converter in found:
                        value = converter(value, col, connection)
                    row[position] = value
            instances.append(from_db(alias, model_attnames, row))
        return instances
