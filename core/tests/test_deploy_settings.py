import os
import secrets
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def test_production_settings_pass_check_deploy():
    """With the required variables set, `check --deploy` reports nothing."""
    # The browser tests allow sync ORM calls from Playwright's event loop in this process;
    # that must not leak into a deployment check.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "DJANGO_SETTINGS_MODULE": "memory_project.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": settings.DATABASE_URL,
        "DJANGO_ALLOWED_HOSTS": "memory.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_settings_refuse_a_missing_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECRET_KEY"}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.production",
            "DATABASE_URL": settings.DATABASE_URL,
        }
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_production_settings_refuse_an_empty_field_encryption_key():
    """Before, FIELD_ENCRYPTION_KEY="" was accepted and credentials were encrypted with it."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memory_project.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": settings.DATABASE_URL,
        "FIELD_ENCRYPTION_KEY": "",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "FIELD_ENCRYPTION_KEY" in result.stderr
