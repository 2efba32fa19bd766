"""An import file arriving as a request body: streamed to disk chunk by chunk (gunzipped on the
way when it says so), capped, its header checked, so a 1 GB file never sits in memory."""

import zlib
from dataclasses import dataclass

from django.conf import settings

from core.errors import ApplicationError
from portability.services.importing import header_check, lines_read
from portability.services.jobs import import_file_remove, import_upload_path

# Bytes read from the request per call: large enough that a 1 GB body is ~16,000 reads, small
# enough that the buffers the upload holds (one compressed and one inflated chunk) stay tiny.
CHUNK_BYTES = 64 * 1024
# The header is a few hundred bytes; a longer first line is not an export.
HEADER_MAX_BYTES = 64 * 1024

TOO_LARGE = "The import is larger than the limit of {limit} bytes (PORTABILITY_IMPORT_MAX_BYTES)."
NOT_A_LENGTH = "Content-Length is not a number."
BAD_GZIP = "The body is not valid gzip: {detail}"
UNSUPPORTED_ENCODING = "Content-Encoding {encoding} is not supported; send the file as is or gzipped."


@dataclass(frozen=True)
class Upload:
    path: str
    size: int  # bytes on disk (after gunzip): what the job's progress bar counts


class UploadTooLarge(ApplicationError):
    status_code = 413

    def __init__(self, limit: int):
        super().__init__(TOO_LARGE.format(limit=limit), code="payload_too_large")


def _chunks(stream, declared: int | None):
    """The body in chunks of at most CHUNK_BYTES; a declared length is read exactly."""
    left = declared
    while left is None or left > 0:
        chunk = stream.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


def _gunzipped(chunks, limit: int):
    """Inflate gzip members as they arrive, never more than CHUNK_BYTES of output at a time,
    so a bomb stops at `limit` output bytes instead of filling memory or disk."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    produced = 0
    try:
        for chunk in chunks:
            data = chunk
            while data:
                out = inflater.decompress(data, CHUNK_BYTES)
                produced += len(out)
                if produced > limit:
                    raise UploadTooLarge(limit)
                yield out
                data = inflater.unconsumed_tail
                # Concatenated members (`cat a.gz b.gz`) are one valid gzip stream.
                if inflater.eof and inflater.unused_data:
                    data = inflater.unused_data + data
                    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        if not inflater.eof and produced:
            raise ApplicationError(BAD_GZIP.format(detail="the stream ends early"), code="malformed_request")
    except zlib.error as exc:
        raise ApplicationError(BAD_GZIP.format(detail=exc), code="malformed_request") from None


def import_upload_receive(*, stream, content_length: str | None, content_encoding: str = "") -> Upload:
    """Write a request body to PORTABILITY_IMPORT_DIR and check its first line is an export
    header; refuse (413) past PORTABILITY_IMPORT_MAX_BYTES, declared or read. The file is
    removed on any refusal; otherwise it belongs to the job made from it."""
    limit = settings.PORTABILITY_IMPORT_MAX_BYTES
    declared = None
    if content_length:
        try:
            declared = int(content_length)
        except ValueError:
            raise ApplicationError(NOT_A_LENGTH, code="malformed_request") from None
        if declared < 0:
            raise ApplicationError(NOT_A_LENGTH, code="malformed_request")
        if declared > limit:
            raise UploadTooLarge(limit)
    encoding = content_encoding.strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise ApplicationError(
            UNSUPPORTED_ENCODING.format(encoding=encoding[:40]),
            code="unsupported_media_type",
            status_code=415,
        )
    chunks = _chunks(stream, declared)
    if encoding in ("gzip", "x-gzip"):
        chunks = _gunzipped(chunks, limit)
    path = import_upload_path()
    size = 0
    try:
        with open(path, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise UploadTooLarge(limit)
                out.write(chunk)
        with open(path, "rb") as written:
            first = next(lines_read(written, limit=HEADER_MAX_BYTES, code="malformed_header"), None)
        header_check(first[1] if first else b"", 1)
    except BaseException:
        import_file_remove(path)
        raise
    return Upload(path=path, size=size)
