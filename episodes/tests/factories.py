import factory

from episodes.models import Episode


class EpisodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Episode

    workspace = factory.SelfAttribute("agent.workspace")
    trigger_type = "chat"
    input = factory.LazyFunction(lambda: {"goal": "answer a question"})
