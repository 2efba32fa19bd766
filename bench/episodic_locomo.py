"""LoCoMo retrieval on a throwaway database: `python -m bench.episodic_locomo --data PATH [--json OUT]`.

The same as `python manage.py bench_locomo`, after starting and migrating a throwaway
embedded PostgreSQL (bench.harness), so the development database is left alone.
"""

import sys

from bench.harness import setup_django


def main(argv: list[str]) -> None:
    setup_django()
    from django.core.management import call_command

    call_command("bench_locomo", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
