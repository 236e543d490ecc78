"""Options of an ``equivalence_llm_judge`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin loads no server code. The option names and
defaults are the reference's *code* defaults (environments spec §17); its shipped yaml differs in three
of them (see the README). Each option's description is what `gym plugin show equivalence_llm_judge`
prints. The judge options every judged environment shares (``judge_model_server``,
``judge_responses_create_params``, ``judge_endpoint_max_concurrency``, ``judge_timeout_s``,
``judge_max_attempts``) come from :class:`gym_core.options.JudgeOptions`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from msgspec import Meta

from gym_core.options import JudgeOptions

__all__ = ["EquivalenceLlmJudgeConfig", "DEFAULT_TEMPLATE", "PACKAGE_DIR", "TEMPLATE_FIELDS", "resolve_template_path"]

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_TEMPLATE = "prompt_templates/equivalence_llm_judge.txt"
# The placeholders a template may use (Python str.format; literal braces are doubled).
TEMPLATE_FIELDS = ("question", "expected_answer", "generated_answer")


def resolve_template_path(path: str) -> Path:
    """Where the template ``path`` is: as given when absolute; else relative to this package (the
    shipped templates: ``prompt_templates/lc_judge.txt``...), else relative to the working directory."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return given
    in_package = PACKAGE_DIR / given
    return in_package if in_package.is_file() else given.resolve()


class EquivalenceLlmJudgeConfig(JudgeOptions, kw_only=True):
    judge_system_message: Annotated[
        str | None, Meta(description="system message of every judge call; null or empty: none")
    ] = None
    judge_prompt_template_fpath: Annotated[
        str,
        Meta(
            description="the judge prompt template (str.format with {question}, {expected_answer}, "
            "{generated_answer}; literal braces doubled); a relative path is looked up in this package first "
            "(shipped: prompt_templates/equivalence_llm_judge.txt, prompt_templates/lc_judge.txt, "
            "prompt_templates/nl2bash.txt), then in the working directory"
        ),
    ] = DEFAULT_TEMPLATE
    judge_equal_label: Annotated[str, Meta(min_length=1, description="the judge's label for 'equivalent'")] = "[[A=B]]"
    judge_not_equal_label: Annotated[str, Meta(min_length=1, description="the judge's label for 'not equivalent'")] = (
        "[[A!=B]]"
    )
    question_extract_regex: Annotated[
        str | None,
        Meta(
            description="regex (MULTILINE|DOTALL) applied to the last user message to get the question: the last "
            "match's first non-blank group (else the whole match); no match: the whole message"
        ),
    ] = None
    response_extract_regex: Annotated[
        str | None,
        Meta(
            description="regex (MULTILINE|DOTALL) applied to the last assistant message to get the answer: the last "
            "match's first non-blank group (else the whole match); no match or an invalid regex: the whole message"
        ),
    ] = None
    msg_extraction_failure: Annotated[
        str, Meta(description="the generated answer the judge sees when there is no (or an empty) assistant message")
    ] = "[NO VALID ANSWER EXTRACTED]"
    check_twice_swap: Annotated[
        bool, Meta(description="after an 'equal' verdict, ask again with the two answers swapped")
    ] = False
    reward_if_swap_fails: Annotated[
        float, Meta(ge=0, le=1, description="the reward when the swapped verdict is 'not equal'")
    ] = 0.0
    use_per_record_regex: Annotated[
        bool, Meta(description="a row's template_metadata.output_regex replaces response_extract_regex")
    ] = True
    extraction_length_threshold: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(
            description="with a per-row regex: when the expected answer is longer than this, use no regex (the "
            "whole message), never call the judge a second time, and give 0 or 1 on the first verdict; "
            "null: no threshold (the shipped yaml's value)"
        ),
    ] = 120
    check_full_generation_on_fail: Annotated[
        bool,
        Meta(
            description="with a per-row regex: when the extracted answer is judged 'not equal', ask again with the "
            "whole last assistant message (false in the shipped yaml)"
        ),
    ] = True
    reward_if_full_generation_succeeds: Annotated[
        float,
        Meta(
            ge=0, le=1, description="the reward when only the whole message is judged 'equal' (0.0 in the shipped yaml)"
        ),
    ] = 0.5
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit of the regex extractions of one verify in a worker: past it, reward 0 "
            "with reason 'timeout' and no judge call",
        ),
    ] = 5.0
    verify_workers: Annotated[
        int, Meta(ge=1, description="worker processes running the extraction regexes on long texts")
    ] = 2
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each worker (null: none); an extraction past it scores 0 ('error')"),
    ] = 1024
    inline_max_chars: Annotated[
        int,
        Meta(
            ge=0,
            description="texts up to this many characters are searched by the regexes in the server process, longer "
            "ones in a worker under verify_timeout_s (0: always a worker)",
        ),
    ] = 256

    def __post_init__(self) -> None:
        for name in ("question_extract_regex", "response_extract_regex"):
            pattern = getattr(self, name)
            if pattern is not None:
                try:
                    re.compile(pattern, re.MULTILINE | re.DOTALL)
                except re.error as exc:
                    raise ValueError(f"{name} is not a valid regular expression: {exc}") from None
        self.template  # noqa: B018 - fail at config load, not at the first verify

    @property
    def template(self) -> str:
        """The judge prompt template's text, checked: it exists and formats with the three fields."""
        path = resolve_template_path(self.judge_prompt_template_fpath)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"judge_prompt_template_fpath: cannot read {self.judge_prompt_template_fpath!r} "
                f"(looked in {PACKAGE_DIR} and the working directory): {exc.strerror or exc}"
            ) from None
        try:
            text.format(**{field: "" for field in TEMPLATE_FIELDS})
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"judge_prompt_template_fpath: {path} is not a str.format template over {', '.join(TEMPLATE_FIELDS)} "
                f"({type(exc).__name__}: {exc}); double literal braces"
            ) from None
        return text
