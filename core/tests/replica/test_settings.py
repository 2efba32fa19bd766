"""DATABASE_REPLICA_URL adds the replica alias, router and middleware; unset, nothing (issue 12)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.db import connections

from core.middleware import ReadReplicaMiddleware

ROOT = Path(__file__).resolve().parents[3]

_PRINT_DATABASES = (
    "import json; from django.conf import settings; print(json.dumps({"
    "'databases': settings.DATABASES, 'routers': settings.DATABASE_ROUTERS,"
    " 'middleware': settings.MIDDLEWARE}, default=str))"
)


def _settings_with(env: dict) -> dict:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "memory_project.settings.development", **env}
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {_PRINT_DATABASES}"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_unset_url_adds_nothing():
    """Without DATABASE_REPLICA_URL no alias, router or middleware exists: no overhead."""
    assert "replica" not in connections
    assert settings.DATABASE_ROUTERS == []
    assert "core.middleware.ReadReplicaMiddleware" not in settings.MIDDLEWARE
    with pytest.raises(MiddlewareNotUsed):
        ReadReplicaMiddleware(lambda request: None)


@pytest.mark.slow
def test_url_adds_a_mirrored_replica_alias_router_and_middleware():
    configured = _settings_with(
        {
            "DATABASE_URL": "postgresql://app:secret@primary.internal:5432/memory?sslmode=require",
            "DATABASE_REPLICA_URL": "postgresql://app:secret@replica.internal:5433/memory?sslmode=require",
            "DATABASE_CONN_MAX_AGE": "30",
        }
    )

    replica = configured["databases"]["replica"]
    assert replica["HOST"] == "replica.internal"
    assert replica["PORT"] == "5433"
    assert replica["NAME"] == "memory"
    assert replica["OPTIONS"] == {"sslmode": "require"}
    assert replica["CONN_MAX_AGE"] == 30
    assert replica["CONN_HEALTH_CHECKS"] is True
    assert replica["TEST"]["MIRROR"] == "default"
    assert configured["routers"] == ["core.lib.replica.ReplicaRouter"]
    # After the middleware that identifies the caller.
    middleware = configured["middleware"]
    assert middleware.index("core.middleware.ReadReplicaMiddleware") > middleware.index(
        "django.contrib.auth.middleware.AuthenticationMiddleware"
    )
