"""The base of every input serializer: what it accepts is what the database can store.

DRF is lenient where the database is strict: a CharField turns `1` into "1", a UUIDField
turns `5` into a UUID, an IntegerField accepts any Python int (a bigint column overflows
past 2**63 - 1) and a JSONField accepts a list where an object is meant. `StrictSerializer`
tightens every declared field once, when its fields are built, instead of per field:

- text fields (CharField and its subclasses, UUIDField) accept only JSON strings;
- an IntegerField without an explicit range gets the bigint range (`BIGINT_MIN..BIGINT_MAX`);
  fields stored in an int column declare `min_value` / `max_value` (`INT_MIN..INT_MAX`);
- a field meant to hold a JSON object is declared as a DictField, which refuses anything else.

Lengths are declared per field as the column's `max_length`.
"""

from rest_framework import serializers

from core.errors import UNKNOWN_FIELD

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1

NOT_A_STRING = "Not a valid string."

_TEXT_FIELDS = (serializers.CharField, serializers.UUIDField)


def _strict_text(field):
    """Refuse non-string input to a text field before DRF converts it with str()."""
    convert = field.to_internal_value

    def to_internal_value(data):
        if not isinstance(data, str):
            raise serializers.ValidationError(NOT_A_STRING, code="invalid")
        return convert(data)

    field.to_internal_value = to_internal_value


def _bounded_integer(field):
    """Give an integer field without a declared range the bigint column's range."""
    from django.core.validators import MaxValueValidator, MinValueValidator

    if field.max_value is None:
        field.max_value = BIGINT_MAX
        field.validators.append(MaxValueValidator(BIGINT_MAX, message=field.error_messages["max_value"]))
    if field.min_value is None:
        field.min_value = BIGINT_MIN
        field.validators.append(MinValueValidator(BIGINT_MIN, message=field.error_messages["min_value"]))


def strict_fields(field) -> None:
    """Tighten `field` and the fields nested in it (list and dict children) in place."""
    if getattr(field, "_strict", False) or getattr(field, "read_only", False):
        return
    field._strict = True
    if isinstance(field, _TEXT_FIELDS):
        _strict_text(field)
    elif isinstance(field, serializers.IntegerField):
        _bounded_integer(field)
    child = getattr(field, "child", None)
    if isinstance(child, serializers.Field) and not isinstance(child, serializers.Serializer):
        strict_fields(child)


class StrictSerializer(serializers.Serializer):
    """An input serializer that rejects fields it does not declare, and wrong types.

    Silently dropping a misspelt field would store something other than what the client
    meant; a 400 naming the field is kinder. Every InputSerializer, FilterSerializer and
    nested input serializer of the API derives from this class
    (core/tests/apis/test_field_limits.py walks the URL configuration to hold that).
    """

    def get_fields(self):
        fields = super().get_fields()
        for field in fields.values():
            if not isinstance(field, serializers.BaseSerializer):
                strict_fields(field)
        return fields

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({name: [UNKNOWN_FIELD] for name in sorted(unknown)})
        return super().to_internal_value(data)


class BatchDeleteInputSerializer(StrictSerializer):
    ids = serializers.ListField(child=serializers.UUIDField(), allow_empty=False, max_length=10_000)


# The agent / person / thread a tool call names, resolved by
# `threads.selectors.memory_context_resolve`. No docstring: drf-spectacular would lend it to
# the schema of every input built on this class.
class ContextInputSerializer(StrictSerializer):
    agent = serializers.SlugField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Agent slug (implied by an agent-bound key).",
    )
    memory_user = serializers.UUIDField(required=False, allow_null=True)
    thread = serializers.UUIDField(required=False, allow_null=True)
