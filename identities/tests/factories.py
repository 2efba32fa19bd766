import factory

from identities.models import ChannelIdentity, MemoryUser


class MemoryUserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = MemoryUser

    canonical_id = factory.Sequence(lambda n: f"telegram:{1000 + n}")
    display_name = factory.Sequence(lambda n: f"Person {n}")


class ChannelIdentityFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ChannelIdentity

    workspace = factory.SelfAttribute("memory_user.workspace")
    channel = "telegram"
    external_id = factory.Sequence(lambda n: str(5000 + n))


class ThreadFactory(factory.django.DjangoModelFactory):
    """Threads belong to another tier; global memory tests only need rows to point at."""

    class Meta:
        model = "threads.Thread"

    workspace = factory.SelfAttribute("agent.workspace")
    channel = "telegram"
    channel_chat_id = factory.Sequence(lambda n: f"chat-{n}")


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "threads.Message"

    workspace = factory.SelfAttribute("thread.workspace")
    role = "user"
    content = factory.Sequence(lambda n: f"message {n}")
