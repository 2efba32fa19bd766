"""The /memories thread page at scale: one branch of a long, much-regenerated thread.

    python -m bench.browser_thread                   # 100,000 messages (the issue's scale)
    python -m bench.browser_thread --rows 20000      # smaller
    python -m bench.browser_thread --json var/browser_thread.json

Target (issue 15): the thread page's first page renders in <= 150 ms server-side with 100,000
rows in the messages table.

Of `--rows` messages, 60% form one thread: a main conversation of user/assistant turns where
every tenth answer was regenerated (the abandoned answer stays a leaf), every twentieth answer
calls a tool (every other result archived), a fork with three branches at depth 3 (the second
continues the conversation), and five sub-agent nodes of 1% each; its compaction summary ends
near the newest page. The rest are 400 other threads of the same workspace and 1% another
workspace's. Each case is a GET through Django's test client as a logged-in viewer: the full
page, and the htmx fragment (`HX-Target: thread-tree`) that branch links and the node filter
ask for.
"""

import json
import os
import random
import time
import uuid
from datetime import timedelta

from bench.harness import (
    PageCase,
    browser_parser,
    browser_setup,
    load_line,
    logged_in_client,
    machine_reference_ms,
    measure_against,
    measure_pages,
    page_get,
    print_table,
    verdict,
    write_json,
)

TARGET_MS = 150.0


