"""gym data import: JSONL, Parquet and datasets directories mapped onto mcqa, math and counter rows,
each row checked on the environment's real servers (loopback, in process): rows the environment
refuses at seed_session or whose reference answer does not score 1 are rejected with their line and
reason; a mapping naming an unknown column is bad usage (exit 2) and checks nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]

QUESTIONS = [
    {"question": "Which planet is red?\nA: Venus\nB: Mars", "choices": [{"A": "Venus"}, {"B": "Mars"}], "answer": "B"},
    {"question": "What is 6 x 7?\nA: 42\nB: 48", "choices": [{"A": "42"}, {"B": "48"}], "answer": "a"},
    # The reference names a letter the options lack: no answer can score 1.
    {"question": "Which is a fruit?\nA: Apple\nB: Brick", "choices": [{"A": "Apple"}, {"B": "Brick"}], "answer": "D"},
]
MCQA_MAP = ["--map", "input=question", "--map", "options=choices", "--map", "expected_answer=answer"]


def _import(tmp_path: Path, source: Path, *args: str) -> tuple[int, str, list[dict], list[dict]]:
    from gym_cli.main import cli

    output = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        cli(), ["data", "import", str(source), *args, "-o", str(output)], catch_exceptions=False
    )
    read = lambda p: [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []  # noqa: E731
    # one line however the console wraps it (the temporary path's length decides where it breaks)
    return result.exit_code, " ".join(result.output.split()), read(output), read(tmp_path / "rows.rejected.jsonl")


@pytest.fixture(autouse=True)
def _in_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _check_mcqa(tmp_path: Path, source: Path, *args: str) -> None:
    status, output, accepted, rejected = _import(tmp_path, source, "--env", "mcqa", *MCQA_MAP, *args)
    assert status == 1, output
    assert [row["expected_answer"] for row in accepted] == ["B", "a"]
    assert accepted[0]["responses_create_params"]["input"] == [{"role": "user", "content": QUESTIONS[0]["question"]}]
    # Arrow stores a list of objects as structs with every key of the column, missing ones null
    # (mcqa reads an option whose text is null as absent).
    options = [{k: v for k, v in option.items() if v is not None} for option in accepted[0]["options"]]
    assert options == QUESTIONS[0]["choices"]
    assert [r["line"] for r in rejected] == [3]
    assert "scored reward 0" in rejected[0]["reason"] and "boxed{D}" in rejected[0]["reason"]
    assert rejected[0]["row"]["expected_answer"] == "D"
    assert "2 accepted" in output and "1 rejected" in output


def test_jsonl_rows_are_checked_by_line_and_a_wrong_reference_is_rejected(tmp_path: Path) -> None:
    source = tmp_path / "qa.jsonl"
    lines = [json.dumps(QUESTIONS[0]), "", json.dumps(QUESTIONS[1]), "{not json", json.dumps(QUESTIONS[2])]
    source.write_text("\n".join(lines) + "\n")
    status, output, accepted, rejected = _import(tmp_path, source, "--env", "mcqa", *MCQA_MAP)
    assert status == 1, output
    assert len(accepted) == 2
    assert [(r["line"], r["reason"][:8]) for r in rejected] == [(4, "not JSON"), (5, "its refe")]


def test_parquet_file(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    source = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_pylist(QUESTIONS), source)
    _check_mcqa(tmp_path, source)


def test_datasets_directory_and_its_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    source = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(QUESTIONS), "test": datasets.Dataset.from_list(QUESTIONS[:1])}
    ).save_to_disk(str(source))
    status, output, _, _ = _import(tmp_path, source, "--env", "mcqa", *MCQA_MAP)
    assert status == 2 and "--split" in output
    status, output, _, _ = _import(tmp_path, source, "--env", "mcqa", *MCQA_MAP, "--split", "tran")
    assert status == 2 and "did you mean 'train'" in output
    _check_mcqa(tmp_path, source, "--split", "train")


def test_math_with_a_system_message_and_all_accepted(tmp_path: Path) -> None:
    source = tmp_path / "gsm.jsonl"
    source.write_text(json.dumps({"problem": "What is 2 + 3?", "solution": "5"}) + "\n")
    status, output, accepted, rejected = _import(
        tmp_path,
        source,
        "--env",
        "math",
        "--map",
        "input=problem",
        "--map",
        "expected_answer=solution",
        "--system",
        "Put the answer in \\boxed{}.",
    )
    assert status == 0, output
    assert rejected == [] and not (tmp_path / "rows.rejected.jsonl").exists()
    assert accepted == [
        {
            "responses_create_params": {
                "input": [
                    {"role": "system", "content": "Put the answer in \\boxed{}."},
                    {"role": "user", "content": "What is 2 + 3?"},
                ]
            },
            "expected_answer": "5",
        }
    ]


def test_unknown_column_is_usage_with_did_you_mean(tmp_path: Path) -> None:
    source = tmp_path / "qa.jsonl"
    source.write_text(json.dumps(QUESTIONS[0]) + "\n")
    status, output, accepted, _ = _import(
        tmp_path, source, "--env", "mcqa", "--map", "input=questoin", "--map", "expected_answer=answer"
    )
    assert status == 2
    assert "no column 'questoin'" in output and "did you mean 'question'" in output
    assert accepted == [] and not (tmp_path / "rows.jsonl").exists()
    status, output, _, _ = _import(tmp_path, source, "--env", "mcq", *MCQA_MAP)
    assert status == 2 and "did you mean 'mcqa'" in output


def test_seed_session_refusal_is_carried_with_its_status(tmp_path: Path) -> None:
    source = tmp_path / "counts.jsonl"
    rows = [
        {"prompt": "Count to 3", "start": 1},
        {"prompt": "Count to 3", "start": "one"},
        {"prompt": None, "start": 0},
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    status, output, accepted, rejected = _import(
        tmp_path, source, "--env", "counter", "--map", "input=prompt", "--map", "initial_count=start"
    )
    assert status == 1, output
    assert [row["initial_count"] for row in accepted] == [1]
    assert [r["line"] for r in rejected] == [2, 3]
    assert rejected[0]["reason"].startswith("seed_session answered 422") and "initial_count" in rejected[0]["reason"]
    assert "column 'prompt' (for input) is null" in rejected[1]["reason"]
    assert "seed_session (no reference answer)" in output


def test_reference_answer_template(tmp_path: Path) -> None:
    source = tmp_path / "qa.jsonl"
    source.write_text(json.dumps(QUESTIONS[0]) + "\n")
    args = ["--env", "mcqa", *MCQA_MAP]
    status, output, accepted, _ = _import(
        tmp_path, source, *args, "--reference-answer", "It is \\boxed{$expected_answer}"
    )
    assert status == 0 and len(accepted) == 1, output
    status, output, _, rejected = _import(tmp_path, source, *args, "--reference-answer", "\\boxed{A}")
    assert status == 1 and "scored reward 0" in rejected[0]["reason"], output
    status, output, _, rejected = _import(tmp_path, source, *args, "--reference-answer", "$answr")
    assert status == 1 and "needs field 'answr'" in rejected[0]["reason"], output
    status, output, accepted, _ = _import(tmp_path, source, *args, "--reference-answer", "costs $5")
    assert status == 2 and "write $$ for a dollar sign" in output and accepted == []


def test_config_of_any_environment_instead_of_env(tmp_path: Path) -> None:
    """--config: the environment of a config file (here only a resources server, a string_match whose
    verify is exact), its model replaced by a scripted one; --env and --config are one or the other."""
    config = tmp_path / "my_env.yaml"
    config.write_text("words:\n  plugin: string_match\npolicy:\n  plugin: local_llama\n")
    source = tmp_path / "words.jsonl"
    rows = [{"q": "Capital of France?", "a": "Paris"}, {"q": "Capital of Italy?", "a": None}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--map", "input=q", "--map", "expected_answer=a", "--set", "extraction_mode=boxed"]
    status, output, accepted, rejected = _import(tmp_path, source, "--config", str(config), *args)
    assert status == 1, output
    assert accepted == [
        {
            "responses_create_params": {"input": [{"role": "user", "content": "Capital of France?"}]},
            "expected_answer": "Paris",
            "extraction_mode": "boxed",
        }
    ]
    assert [(r["line"], r["reason"]) for r in rejected] == [(2, "column 'a' (for expected_answer) is null")]
    status, output, _, _ = _import(tmp_path, source, *args)
    assert status == 2 and "--env NAME or --config FILE" in output
    status, output, _, _ = _import(tmp_path, source, "--env", "math", "--config", str(config), *args)
    assert status == 2 and "--env NAME or --config FILE" in output
