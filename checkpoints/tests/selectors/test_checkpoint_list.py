import json

from django.db import connection

from checkpoints.filters import CheckpointFilter
from checkpoints.models import Checkpoint
from checkpoints.selectors import checkpoint_list, checkpoint_list_for_thread
from checkpoints.tests.factories import make_checkpoint
from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from threads.tests.factories import make_thread


class CheckpointMetadataFilterTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.loop = make_checkpoint(cls.thread, "1ef-001", metadata={"source": "loop", "step": 1})
        cls.input = make_checkpoint(cls.thread, "1ef-002", metadata={"source": "input", "step": 2})
        cls.filters = {"metadata": json.dumps({"source": "loop"})}

    def test_both_lists_keep_the_checkpoints_holding_the_pairs(self):
        principal = principal_for_api_key(self.owner_api_key)
        assert list(checkpoint_list(principal=principal, filters=self.filters)) == [self.loop]
        assert list(checkpoint_list_for_thread(thread=self.thread, filters=self.filters)) == [self.loop]

    def test_the_metadata_filter_can_be_answered_by_its_index(self):
        """The metadata index (checkpoints 0002) can answer the condition as the lists' filter
        writes it; whether the planner takes it depends on how few checkpoints carry the pairs
        (docs/speed.md measures it at 200,000)."""
        filtered = CheckpointFilter(self.filters, queryset=Checkpoint.objects.all()).qs
        sql, params = filtered.values("id").query.sql_with_params()
        with connection.cursor() as cursor:
            # Only a bitmap of an index is left; SET LOCAL lasts to the test's end.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_indexscan = off")
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = json.dumps(cursor.fetchone()[0][0]["Plan"])
        assert '"Index Name": "checkpoints_metadata"' in plan, plan
        assert '"Disabled": true' not in plan, plan
