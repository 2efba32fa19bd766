"""The Dockerfile and compose.yaml hold to what docs/deploy.md promises (no image builder runs here)."""

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client, override_settings

yaml = pytest.importorskip("yaml")

ROOT = Path(settings.BASE_DIR)
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
# Variables the app services get that the project's own code does not read, and who does.
THIRD_PARTY_VARIABLES = {
    "DJANGO_SETTINGS_MODULE": "Django",
    "PORT": "gunicorn (bind)",
    "WEB_CONCURRENCY": "gunicorn (workers)",
    "GUNICORN_CMD_ARGS": "gunicorn",
    "HF_HUB_OFFLINE": "huggingface_hub",
    "TRANSFORMERS_OFFLINE": "transformers",
}
ENV_READ = re.compile(
    r"""(?:env_(?:str|int|float|bool|list)\(|environ(?:\.get)?[(\[]|getenv\()\s*["']([A-Z0-9_]+)["']"""
)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        keyword, _, rest = pending.strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def compose_services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def app_services() -> dict:
    """The services that run the project's image."""
    return {name: spec for name, spec in compose_services().items() if "build" in spec}


def command_words(spec: dict) -> list[str]:
    command = spec.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def project_environment_variables() -> set[str]:
    """Every variable name the project's code reads (settings, env helpers, manage.py, commands)."""
    names = set()
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in {".venv", "var", "bench", "clients"} or "tests" in parts:
            continue
        names.update(ENV_READ.findall(path.read_text()))
    return names


def test_compose_runs_exactly_one_beat():
    """One service runs Celery beat, with one replica: two would send every periodic task twice."""
    beats = {name: spec for name, spec in app_services().items() if "beat" in command_words(spec)}
    assert list(beats) == ["beat"]
    assert beats["beat"].get("deploy", {}).get("replicas", 1) == 1


def test_compose_beat_uses_the_locked_scheduler():
    """Beat's scheduler is the advisory-lock one, and that class exists: a second beat stands by."""
    from core.lib.beat import LockedPersistentScheduler

    words = command_words(app_services()["beat"])
    (scheduler,) = [word.split("=", 1)[1] for word in words if word.startswith("--scheduler=")]
    module, _, name = scheduler.partition(":")
    assert f"{LockedPersistentScheduler.__module__}:{LockedPersistentScheduler.__name__}" == scheduler
    assert (ROOT / (module.replace(".", "/") + ".py")).exists(), name


def test_migrations_complete_before_web_and_worker_start():
    """The one-shot migrate service runs `manage.py migrate`, and every long-running service
    of the image waits for it to exit successfully."""
    services = app_services()
    assert command_words(services["migrate"])[:3] == ["python", "manage.py", "migrate"]
    assert services["migrate"]["restart"] == "no"
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name


def test_compose_passes_only_variables_the_code_reads():
    """Every variable compose gives the app services is read by the project's code (or by
    Django, gunicorn or Hugging Face, as listed): a misspelt name would be silently ignored."""
    known = project_environment_variables() | set(THIRD_PARTY_VARIABLES)
    for name, spec in app_services().items():
        unknown = set(spec.get("environment", {})) - known
        assert not unknown, f"{name}: {sorted(unknown)}"


def test_dockerfile_sets_only_variables_someone_reads():
    """The image's own ENV names are the project's, the listed third parties', or Python's and pip's."""
    known = project_environment_variables() | set(THIRD_PARTY_VARIABLES) | {"PATH"}
    for keyword, rest in dockerfile_instructions():
        if keyword != "ENV":
            continue
        for word in shlex.split(rest):
            name = word.split("=", 1)[0]
            assert name in known or name.startswith(("PYTHON", "PIP_")), name


