"""Reading exports in tests: records as dicts, and a form of them equal across workspaces; an
import racing another write, and the procedure those races bring."""

import io
import json
import threading

from django.db import transaction

from core.testing import thread_started, until_a_backend_waits
from portability.registry import AUDIT_ENTITY_TYPES, BY_NAME, record_key, ref_type
from portability.services import export_lines, import_run, lines_read


def export_bytes(scope) -> bytes:
    return b"".join(export_lines(scope=scope, chunk_size=7))


def records(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def import_bytes(workspace, data: bytes, **kwargs) -> dict:
    return import_run(workspace=workspace, lines=lines_read(io.BytesIO(data)), actor="test", **kwargs)


def normalized(data: bytes) -> list:
    """The records with every id replaced by (type, order of first appearance): two exports
    are equal modulo ids when these are equal. The header's instant and source, and the audit
    event of the import itself, are not part of the memory."""
    rows = records(data)
    header, body = rows[0], rows[1:]
    labels = {}

    def label(type_name, old):
        key = (type_name, old)
        if key not in labels:
            labels[key] = f"{type_name}#{sum(1 for t, _ in labels if t == type_name)}"
        return labels[key]

    for record in body:
        if record["type"] != "end":
            label(record["type"], record["id"])
    out = [{k: v for k, v in header.items() if k not in ("exported_at", "source")}]
    for record in body:
        if record.get("entity_type") == "import":
            continue
        record_type = BY_NAME.get(record["type"])
        if record_type is None:  # the closing line
            out.append({"type": record["type"]})
            continue
        fields = {record_key(f): f for f in record_type.fields()}
        item = {"type": record["type"], "id": label(record["type"], record["id"])}
        for name, value in record.items():
            if name in ("type", "id"):
                continue
            f = fields[name]
            if value is not None and f.is_relation and ref_type(f):
                value = label(ref_type(f), value)
            elif value is not None and name in record_type.id_columns:
                value = label(record_type.id_columns[name], value)
            elif name in record_type.id_lists:
                value = [label(record_type.id_lists[name], v) for v in value]
            elif name in record_type.json_ids and isinstance(value, dict):
                keys = record_type.json_ids[name]
                value = {k: label(keys[k], v) if k in keys and v else v for k, v in value.items()}
            elif name == "entity_id" and record.get("entity_type") in AUDIT_ENTITY_TYPES:
                value = label(AUDIT_ENTITY_TYPES[record["entity_type"]], value)
            item[name] = value
        out.append(item)
    return out


def while_held(first, second) -> list[BaseException]:
    """Run `first` in a transaction on one connection and keep it open; run `second` on another
    once `first` ran, let `first` commit once `second` waits for a lock, and return what either
    raised. The two then run one after the other, `first` committing first."""
    ran, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold():
        with transaction.atomic():
            first()
            ran.set()
            release.wait(30)

    holder = thread_started(hold, errors)
    assert ran.wait(30)
    waiter = thread_started(second, errors)
    until_a_backend_waits(timeout=10)
    release.set()
    holder.join(30)
    waiter.join(30)
    return errors


def refund(workspace, agent, content, parent=None):
    """A version of the procedure "Refund" (the next one, with `parent`)."""
    from procedures.services import procedure_create

    return procedure_create(
        workspace=workspace,
        agent=agent,
        name="Refund",
        procedure_type="prompt_template",
        content=content,
        parent=parent,
    )
