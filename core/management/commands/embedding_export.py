"""Export the packaged embedding weights to ONNX for EMBEDDING_RUNTIME=onnx (scripts/bootstrap runs it)."""

from django.conf import settings
from django.core.management.base import BaseCommand

from core.lib.onnx_embedding import FP32, INT8, onnx_model_export, onnx_model_file


class Command(BaseCommand):
    help = "Export all-MiniLM-L6-v2 from the packaged weights to ONNX; does nothing when up to date."

    def add_arguments(self, parser):
        parser.add_argument("--int8", action="store_true", help="Also build the int8 (quantised) graph.")
        parser.add_argument("--force", action="store_true", help="Rebuild even when up to date.")

    def handle(self, *args, **options):
        directory = settings.EMBEDDING_ONNX_DIR
        variants = [FP32, INT8] if options["int8"] or settings.EMBEDDING_RUNTIME == "onnx-int8" else [FP32]
        for variant in variants:
            built = onnx_model_export(directory=directory, variant=variant, force=options["force"])
            state = "exported" if built else "up to date"
            self.stdout.write(f"{onnx_model_file(directory, variant)}: {state}")
