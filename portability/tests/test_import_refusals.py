"""Hostile or broken files: refused with the line's number, and nothing of the run is stored."""

import json

from django.test import TestCase

from core.services import workspace_create
from core.tests.reliability.routes import seed_world, snapshot
from portability.models import ImportIdMap
from portability.registry import Scope
from portability.services import ImportFailed
from portability.tests.helpers import export_bytes, import_bytes, records


def lines(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


class RefusalTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()
        cls.target = workspace_create(name="Empty")
        cls.rows = records(export_bytes(Scope(workspace=cls.world.w1, history=True)))

    def refused(self, data: bytes, code: str | None = None) -> ImportFailed:
        before = snapshot(self.target)
        try:
            import_bytes(self.target, data)
        except ImportFailed as exc:
            assert snapshot(self.target) == before
            assert not ImportIdMap.objects.filter(workspace=self.target).exists()
            if code:
                assert exc.code == code, (exc.code, exc.message)
            return exc
        raise AssertionError("accepted")

    def test_a_failing_line_near_the_end_rolls_back_everything(self):
        """Every earlier line had been written; the refusal of the last record undoes them all."""
        rows = [*self.rows[:-1]]
        bad = dict(rows[-1])
        bad["action"] = "explode"
        rows[-1] = bad
        exc = self.refused(lines([*rows, {"type": "end"}]))
        assert exc.line == len(rows)
        assert f"Line {len(rows)}:" in exc.message

    def test_malformed_json_names_its_line(self):
        data = lines(self.rows[:3]) + b"{not json\n" + lines(self.rows[3:])
        assert self.refused(data, "malformed_line").line == 4

    def test_a_wrong_version_is_refused_at_line_one(self):
        header = {**self.rows[0], "version": 2}
        exc = self.refused(lines([header, *self.rows[1:]]), "unsupported_version")
        assert exc.line == 1

    def test_a_file_without_a_header_is_refused(self):
        self.refused(lines(self.rows[1:]), "malformed_header")
        self.refused(b"", "malformed_header")

    def test_a_reference_to_a_row_the_file_lacks_is_refused(self):
        rows = [r for r in self.rows if r.get("type") not in ("agent", "end")]
        exc = self.refused(lines([*rows, {"type": "end"}]), "missing_reference")
        first = next(i for i, r in enumerate(rows, start=1) if r.get("type") == "thread")
        assert exc.line == first

    def test_an_incomplete_file_is_refused(self):
        self.refused(lines(self.rows[:-1]), "incomplete_file")
        self.refused(lines([*self.rows[:-3], self.rows[-1]]), "count_mismatch")

    def test_a_line_over_the_limit_is_refused_without_reading_it_whole(self):
        with self.settings(PORTABILITY_LINE_MAX_BYTES=2000):
            huge = {"type": "message", "id": "x", "content": "a" * 5000}
            exc = self.refused(lines([self.rows[0], huge, {"type": "end"}]), "line_too_long")
        assert exc.line == 2

    def test_wrong_types_unknown_fields_and_unknown_record_types(self):
        thread = next(r for r in self.rows if r.get("type") == "thread")
        self.refused(lines([self.rows[0], {**thread, "title": 5}, {"type": "end"}]), "invalid_import")
        self.refused(lines([self.rows[0], {**thread, "secret": 1}, {"type": "end"}]), "invalid_import")
        self.refused(lines([self.rows[0], {"type": "webhook", "id": "1"}, {"type": "end"}]), "unknown_type")
        self.refused(
            lines([self.rows[0], {**thread, "title": "a\u0000b"}, {"type": "end"}]), "malformed_line"
        )

    def test_an_id_twice_in_one_file_is_refused(self):
        agent = next(r for r in self.rows if r.get("type") == "agent")
        self.refused(lines([self.rows[0], agent, agent, {"type": "end"}]))
