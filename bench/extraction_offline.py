"""Extraction without a model: precision and recall of the offline method on hand-labelled turns.

    python -m bench.extraction_offline [--data PATH] [--json OUT] [--misses]

Scores are printed per split of the data: `tuning` (the patterns were adjusted once after a
first run on these turns), `held_out` (labelled afterwards, never used to adjust) and `all`.

Each turn of `episodic/tests/data/extraction_labelled.json` runs through the offline method
(`episodic.services.offline.offline_candidates`) and the same per-candidate validation and
relevance checks as `entry_extract` (`_candidates_validate`), then the exact dedupe within the
turn; the database-backed steps (stored duplicates, similarity, the per-turn cap) are left out.
A proposed entry matches a labelled one of the same kind when one evidence quote contains the
other (case and whitespace aside). Kinds: `statement` (user_assertion), `finding`
(verified_assistant_finding) and `fact` (a stated preference handed to the facts tier).
"""

import argparse
import json
import os
import re
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "episodic" / "tests" / "data" / "extraction_labelled.json"
KINDS = ("statement", "finding", "fact")


def _key(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip().strip(".!?").strip().casefold()


def _same(a: str, b: str) -> bool:
    a, b = _key(a), _key(b)
    return bool(a and b) and (a in b or b in a)


def offline_predict(turn: dict) -> list[tuple[str, str]]:
    """(kind, evidence) of what the offline method would store and hand to facts for `turn`."""
    from episodic.models import EpisodicEntry
    from episodic.services.extraction import _candidates_validate, _context_lines
    from episodic.services.offline import offline_candidates

    transcript = [dict(m) for m in turn["messages"]]
    entries, facts = offline_candidates(transcript)
    known_lines = _context_lines(turn.get("known_memory", ""))
    valid, _rejected, routed = _candidates_validate(
        [("offline", c) for c in entries], transcript=transcript, known_lines=known_lines
    )
    seen, predicted = set(), []
    for item in valid:
        if item["hash"] in seen:
            continue
        seen.add(item["hash"])
        kind = "statement" if item["source"] == EpisodicEntry.Source.USER_ASSERTION else "finding"
        predicted.append((kind, item["evidence"]))
    predicted.extend(("fact", fact["evidence"]) for fact in facts + routed)
    return predicted


def extraction_score(turns: list[dict], predict=offline_predict) -> dict:
    """Per kind and overall: true positives, predicted, expected, precision, recall; plus the
    misses and false positives with their turn's name."""
    counts = {kind: {"tp": 0, "predicted": 0, "expected": 0} for kind in KINDS}
    misses, false_positives = [], []
    for turn in turns:
        expected = [(e["kind"], e["evidence"]) for e in turn["expected"]]
        expected += [("fact", f["evidence"]) for f in turn.get("expected_facts", [])]
        predicted = predict(turn)
        unmatched = list(expected)
        for kind, evidence in predicted:
            counts[kind]["predicted"] += 1
            hit = next((e for e in unmatched if e[0] == kind and _same(e[1], evidence)), None)
            if hit is None:
                false_positives.append({"turn": turn["name"], "kind": kind, "evidence": evidence})
                continue
            unmatched.remove(hit)
            counts[kind]["tp"] += 1
        for kind, _evidence in expected:
            counts[kind]["expected"] += 1
        misses.extend({"turn": turn["name"], "kind": k, "evidence": e} for k, e in unmatched)
    counts["all"] = {k: sum(counts[kind][k] for kind in KINDS) for k in ("tp", "predicted", "expected")}
    for row in counts.values():
        row["precision"] = round(row["tp"] / row["predicted"], 3) if row["predicted"] else None
        row["recall"] = round(row["tp"] / row["expected"], 3) if row["expected"] else None
    return {"counts": counts, "misses": misses, "false_positives": false_positives, "turns": len(turns)}


def load_turns(path: Path = DATA) -> list[dict]:
    return json.loads(Path(path).read_text())["transcripts"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--json", help="Write the scores to this file.")
    parser.add_argument("--misses", action="store_true", help="List misses and false positives.")
    args = parser.parse_args()
    # Nothing here reads the database: the settings are loaded, no server is started.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.bench")
    import django

    django.setup()
    turns = load_turns(Path(args.data))
    results = {}
    for split in ("tuning", "held_out", "all"):
        chosen = [t for t in turns if split == "all" or t.get("split") == split]
        results[split] = result = extraction_score(chosen)
        print(f"\n{split}: {result['turns']} labelled turns")
        print(f"{'kind':<10} {'tp':>4} {'pred':>5} {'exp':>5} {'precision':>10} {'recall':>7}")
        for kind, row in result["counts"].items():
            precision = "-" if row["precision"] is None else f"{row['precision']:.2f}"
            recall = "-" if row["recall"] is None else f"{row['recall']:.2f}"
            counted = f"{row['tp']:>4} {row['predicted']:>5} {row['expected']:>5}"
            print(f"{kind:<10} {counted} {precision:>10} {recall:>7}")
    if args.misses:
        for label in ("misses", "false_positives"):
            print(f"\n{label}:")
            for row in results["all"][label]:
                print(f"  [{row['turn']}] {row['kind']}: {row['evidence']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
