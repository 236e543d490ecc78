"""The pure scoring functions of gym_multi_step.verify: every rule and edge case of the spec."""

from __future__ import annotations

import json

import pytest

from gym_core.schemas import decode_response

from gym_multi_step.verify import (
    MalformedSubmission,
    Verdict,
    last_submission,
    lax_int,
    read_submission,
    score_submission,
    synonym_value,
    verdict_for,
)

EXPECTED = [711, 407]  # 'Blazing', 'Warm'
LABEL, LABEL_VALUE = "Hot", 299


def call(name: str, arguments: str, i: int = 0) -> dict:
    return {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": arguments}


@pytest.mark.parametrize(
    ("synonym", "value"),
    [
        ("Warm", 407),
        ("Blazing", 711),
        ("Hot", 299),
        ("warm", 439),
        ("Sky-high", 772),
        ("Draw back", 831),
        ("Drawback", 799),
        ("", 0),
        ("é", 233),
    ],
)
def test_a_synonym_value_is_the_sum_of_its_code_points(synonym, value):
    # Case, spaces and hyphens all count.
    assert synonym_value(synonym) == value


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (7, 7),
        (True, 1),
        (False, 0),
        (711.0, 711),
        (-3.0, -3),
        ("711", 711),
        (" 711\n", 711),
        ("+7", 7),
        ("-0", 0),
        ("07", 7),
        ("1_000", 1000),
        ("711.00", 711),
        (10**30, 10**30),
        ("9" * 30, int("9" * 30)),
        (711.5, None),
        (float("nan"), None),
        (float("inf"), None),
        (1e20, None),
        ("0x10", None),
        ("1e3", None),
        ("1.", None),
        ("1__0", None),
        ("_1", None),
        ("", None),
        ("seven", None),
        ("١٢", None),
        (None, None),
        ([7], None),
        ({"v": 7}, None),
    ],
)
def test_lax_int_follows_pydantic_lax_mode(value, number):
    assert lax_int(value) == number


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"synonym_values": [711, 4', "invalid_json"),
        ("", "invalid_json"),
        ("[" * 100_000 + "]" * 100_000, "invalid_json"),  # too deep for the parser
        ("[711, 407]", "no_synonym_values"),
        ("null", "no_synonym_values"),
        ('{"values": [711, 407]}', "no_synonym_values"),
        ('{"synonym_values": "711, 407"}', "not_a_list"),
        ('{"synonym_values": 711}', "not_a_list"),
        ('{"synonym_values": null}', "not_a_list"),
        ('{"synonym_values": [711, "Warm"]}', "not_integers"),
        ('{"synonym_values": [711, [407]]}', "not_integers"),
        ('{"synonym_values": [711, {"v": 407}]}', "not_integers"),
        ('{"synonym_values": [711, 407.5]}', "not_integers"),
        ('{"synonym_values": [711, NaN]}', "not_integers"),
        ('{"synonym_values": [711, null]}', "not_integers"),
    ],
)
def test_unreadable_submissions_raise_with_a_reason(arguments, reason):
    with pytest.raises(MalformedSubmission) as caught:
        read_submission(arguments)
    assert caught.value.reason == reason
    verdict = verdict_for(EXPECTED, LABEL, LABEL_VALUE, arguments)
    assert verdict == Verdict(0.0, None, False, 0.0, False, False, reason, str(caught.value))


def test_read_submission_keeps_items_as_parsed():
    assert read_submission('{"synonym_values": [711, "407", 1.0, true], "extra": 1}') == [711, "407", 1.0, True]
    assert read_submission('{"synonym_values": []}') == []


def test_the_exact_list_in_order_gets_reward_1():
    verdict = score_submission(EXPECTED, LABEL, LABEL_VALUE, [711, 407])
    assert verdict == Verdict(1.0, [711, 407], True, 1.0, False, False)


