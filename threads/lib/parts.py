"""A message's text and file references rendered as model input content parts.

Two shapes (docs/threads.md, "Files"): OpenAI's (`content_format="parts"`: `text` and
`image_url` parts) and Anthropic's (`content_format="anthropic"`: `text` and `image` blocks
with a `url` or `base64` source). Pure functions: nothing is fetched, an image URL is passed on
as stored and the model's provider reads it.

- An image of a user message becomes an image part (its `url`, or its base64 `data` as a
  data: URL / base64 source). Chat APIs take images from users only, so an image of another
  role, or one without an http(s) URL or data (Dify's `local_file`), becomes a reference.
- A document with extracted `text` becomes a text part `<document name="...">text</document>`;
  one without text becomes a reference. Audio, video and custom files become references.
- A reference is a text part `<file type="..." name="..." url="..." />`, so the model knows a
  file was there.

Stored text reaches the model through core.lib.escaping: names and URLs inside tags through
`escape_text` (quotes escaped too, since they sit in attributes), document text through
`strip_invisible` and markup escaping with its line breaks kept.
"""

from html import escape

from core.lib.escaping import escape_text, strip_invisible

# plain: today's shape (content a string, references in `files`).
CONTENT_FORMATS = ("plain", "parts", "anthropic")
ATTRIBUTE_MAX_CHARS = 2000


def _attribute(value) -> str:
    return escape_text(str(value), limit=ATTRIBUTE_MAX_CHARS).replace('"', "&quot;")


def _http_url(file: dict) -> str:
    url = file.get("url")
    if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
        return url
    return ""


def _attributes(file: dict, *, keys) -> str:
    values = {
        "type": file.get("type"),
        "name": file.get("name") or file.get("filename"),
        "mime_type": file.get("mime_type"),
        "url": _http_url(file),
        "file_id": file.get("file_id"),
    }
    return "".join(f' {key}="{_attribute(values[key])}"' for key in keys if values[key])


def _reference(file: dict) -> dict:
    return {
        "type": "text",
        "text": f"<file{_attributes(file, keys=('type', 'name', 'mime_type', 'url', 'file_id'))} />",
    }


def _document(file: dict) -> dict:
    text = file.get("text")
    if not text:
        attributes = _attributes(file, keys=("name", "mime_type", "url", "file_id"))
        return {"type": "text", "text": f"<document{attributes} />"}
    attributes = _attributes(file, keys=("name", "mime_type"))
    body = escape(strip_invisible(text), quote=False)
    return {"type": "text", "text": f"<document{attributes}>\n{body}\n</document>"}


def _image(file: dict, *, content_format: str) -> dict | None:
    data, url = file.get("data"), _http_url(file)
    if content_format == "anthropic":
        if data:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": file.get("mime_type"), "data": data},
            }
        return {"type": "image", "source": {"type": "url", "url": url}} if url else None
    if data:
        url = f"data:{file.get('mime_type')};base64,{data}"
    if not url:
        return None
    return {"type": "image_url", "image_url": {"url": url, "detail": file.get("detail") or "auto"}}


def file_part(file: dict, *, role: str, content_format: str = "parts") -> dict:
    """One file reference as one content part."""
    kind = file.get("type")
    if kind == "image" and role == "user":
        part = _image(file, content_format=content_format)
        if part is not None:
            return part
    if kind == "document":
        return _document(file)
    return _reference(file)


def files_parts(files: list[dict], *, role: str, content_format: str = "parts") -> list[dict]:
    return [file_part(file, role=role, content_format=content_format) for file in files or ()]


def content_parts(*, role: str, content: str, files: list[dict], content_format: str = "parts") -> list[dict]:
    """The message as content parts: its text first (when any), then its files in order."""
    parts = [{"type": "text", "text": content}] if content else []
    return parts + files_parts(files, role=role, content_format=content_format)
