import factory

from procedures.models import Procedure


class ProcedureFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Procedure

    name = factory.Sequence(lambda n: f"procedure {n}")
    procedure_type = Procedure.ProcedureType.PROMPT_TEMPLATE
    content = "Do the thing."
