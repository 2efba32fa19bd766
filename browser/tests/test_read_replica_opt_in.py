"""Which pages may read from a replica: browsing may, editing and administration may not."""

from django.test import SimpleTestCase
from django.urls import get_resolver

READS = {
    "workspace",
    "facts",
    "fact",
    "episodes",
    "episode",
    "entries",
    "entry",
    "threads",
    "thread",
    "thread-tool-result",
    "thread-pick",
    "checkpoints",
    "checkpoint",
    "checkpoint-state",
    "procedures",
    "procedure",
    "users",
    "user",
    "user-pick",
    "store",
    "store-item",
    # Pages added with issues 14 and 15 that only read.
    "overview",
    "audit",
    "evidence",
    "search",
}


class ReadReplicaOptInTests(SimpleTestCase):
    def test_list_and_detail_pages_opt_in_and_no_other_page_does(self):
        """An edit form or a members page shows the primary's rows: it is about to change them."""
        resolver = get_resolver().url_patterns
        memories = next(p for p in resolver if getattr(p, "namespace", None) == "memories")
        workspace_patterns = next(p for p in memories.url_patterns if hasattr(p, "url_patterns")).url_patterns
        opted = {p.name for p in workspace_patterns if getattr(p.callback, "read_replica", False)}
        assert opted == READS
