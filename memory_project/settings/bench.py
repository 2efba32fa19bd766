"""Benchmarks: a throwaway embedded PostgreSQL tuned like a small production box."""

import os
import tempfile

from core.lib.embedded import start_throwaway_postgres

if not os.environ.get("DATABASE_URL"):
    os.environ["DATABASE_URL"] = start_throwaway_postgres(tempfile.mkdtemp(prefix="memory-bench-pg-"))

from .base import *  # noqa: F403

DEBUG = False
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CELERY_TASK_ALWAYS_EAGER = True
CELERY_BROKER_URL = "memory://"
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {"api_key": "100000000/min"},
}