def test_compose_services_have_healthchecks_or_say_why_not():
    """Backing services and the worker are probed; web inherits the image's HEALTHCHECK."""
    services = compose_services()
    for name in ("postgres", "redis", "worker"):
        assert services[name]["healthcheck"]["test"], name
    assert "healthcheck" not in services["web"]
    assert services["postgres"]["image"].startswith("pgvector/pgvector:pg")


def test_dockerfile_runs_as_an_unprivileged_user():
    """The last USER of the image is neither root nor uid 0."""
    users = [rest.split(":")[0] for keyword, rest in dockerfile_instructions() if keyword == "USER"]
    assert users
    assert users[-1] not in {"root", "0"}


def test_dockerfile_command_names_the_wsgi_application():
    """The default command serves `memory_project.wsgi:application`, which exists."""
    (cmd,) = [rest for keyword, rest in dockerfile_instructions() if keyword == "CMD"]
    words = json.loads(cmd)
    assert words[0] == "gunicorn"
    module, _, attribute = words[1].partition(":")
    assert (ROOT / (module.replace(".", "/") + ".py")).exists()
    assert attribute in (ROOT / "memory_project" / "wsgi.py").read_text()
    assert f"{module}.{attribute}" == settings.WSGI_APPLICATION


def test_compose_commands_name_modules_that_exist():
    """`celery -A memory_project` and `manage.py` in compose point at real files."""
    for name, spec in app_services().items():
        words = command_words(spec)
        if "-A" in words:
            app = words[words.index("-A") + 1]
            assert (ROOT / app / "celery.py").exists(), name
        if "manage.py" in words:
            assert (ROOT / "manage.py").exists(), name


def test_dockerfile_copies_only_files_that_exist_and_are_not_ignored():
    """Every COPY source from the build context exists and is not excluded by .dockerignore."""
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    copies = [rest for keyword, rest in dockerfile_instructions() if keyword == "COPY"]
    assert copies
    for rest in copies:
        words = shlex.split(rest)
        if any(word.startswith("--from") for word in words):
            continue
        paths = [word for word in words if not word.startswith("--")]
        for source in paths[:-1]:
            assert (ROOT / source).exists(), source
            assert source not in ignored, source


def test_dockerignore_keeps_local_state_out_of_the_image():
    """The virtualenv, var/ (embedded databases, credentials), bench results and .git stay out."""
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "var", "bench/results", "node_modules", ".env"} <= ignored


def test_healthcheck_probes_healthz():
    """The image's HEALTHCHECK asks /healthz, and /healthz is routed."""
    (check,) = [rest for keyword, rest in dockerfile_instructions() if keyword == "HEALTHCHECK"]
    assert "/healthz" in check
    assert Client().get("/healthz").status_code == 200


def healthcheck_code() -> str:
    (check,) = [rest for keyword, rest in dockerfile_instructions() if keyword == "HEALTHCHECK"]
    words = json.loads(check[check.index("CMD") + 3 :])
    assert words[:2] == ["python", "-c"]
    return words[2]


@override_settings(
    SECURE_SSL_REDIRECT=True,
    SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    ALLOWED_HOSTS=["memory.example.com"],
)
def test_healthcheck_passes_production_redirect_and_host_check():
    """Production redirects plain HTTP and refuses unknown hosts. The image's probe, run as
    it is against a server with those settings, passes when its DJANGO_ALLOWED_HOSTS names
    the host, and fails (non-zero exit) when it does not."""
    assert Client().get("/healthz", headers={"host": "memory.example.com"}).status_code == 301
    server = make_server("127.0.0.1", 0, WSGIHandler(), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = str(server.server_address[1])

        def probe(allowed_hosts: str) -> int:
            env = {**os.environ, "PORT": port, "DJANGO_ALLOWED_HOSTS": allowed_hosts}
            command = [sys.executable, "-c", healthcheck_code()]
            return subprocess.run(command, env=env, capture_output=True, timeout=30, check=False).returncode

        assert probe(".memory.example.com,localhost") == 0
        assert probe("other.example.com") != 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass
