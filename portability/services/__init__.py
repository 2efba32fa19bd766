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
    import_job_record,
    import_job_run,
    import_upload_path,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "ImportFailed",
    "export_header",
    "export_lines",
    "export_stream",
    "import_embed_missing",
    "import_job_create",
    "import_job_progress",
    "import_job_record",
    "import_job_run",
    "import_run",
    "import_upload_path",
    "lines_read",
]
