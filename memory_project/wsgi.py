import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.development")
application = get_wsgi_application()

# Requests' statements and lock waits are limited; workers' and commands' are not.
from core.lib.postgresql.base import request_limits_apply  # noqa: E402 (needs the settings)

request_limits_apply()
