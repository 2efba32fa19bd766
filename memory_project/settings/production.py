"""Production: every secret comes from the environment; `check --deploy` passes clean."""

from django.core.exceptions import ImproperlyConfigured

from memory_project.env import env_bool, env_int, env_str

from .base import *  # noqa: F403

DEBUG = False
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set to at least 50 random characters")
FIELD_ENCRYPTION_KEY = env_str("FIELD_ENCRYPTION_KEY", SECRET_KEY)
# Provider credentials are encrypted with a key derived from this; set but empty (a
# template's blank line) would encrypt them with a key anyone can derive.
if len(FIELD_ENCRYPTION_KEY) < 32:
    raise ImproperlyConfigured("FIELD_ENCRYPTION_KEY, when set, must be at least 32 random characters")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
