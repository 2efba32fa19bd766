"""LoCoMo evidence retrieval through the project's own ingestion, embedding and search code.

    python manage.py bench_locomo --data ../shared/data/locomo/locomo-dev.json [--json OUT]

Each conversation becomes one memory user's threads (one thread per session) in a
throwaway workspace, deleted afterwards. Every turn is appended with
`threads.services.thread_append_messages` (its `dia_id` and session date in metadata,
the session date as `created_at`), embedded with `threads.services.message_embed_batch`,
and every question of categories 1-4 with evidence is asked through
`threads.selectors.message_search_related`, the search semantic recall uses, in
the default (hybrid), lexical-only and vector-only modes. The metric is the data set
README's: evidence recall@5/10/20 and MRR, per category and overall.

With `--corpus entries` every turn is instead an episodic entry of that memory user
("<speaker>: <text> [shares <caption>]", the session date as `created_at`), embedded with
`episodic.services.entry_embed_batch` and searched with `episodic.selectors.entry_search_hybrid`,
the search of POST /api/v1/episodic-entries/search/. The rows are written directly, not
through `entries_create`: its dedupe and consolidation would fold or close conversation
turns ("Thanks!", a changed number), and what is measured here is the ranking.
`--corpus extracted` stores the same entries as extraction would take them from the
conversation: the turns are also threads and messages, and each entry records the message
and thread it came from (its speaker and session in the search).
"""

import json
import re
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial

from django.core.management.base import BaseCommand, CommandError

from core.ranking import first_person, whole_word

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 20)


