"""Export the packaged embedding weights to ONNX, the file EMBEDDING_RUNTIME=onnx and openvino run
(scripts/bootstrap runs it)."""

from importlib import metadata

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.embeddings import RUNTIME_ONNX_INT8, EmbeddingError, local_runtime, query_runtime_for
from core.lib.local_models import LOCAL_MODELS, local_model
from core.lib.onnx_embedding import FP32, INT8, onnx_model_export, onnx_model_file


def installed(model) -> bool:
    try:
        metadata.version(model.weights_package)
    except metadata.PackageNotFoundError:
        return False
    return True


class Command(BaseCommand):
    help = (
        "Export the local embedding models to ONNX from their packaged weights: EMBEDDING_LOCAL_MODEL's "
        "and every other one whose weights are installed; does nothing for a file that is up to date."
    )

    def add_arguments(self, parser):
        parser.add_argument("--int8", action="store_true", help="Also build the int8 (quantised) graph.")
        parser.add_argument("--force", action="store_true", help="Rebuild even when up to date.")
        parser.add_argument("--model", choices=sorted(LOCAL_MODELS), help="Only this model.")

    def handle(self, *args, **options):
        directory = settings.EMBEDDING_ONNX_DIR
        try:
            configured = local_model(settings.EMBEDDING_LOCAL_MODEL)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["model"]:
            models = [LOCAL_MODELS[options["model"]]]
        else:
            models = [configured, *(m for m in LOCAL_MODELS.values() if m != configured and installed(m))]
        try:
            runtimes = {model.name: local_runtime(model=model) for model in models}
            query_runtimes = {model.name: query_runtime_for(runtimes[model.name], model) for model in models}
        except EmbeddingError as exc:
            raise CommandError(str(exc)) from exc
        for model in models:
            # The int8 graph when asked for, when texts are stored by it, or when it embeds
            # this model's search queries (core.embeddings.query_runtime_for).
            int8 = options["int8"] or RUNTIME_ONNX_INT8 in (runtimes[model.name], query_runtimes[model.name])
            for variant in [FP32, INT8] if int8 else [FP32]:
                built = onnx_model_export(
                    directory=directory, variant=variant, force=options["force"], model=model
                )
                state = "exported" if built else "up to date"
                self.stdout.write(f"{onnx_model_file(directory, variant, model)}: {state}")
