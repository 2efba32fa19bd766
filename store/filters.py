"""LangGraph's value filters as SQL, and the FilterSet of the item lists (API, /memories, admin)."""

import json

import django_filters
from django.contrib.postgres.search import SearchQuery
from django.db.models import F, Func, JSONField, Q, TextField, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.db.models.lookups import Exact

from core.errors import ApplicationError
from core.filters import FilterSet
from store.models import NAMESPACE_SEPARATOR, StoreItem

FILTER_NOT_OBJECT = "filter must be a JSON object of field names to values or to {operator: value}."
FILTER_OPERATOR_UNKNOWN = "Unknown filter operator {operator!r}: use $eq, $ne, $gt, $gte, $lt or $lte."
FILTER_NOT_FINITE = "filter holds a number JSON cannot store (NaN or Infinity, such as 1e400)."
FILTER_TOO_DEEP = "filter nests deeper than {limit} levels."
FILTER_DEPTH_MAX = 8

_COMPARISONS = {"$eq": "exact", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, fields={"filter": [message]})


class _ObjectField(Func):
    """`expression -> name`: the field `name` of a JSON object, NULL where there is none.

    The name is always a key. Django's `KeyTransform` reads a name of digits as an array
    position at the top level (`value -> 0`), so `{"2024": "x"}` matched no object holding
    that field, and `{"0": "x"}` matched an array's first element; LangGraph's stores read
    both as field names.
    """

    template = "(%(expressions)s)"
    arg_joiner = " -> "
    output_field = JSONField()

    def __init__(self, expression, name: str):
        # The key cast to text, so the operator can never be jsonb -> integer.
        super().__init__(expression, Cast(Value(str(name)), output_field=TextField()))


def _json(operand):
    """`operand` as a JSONB parameter (a bare Python value would be bound as int or text)."""
    if operand is None:
        return RawSQL("'null'::jsonb", [], output_field=JSONField())
    return Value(operand, output_field=JSONField())


