import uuid

import factory

from procedures.models import Procedure


class ProcedureFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Procedure

    name = factory.Sequence(lambda n: f"procedure {n}")
    procedure_type = Procedure.ProcedureType.PROMPT_TEMPLATE
    content = "Do the thing."


def proposal_create(
    *, workspace, agent, name: str, version: int = 2, signature: str = "", content: str = ""
) -> Procedure:
    """A procedure proposed by learning, waiting for review (inactive, never decided)."""
    return Procedure.objects.create(
        workspace=workspace,
        agent=agent,
        name=name,
        version=version,
        procedure_type="prompt_template",
        content=content or f"learned {name}",
        origin=Procedure.Origin.SELF_LEARNED,
        source_episode_ids=[uuid.uuid4()],
        learned_signature=signature,
        is_active=False,
    )
