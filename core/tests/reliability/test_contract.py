"""Contract: every operation in /api/schema/ answers what the schema documents.

schemathesis (pinned in requirements-dev.txt) runs through its own CLI against a live test
server: a real socket, real JSON over HTTP, the API keys of seeded workspaces. Path
parameters and body references are drawn partly from the seeded rows (so detail responses
are 200s that the schema must describe) and partly generated (so 404s and 400s are too).

The runs are bounded for CI on 2 cores (examples per operation, no shrinking, one worker)
and derandomized with a fixed seed, so a failure reproduces with the same cases.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest
import requests
from django.core.servers.basehttp import WSGIServer
from django.test import LiveServerTestCase, override_settings
from django.test.testcases import LiveServerThread, QuietWSGIRequestHandler
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from rest_framework.test import APIClient

from core.services import agent_get_or_create, api_key_create, workspace_create

pytestmark = pytest.mark.slow

SCHEMATHESIS = str(Path(sys.executable).with_name("st"))
SEED = 20261123
# ~40 cases per operation over ~66 operations with examples, coverage and fuzzing phases:
# about 3,000 requests, two to three minutes on this 2-core machine.
MAX_EXAMPLES = 10
CONFORMANCE_CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "ignored_auth",
]
# Generous per request: the first semantic call of the server thread loads the local embedding model.
REQUEST_TIMEOUT_SECONDS = 120


def seed_workspace(name: str, marker: str) -> dict:
    """A workspace with one row of every kind, each carrying `marker` in its text.

    Returns the workspace key and, per path parameter / body reference name, the ids of the rows.
    """
    workspace = workspace_create(name=name)
    agent = agent_get_or_create(workspace=workspace, slug="assistant")
    _, key = api_key_create(workspace=workspace, name="contract")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def call(method, path, body=None, expect=(200, 201, 202)):
        response = getattr(client, method)(f"/api/v1/{path}", body, format="json")
        assert response.status_code in expect, (path, response.status_code, response.content[:500])
        return response.json() if response.content else None

    person = call(
        "post",
        "memory-users/",
        {
            "canonical_id": f"telegram:{marker}",
            "display_name": f"Ada {marker}",
            "identities": [{"channel": "telegram", "external_id": marker, "profile": {"note": marker}}],
        },
    )
    merged = call("post", "memory-users/", {"canonical_id": f"email:{marker}", "display_name": marker})
    thread = call(
        "post",
        "threads/",
        {"agent": agent.slug, "memory_user": person["id"], "title": marker, "metadata": {"m": marker}},
    )
    thread_id = thread["id"]
    messages = call(
        "post",
        f"threads/{thread_id}/messages/",
        {
            "messages": [
                {"role": "user", "content": f"I moved to Lisbon ({marker})."},
                {
                    "role": "assistant",
                    "content": f"Noted, {marker}.",
                    "tool_calls": [
                        {
                            "id": "call-1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": f"tool output {marker}", "tool_call_id": "call-1"},
            ]
        },
    )["messages"]
    fact = call(
        "post",
        "facts/remember/",
        {
            "agent": agent.slug,
            "memory_user": person["id"],
            "key": "city",
            "value": f"Lisbon {marker}",
            "scope": "user",
            "source_message": messages[0]["id"],
        },
    )["fact"]
    call(
        "post",
        "facts/remember/",
        {
            "agent": agent.slug,
            "memory_user": person["id"],
            "key": "city",
            "value": f"Porto {marker}",
            "scope": "user",
        },
    )
    episode = call(
        "post",
        "episodes/",
        {"agent": agent.slug, "memory_user": person["id"], "thread": thread_id, "input": {"goal": marker}},
    )
    closed = call("post", "episodes/", {"agent": agent.slug, "input": {"goal": marker}, "outcome": "success"})
    procedure = call(
        "post",
        "procedures/",
        {
            "agent": agent.slug,
            "name": f"Refund {marker}",
            "description": f"How to refund {marker}",
            "trigger_conditions": {"goal_contains": ["refund"]},
            "procedure_type": "prompt_template",
            "content": {"template": marker},
            "source_episode_ids": [closed["id"]],
        },
    )
    call(
        "put",
        f"threads/{thread_id}/checkpoints/",
        {"checkpoint_id": "cp-1", "checkpoint": {"type": "json", "data": "e30="}, "metadata": {"m": marker}},
    )
    call(
        "put",
        f"threads/{thread_id}/checkpoints/cp-1/writes/",
        {
            "task_id": "task-1",
            "writes": [{"idx": 0, "channel": marker, "value": {"type": "json", "data": "e30="}}],
        },
    )
    call("put", f"threads/{thread_id}/plan/", {"plan": {"steps": [marker]}})
    call("put", f"threads/{thread_id}/runs/run-1/snapshot/", {"snapshot": {"state": marker}})
    call(
        "post",
        f"threads/{thread_id}/iterations/",
        {"task": "t", "outcome": "success", "detail": {"m": marker}},
    )
    extracted = call(
        "post",
        "episodic-entries/extract/",
        {
            "agent": agent.slug,
            "memory_user": person["id"],
            "transcript": [{"role": "user", "content": f"I adopted a cat named {marker}."}],
            "candidates": [
                {
                    "content": f"Adopted a cat named {marker}.",
                    "source": "user_assertion",
                    "evidence": f"I adopted a cat named {marker}.",
                }
            ],
            "use_llm": False,
            "sync": True,
        },
    )
    entry_ids = [entry["id"] for entry in extracted["stored"]]
    assert entry_ids, extracted
    ids = {
        "slug": [agent.slug],
        "memory_user_id": [person["id"], merged["id"]],
        "thread_id": [thread_id],
        "message_id": [m["id"] for m in messages],
        "fact_id": [fact["id"]],
        "episode_id": [episode["id"], closed["id"]],
        "procedure_id": [procedure["id"]],
        "entry_id": entry_ids,
        "checkpoint_id": ["cp-1"],
        "run_id": ["run-1"],
    }
    return {"workspace": workspace, "key": key, "ids": ids, "marker": marker}


# Body and query references that name rows, bound to the same seeded ids as the path parameters.
REFERENCES = {
    "memory_user_id": ["body.memory_user", "body.target", "query.memory_user"],
    "thread_id": ["body.thread", "query.thread"],
    "message_id": ["body.source_message", "query.leaf"],
    "episode_id": ["body.source_episode", "body.source_episode_ids[*]"],
    "procedure_id": ["body.parent"],
    "slug": ["body.agent", "query.agent"],
}


def _toml(value) -> str:
    return json.dumps(value)


def schemathesis_config(ids: dict, *, probability: float) -> str:
    """A schemathesis.toml drawing path parameters and body references from the seeded ids."""
    lines = [
        f"seed = {SEED}",
        "[generation]",
        "no-shrink = true",
        "deterministic = true",
        # The HAR must hold each request as sent, for `replay`: sanitized, a query parameter
        # named `key` was recorded as "[Filtered]", and a request refused for a NUL in it was
        # replayed without one (seed 77). The keys are the run's own throwaway ones.
        "[output.sanitization]",
        "enabled = false",
    ]
    for name, values in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = {_toml(values)}"]
    lines.append("[parameters]")
    for name in ids:
        binding = f"{{ dictionary = {_toml(name)}, probability = {probability} }}"
        lines.append(f"{_toml('path.' + name)} = {binding}")
        for reference in REFERENCES.get(name, []):
            lines.append(f"{_toml(reference)} = {binding}")
    return "\n".join(lines) + "\n"


def operation_of(paths: list[str]):
    """A function naming the documented operation path of a request URL (literal segments win)."""
    patterns = sorted(
        ((re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(p)) + "$"), p) for p in paths),
        key=lambda item: -len(re.sub(r"{[^}]+}", "", item[1])),
    )

    def match(url: str) -> str | None:
        path = urlsplit(url).path
        return next((template for pattern, template in patterns if pattern.match(path)), None)

    return match


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _error_code(text: str) -> str | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body.get("error", {}).get("code") if isinstance(body, dict) else None


def replay(session: requests.Session, request: dict, replacements: dict) -> tuple[int, str | None]:
    """Send a recorded HAR request again with ids replaced; (status, error code) of the answer."""
    url, body = request["url"], request.get("postData", {}).get("text")
    for old, new in replacements.items():
        url = url.replace(old, new)
        body = body.replace(old, new) if body is not None else None
    headers = {h["name"]: h["value"] for h in request["headers"] if h["name"].lower() == "content-type"}
    data = body.encode("utf-8", "surrogatepass") if body is not None else None
    response = session.request(
        request["method"], url, data=data, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS
    )
    return response.status_code, _error_code(response.text)


def openapi_document() -> dict:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))


def workspace_snapshot(key: str) -> dict:
    """Every row a workspace key can list, with its content, to compare before and after a run."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def listing(path):
        response = client.get(f"/api/v1/{path}?limit=500")
        assert response.status_code == 200, (path, response.content[:300])
        return sorted(json.dumps(row, sort_keys=True) for row in response.json()["results"])

    threads = client.get("/api/v1/threads/?limit=500").json()["results"]
    snapshot = {
        path: listing(path)
        for path in (
            "agents/",
            "memory-users/",
            "threads/",
            "facts/",
            "episodes/",
            "procedures/",
            "episodic-entries/",
            "checkpoints/",
        )
    }
    for thread in threads:
        for child in ("messages/", "iterations/", "plan/versions/", "checkpoints/"):
            snapshot[f"threads/{thread['id']}/{child}"] = listing(f"threads/{thread['id']}/{child}")
    return snapshot


