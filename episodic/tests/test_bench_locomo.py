import io
import json
import tempfile
from pathlib import Path

from django.core.management import call_command
from django.test import SimpleTestCase, TestCase

from episodic.management.commands.bench_locomo import person_display_name, user_question


class UserQuestionTests(SimpleTestCase):
    """`bench_locomo --user-questions` asks as an agent asks of the person it serves."""

    def test_the_persons_name_becomes_the_user(self):
        assert user_question("What do Melanie's kids like?", "Melanie") == "What do the user's kids like?"
        assert user_question("Melanie\u2019s dog is called?", "Melanie") == "The user\u2019s dog is called?"
        assert user_question("Did Melanie meet Caroline?", "Melanie") == "Did the user meet Caroline?"

    def test_only_the_whole_name_changes(self):
        assert user_question("Do the Melanies paint?", "Melanie") == "Do the Melanies paint?"
        assert user_question("Is a.b here?", "axb") == "Is a.b here?"
        assert user_question("Is axb here?", "a.b") == "Is axb here?"


class PersonDisplayNameTests(SimpleTestCase):
    def test_the_options_name_the_person(self):
        def name(**options):
            return person_display_name("Caroline", {"nameless_person": False, "full_name": False, **options})

        assert name() == "Caroline"
        assert name(full_name=True) == "Caroline Rivera"
        assert name(nameless_person=True, full_name=True) == ""


class QuestionsJsonTests(TestCase):
    """`bench_locomo --questions-json` writes where each question's evidence ranked, the data
    a per-question look at the misses needs (docs/episodic.md, "Issue 19")."""

    def test_each_question_has_its_evidence_ranks_and_top_ten(self):
        turns = [
            ("Ada", "Morning Bo! I spent the weekend in my garden."),
            ("Bo", "Nice, what are you growing this year?"),
            ("Ada", "Tomatoes and basil, and the tomatoes are finally red."),
            ("Bo", "I went climbing with my brother on Saturday."),
        ]
        sample = {
            "sample_id": "conv-t",
            "conversation": {
                "speaker_a": "Ada",
                "speaker_b": "Bo",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": speaker, "dia_id": f"D1:{index}", "text": text}
                    for index, (speaker, text) in enumerate(turns, start=1)
                ],
            },
            "qa": [
                {"question": "Are Ada's tomatoes red?", "answer": "yes", "evidence": ["D1:3"], "category": 4},
                {
                    "question": "Who did Bo climb with?",
                    "answer": "his brother",
                    "evidence": ["D1:4"],
                    "category": 1,
                },
                # No evidence among the turns: not asked.
                {"question": "Where?", "answer": "?", "evidence": ["D9:1"], "category": 4},
            ],
        }
        with tempfile.TemporaryDirectory() as folder:
            data, out = Path(folder, "data.json"), Path(folder, "questions.json")
            data.write_text(json.dumps([sample]))
            call_command(
                "bench_locomo",
                "--data",
                str(data),
                "--modes",
                "hybrid,lexical",
                "--split",
                "conv-t",
                "--questions-json",
                str(out),
                stdout=io.StringIO(),
            )
            asked = json.loads(out.read_text())

        assert set(asked) == {"default", "lexical"}
        grow, climb = asked["lexical"]
        assert grow["sample_id"] == "conv-t"
        assert grow["question"] == "Are Ada's tomatoes red?"
        assert (grow["category"], grow["half"]) == ("single-hop", "tuning")
        assert climb["category"] == "multi-hop"
        assert set(grow["evidence_ranks"]) == {"D1:3"}
        rank = grow["evidence_ranks"]["D1:3"]
        assert grow["top10"][rank] == "D1:3"
        assert grow["recall@10"] == 1.0
        assert set(grow["top10"]) <= {f"D1:{index}" for index in range(1, 5)}
        assert len(asked["default"]) == 2
