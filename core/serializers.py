from rest_framework import serializers

from core.errors import UNKNOWN_FIELD


class StrictSerializer(serializers.Serializer):
    """An input serializer that rejects fields it does not declare.

    Silently dropping a misspelt field would store something other than what the client
    meant; a 400 naming the field is kinder.
    """

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({name: [UNKNOWN_FIELD] for name in sorted(unknown)})
        return super().to_internal_value(data)


class BatchDeleteInputSerializer(StrictSerializer):
    ids = serializers.ListField(child=serializers.UUIDField(), allow_empty=False, max_length=10_000)
