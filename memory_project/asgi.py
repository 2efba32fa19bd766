import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.development")
application = get_asgi_application()

# Requests' statements and lock waits are limited, as under WSGI (memory_project.wsgi).
from core.lib.postgresql.base import request_limits_apply  # noqa: E402 (needs the settings)

request_limits_apply()
