"""The response an export is sent in, for the API and the /memories download alike."""

from django.http import StreamingHttpResponse
from django.utils import timezone

NDJSON = "application/x-ndjson"


class ExportResponse(StreamingHttpResponse):
    """Streamed by the server line by line; `content` still reads the body whole, as Django's
    test client and the route suites read every response (a real server never asks)."""

    @property
    def content(self):
        body = b"".join(self.streaming_content)
        self.streaming_content = [body]
        return body


def export_response(lines, *, kind: str) -> ExportResponse:
    response = ExportResponse(lines, content_type=NDJSON)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="memory-{kind}-{stamp}.jsonl"'
    return response
