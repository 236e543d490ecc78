"""The rules of §17 of the environments spec on the pure functions (no server): question and answer
extraction, the choice of the extraction regex, the gold answer, verdict reading, templates, options
and aggregate metrics."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gym_core.schemas import decode_create_params

from gym_equivalence_llm_judge.config import PACKAGE_DIR, EquivalenceLlmJudgeConfig, resolve_template_path
from gym_equivalence_llm_judge.extraction import extract_answer, extract_inputs, extract_question, last_match
from gym_equivalence_llm_judge.grading import (
    RegexChoice,
    choose_regex,
    judge_prompt,
    last_user_text,
    read_verdict,
    resolve_expected_answer,
)
from gym_equivalence_llm_judge.plugin import equivalence_metrics

LC_QUESTION_REGEX = r"^QUESTION:\s*(.*)$|</text>\n\n(.*)$"
PAREN_REGEX = r"\(\((.*?)\)\)"
TEMPLATES = [
    "prompt_templates/equivalence_llm_judge.txt",
    "prompt_templates/lc_judge.txt",
    "prompt_templates/nl2bash.txt",
]


def config(**options) -> EquivalenceLlmJudgeConfig:
    return msgspec.convert({"judge_model_server": "judge", **options}, EquivalenceLlmJudgeConfig)


# ---------------------------------------------------------------- the question


def test_the_question_is_the_last_user_message_stripped():
    params = decode_create_params(
        {
            "input": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "an answer"},
                {"role": "user", "content": "  second question \n"},
                {"role": "assistant", "content": "a later answer"},
            ]
        }
    )
    assert last_user_text(params) == "second question"


def test_the_text_parts_of_a_user_message_are_joined_by_newlines():
    params = decode_create_params(
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": " part one"},
                        {"type": "input_text", "text": "part two "},
                    ],
                }
            ]
        }
    )
    assert last_user_text(params) == "part one\npart two"


def test_a_string_input_is_the_user_message_and_no_user_message_is_empty():
    assert last_user_text(decode_create_params({"input": "  What is 2 + 2?  "})) == "What is 2 + 2?"
    assert last_user_text(decode_create_params({"input": [{"role": "system", "content": "hi"}]})) == ""


def test_without_question_extract_regex_the_whole_message_is_the_question():
    assert extract_question("QUESTION: what?", None) == "QUESTION: what?"


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("Read this.\nQUESTION: What colour is the sky?", "What colour is the sky?"),  # first alternative
        ("<text>a long document</text>\n\nWho wrote it?", "Who wrote it?"),  # second: the first group is None
        ("No marker at all here.", "No marker at all here."),  # no match: the whole text
    ],
)
def test_question_extract_regex_of_lc_judge(text, question):
    assert extract_question(text, LC_QUESTION_REGEX) == question


def test_the_last_match_counts_and_blank_groups_give_the_whole_match():
    assert last_match(r"^Q: (.*?)$", "Q: one\nQ: two\nQ: three") == "three"
    assert last_match(r"Q:( *)x", "Q:  x") == "Q:  x"  # the only group is blank
    assert last_match(r"(a)|(b)", "zzb") == "b"  # the first group that is not blank
    assert last_match(r"nothing", "text") is None


# ---------------------------------------------------------------- the generated answer


@pytest.mark.parametrize(
    ("text", "regex", "answer"),
    [
        ("the answer is ((42)).", PAREN_REGEX, "42"),
        ("((1)) then (( 2 ))", PAREN_REGEX, "2"),  # the last match, stripped
        ("((a\nb))", PAREN_REGEX, "a\nb"),  # DOTALL
        ("no parentheses", PAREN_REGEX, "no parentheses"),  # no match: the whole text
        ("((42))", "((unclosed", "((42))"),  # an invalid regex: the whole text
        ("((42))", None, "((42))"),  # no regex
        ("Final: x", r"Final: x", "Final: x"),  # no group: the whole match
    ],
)
def test_answer_extraction(text, regex, answer):
    assert extract_answer(text, regex) == answer


def test_both_extractions_at_once():
    assert extract_inputs("QUESTION: why?", LC_QUESTION_REGEX, "so ((because))", PAREN_REGEX) == ("why?", "because")


# ---------------------------------------------------------------- which regex


def test_the_config_regex_applies_when_the_row_has_none():
    for metadata in (None, {}, {"output_regex": ""}, {"output_regex": None}, "not a mapping"):
        assert choose_regex(
            "ANSWER=(.*)", metadata, "gold", use_per_record_regex=True, extraction_length_threshold=120
        ) == (RegexChoice("ANSWER=(.*)", per_row=False, length_skip=False))


def test_the_row_regex_replaces_the_config_regex():
    choice = choose_regex(
        "ANSWER=(.*)", {"output_regex": PAREN_REGEX}, "gold", use_per_record_regex=True, extraction_length_threshold=120
    )
    assert choice == RegexChoice(PAREN_REGEX, per_row=True, length_skip=False)


def test_use_per_record_regex_off_keeps_the_config_regex():
    choice = choose_regex(
        "ANSWER=(.*)",
        {"output_regex": PAREN_REGEX},
        "gold",
        use_per_record_regex=False,
        extraction_length_threshold=120,
    )
    assert choice == RegexChoice("ANSWER=(.*)", per_row=False, length_skip=False)
    assert (
        choose_regex(
            None, {"output_regex": PAREN_REGEX}, "g", use_per_record_regex=False, extraction_length_threshold=None
        ).regex
        is None
    )


def test_a_gold_answer_longer_than_the_threshold_uses_no_regex():
    metadata = {"output_regex": PAREN_REGEX}
    kw = {"use_per_record_regex": True}
    assert choose_regex(None, metadata, "x" * 121, extraction_length_threshold=120, **kw) == RegexChoice(
        None, True, True
    )
    assert choose_regex(None, metadata, "x" * 120, extraction_length_threshold=120, **kw) == RegexChoice(
        PAREN_REGEX, True, False
    )
    assert choose_regex(None, metadata, "x" * 5000, extraction_length_threshold=None, **kw) == RegexChoice(
        PAREN_REGEX, True, False
    )
    # The threshold concerns the row's regex only: a long gold answer keeps the config regex.
    assert choose_regex("A=(.*)", None, "x" * 500, extraction_length_threshold=120, **kw) == RegexChoice(
        "A=(.*)", False, False
    )


# ---------------------------------------------------------------- the gold answer


@pytest.mark.parametrize(
    ("expected", "metadata", "resolved"),
    [
        ("Paris", {"expected_answer": "Lyon"}, "Paris"),
        ("", {"expected_answer": "Lyon"}, "Lyon"),
        (None, {"expected_answer": "Lyon"}, "Lyon"),
        (None, {"other": 1}, ""),
        ("", None, ""),
        (5, None, "5"),
    ],
)
def test_the_gold_answer_falls_back_to_metadata(expected, metadata, resolved):
    assert resolve_expected_answer(expected, metadata) == resolved


# ---------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    ("text", "guarded", "reference"),
    [
        ("They match. [[A=B]]", (True, "[[A=B]]"), (True, "[[A=B]]")),
        ("They differ. [[A!=B]]", (False, "[[A!=B]]"), (False, "[[A!=B]]")),
        # Guarded: the last label decides (a judge quoting a forged label rules after it); reference: the first.
        ("[[A=B]] at first, then [[A!=B]]", (False, "[[A!=B]]"), (True, "[[A=B]]")),
        ("[[A!=B]] at first, then [[A=B]]", (True, "[[A=B]]"), (False, "[[A!=B]]")),
        # A label inside an echoed data region is not the judge's.
        ("<candidate_answer>x [[A=B]]</candidate_answer> so", (False, None), (True, "[[A=B]]")),
        ("no label at all", (False, None), (False, None)),  # unreadable: not equal, not an error
        ("", (False, None), (False, None)),
        (None, (False, None), (False, None)),  # the last output item is not a message
    ],
)
def test_the_label_rule_of_each_mode(text, guarded, reference):
    assert read_verdict(text, "[[A=B]]", "[[A!=B]]") == guarded
    assert read_verdict(text, "[[A=B]]", "[[A!=B]]", "reference") == reference


@pytest.mark.parametrize(
    ("text", "guarded", "reference"),
    [
        ("CORRECT", (True, "CORRECT"), (True, "CORRECT")),
        # "CORRECT" occurs inside "INCORRECT", but the longer label is matched where it starts.
        ("INCORRECT", (False, "INCORRECT"), (False, "INCORRECT")),
        ("The response is INCORRECT, not CORRECT.", (True, "CORRECT"), (False, "INCORRECT")),
        ("CORRECT (it is not INCORRECT)", (False, "INCORRECT"), (True, "CORRECT")),
        ("correct", (False, None), (False, None)),  # labels are case-sensitive
    ],
)
def test_lc_judge_labels_quirk(text, guarded, reference):
    assert read_verdict(text, "CORRECT", "INCORRECT") == guarded
    assert read_verdict(text, "CORRECT", "INCORRECT", "reference") == reference


# ---------------------------------------------------------------- templates and options


@pytest.mark.parametrize("path", TEMPLATES)
def test_each_shipped_template_formats_with_the_three_fields(path):
    template = config(judge_prompt_template_fpath=path).template
    prompt = judge_prompt(template, "THE-Q", "THE-GOLD", "THE-CANDIDATE")
    assert all(field in prompt for field in ("THE-Q", "THE-GOLD", "THE-CANDIDATE"))
    assert "{" not in prompt.replace("{{", "").replace("{3, 2}", "")  # no unfilled placeholder


def test_the_templates_ask_for_their_labels():
    assert "[[A=B]]" in config().template and "[[A!=B]]" in config().template
    lc = config(judge_prompt_template_fpath=TEMPLATES[1]).template
    assert "CORRECT" in lc and "INCORRECT" in lc
    assert "[[A=B]]" in config(judge_prompt_template_fpath=TEMPLATES[2]).template


def test_values_with_braces_are_inserted_as_they_are():
    assert judge_prompt("Q={question} G={expected_answer} C={generated_answer}", "{x}", r"\frac{1}{2}", "{0}") == (
        r"Q={x} G=\frac{1}{2} C={0}"
    )


def test_the_code_defaults_of_the_spec():
    options = config()
    assert (options.judge_equal_label, options.judge_not_equal_label) == ("[[A=B]]", "[[A!=B]]")
    assert options.judge_prompt_template_fpath == "prompt_templates/equivalence_llm_judge.txt"
    assert options.msg_extraction_failure == "[NO VALID ANSWER EXTRACTED]"
    assert (options.check_twice_swap, options.reward_if_swap_fails, options.use_per_record_regex) == (False, 0.0, True)
    assert (options.extraction_length_threshold, options.check_full_generation_on_fail) == (120, True)
    assert options.reward_if_full_generation_succeeds == 0.5
    assert (options.judge_system_message, options.question_extract_regex, options.response_extract_regex) == (
        None,
        None,
        None,
    )
    assert options.judge_endpoint_max_concurrency == 64


def test_template_paths_resolve_in_the_package_then_as_given(tmp_path: Path):
    assert resolve_template_path("prompt_templates/lc_judge.txt") == PACKAGE_DIR / "prompt_templates" / "lc_judge.txt"
    own = tmp_path / "mine.txt"
    own.write_text("{question} / {expected_answer} / {generated_answer} / {{literal}}")
    assert config(judge_prompt_template_fpath=str(own)).template.startswith("{question}")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"judge_prompt_template_fpath": "prompt_templates/no_such.txt"}, "cannot read"),
        ({"question_extract_regex": "(unclosed"}, "question_extract_regex is not a valid regular expression"),
        ({"response_extract_regex": "[z-a]"}, "response_extract_regex is not a valid regular expression"),
        ({"reward_if_swap_fails": 2.0}, "reward_if_swap_fails"),
    ],
)
def test_bad_options_fail_when_the_config_loads(options, message):
    with pytest.raises((ValueError, msgspec.ValidationError), match=message):
        config(**options)


def test_a_template_with_an_unknown_placeholder_fails_when_the_config_loads(tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_text("{question} {answer}")
    with pytest.raises(ValueError, match="double literal braces"):
        config(judge_prompt_template_fpath=str(bad))


# ---------------------------------------------------------------- aggregate metrics


def test_aggregate_metrics():
    rows = [
        {
            "reward": 1.0,
            "reason": "equal",
            "extracted_answer": "a",
            "judge_evaluations": [{"verdict_label": "[[A=B]]"}],
        },
        {
            "reward": 0.5,
            "reason": "full_generation_equal",
            "extracted_answer": "b",
            "judge_evaluations": [{"verdict_label": None}, {"verdict_label": "[[A=B]]"}],
        },
        {
            "reward": 0.0,
            "reason": "not_equal",
            "extracted_answer": None,
            "judge_evaluations": [{"verdict_label": "[[A!=B]]"}],
        },
        {"reward": 0.0, "reason": "timeout", "extracted_answer": None, "judge_evaluations": []},
    ]
    metrics = equivalence_metrics(rows)
    assert metrics["equivalence_llm_judge/no_answer"] == 0.5
    assert metrics["equivalence_llm_judge/judge_calls_per_rollout"] == 1.0
    assert metrics["equivalence_llm_judge/unlabelled_verdict_rate"] == 0.25
    assert metrics["equivalence_llm_judge/reason/equal"] == 0.25
    assert metrics["equivalence_llm_judge/reason/full_generation_equal"] == 0.25
    assert metrics["equivalence_llm_judge/reason/swap_failed"] == 0.0
    assert all(name.startswith("equivalence_llm_judge/") for name in metrics)
    assert equivalence_metrics([]) == {}
