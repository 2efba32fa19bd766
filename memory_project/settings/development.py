"""Local development: the default when DJANGO_SETTINGS_MODULE is not set."""

from memory_project.env import env_bool

from .base import *  # noqa: F403

# Debug pages show settings and source: only when asked for (`DJANGO_DEBUG=true`), never by default.
DEBUG = env_bool("DJANGO_DEBUG", False)
# A receiver on this machine (localhost) is the usual way to try webhooks out.
WEBHOOKS_ALLOW_PRIVATE_URLS = env_bool("WEBHOOKS_ALLOW_PRIVATE_URLS", True)
PROVIDER_ALLOW_PRIVATE_URLS = env_bool("PROVIDER_ALLOW_PRIVATE_URLS", True)
