import factory

from facts.models import Fact, FactKey, key_normalize
from facts.services import fact_search_text


class FactFactory(factory.django.DjangoModelFactory):
    """A current global fact unless told otherwise; prefer fact_remember in behaviour tests."""

    class Meta:
        model = Fact
        # The hook below writes FactKey, not the fact: saving the fact again is wasted.
        skip_postgeneration_save = True

    scope = Fact.Scope.GLOBAL
    key = factory.Sequence(lambda n: f"key_{n}")
    key_normalized = factory.LazyAttribute(lambda o: key_normalize(o.key))
    value = "value"
    search_text = factory.LazyAttribute(lambda o: fact_search_text(o.key, o.value))
    confidence = 0.9

    @factory.post_generation
    def key_dictionary(obj, create, extracted, **kwargs):
        if create:
            FactKey.objects.get_or_create(workspace=obj.workspace, key_normalized=obj.key_normalized)
