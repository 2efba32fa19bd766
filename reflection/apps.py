"""The reflection app: a periodic per-agent pass that tidies memory (docs/reflection.md)."""

from django.apps import AppConfig


class ReflectionConfig(AppConfig):
    name = "reflection"

    def ready(self):
        from core.holdings import Holding, holding_register
        from reflection.models import ReflectionProfile
        from reflection.services import reflection_profiles_merge

        # A cached profile is derived data: a merge drops the source's (the next pass rebuilds
        # the target's), and an erasure deletes it with the person.
        holding_register(
            Holding("reflection_profiles", ReflectionProfile, merge=reflection_profiles_merge, counted=False)
        )