def session_datetime(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def clean_evidence(evidence, turn_ids: set) -> set:
    found = set()
    for item in evidence or []:
        for match in re.finditer(r"D(\d+):(\d+)", str(item)):
            dia = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia in turn_ids:
                found.add(dia)
    return found


def summarize_run(rows: list[dict]) -> dict:
    def block(items):
        if not items:
            return {}
        out = {f"recall@{k}": round(sum(r[k] for r in items) / len(items), 4) for k in KS}
        out["mrr"] = round(sum(r["rr"] for r in items) / len(items), 4)
        out["n"] = len(items)
        return out

    return {
        "overall": block(rows),
        "by_category": {CATEGORIES[c]: block([r for r in rows if r["category"] == c]) for c in CATEGORIES},
    }


def user_question(question: str, name: str) -> str:
    """`question` as an agent asks it of the person it serves: `name` (the person's) said
    "the user" ("What do Melanie's kids like?" -> "What do the user's kids like?")."""
    text = re.sub(whole_word(name), "the user", question)
    return text[:1].upper() + text[1:] if text.startswith("the user") else text


def person_question(question: str, name: str) -> str:
    """`question` as the person (`name`) asks it of an agent, in their own words ("What do
    Caroline's kids like?" -> "What do my kids like?"), as a context's incoming message is."""
    return first_person(question, {name.casefold()})


def person_display_name(speaker: str, options: dict) -> str:
    """The display name of the person (`speaker`, speaker A) as the run's options have it."""
    if options["nameless_person"]:
        return ""
    return f"{speaker} Rivera" if options["full_name"] else speaker


def turn_text(turn: dict) -> str:
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def _messages_ingest(
    conv: dict, sessions: list[int], *, sample_id: str, agent, person, unnamed_user: bool = False
) -> dict:
    """Every session of `conv` as a thread of `person`, every turn a message; {message id: dia_id}.

    `unnamed_user`: the user's turns (speaker A's, `person`'s) carry no `name`, as most chat
    clients send them; speaker B's keep theirs."""
    from threads.services import thread_append_messages, thread_create

    roles = {conv["speaker_a"]: "user", conv["speaker_b"]: "assistant"}
    dia_of = {}
    for number in sessions:
        date_text = conv.get(f"session_{number}_date_time", "")
        when = session_datetime(date_text)
        thread = thread_create(
            workspace=agent.workspace,
            agent=agent,
            memory_user=person,
            channel_chat_id=f"{sample_id}-session-{number}",
            title=f"Session {number}",
        )
        batch = [
            {
                "role": roles.get(turn["speaker"], "user"),
                **(
                    {}
                    if unnamed_user and turn["speaker"] == conv["speaker_a"]
                    else {"name": turn["speaker"][:100]}
                ),
                "content": turn_text(turn),
                "metadata": {"dia_id": turn["dia_id"], "session_date": date_text},
                "created_at": (when + timedelta(seconds=index)).isoformat(),
            }
            for index, turn in enumerate(conv[f"session_{number}"])
        ]
        for message in thread_append_messages(thread=thread, messages=batch):
            dia_of[message.pk] = message.metadata["dia_id"]
    return dia_of


def _entries_ingest(
    conv: dict,
    sessions: list[int],
    *,
    sample_id: str,
    agent,
    person,
    sourced: bool = False,
    mixed: bool = False,
    unnamed_user: bool = False,
) -> dict:
    """Every turn of `conv` as an active, approved entry of `person`; {entry id: dia_id}.

    `sourced`: each entry is taken from its turn, as extraction stores one: the turns are
    also a thread per session, and each entry records its message and thread (which give it
    its speaker and session in the search). Otherwise entries are written directly, as an
    agent's own notes are, with no source. `mixed`: every other turn of a session is taken
    from its message, the rest written directly."""
    from episodic.models import EpisodicEntry
    from episodic.services.normalize import entry_content_hash
    from threads.models import Message

    messages = {}
    if sourced or mixed:
        message_ids = _messages_ingest(
            conv, sessions, sample_id=sample_id, agent=agent, person=person, unnamed_user=unnamed_user
        )
        messages = {m.metadata["dia_id"]: m for m in Message.objects.filter(pk__in=list(message_ids))}
    rows = []
    for number in sessions:
        date_text = conv.get(f"session_{number}_date_time", "")
        when = session_datetime(date_text)
        for index, turn in enumerate(conv[f"session_{number}"]):
            content = f"{turn['speaker']}: {turn_text(turn)}"
            at = when + timedelta(seconds=index)
            message = None if mixed and index % 2 else messages.get(turn["dia_id"])
            rows.append(
                EpisodicEntry(
                    workspace=agent.workspace,
                    agent=agent,
                    memory_user=person,
                    content=content,
                    content_hash=entry_content_hash(content),
                    source=EpisodicEntry.Source.AGENT_DIRECT,
                    metadata={"dia_id": turn["dia_id"], "session_date": date_text},
                    created_at=at,
                    valid_from=at,
                    source_thread_id=message.thread_id if message else None,
                    source_message_ids=[str(message.pk)] if message else [],
                )
            )
    EpisodicEntry.objects.bulk_create(rows)
    return {row.pk: row.metadata["dia_id"] for row in rows}


class Command(BaseCommand):
    help = "Measure evidence recall@k and MRR on LoCoMo through the project's own search."

    def add_arguments(self, parser):
        parser.add_argument("--data", required=True)
        parser.add_argument("--json", dest="json_path")
        parser.add_argument("--conversations", help="Comma-separated sample ids (default: all).")
        parser.add_argument("--modes", default="hybrid,lexical,vector")
        parser.add_argument(
            "--variant",
            action="append",
            default=[],
            help="Also run the hybrid search with other weights: NAME=FIELD:VALUE[,FIELD:VALUE...] "
            "(fields of core.ranking.RankingWeights; repeatable).",
        )
        parser.add_argument(
            "--corpus",
            choices=["messages", "entries", "extracted", "mixed"],
            default="messages",
            help="Search the turns as thread messages (semantic recall), as episodic entries "
            "written directly (the episodic search API), as entries taken from their "
            "messages (extracted: each records its source message and thread), or half of "
            "each (mixed: every other turn of a session taken from its message).",
        )
        parser.add_argument(
            "--unnamed-user",
            action="store_true",
            help="Store the person's turns (speaker A's, the user's) without a message name, as "
            "most chat clients send them (messages and the extracted corpus).",
        )
        parser.add_argument(
            "--nameless-person",
            action="store_true",
            help="Create each conversation's person without a display name, as a chat channel "
            "often knows them only by an id (with --unnamed-user, nothing names their turns).",
        )
        parser.add_argument(
            "--full-name",
            action="store_true",
            help="Create each conversation's person with a surname after speaker A's name (\"Caroline "
            'Rivera"), as a channel\'s profile gives the full name; the questions still say "Caroline".',
        )
        parser.add_argument(
            "--user-questions",
            action="store_true",
            help="Ask the questions that name the person (speaker A) as an agent asks them of "
            'the person it serves: "the user" for the name.',
        )
        parser.add_argument(
            "--person-questions",
            action="store_true",
            help="Ask the questions that name the person (speaker A) as the person asks them, in "
            'their own words ("my kids" for "Caroline\'s kids"), searched as a context searches '
            'the incoming message (its "I" and "my" are the person).',
        )
        parser.add_argument(
            "--questions-json",
            help="Also write every question's result per run: its category and half, the rank "
            "(0-based, null past the top 20) of each evidence turn, and the top 10's dia_ids.",
        )
        parser.add_argument(
            "--split",
            help="Comma-separated sample ids of the tuning half: every run is also summarized "
            "per half (these, and the rest).",
        )

    def handle(self, *args, **options):
        from core.embeddings import embedding_provider_for
        from core.services import agent_get_or_create, workspace_create
        from episodic.selectors import ENTRY_WEIGHTS, entry_search_hybrid
        from episodic.services.embeddings import entry_embed_batch
        from identities.services import memory_user_create
        from threads.selectors import MESSAGE_WEIGHTS, message_search_related
        from threads.services import message_embed_batch

        entries = options["corpus"] in ("entries", "extracted", "mixed")
        # Each corpus ranks with the weights its search uses by default.
        base_weights = ENTRY_WEIGHTS if entries else MESSAGE_WEIGHTS

        try:
            with open(options["data"]) as handle:
                samples = json.load(handle)
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read {options['data']}: {exc}") from exc
        wanted = set(filter(None, (options["conversations"] or "").split(",")))
        if wanted:
            samples = [s for s in samples if s["sample_id"] in wanted]
        modes = [m for m in options["modes"].split(",") if m]
        variants = {}
        for spec in options["variant"]:
            name, _, fields = spec.partition("=")
            overrides = {}
            for item in filter(None, fields.split(",")):
                key, _, value = item.partition(":")
                if not hasattr(base_weights, key):
                    raise CommandError(f"Unknown ranking weight {key!r} in --variant {spec!r}.")
                overrides[key] = type(getattr(base_weights, key))(value)
            variants[name] = replace(base_weights, **overrides)
        modes += [name for name in variants if name not in modes]
        tuning = set(filter(None, (options["split"] or "").split(",")))
        workspace = workspace_create(name=f"bench-locomo-{uuid.uuid4().hex[:8]}")
        provider = embedding_provider_for(workspace)
        search = entry_search_hybrid if entries else partial(message_search_related, workspace=workspace)
        runs = {mode: [] for mode in modes}
        asked = {mode: [] for mode in modes}
        per_conversation = {}
        timings = {"ingest_s": 0.0, "embed_s": 0.0, "search_s": 0.0}
        try:
            agent = agent_get_or_create(workspace=workspace, slug="locomo")
            for sample in samples:
                conv = sample["conversation"]
                person = memory_user_create(
                    workspace=workspace,
                    canonical_id=f"locomo:{sample['sample_id']}",
                    display_name=person_display_name(conv["speaker_a"], options),
                )
                sessions = sorted(
                    int(m.group(1)) for key in conv for m in [re.fullmatch(r"session_(\d+)", key)] if m
                )
                started = time.perf_counter()
                unnamed_user = options["unnamed_user"]
                if entries:
                    ingest = partial(
                        _entries_ingest,
                        sourced=options["corpus"] == "extracted",
                        mixed=options["corpus"] == "mixed",
                        unnamed_user=unnamed_user,
                    )
                else:
                    ingest = partial(_messages_ingest, unnamed_user=unnamed_user)
                dia_of = ingest(conv, sessions, sample_id=sample["sample_id"], agent=agent, person=person)
                timings["ingest_s"] += time.perf_counter() - started
                started = time.perf_counter()
                if entries:
                    entry_embed_batch(entry_ids=list(dia_of), provider=provider)
                else:
                    message_embed_batch(message_ids=list(dia_of), provider=provider)
                timings["embed_s"] += time.perf_counter() - started

                turn_ids = set(dia_of.values())
                questions = []
                for qa in sample["qa"]:
                    if qa.get("category") not in CATEGORIES:
                        continue
                    evidence = clean_evidence(qa.get("evidence"), turn_ids)
                    if evidence:
                        question = qa["question"]
                        if options["user_questions"]:
                            question = user_question(question, conv["speaker_a"])
                        elif options["person_questions"]:
                            question = person_question(question, conv["speaker_a"])
                        questions.append((question, evidence, qa["category"]))
                # Each question as the search API embeds a query (`embed_query`: the int8 graph
                # for the default model, docs/speed.md).
                vectors = [provider.embed_query(q) for q, _, _ in questions]
                started = time.perf_counter()
                conv_rows = {mode: [] for mode in modes}
                for (question, evidence, category), vector in zip(questions, vectors, strict=True):
                    for mode in modes:
                        result = search(
                            agent=agent,
                            memory_user=person,
                            query=question,
                            top_k=max(KS),
                            mode=mode if mode not in variants else "hybrid",
                            weights=variants.get(mode),
                            query_vector=vector,
                            model=provider.model_name,
                            asked_by_person=options["person_questions"],
                        )
                        hit_ids = [hit.entry.pk if entries else hit.message.pk for hit in result.hits]
                        ranked = [dia_of.get(pk) for pk in hit_ids]
                        row = {k: len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
                        first = next((i for i, dia in enumerate(ranked) if dia in evidence), None)
                        row["rr"] = 0.0 if first is None else 1 / (first + 1)
                        row["category"] = category
                        row["half"] = "tuning" if sample["sample_id"] in tuning else "held-out"
                        conv_rows[mode].append(row)
                        asked[mode].append(
                            {
                                "sample_id": sample["sample_id"],
                                "question": question,
                                "category": CATEGORIES[category],
                                "half": row["half"],
                                "recall@10": row[10],
                                "evidence_ranks": {
                                    dia: (ranked.index(dia) if dia in ranked else None)
                                    for dia in sorted(evidence)
                                },
                                "top10": ranked[:10],
                            }
                        )
                        runs[mode].append(row)
                timings["search_s"] += time.perf_counter() - started
                per_conversation[sample["sample_id"]] = {
                    mode: summarize_run(rows)["overall"] for mode, rows in conv_rows.items()
                }
                self.stdout.write(
                    f"{sample['sample_id']}: {len(dia_of)} turns, {len(questions)} questions, "
                    + ", ".join(
                        f"{m} R@10 {per_conversation[sample['sample_id']][m]['recall@10']:.3f}" for m in modes
                    )
                )
        finally:
            workspace.delete()

        names = {"hybrid": "default", "lexical": "lexical", "vector": "vector"}
        report = {
            "runs": {names.get(mode, mode): summarize_run(rows) for mode, rows in runs.items()},
            "per_conversation": per_conversation,
            "variants": {name: weights.as_dict() for name, weights in variants.items()},
            "settings": {
                "corpus": options["corpus"],
                "unnamed_user": options["unnamed_user"],
                "nameless_person": options["nameless_person"],
                "full_name": options["full_name"],
                "user_questions": options["user_questions"],
                "person_questions": options["person_questions"],
                "embedding_model": provider.model_name,
                "weights": base_weights.as_dict(),
                "bm25": {"k1": 1.2, "b": 0.75, "text_search_config": "english"},
                "indexed_text": (
                    "<speaker>: <text> [shares <caption>]"
                    + ("" if entries else "; vectors add the date and the previous turn")
                ),
            },
            "timings": {k: round(v, 2) for k, v in timings.items()},
        }
        self.stdout.write(f"\n{'run':<10} {'R@5':>7} {'R@10':>7} {'R@20':>7} {'MRR':>7}   R@10 by category")
        for name, run in report["runs"].items():
            overall = run["overall"]
            cats = " ".join(f"{c} {v.get('recall@10', 0):.3f}" for c, v in run["by_category"].items())
            self.stdout.write(
                f"{name:<10} {overall['recall@5']:>7.3f} {overall['recall@10']:>7.3f} "
                f"{overall['recall@20']:>7.3f} {overall['mrr']:>7.3f}   {cats}"
            )
        if tuning:
            report["halves"] = {
                names.get(mode, mode): {
                    half: summarize_run([r for r in rows if r["half"] == half])
                    for half in ("tuning", "held-out")
                }
                for mode, rows in runs.items()
            }
            self.stdout.write(f"\nper half (tuning: {', '.join(sorted(tuning))})")
            for name, halves in report["halves"].items():
                for half, run in halves.items():
                    overall = run["overall"]
                    if not overall:
                        continue  # No question in this half (a split naming every conversation).
                    cats = " ".join(f"{c} {v.get('recall@10', 0):.3f}" for c, v in run["by_category"].items())
                    self.stdout.write(
                        f"{name:<10} {half:<9} {overall['recall@5']:>7.3f} {overall['recall@10']:>7.3f} "
                        f"{overall['recall@20']:>7.3f} {overall['mrr']:>7.3f}   {cats}"
                    )
        self.stdout.write(f"timings: {report['timings']}")
        if options["json_path"]:
            with open(options["json_path"], "w") as handle:
                json.dump(report, handle, indent=2, sort_keys=True)
        if options["questions_json"]:
            with open(options["questions_json"], "w") as handle:
                json.dump({names.get(mode, mode): rows for mode, rows in asked.items()}, handle, indent=1)