def test_the_right_values_in_the_wrong_order_are_an_order_failure():
    verdict = score_submission(EXPECTED, LABEL, LABEL_VALUE, [407, 711])
    assert verdict == Verdict(0.0, [407, 711], False, 1.0, False, True)


def test_an_extra_value_loses_the_reward_but_not_the_overlap():
    # Every expected value is there, so set_overlap is 1 and it counts as an order failure too.
    verdict = score_submission(EXPECTED, LABEL, LABEL_VALUE, [711, 407, 5])
    assert (verdict.reward, verdict.set_overlap, verdict.order_instruction_following_failure) == (0.0, 1.0, True)


def test_submitting_the_original_terms_value_hits_the_minefield():
    verdict = score_submission(EXPECTED, LABEL, LABEL_VALUE, [299, 711])
    assert verdict == Verdict(0.0, [299, 711], False, 0.5, True, False)
    # Python equality: 299.0 is the minefield's value too.
    assert score_submission(EXPECTED, LABEL, LABEL_VALUE, [299.0]).original_term_minefield_hit


def test_the_minefield_label_is_tested_as_the_reference_does():
    # An int list never holds the label; a numeric-string label equal to a submitted string does.
    assert not score_submission(EXPECTED, LABEL, LABEL_VALUE, [711, 407]).original_term_minefield_hit
    assert score_submission([1], "12", 999, ["12"]).original_term_minefield_hit


def test_set_overlap_divides_by_the_expected_lists_length():
    # Duplicates in expected count in the denominator, not in the intersection.
    assert score_submission([5, 5], LABEL, LABEL_VALUE, [5]).set_overlap == 0.5
    assert score_submission([5, 5], LABEL, LABEL_VALUE, [5, 5]).reward == 1.0
    assert score_submission([1, 2, 3, 4], LABEL, LABEL_VALUE, [4, 9, 9]).set_overlap == 0.25


def test_comparisons_are_pythons_on_parsed_json():
    # 711.0 == 711 and True == 1: accurate. "711" != 711: not, though parsed_synonym_values reads 711.
    assert score_submission(EXPECTED, LABEL, LABEL_VALUE, [711.0, 407.0]).reward == 1.0
    assert score_submission([1, 0], LABEL, LABEL_VALUE, [True, False]).reward == 1.0
    strings = score_submission(EXPECTED, LABEL, LABEL_VALUE, ["711", 407])
    assert (strings.reward, strings.parsed_synonym_values, strings.set_overlap) == (0.0, [711, 407], 0.5)


def test_no_submission_scores_as_an_empty_list():
    verdict = verdict_for(EXPECTED, LABEL, LABEL_VALUE, None)
    assert verdict == Verdict(0.0, [], False, 0.0, False, False)
    assert verdict_for(EXPECTED, LABEL, LABEL_VALUE, '{"synonym_values": []}') == verdict


def test_an_empty_expected_list_is_refused():
    with pytest.raises(ValueError, match="must not be empty"):
        score_submission([], LABEL, LABEL_VALUE, [1])


def test_last_submission_is_the_last_extract_call_of_every_turn():
    output = [
        call("extract_synonym_values", '{"synonym_values": [711, 407]}', 0),
        {"type": "function_call_output", "call_id": "call_0", "output": '{"success": true}'},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me redo it."}]},
        call("extract_synonym_values", "{broken", 1),
        call("get_synonym_value", '{"synonym": "Warm"}', 2),
    ]
    assert last_submission(decode_response({"output": output})) == "{broken"
    assert last_submission(decode_response({"output": output[:3]})) == '{"synonym_values": [711, 407]}'
    assert last_submission(decode_response({"output": output[4:]})) is None
    assert last_submission(decode_response({"output": []})) is None


def test_verdict_for_a_submission_string():
    arguments = json.dumps({"synonym_values": [407, 711]})
    assert verdict_for(EXPECTED, LABEL, LABEL_VALUE, arguments) == Verdict(0.0, [407, 711], False, 1.0, False, True)
