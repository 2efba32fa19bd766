"""Test settings: a throwaway embedded PostgreSQL unless DATABASE_URL names a server."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from core.lib.embedded import start_throwaway_postgres

# Each pytest-xdist worker runs on a server of its own. PostgreSQL's transaction horizon
# belongs to the whole server, so one worker's open test transaction would hold back what
# another worker's webhook dispatch may deliver. The servers a worker's tests start inherit
# both variables and use that worker's server.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if not os.environ.get("DATABASE_URL") or os.environ.get("MEMORY_TEST_POSTGRES_FOR", _worker) != _worker:
    os.environ["DATABASE_URL"] = start_throwaway_postgres(tempfile.mkdtemp(prefix="memory-test-pg-"))
    os.environ["MEMORY_TEST_POSTGRES_FOR"] = _worker
    # No replica can stream from a server started a moment ago; core/tests/replica starts one.
    os.environ.pop("DATABASE_REPLICA_URL", None)

from .base import *  # noqa: E402, F403

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Tasks run inline in unit tests; core/tests/test_worker.py runs a real worker on a real broker.
# Every test sees key changes at once (revocation by update(), expiry moved back).
API_KEY_CACHE_SECONDS = 0
PROVIDER_CACHE_SECONDS = 0
# Each request's counts are written after its response, where the test client sees them.
COUNTERS_FLUSH_SECONDS = 0
# Tests inject one endpoint failure and expect the next query to reach the endpoint again;
# the retry window's own test (episodic/tests/test_entry_search.py) switches it on.
EMBEDDING_QUERY_RETRY_SECONDS = 0
WEBHOOKS_ACTIVE_CACHE_SECONDS = 0
# Receivers in tests listen on 127.0.0.1; webhooks/tests check the refusal with it off.
WEBHOOKS_ALLOW_PRIVATE_URLS = True
# Test endpoints (core.testing_openai) listen on 127.0.0.1 too; core/tests/test_provider_addresses.py
# checks the refusal with it off.
PROVIDER_ALLOW_PRIVATE_URLS = True
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = "memory://"
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {"api_key": "100000/min"},
}
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Import uploads of requests a test rolls back would otherwise be left in var/imports. The
# servers a test starts inherit the directory of the test process, which removes it at exit
# (a server stopped by a signal runs no exit handler).
if not os.environ.get("MEMORY_TEST_IMPORT_DIR"):
    os.environ["MEMORY_TEST_IMPORT_DIR"] = tempfile.mkdtemp(prefix="memory-test-imports-")
    atexit.register(shutil.rmtree, os.environ["MEMORY_TEST_IMPORT_DIR"], ignore_errors=True)
PORTABILITY_IMPORT_DIR = Path(os.environ["MEMORY_TEST_IMPORT_DIR"])
# WhiteNoise scans every static file of every finder when its middleware is built, and the
# test client builds the middleware for each Client: 59% of the hostile-input suite's time.
# Looking a file up when it is asked for serves the same files (as under DEBUG).
WHITENOISE_AUTOREFRESH = True
