"""Every app of the project is tested and sorted as first-party: an app missing from pytest's
testpaths is silently never tested (the episodic app's tests did not run for a while after it
was split out of episodes)."""

import tomllib
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _project_apps() -> list:
    """The apps whose package is a top-level folder of this repository (not site-packages)."""
    return [app for app in apps.get_app_configs() if Path(app.path).resolve().parent == ROOT]


def test_every_project_app_with_tests_is_in_testpaths():
    testpaths = set(_config()["tool"]["pytest"]["ini_options"]["testpaths"])
    with_tests = {app.name for app in _project_apps() if (Path(app.path) / "tests").is_dir()}
    assert "core" in with_tests
    assert with_tests <= testpaths, sorted(with_tests - testpaths)


def test_every_project_app_is_first_party_for_the_import_sorter():
    first_party = set(_config()["tool"]["ruff"]["lint"]["isort"]["known-first-party"])
    names = {app.name for app in _project_apps()}
    assert "episodic" in names
    assert names <= first_party, sorted(names - first_party)