def build(n_rows: int, seed: int = 7):
    from django.db import connection
    from django.utils import timezone

    from core.models import Membership
    from core.services import agent_get_or_create, operator_create, workspace_create
    from threads.lib.tree import TreeNode, child_position
    from threads.models import Message, Thread

    rng = random.Random(seed)
    now = timezone.now() - timedelta(days=30)
    workspace = workspace_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    other = workspace_create(name=f"noise-{uuid.uuid4().hex[:6]}")
    viewer = operator_create(
        workspace=workspace,
        username=f"viewer-{uuid.uuid4().hex[:6]}",
        password="x" * 12,
        role=Membership.Role.VIEWER,
    ).user
    agent = agent_get_or_create(workspace=workspace, slug="assistant")
    other_agent = agent_get_or_create(workspace=other, slug="assistant")
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]

    def text(n):
        return " ".join(rng.choice(words) for _ in range(n))

    messages: list[Message] = []
    marks: dict = {}

    def thread_of(workspace_, agent_, title):
        return Thread.objects.create(workspace=workspace_, agent=agent_, title=title)

    class Writer:
        """Messages of one thread with the tree columns the append service computes."""

        def __init__(self, thread):
            self.thread, self.seq, self.nodes = thread, 0, {}

        def add(self, parent, role, content, **extra):
            self.seq += 1
            message_id = uuid.uuid4()
            parent_node = self.nodes.get(parent.pk) if parent is not None else None
            parent_jump = self.nodes.get(parent_node.jump_id) if parent_node is not None else None
            depth, jump_id, jump_depth = child_position(parent_node, parent_jump, own_id=message_id)
            tokens = max(4, len(content) // 4)
            branch_tokens = (parent_node.branch_tokens if parent_node else 0) + tokens
            self.nodes[message_id] = TreeNode(
                message_id, depth, jump_id, jump_depth, branch_tokens, parent.pk if parent else None
            )
            message = Message(
                id=message_id,
                workspace_id=self.thread.workspace_id,
                thread=self.thread,
                role=role,
                content=content,
                parent_id=parent.pk if parent is not None else None,
                seq=self.seq,
                depth=depth,
                jump_id=jump_id,
                jump_depth=jump_depth,
                token_count=tokens,
                branch_tokens=branch_tokens,
                created_at=now + timedelta(seconds=self.seq),
                **extra,
            )
            messages.append(message)
            return message

        def finish(self):
            Thread.objects.filter(pk=self.thread.pk).update(
                message_seq=self.seq,
                message_count=self.seq,
                last_activity_at=now + timedelta(seconds=self.seq),
            )

    start = time.perf_counter()
    big = thread_of(workspace, agent, "The long thread")
    writer = Writer(big)
    main_rows = int(n_rows * 0.55)
    parent = writer.add(None, "user", "Hello " + text(8))
    parent = writer.add(parent, "assistant", text(30))
    question = parent = writer.add(parent, "user", text(12))
    # The early fork: three answers at depth 3; the second is the one continued.
    writer.add(question, "assistant", "First answer " + text(30))
    marks["early_branch"] = parent = writer.add(question, "assistant", "Second answer " + text(30))
    writer.add(question, "assistant", "Third answer " + text(30))
    turn = 0
    while writer.seq < main_rows:
        turn += 1
        question = writer.add(parent, "user", text(rng.randint(5, 25)))
        if turn % 10 == 0:
            abandoned = writer.add(question, "assistant", "Regenerated away " + text(40))
            marks.setdefault("abandoned", abandoned)
        if turn % 20 == 0:
            call_id = f"call-{turn}"
            asking = writer.add(
                question,
                "assistant",
                "",
                tool_calls=[{"id": call_id, "name": "search", "arguments": json.dumps({"q": text(3)})}],
            )
            archived = turn % 40 == 0
            result = writer.add(
                asking,
                "tool",
                text(3000 if archived else 40),
                tool_call_id=call_id,
                archived=archived,
            )
            parent = writer.add(result, "assistant", text(rng.randint(10, 60)))
        else:
            parent = writer.add(question, "assistant", text(rng.randint(10, 60)))
        if turn == 100:
            marks["late_regeneration"] = question
    marks["leaf"] = parent
    # The summary ends 400 messages before the newest: off the newest page, found by jump pointers.
    summary_end = messages[-400] if messages[-400].thread_id == big.pk else parent
    for n in range(5):
        node_parent = None
        for _ in range(int(n_rows * 0.01)):
            node_parent = writer.add(
                node_parent, rng.choice(["user", "assistant"]), text(20), node_id=f"node-{n}"
            )
    writer.finish()
    Thread.objects.filter(pk=big.pk).update(
        summary="Summary: " + text(200),
        summary_upto_id=summary_end.pk,
        summary_upto_depth=summary_end.depth,
        summary_tokens=300,
        summary_covers_tokens=summary_end.branch_tokens,
        summary_method="llm",
        compacted_at=now,
    )
    # Half-way up the newest branch: the anchor of an older page.
    anchor = writer.nodes[marks["leaf"].pk]
    for _ in range(anchor.depth // 2):
        anchor = writer.nodes[anchor.parent_id]
    marks["older_anchor"] = anchor.id
    build_big = time.perf_counter() - start

    rest = n_rows - len(messages)
    threads = [thread_of(workspace, agent, f"thread {i}") for i in range(400)]
    noise = thread_of(other, other_agent, "noise")
    writers = [Writer(t) for t in threads]
    tails: dict = {}
    noise_writer, noise_tail = Writer(noise), None
    for i in range(rest):
        if i % 100 == 0:
            noise_tail = noise_writer.add(noise_tail, "user", text(10))
            continue
        w = writers[i % len(writers)]
        tails[w] = w.add(tails.get(w), rng.choice(["user", "assistant"]), text(20))
    for w in [*writers, noise_writer]:
        w.finish()
    # The reference page: a thread of ~100 messages, rendered by the same code in the same run.
    marks["small_thread"] = threads[0]

    start = time.perf_counter()
    Message.objects.bulk_create(messages, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE threads_message")
    timings = {"build": build_big, "insert": time.perf_counter() - start}
    return workspace, viewer, big, marks, timings


def cases(workspace, thread, marks):
    base = f"/memories/{workspace.pk}/threads/{thread.pk}/"
    return [
        ("newest branch", base),
        (
            "a regeneration 100 turns in (descent to its newest message)",
            f"{base}?leaf={marks['late_regeneration'].pk}",
        ),
        (
            "older page, half-way up the branch",
            f"{base}?leaf={marks['leaf'].pk}&before={marks['older_anchor']}",
        ),
        ("node filter", f"{base}?node=node-2"),
        (
            "an abandoned regeneration near the start (no newer message below it)",
            f"{base}?leaf={marks['abandoned'].pk}",
        ),
        (
            "the early fork's continued branch (descent through the whole thread)",
            f"{base}?leaf={marks['early_branch'].pk}",
        ),
    ]


def main():
    parser = browser_parser(__doc__, help="messages in the table (default 100,000)")
    args = parser.parse_args()

    browser_setup()
    from threads.models import Message

    workspace, viewer, thread, marks, timings = build(args.rows)
    in_thread = Message.objects.filter(thread=thread).count()
    print(
        f"loaded {Message.objects.count():,} messages ({in_thread:,} in the thread measured): "
        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    )
    client = logged_in_client(viewer)

    def check(case, response):
        assert b'id="thread-tree"' in response.content, case.path

    load_before = os.getloadavg()
    page_cases = [
        PageCase(name, path, fragments=(("fragment", "thread-tree"),))
        for name, path in cases(workspace, thread, marks)
    ]
    reference_ms = machine_reference_ms()
    rows, results = measure_pages(client, page_cases, repeat=args.repeat, check=check)
    # The first page against the reference page, alternately, so both see the same load.
    small = f"/memories/{workspace.pk}/threads/{marks['small_thread'].pk}/"
    against = measure_against(
        lambda: page_get(client, cases(workspace, thread, marks)[0][1]),
        lambda: page_get(client, small),
        repeat=args.repeat,
    )
    load_after = os.getloadavg()
    rows += [
        ("newest branch, alternating with the reference", against),
        ("reference: a 100-message thread's page", against["reference"]),
    ]
    print_table(f"/memories thread page, {args.rows:,} messages (target p95 <= {TARGET_MS:.0f} ms)", rows)
    print(load_line(load_before, load_after))
    print(f"machine reference: {reference_ms:.1f} ms")
    print(f"newest branch / 100-message thread, p50: {against['ratio_p50']}x")
    first = results["newest branch"]["page"]["p95_ms"]
    verdict("first page p95", first, TARGET_MS)
    write_json(
        args.json,
        {
            "rows": args.rows,
            "target_ms": TARGET_MS,
            "cores": os.cpu_count(),
            "cases": results,
            "against_reference": against,
            "machine_reference_ms": reference_ms,
            "load_average": [load_before, load_after],
        },
    )


if __name__ == "__main__":
    main()
