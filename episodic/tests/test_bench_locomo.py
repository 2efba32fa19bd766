from django.test import SimpleTestCase

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
