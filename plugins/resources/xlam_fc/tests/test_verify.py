"""The scoring rules of xlam_fc, as pure functions (gym_xlam_fc.verify)."""

from __future__ import annotations

import pytest

from gym_core.schemas import decode_response

from gym_xlam_fc.verify import CallScore, arguments_match, count_correct, parse_arguments, predicted_calls, score_calls


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('{"a": 1, "b": [1, 2]}', {"a": 1, "b": [1, 2]}),
        ("{}", {}),
        ('{"a": 1', {}),  # cut off
        ("", {}),
        ("not json", {}),
        ("{'a': 1}", {}),  # Python repr, not JSON
        ("[1, 2]", [1, 2]),  # valid JSON that is not an object is kept as it is
        ("5", 5),
        ('{"a": 1, "a": 2}', {"a": 2}),  # the last duplicate key wins, as in json.loads
    ],
)
def test_parse_arguments(text, parsed):
    assert parse_arguments(text) == parsed


def test_parse_arguments_survives_pathological_nesting():
    assert parse_arguments("[" * 200_000 + "]" * 200_000) == {}
    assert parse_arguments('{"a": ' * 200_000 + "1" + "}" * 200_000) == {}


def test_predicted_calls_take_every_function_call_in_order_across_turns():
    response = decode_response(
        {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "call f"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
                {"type": "function_call_output", "call_id": "c1", "output": '{"detail":"Not Found"}'},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "retrying"}]},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{oops"},
                {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "[1]"},
            ]
        }
    )
    assert predicted_calls(response) == [call("f", x=1), call("g"), {"name": "f", "arguments": [1]}]


def test_predicted_calls_of_a_text_answer_are_empty():
    response = decode_response({"output": [{"type": "message", "role": "assistant", "content": "no call needed"}]})
    assert predicted_calls(response) == []


# ---------------------------------------------------------------- argument equality


@pytest.mark.parametrize(
    ("expected", "predicted"),
    [
        ({"n": 1}, {"n": 1.0}),  # 1 == 1.0
        ({"n": 1.0}, {"n": 1}),
        ({"flag": True}, {"flag": 1}),  # true == 1, as in Python
        ({"flag": False}, {"flag": 0}),
        ({"d": {"a": 1, "b": 2}}, {"d": {"b": 2, "a": 1}}),  # objects ignore key order
        ({"l": [1, [2, 3]]}, {"l": [1.0, [2, 3]]}),
        ({"s": "x"}, {"s": "x", "extra": 5}),  # extra predicted keys are allowed
        ({"v": None}, {"v": None}),
        ({}, {"anything": 1}),
        ({}, [1, 2]),  # no expected argument: whatever was sent matches
        ({}, "text"),
    ],
)
def test_arguments_match(expected, predicted):
    assert arguments_match(expected, predicted)


@pytest.mark.parametrize(
    ("expected", "predicted"),
    [
        ({"n": 1}, {"n": "1"}),  # a string is not a number
        ({"n": "1"}, {"n": 1}),
        ({"l": [1, 2]}, {"l": [2, 1]}),  # lists are ordered
        ({"s": "Paris"}, {"s": "paris"}),  # case matters
        ({"s": "x"}, {}),  # a missing key
        ({"s": "x", "t": "y"}, {"s": "x"}),
        ({"v": None}, {}),  # a null expected value still needs the key
        ({"d": {"a": 1}}, {"d": {"a": 1, "b": 2}}),  # nested objects compare whole
        ({"n": 1}, [1]),  # arguments that are not an object have no keys
        ({"n": 1}, "n"),
        ({"n": 1}, 1),
    ],
)
def test_arguments_do_not_match(expected, predicted):
    assert not arguments_match(expected, predicted)


def test_arguments_nested_deeper_than_python_compares_do_not_match():
    deep_a: list = []
    deep_b: list = []
    for _ in range(100_000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert not arguments_match({"x": deep_a}, {"x": deep_b})


# ---------------------------------------------------------------- matching and reward


def test_matching_is_greedy_in_expected_order_and_uses_each_call_once():
    expected = [call("f", a=1), call("f", a=1)]
    assert count_correct(expected, [call("f", a=1)]) == 1
    assert count_correct(expected, [call("f", a=1, b=2), call("f", a=1.0)]) == 2
    # The first expected call takes the first fitting prediction, even where another assignment
    # would match more: greedy, as in the reference.
    greedy = [call("f"), call("f", a=1)]
    assert count_correct(greedy, [call("f", a=1), call("f", a=2)]) == 1


def test_matching_needs_the_same_name():
    assert count_correct([call("f", a=1)], [call("g", a=1)]) == 0
    assert count_correct([call("f", a=1)], [call("F", a=1)]) == 0


def test_order_of_predicted_calls_does_not_matter():
    expected = [call("weather", city="Oslo"), call("weather", city="Lima")]
    predicted = [call("weather", city="Lima"), call("weather", city="Oslo")]
    assert score_calls(expected, predicted) == CallScore(1.0, 2, 2, 2)


def test_no_expected_call_rewards_no_call_only():
    assert score_calls([], []) == CallScore(1.0, 0, 0, 0)
    assert score_calls([], [call("f")]) == CallScore(0.0, 0, 1, 0)


def test_every_expected_call_must_be_matched():
    expected = [call("weather", city="Oslo"), call("weather", city="Lima")]
    assert score_calls(expected, [call("weather", city="Oslo")]) == CallScore(0.0, 2, 1, 1)
    assert score_calls(expected, []) == CallScore(0.0, 2, 0, 0)


def test_an_extra_call_loses_the_reward():
    expected = [call("timer", minutes=15)]
    assert score_calls(expected, [call("timer", minutes=15), call("timer", minutes=15)]) == CallScore(0.0, 1, 2, 1)
    assert score_calls(expected, [call("timer", minutes=15), call("weather")]) == CallScore(0.0, 1, 2, 1)


def test_as_many_calls_as_expected_but_one_wrong():
    expected = [call("f", a=1), call("g", b=2)]
    assert score_calls(expected, [call("f", a=1), call("g", b=3)]) == CallScore(0.0, 2, 2, 1)


def test_unparseable_arguments_match_only_a_call_without_arguments():
    assert score_calls([call("search", query="pasta")], [call("search")]) == CallScore(0.0, 1, 1, 0)
    assert score_calls([call("now")], [call("now")]) == CallScore(1.0, 1, 1, 1)
