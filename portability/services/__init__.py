"""Export and import of memory (docs/export.md): the writer, the reader and import jobs."""

from portability.services.exporting import FORMAT, VERSION, export_header, export_lines, export_stream
from portability.services.importing import (
    ImportFailed,
    import_embed_missing,
    import_run,
    lines_read,
)
from portability.services.jobs import (
    import_job_create,
    import_job_progress,
    import_job_queue,
    import_job_run,
    import_jobs_sweep,
    import_upload_path,
)
from portability.services.uploads import Upload, UploadTooLarge, import_upload_receive

__all__ = [
    "FORMAT",
    "VERSION",
    "ImportFailed",
    "Upload",
    "UploadTooLarge",
    "export_header",
    "export_lines",
    "export_stream",
    "import_embed_missing",
    "import_job_create",
    "import_job_progress",
    "import_job_queue",
    "import_job_run",
    "import_jobs_sweep",
    "import_upload_receive",
    "import_run",
    "import_upload_path",
    "lines_read",
]