def _distinct_failures(junit: Path) -> list[str]:
    """ "<operation>: <first line of each failure>" from schemathesis' JUnit report, deduplicated."""
    if not junit.exists():
        return []
    failures = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for problem in [*case.iter("failure"), *case.iter("error")]:
            text = (problem.get("message") or problem.text or "").strip()
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            checks = [line for line in lines if line.startswith("- ")] or lines[:1]
            failures += [f"{case.get('name')}: {check}" for check in checks]
    return sorted(set(failures))


class SerialLiveServerThread(LiveServerThread):
    """Serves one request at a time on the server thread, which keeps its database connection.

    Django's threaded live server opens a PostgreSQL connection per request thread: about
    half of every request's time, and the run is ~4,000 requests.
    """

    def _create_server(self, connections_override=None):
        return WSGIServer((self.host, self.port), QuietWSGIRequestHandler, allow_reuse_address=False)


# Context parts read inline: pool threads would keep database connections open after the
# server thread is gone, and the test database could not be dropped.
# The per-process caches of keys, endpoints and webhook subscriptions at their production
# lifetimes (the test settings turn them off): no request of the run revokes a key, and with
# the key looked up on every request authentication took ~30% of the server's time (profiled).
# A webhook the run subscribes at this server's own URL (the tests allow private URLs) is
# delivered inline (eager tasks) to the server busy with the request that sent it: each delivery
# waits out the timeout until 20 failures disable the subscription, and the run may subscribe
# many. With the default 10 s, a run seeded otherwise at 60 examples outlasted the subprocess'
# half hour (at 1 s it still spent most of its time waiting); no receiver answers here, so a
# delivery may as well fail at once.
@override_settings(
    SIDE_READ_THREADS=0,
    API_KEY_CACHE_SECONDS=5,
    PROVIDER_CACHE_SECONDS=5,
    WEBHOOKS_ACTIVE_CACHE_SECONDS=5,
    WEBHOOKS_TIMEOUT_SECONDS=0.05,
)
class ContractTests(LiveServerTestCase):
    server_thread_class = SerialLiveServerThread

    def setUp(self):
        super().setUp()
        self.acme = seed_workspace("Acme", marker=f"acme-{uuid.uuid4().hex[:12]}")
        self.globex = seed_workspace("Globex", marker=f"globex-{uuid.uuid4().hex[:12]}")

    @contextmanager
    def schemathesis(
        self, *, key, ids, checks, max_examples, phases="examples,coverage,fuzzing", probability=0.5
    ) -> Iterator[tuple[int, str, list[dict]]]:
        """Run `st run` over every operation.

        Yields the exit code, a summary (the distinct failures and schemathesis' own summary,
        the whole console output being kept in a file it names) and the HAR entries. The
        working directory is removed when the block completes, and kept for a failure's
        reader when it raises.
        """
        workdir = Path(tempfile.mkdtemp(prefix="contract-"))
        config = workdir / "schemathesis.toml"
        config.write_text(schemathesis_config(ids, probability=probability))
        har, junit, console = workdir / "run.har", workdir / "junit.xml", workdir / "console.txt"
        command = [
            SCHEMATHESIS,
            "--config-file",
            str(config),
            "run",
            f"{self.live_server_url}/api/schema/",
            "--checks",
            ",".join(checks),
            "--phases",
            phases,
            "--max-examples",
            str(max_examples),
            "--no-shrink",
            "--generation-deterministic",
            "--workers",
            "1",
            "--request-timeout",
            str(REQUEST_TIMEOUT_SECONDS),
            "--continue-on-failure",
            "--report",
            "har,junit",
            "--report-har-path",
            str(har),
            "--report-junit-path",
            str(junit),
            "--no-color",
        ]
        if key is not None:
            command += ["--header", f"Authorization: Bearer {key}"]
        with console.open("w") as out:
            result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, timeout=1800)
        output = console.read_text()
        summary = output[output.rfind("SUMMARY") - 40 :] if "SUMMARY" in output else output[-3000:]
        failures = _distinct_failures(junit)
        report = "\n".join(
            [f"{len(failures)} distinct failures:", *failures, summary, f"Full output: {console}"]
        )
        entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
        # ~30 MB per run; the console output and the JUnit report stay for a failure's reader.
        har.unlink(missing_ok=True)
        yield result.returncode, report, entries
        shutil.rmtree(workdir, ignore_errors=True)

    def test_every_operation_answers_as_the_schema_documents(self):
        """No 5xx, and every status code, content type and body is the documented one."""
        with self.schemathesis(
            key=self.acme["key"], ids=self.acme["ids"], checks=CONFORMANCE_CHECKS, max_examples=MAX_EXAMPLES
        ) as (code, report, entries):
            assert code == 0, report
            assert len(entries) > 3000, report
            statuses = {entry["response"]["status"] for entry in entries}
            # The seeded ids reach the rows: detail reads, writes and deletes, not only 404s.
            assert {200, 201, 204, 400, 401, 404} <= statuses, statuses

    def test_requests_without_a_key_are_refused_with_the_error_body(self):
        """Every operation refuses a request with no key (401) before reading anything."""
        with self.schemathesis(
            key=None, ids=self.acme["ids"], checks=CONFORMANCE_CHECKS[:-1], max_examples=5, phases="fuzzing"
        ) as (code, report, entries):
            assert code == 0, report
            assert len(entries) > 300, report
            paths = openapi_document()["paths"]
            operation = operation_of(list(paths))
            documented = {(method.upper(), path) for path, item in paths.items() for method in item}
            tried = {(e["request"]["method"], operation(e["request"]["url"])) for e in entries}
            refused = {
                (e["request"]["method"], operation(e["request"]["url"]))
                for e in entries
                if e["response"]["status"] == 401
            }
            # Every documented operation, not a count that each new route would have to bump.
            assert refused == documented, (sorted(documented - refused), sorted(tried - refused))
            for entry in entries:
                response = entry["response"]
                # 400/404 only for URLs refused before authentication (NUL in the URL, no route).
                assert response["status"] in (400, 401, 404), (entry["request"]["url"], response["status"])
                assert set(json.loads(response["content"]["text"])) == {"error"}
                assert self.acme["marker"] not in response["content"]["text"]

    def test_another_workspace_key_never_reaches_this_workspace(self):
        """Globex's key, aimed at Acme's ids in paths, queries and bodies, reads and changes nothing."""
        before = workspace_snapshot(self.acme["key"])
        with self.schemathesis(
            key=self.globex["key"],
            ids=self.acme["ids"],
            checks=CONFORMANCE_CHECKS[:-1],
            max_examples=10,
            phases="fuzzing",
            probability=0.9,
        ) as (code, report, entries):
            assert code == 0, report
            assert len(entries) > 600, report
            secrets = {value for values in self.acme["ids"].values() for value in values if _is_uuid(value)}
            # Each of Acme's ids stands for a fresh id that exists nowhere: an id out of the key's
            # reach must answer exactly like one that does not exist (no existence oracle).
            nowhere = {secret: str(uuid.uuid4()) for secret in secrets}
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {self.globex['key']}"
            aimed = 0
            for entry in entries:
                request = entry["request"]
                sent = request["url"] + request.get("postData", {}).get("text", "")
                text = entry["response"]["content"].get("text", "")
                assert self.acme["marker"] not in text, request["url"]
                leaked = {secret for secret in secrets if secret in text and secret not in sent}
                assert not leaked, (request["url"], leaked)
                if any(secret in sent for secret in secrets):
                    aimed += 1
                    original = entry["response"]["status"], _error_code(text)
                    assert replay(session, request, nowhere) == original, (
                        request["method"],
                        sent[:500],
                        text[:300],
                    )
            assert aimed > 300, aimed
            assert workspace_snapshot(self.acme["key"]) == before