def _json_type(value) -> str:
    """The name jsonb_typeof gives `value` once stored."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def _operator(expression, operator: str, raw) -> Q:
    operand = _json(raw)
    if operator == "$ne":
        # A missing field differs from any value, as in LangGraph's InMemoryStore; SQL's
        # NULL comparison alone would drop those items.
        equal = expression.get_lookup("exact")(expression, operand)
        missing = expression.get_lookup("isnull")(expression, True)
        return ~Q(equal) | Q(missing)
    lookup = _COMPARISONS.get(operator)
    if lookup is None:
        raise _invalid(FILTER_OPERATOR_UNKNOWN.format(operator=operator))
    condition = Q(expression.get_lookup(lookup)(expression, operand))
    if operator == "$eq":
        return condition
    # jsonb orders values of different types too (null < strings < numbers < booleans < arrays
    # < objects): a range only compares like with like, or {"$lt": 3} would match null and "high".
    same_type = Func(expression, function="jsonb_typeof", output_field=TextField())
    return condition & Q(Exact(same_type, Value(_json_type(raw))))


def _condition(expression, wanted, depth: int) -> Q:
    if depth > FILTER_DEPTH_MAX:
        raise _invalid(FILTER_TOO_DEEP.format(limit=FILTER_DEPTH_MAX))
    if isinstance(wanted, dict) and any(str(name).startswith("$") for name in wanted):
        condition = Q()
        for operator, operand in wanted.items():
            condition &= _operator(expression, operator, operand)
        return condition
    if isinstance(wanted, dict) and wanted:
        # A plain object matches field by field, like LangGraph's stores.
        condition = Q()
        for name, nested in wanted.items():
            condition &= _condition(_ObjectField(expression, name), nested, depth + 1)
        return condition
    return Q(expression.get_lookup("exact")(expression, _json(wanted)))


def value_filter_q(filter_: dict | None) -> Q:
    """The SQL condition of a LangGraph search `filter` on the items' `value`.

    `{"status": "active"}` is equality (JSON equality: lists in order, objects field by
    field); `{"score": {"$gt": 4.99}}` compares as PostgreSQL compares JSONB (numbers as
    numbers, strings as text). Field names are bound as parameters, never spliced into SQL.
    """
    if not filter_:
        return Q()
    if not isinstance(filter_, dict):
        raise _invalid(FILTER_NOT_OBJECT)
    try:
        # jsonb has no NaN or Infinity, and Python's decoder reads 1e400 as Infinity.
        json.dumps(filter_, allow_nan=False)
    except ValueError:
        raise _invalid(FILTER_NOT_FINITE) from None
    condition = Q()
    for name, wanted in filter_.items():
        condition &= _condition(_ObjectField(F("value"), name), wanted, 1)
    return condition


def value_filter_pairs(filter_: dict | None) -> dict:
    """The JSON document every value matching `filter_` contains: its equalities ($eq and
    plain values, objects field by field); comparisons and $ne imply nothing.

    As `value @>` it is what the value index (store 0005) answers. It only ever narrows
    `value_filter_q(filter_)`, which still decides (containment alone would let [1, 2] hold
    [1]), so call it on a filter that one has accepted.
    """
    if not filter_:
        return {}
    contained = {}
    for name, wanted in filter_.items():
        if isinstance(wanted, dict) and any(str(key).startswith("$") for key in wanted):
            if "$eq" in wanted:
                contained[str(name)] = wanted["$eq"]
        elif isinstance(wanted, dict) and wanted:
            nested = value_filter_pairs(wanted)
            if nested:
                contained[str(name)] = nested
        else:
            contained[str(name)] = wanted
    return contained


def namespace_paths_under(prefix) -> tuple[str, str]:
    """[low, high): the range of `namespace_path` that holds every namespace under `prefix`
    ("/" follows "." in byte order). It also holds siblings that extend the last label
    ("docsx" beside "docs"), which a condition on whole labels must drop."""
    path = NAMESPACE_SEPARATOR.join(prefix)
    return path, path + "/"


def namespace_prefix_q(prefix) -> Q:
    """Items whose namespace starts with the labels of `prefix` (every item for ())."""
    if not prefix:
        return Q()
    path = NAMESPACE_SEPARATOR.join(prefix)
    # "/" follows "." in byte order: [path + ".", path + "/") is every deeper namespace.
    deeper = Q(namespace_path__gte=path + ".", namespace_path__lt=path + "/")
    return Q(namespace_path=path) | deeper


class NamespacePrefixFilter(django_filters.CharFilter):
    def filter(self, qs, value):
        if not value:
            return qs
        return qs.filter(
            namespace_prefix_q(tuple(value.strip(NAMESPACE_SEPARATOR).split(NAMESPACE_SEPARATOR)))
        )


class StoreItemFilter(FilterSet):
    """Filters of the item lists: the API's, the /memories Store tab and the admin's."""

    namespace_prefix = NamespacePrefixFilter(help_text='Dotted namespace prefix, e.g. "memories.ada".')
    key = django_filters.CharFilter()
    agent = django_filters.CharFilter(field_name="agent__slug", help_text="Agent slug.")
    shared = django_filters.BooleanFilter(
        field_name="agent", lookup_expr="isnull", help_text="Only the workspace partition (no agent)."
    )
    memory_user = django_filters.UUIDFilter(field_name="memory_user_id")
    q = django_filters.CharFilter(method="filter_text", help_text="Words in the indexed text.")
    updated_after = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="lt")

    class Meta:
        model = StoreItem
        fields = []

    def filter_text(self, queryset, name, value):
        if not value.strip():
            return queryset
        words = SearchQuery(value, search_type="websearch", config="english")
        return queryset.filter(Q(search_vector=words) | Q(key__icontains=value.strip()))
