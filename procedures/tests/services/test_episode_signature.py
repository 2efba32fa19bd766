from procedures.services.learning import common_tool_sequence, episode_signature


def signature(trigger_type="", trigger_payload=None, input=None):
    found = episode_signature(trigger_type=trigger_type, trigger_payload=trigger_payload or {}, input=input)
    return str(found) if found else None


def test_goal_words_ignore_numbers_case_order_and_stop_words():
    """The same request with another number, wording order and politeness has one signature."""
    first = signature("Chat", input={"goal": "Refund order 4411"})
    assert first == "chat|goal:order refund"
    assert signature("chat", input={"goal": "Could you please REFUND the order 5522?"}) == first
    assert signature("chat", input="order refund") == first
    assert signature("email", input={"goal": "Refund order 4411"}) != first


def test_the_goal_is_read_from_input_then_from_the_trigger_payload():
    assert signature(trigger_payload={"text": "Deploy staging"}) == "|goal:deploy staging"
    assert signature(trigger_payload={"text": "deploy prod"}, input={"goal": "Deploy staging"}) == (
        "|goal:deploy staging"
    )


def test_an_explicit_task_wins_over_the_goal():
    assert (
        signature(trigger_payload={"task": "  Refund   Order "}, input={"goal": "x y"})
        == "|task:refund order"
    )


def test_no_salient_word_means_no_signature():
    assert signature(input={"goal": "42 ok"}) is None
    assert signature(input={"other": "Refund"}) is None
    assert signature(trigger_payload={"task": "12"}) is None


def test_only_the_first_five_salient_words_count():
    found = episode_signature(
        trigger_type="", trigger_payload={}, input="alpha bravo charlie delta echo foxtrot golf"
    )
    assert found.words == ("alpha", "bravo", "charlie", "delta", "echo")


def test_the_common_tool_sequence_is_what_every_run_called_in_order():
    runs = [
        [{"tool": "lookup"}, {"tool": "apologise"}, {"tool": "refund"}],
        [{"name": "lookup"}, {"tool": "refund"}, {"tool": "email"}],
        [{"function": {"name": "lookup"}}, {"tool": "check"}, {"tool": "refund"}, "noise"],
    ]
    assert common_tool_sequence(runs) == ["lookup", "refund"]
    assert common_tool_sequence([[{"tool": "a"}], [{"tool": "b"}]]) == []
    assert common_tool_sequence([None, []]) == []
