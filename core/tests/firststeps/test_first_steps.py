"""The README's first screen, walked as a newcomer would, and two instances on one machine (issue 18).

One module, two `manage.py serve` processes started side by side: instance A runs as
`scripts/run` does (defaults but a free port) and serves the README walkthrough; both then
show that a second var dir serves beside the first, and both stop on Ctrl-C.
"""

import re
import shlex
import shutil
import socket
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from core.management.commands.serve import Command as ServeCommand
from core.tests.firststeps.serving import ROOT, ServeInstance

pytestmark = pytest.mark.slow

# README's documented address: the serve default, which a test instance cannot take.
DOCUMENTED_SITE = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def instances():
    root = Path(tempfile.mkdtemp(prefix="memory-firststeps-"))
    started = [
        ServeInstance(root / "a"),
        # The second with the smallest pools: it is here to share the machine, not to serve.
        ServeInstance(root / "b", "--web-workers=1", "--worker-concurrency=1"),
    ]
    try:
        for instance in started:
            instance.wait_ready()
        yield started
    finally:
        for instance in started:
            instance.stop()
        shutil.rmtree(root, ignore_errors=True)


def _first_screen() -> str:
    """README.md up to its first second-level heading: what a newcomer reads before scrolling."""
    return (ROOT / "README.md").read_text().split("\n## ", 1)[0]


def _commands(text: str) -> list[list[str]]:
    """Every shell command in the fenced code blocks of `text`, split as a shell would."""
    commands = []
    for block in re.findall(r"```(?:bash|sh|shell|console)?\n(.*?)```", text, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def _curl_request(words: list[str]) -> dict:
    """A curl command line as method, url, headers and body (the options the README may use)."""
    request = {"method": None, "url": None, "headers": {}, "body": None}
    args = iter(words[1:])
    for word in args:
        if word in ("-H", "--header"):
            name, _, value = next(args).partition(":")
            request["headers"][name.strip()] = value.strip()
        elif word in ("-X", "--request"):
            request["method"] = next(args)
        elif word in ("-d", "--data", "--data-raw", "--json"):
            request["body"] = next(args)
            request["headers"].setdefault("Content-Type", "application/json")
        elif word in ("-s", "-S", "-f", "-sS", "-fsS", "--silent", "--fail", "--show-error"):
            continue
        elif word.startswith("-"):
            raise AssertionError(f"the walkthrough does not know curl's {word}: teach _curl_request")
        else:
            request["url"] = word
    request["method"] = request["method"] or ("POST" if request["body"] is not None else "GET")
    return request


def _with_key(text: str, key: str) -> str:
    """The README's `$KEY`, as the reader's shell would expand it."""
    return text.replace("${KEY}", key).replace("$KEY", key)


def test_readme_first_screen_works_as_written(instances):
    instance = instances[0]
    screen = _first_screen()
    commands = _commands(screen)

    # The first command is scripts/run, which is `manage.py serve` with the arguments given.
    assert commands[0] == ["scripts/run"], commands
    assert re.search(r'^exec \S*python manage\.py serve "\$@"$', (ROOT / "scripts" / "run").read_text(), re.M)
    defaults = ServeCommand().create_parser("manage.py", "serve").parse_args([])
    assert f"http://{defaults.host}:{defaults.port}" == DOCUMENTED_SITE
    assert f"`{defaults.host}:{defaults.port}`" in screen

    # The printed login and key, and the file the README says holds them.
    key = instance.api_key()
    username, password = instance.operator_login()
    saved = re.search(r"`var/([\w.-]+)`\s+\(mode 600\)", screen)
    assert saved, "the first screen names the credentials file under var/ and its mode"
    credentials = instance.var_dir / saved.group(1)
    assert credentials.stat().st_mode & 0o777 == 0o600
    assert key in credentials.read_text() and password in credentials.read_text()

    # Every documented curl call, with the printed key, against this instance.
    curls = [words for words in commands if words[0] == "curl"]
    assert curls, "the first screen shows a curl call"
    for words in curls:
        request = _curl_request(words)
        assert request["url"].startswith(DOCUMENTED_SITE + "/"), request["url"]
        url = instance.url + request["url"][len(DOCUMENTED_SITE) :]
        headers = {name: _with_key(value, key) for name, value in request["headers"].items()}
        response = httpx.request(request["method"], url, headers=headers, content=request["body"], timeout=30)
        assert response.status_code == 200, (words, response.status_code, response.text[:500])
        assert response.headers["Content-Type"].startswith("application/json")
        response.json()

    # The printed operator login opens the browser and the admin.
    with httpx.Client(base_url=instance.url, timeout=30) as browser:
        page = browser.get("/memories/", follow_redirects=True)
        assert page.status_code == 200 and "/accounts/login/" in str(page.url), page.url
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        logged_in = browser.post(
            str(page.url),
            data={"csrfmiddlewaretoken": token, "username": username, "password": password},
            headers={"Referer": str(page.url)},
        )
        assert logged_in.status_code == 302, logged_in.text[:500]
        # /memories/ opens the workspace's first tab, as the browser follows it.
        memories = browser.get("/memories/", follow_redirects=True)
        assert memories.status_code == 200, memories.status_code
        assert memories.url.path.startswith("/memories/"), memories.url
        # The demo operator is staff with an admin right scoped to the demo workspace.
        admin = browser.get("/admin/")
        assert admin.status_code == 200, (admin.status_code, admin.headers.get("Location"))


def test_two_instances_serve_side_by_side(instances):
    a, b = instances
    for instance in instances:
        listening = instance.listening
        # Printed at start, and saved where the next person (or script) looks.
        for value in (listening["web_url"], listening["mcp_url"], listening["valkey_socket"]):
            assert value and value in instance.output(), value
        assert listening["pid"] == instance.pid
        assert Path(listening["valkey_socket"]).is_relative_to(instance.var_dir)
        assert Path(listening["postgres_socket_dir"]).is_relative_to(instance.var_dir)
        assert listening["gunicorn_control_socket"] is None
        with socket.create_connection(("127.0.0.1", listening["mcp_port"]), timeout=5):
            pass
    assert a.listening["web_port"] != b.listening["web_port"]
    assert a.listening["mcp_port"] != b.listening["mcp_port"]
    assert a.listening["valkey_socket"] != b.listening["valkey_socket"]

    # Each answers its own printed key; the other's key belongs to another database.
    for instance, other in ((a, b), (b, a)):
        agents = f"{instance.url}/api/v1/agents/"
        own = httpx.get(agents, headers={"Authorization": f"Bearer {instance.api_key()}"})
        assert own.status_code == 200, own.text[:300]
        foreign = httpx.get(agents, headers={"Authorization": f"Bearer {other.api_key()}"})
        assert foreign.status_code == 401

    # Ctrl-C stops each cleanly: exit status 0, its ports closed, its embedded servers down.
    for instance in instances:
        instance.interrupt_send()
    for instance in instances:
        assert instance.wait_exit() == 0, instance.output()[-3000:]
        assert "Stopping" in instance.output()
        assert not (instance.var_dir / "serve.json").exists()
        for port in (instance.listening["web_port"], instance.listening["mcp_port"]):
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
        assert not Path(instance.listening["valkey_socket"]).exists()
        postmaster = instance.var_dir / "postgres" / "data" / "postmaster.pid"
        deadline = time.monotonic() + 30
        while postmaster.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not postmaster.exists(), "the embedded PostgreSQL outlived serve"
