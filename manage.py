#!/usr/bin/env python
"""Django's command-line utility; starts the embedded PostgreSQL when none is configured."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.development")
    if not os.environ.get("DATABASE_URL") and len(sys.argv) > 1 and sys.argv[1] != "help":
        from pathlib import Path

        from core.lib.embedded import ensure_postgres

        var_dir = Path(os.environ.get("MEMORY_VAR_DIR", Path(__file__).resolve().parent / "var"))
        os.environ["DATABASE_URL"] = ensure_postgres(var_dir.resolve() / "postgres")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
