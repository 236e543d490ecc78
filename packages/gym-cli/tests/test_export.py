"""``gym export sft|dpo|prompts``: rollouts → TRL's dataset formats, on the committed example rollouts,
on rollouts collected here with the scripted model, and on hand-built rows for the edge cases; each
output loaded back through Hugging Face ``datasets`` (JSONL and Parquet)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import datasets
import pytest
from click.testing import CliRunner

from gym_core.convert import tools_to_chat
from gym_core.schemas import FunctionTool
from gym_core.testing import running_servers
from gym_core.testing.running import HTTPCaller

from gym_cli.example_rollouts import fixed, render
from gym_cli.export import rollout_conversation
from gym_cli.main import cli

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(ROOT.glob("plugins/resources/*/data/example_rollouts.jsonl"))
# Small exports that gym-train's TRL tests train on (SFTTrainer, DPOTrainer) and read (GRPO prompts).
TRAIN_FIXTURES = ROOT / "packages/gym-train/tests/fixtures"
REGENERATE = "GYM_REGENERATE_EXPORT_FIXTURES"

datasets.disable_progress_bars()


def gym(*args: str) -> Any:
    return CliRunner().invoke(cli(), [str(a) for a in args], catch_exceptions=False)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def load(path: Path) -> list[dict[str, Any]]:
    """The file as Hugging Face datasets loads it (what a trainer gets), its cache thrown away."""
    kind = "parquet" if path.suffix == ".parquet" else "json"
    with tempfile.TemporaryDirectory(prefix="gym-export-") as cache:
        return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=cache).to_list()


# --- hand-built rollout rows ----------------------------------------------------------------------


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "id": f"fc_{call_id}",
        "status": "completed",
    }


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def say(text: str, role: str = "assistant") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "output_text", "text": text}]}


def rollout(
    task_index: int,
    reward: float,
    items: list[dict[str, Any]],
    *,
    question: str | None = None,
    status: str = "completed",
    **fields: Any,
) -> dict[str, Any]:
    """A rollout row shaped as gym collect writes them (gym_core.rows.rollout_row)."""
    return {
        "task_index": task_index,
        "rollout_index": fields.pop("rollout_index", 0),
        "agent": "agent",
        "reward": reward,
        "latency_s": 0.1,
        "environment": "counter",
        "resources_server": "counter",
        "responses_create_params": {"input": question or f"Question {task_index}?"},
        **fields,
        "response": {"id": "resp_1", "output": items, "status": status},
    }


def answer(task_index: int, reward: float, text: str, **fields: Any) -> dict[str, Any]:
    return rollout(task_index, reward, [say(text)], **fields)


# --- the conversation ---------------------------------------------------------------------------


def test_a_rollout_becomes_chat_template_messages():
    """Every item kind in the shape chat templates render: instructions and developer → system, tool
    calls with decoded arguments (an invalid one kept as the model wrote it), tool outputs named by
    their call, reasoning on the next assistant turn, the offered tools as chat function specs."""
    tool = {
        "type": "function",
        "name": "add",
        "description": "Add.",
        "strict": True,
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    row = {
        "task_index": 0,
        "reward": 1.0,
        "responses_create_params": {
            "instructions": "Be brief.",
            "tools": [tool],
            "input": [
                {"role": "developer", "content": "Use the tools."},
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Add 2 "}, {"type": "input_text", "text": "twice."}],
                },
            ],
        },
        "response": {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Two calls."}]},
                call("c1", "add", '{"n": 2}'),
                call("c2", "add", "{not json"),
                output("c1", '{"total": 2}'),
                output("c2", "error: bad arguments"),
                say("The total is 2."),
            ]
        },
    }
    conversation = rollout_conversation(row)
    assert conversation.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Add 2 twice."},
    ]
    assert conversation.completion == [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Two calls.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"n": 2}}},
                {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{not json"}},
            ],
        },
        {"role": "tool", "name": "add", "tool_call_id": "c1", "content": '{"total": 2}'},
        {"role": "tool", "name": "add", "tool_call_id": "c2", "content": "error: bad arguments"},
        {"role": "assistant", "content": "The total is 2."},
    ]
    assert conversation.tools == [
        {
            "type": "function",
            "function": {"name": "add", "parameters": tool["parameters"], "description": "Add.", "strict": True},
        }
    ]


def test_tools_the_task_did_not_name_come_from_the_response_echo():
    """An agent offers a task that names no tools its environment's own; the row's request lacks
    them, and the response echoes them (as every model server does)."""
    tool = {"type": "function", "name": "increment_counter", "parameters": {"type": "object", "properties": {}}}
    row = rollout(0, 1.0, [call("c1", "increment_counter", "{}"), output("c1", "1"), say("Done.")])
    assert rollout_conversation(row).tools is None
    row["response"]["tools"] = [tool]
    assert rollout_conversation(row).tools == tools_to_chat(
        [FunctionTool(name="increment_counter", parameters=tool["parameters"])]
    )


# --- sft on the committed example rollouts ------------------------------------------------------


def test_sft_of_every_environments_example_rollouts(tmp_path):
    """Every committed example rollout that is complete becomes one conversation ending with the
    assistant's turn, its tool calls and tool outputs in it, its tools as a JSON column; JSONL and
    Parquet load through datasets as written."""
    out = tmp_path / "sft.jsonl"
    result = gym(
        "export",
        "sft",
        *EXAMPLES,
        "-o",
        out,
        "--min-reward",
        "-1e9",
        "--keep-duplicates",
        "--summary-json",
        tmp_path / "summary.json",
    )
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    source = [json.loads(line) for path in EXAMPLES for line in path.read_text().splitlines() if line.strip()]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows_read"] == len(source)
    assert summary["kept"] == len(rows) == len(source) - summary["dropped"].get("incomplete", 0)
    assert summary["dropped"].keys() <= {"incomplete"}
    complete = [r for r in source if rollout_conversation(r).completion[-1]["role"] == "assistant"]
    assert len(complete) == len(rows)
    for row, original in zip(rows, complete):
        assert row.keys() == {"messages", "tools"}
        messages = row["messages"]
        assert messages[-1]["role"] == "assistant"
        calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        outputs = [m for m in messages if m["role"] == "tool"]
        given = original["responses_create_params"]["input"]
        items = [*(given if isinstance(given, list) else []), *original["response"]["output"]]
        assert len(calls) == sum(1 for i in items if i.get("type") == "function_call")
        assert len(outputs) == sum(1 for i in items if i.get("type") == "function_call_output")
        assert all(m["content"] is not None for m in messages)
        # The task's tools, else those the agent offered (the model server echoes them in its response).
        offered = original["responses_create_params"].get("tools") or (original.get("response") or {}).get("tools")
        assert (row["tools"] is None) == (not offered)
        if offered:
            assert [t["function"]["name"] for t in json.loads(row["tools"])] == [t["name"] for t in offered]
    assert load(out) == rows
    parquet = tmp_path / "sft.parquet"
    assert gym("export", "sft", *EXAMPLES, "-o", parquet, "--min-reward", "-1e9", "--keep-duplicates").exit_code == 0
    assert load(parquet) == rows


def test_sft_keeps_a_tool_conversation_whole():
    """workplace_assistant's first example: the system prompt, the request, each tool call with its
    arguments as an object and its output named by the call, the final answer, and the tools."""
    row = json.loads(
        (ROOT / "plugins/resources/workplace_assistant/data/example_rollouts.jsonl").read_text().splitlines()[0]
    )
    conversation = rollout_conversation(row)
    items = row["response"]["output"]
    calls = [i for i in items if i["type"] == "function_call"]
    expected = list(row["responses_create_params"]["input"])
    for item in items:
        if item["type"] == "function_call":
            expected.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": item["call_id"],
                            "type": "function",
                            "function": {"name": item["name"], "arguments": json.loads(item["arguments"])},
                        }
                    ],
                }
            )
        elif item["type"] == "function_call_output":
            name = next(c["name"] for c in calls if c["call_id"] == item["call_id"])
            expected.append({"role": "tool", "name": name, "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            expected.append({"role": "assistant", "content": item["content"][0]["text"]})
    assert conversation.messages == expected
    assert len(calls) == 2
    tools = row["responses_create_params"]["tools"]
    assert json.loads(conversation.tools_json() or "null") == tools_to_chat(
        [FunctionTool(**{k: v for k, v in t.items() if k != "type"}) for t in tools]
    )


# --- filters, on hand-built rows ----------------------------------------------------------------


def test_sft_filters_and_counts_each_dropped_row_once(tmp_path):
    rows = [
        answer(0, 1.0, "A"),
        answer(0, 1.0, "B"),
        answer(0, 0.5, "C"),
        answer(0, 1.0, "A"),  # 4th: a duplicate
        rollout(0, 1.0, [call("x1", "f", "{}"), output("x1", "1"), say("D")]),
        rollout(0, 1.0, [call("x2", "f", "{}"), output("x2", "1"), say("D")]),  # the same but for the call id
        answer(1, 1.0, "E", status="incomplete"),  # cut off
        rollout(1, 1.0, [call("y", "f", "{}"), output("y", "1")]),  # ends with a tool output
        answer(1, 1.0, "none") | {"response": None},  # no trajectory at all
        rollout(1, 1.0, [say("F")], status="failed"),
        {"task_index": 1, "rollout_index": 3, "reason": "server_unavailable", "message": "down", "attempts": 4},
        answer(2, 0.0, "G"),
        answer(2, 0.0, "H"),
        answer(2, 1.0, "I"),  # pass rate 1/3
    ]
    source = write_jsonl(tmp_path / "rollouts.jsonl", rows)
    out = tmp_path / "sft.jsonl"
    result = gym("export", "sft", source, "-o", out, "--summary-json", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    texts = [
        [m["content"] for m in r["messages"] if m["role"] == "assistant" and m["content"]] for r in read_jsonl(out)
    ]
    assert texts == [["A"], ["B"], ["D"], ["I"]]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["dropped"] == {"failed": 2, "incomplete": 3, "below_threshold": 3, "duplicate": 2}
    assert (summary["rows_read"], summary["kept"], summary["rows_written"], summary["tasks"]) == (14, 4, 4, 3)
    assert "below_threshold" in result.output and "reward below --min-reward" in result.output

    # Best of 2 per task (the earlier row on a tie); the pass-rate window drops task 2 (1 of 3 pass) whole.
    assert (
        gym(
            "export",
            "sft",
            source,
            "-o",
            out,
            "--best-of",
            "2",
            "--min-pass-rate",
            "0.5",
            "--summary-json",
            tmp_path / "s.json",
        ).exit_code
        == 0
    )
    assert [r["messages"][-1]["content"] for r in read_jsonl(out)] == ["A", "B"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["dropped"] == {
        "failed": 2,
        "pass_rate": 3,
        "incomplete": 3,
        "below_threshold": 1,
        "duplicate": 2,
        "not_best": 1,
    }
    # A lower threshold and the duplicates kept.
    assert gym("export", "sft", source, "-o", out, "--min-reward", "0", "--keep-duplicates").exit_code == 0
    assert [r["messages"][-1]["content"] for r in read_jsonl(out)] == ["A", "B", "C", "A", "D", "D", "G", "H", "I"]
    # --pass-reward moves the default threshold.
    assert gym("export", "sft", source, "-o", out, "--pass-reward", "0.5").exit_code == 0
    assert [r["messages"][-1]["content"] for r in read_jsonl(out)] == ["A", "B", "C", "D", "I"]


def test_dpo_margin_and_ties(tmp_path):
    rows = [
        answer(0, 0.2, "low"),
        answer(0, 0.9, "high"),
        answer(0, 0.9, "high too"),
        answer(0, 0.5, "mid"),
        answer(1, 0.6, "a"),
        answer(1, 0.4, "b"),
        answer(2, 1.0, "same"),
        answer(2, 1.0, "same again"),
    ]
    source = write_jsonl(tmp_path / "rollouts.jsonl", rows)
    out = tmp_path / "dpo.jsonl"
    assert (
        gym("export", "dpo", source, "-o", out, "--min-margin", "0.3", "--summary-json", tmp_path / "s.json").exit_code
        == 0
    )
    assert read_jsonl(out) == [
        {
            "prompt": [{"role": "user", "content": "Question 0?"}],
            "chosen": [{"role": "assistant", "content": "high"}],
            "rejected": [{"role": "assistant", "content": "low"}],
        }
    ]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["dropped"] == {"unpaired": 2, "margin_too_small": 2, "no_contrast": 2}
    assert (summary["kept"], summary["rows_written"]) == (2, 1)


# --- real rollouts: two runs of the same counter tasks, collected with the scripted model --------


def _counter_task(question: str, initial: int, expected: int | None, turns: list[dict], tools: list[dict]) -> dict:
    task = {
        "responses_create_params": {
            "input": [{"role": "user", "content": question}],
            "tools": tools,
            "metadata": {"scripted_turns": json.dumps(turns)},
        },
        "initial_count": initial,
    }
    return task if expected is None else {**task, "expected_count": expected}


def _add(count: int) -> list[dict]:
    return [
        {"tool_calls": [{"name": "increment_counter", "arguments": {"count": count}}]},
        {"text": f"I added {count}."},
    ]


# The same five questions in both runs; the scripts differ. Task 0: good adds 3 (1.0), bad adds 2 (0.0);
# task 1: good leaves it (1.0), bad adds 1 (0.0); task 2: both right; task 3: both wrong; task 4: verify
# refuses it (no expected_count): every rollout goes to the failures file.
QUESTIONS = [
    ("Add 3 to the counter.", 0, 3),
    ("Make sure the counter reads 5.", 5, 5),
    ("Add 4 to the counter.", 0, 4),
    ("Add 1 to the counter.", 2, 3),
    ("Add 2 to the counter.", 0, None),
]
RUNS = {
    "good": [_add(3), [{"text": "It already reads 5."}], _add(4), _add(2), _add(2)],
    "bad": [_add(2), _add(1), _add(4), _add(2), _add(2)],
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> dict[str, Path]:
    """RUNS collected for real (counter, simple_agent, scripted model, in-thread servers), 2 rollouts
    per task, each row made reproducible (ids renumbered, timings zeroed): run name → rollouts file,
    its ``.failures.jsonl`` beside it. The tasks name counter's tools, as its server lists them."""
    folder = tmp_path_factory.mktemp("two_runs")
    config = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "model_name": "scripted"},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    outputs = {}
    with running_servers(config) as running:
        tools = HTTPCaller(running.instances["counter"].url, auth_token=running.auth_token).get("/tools").json()
        for name, scripts in RUNS.items():
            tasks = [
                _counter_task(q, initial, expected, script, tools)
                for (q, initial, expected), script in zip(QUESTIONS, scripts)
            ]
            tasks_file, out = write_jsonl(folder / f"{name}.tasks.jsonl", tasks), folder / f"{name}.jsonl"
            result = CliRunner().invoke(
                cli(),
                [
                    "collect",
                    "--input",
                    str(tasks_file),
                    "--output",
                    str(out),
                    "--repeats",
                    "2",
                    "--head",
                    running.head_url,
                    "--no-profile",
                    "--retries",
                    "0",
                ],
                catch_exceptions=False,
            )
            assert result.exit_code == 1, result.output  # task 4's rollouts failed
            rows = sorted(read_jsonl(out), key=lambda r: (r["task_index"], r["rollout_index"]))
            out.write_text(render([fixed(r) for r in rows]))
            outputs[name] = out
    return outputs


def _failures(run: Path) -> Path:
    return run.with_name(run.stem + ".failures.jsonl")


def test_dpo_pairs_the_best_and_worst_rollout_of_each_task(two_runs, tmp_path):
    good, bad = two_runs["good"], two_runs["bad"]
    out = tmp_path / "dpo.jsonl"
    result = gym("export", "dpo", bad, good, _failures(bad), "-o", out, "--summary-json", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    assert [r["prompt"] for r in rows] == [
        [{"role": "user", "content": QUESTIONS[0][0]}],
        [{"role": "user", "content": QUESTIONS[1][0]}],
    ]
    first = rows[0]
    assert [m["role"] for m in first["chosen"]] == ["assistant", "tool", "assistant"]
    assert first["chosen"][0]["tool_calls"][0]["function"] == {"name": "increment_counter", "arguments": {"count": 3}}
    assert first["chosen"][1] | {"tool_call_id": None} == {
        "role": "tool",
        "name": "increment_counter",
        "tool_call_id": None,
        "content": '{"count":3}',
    }
    assert first["chosen"][-1] == {"role": "assistant", "content": "I added 3."}
    assert first["rejected"][0]["tool_calls"][0]["function"]["arguments"] == {"count": 2}
    assert rows[1]["chosen"] == [{"role": "assistant", "content": "It already reads 5."}]
    assert rows[1]["rejected"][-1] == {"role": "assistant", "content": "I added 1."}
    summary = json.loads((tmp_path / "s.json").read_text())
    # 16 rollouts (4 tasks × 2 runs × 2) and 2 failures; each run repeats itself, and tasks 2 and 3 are
    # the same in both runs.
    assert summary["rows_read"] == 18
    assert summary["dropped"] == {"failed": 2, "duplicate": 10, "no_contrast": 2}
    assert (summary["tasks"], summary["kept"], summary["rows_written"]) == (4, 4, 2)
    assert all(json.loads(r["tools"]) == json.loads(rows[0]["tools"]) for r in rows)
    assert load(out) == rows
    assert gym("export", "dpo", bad, good, "-o", tmp_path / "dpo.parquet").exit_code == 0
    assert load(tmp_path / "dpo.parquet") == rows


def test_sft_and_prompts_of_two_runs(two_runs, tmp_path):
    good, bad = two_runs["good"], two_runs["bad"]
    out = tmp_path / "sft.jsonl"
    assert gym("export", "sft", good, bad, "-o", out, "--summary-json", tmp_path / "s.json").exit_code == 0
    assert [r["messages"][0]["content"] for r in read_jsonl(out)] == [q for q, _, _ in QUESTIONS[:3]]
    assert json.loads((tmp_path / "s.json").read_text())["dropped"] == {"below_threshold": 8, "duplicate": 5}

    out = tmp_path / "prompts.jsonl"
    result = gym(
        "export",
        "prompts",
        good,
        bad,
        _failures(good),
        "-o",
        out,
        "--min-pass-rate",
        "0.01",
        "--max-pass-rate",
        "0.99",
        "--summary-json",
        tmp_path / "s.json",
    )
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    assert [r["prompt"] for r in rows] == [[{"role": "user", "content": q}] for q, _, _ in QUESTIONS[:2]]
    first = rows[0]
    assert first.keys() == {"prompt", "tools", "gym_task", "environment", "agent", "task_index"}
    assert [t["function"]["name"] for t in json.loads(first["tools"])] == ["get_counter_value", "increment_counter"]
    assert (first["environment"], first["agent"], first["task_index"]) == ("counter", "agent", 0)
    task = json.loads(first["gym_task"])
    assert task["responses_create_params"]["input"] == [{"role": "user", "content": QUESTIONS[0][0]}]
    assert (task["initial_count"], task["expected_count"]) == (0, 3)
    assert not {"reward", "response", "task_index", "agent", "usage", "environment"} & task.keys()
    assert json.loads((tmp_path / "s.json").read_text())["dropped"] == {"failed": 2, "pass_rate": 8, "duplicate": 6}


# --- prompts: the task comes back, and /verify takes it ---------------------------------------------


def test_prompts_gym_task_is_what_verify_takes(tmp_path):
    """Each math example rollout's task, exported as a prompt, sent back to math's /verify with the
    rollout's response scores what the rollout scored: the contract of a GRPO reward function."""
    source = ROOT / "plugins/resources/math/data/example_rollouts.jsonl"
    rollouts = read_jsonl(source)
    assert gym("export", "prompts", source, "-o", tmp_path / "prompts.jsonl").exit_code == 0
    rows = read_jsonl(tmp_path / "prompts.jsonl")
    assert len(rows) == len(rollouts)
    with running_servers({"math": {"plugin": "math"}}) as running:
        caller = HTTPCaller(running.instances["math"].url, auth_token=running.auth_token)
        for row, original in zip(rows, rollouts):
            assert row["prompt"][-1] == {
                "role": "user",
                "content": original["responses_create_params"]["input"][-1]["content"],
            }
            verdict = caller.post("/verify", {**json.loads(row["gym_task"]), "response": original["response"]}).json()
            assert verdict["reward"] == original["reward"], row["gym_task"]


def test_prompts_of_a_tasks_file(tmp_path):
    """A tasks file exports as it is: one prompt per line, the row itself as gym_task, its tools."""
    source = ROOT / "plugins/resources/multi_step/data/example.jsonl"
    tasks = read_jsonl(source)
    out = tmp_path / "prompts.parquet"
    assert gym("export", "prompts", source, "-o", out).exit_code == 0
    rows = load(out)
    assert [json.loads(r["gym_task"]) for r in rows] == tasks
    assert [r["task_index"] for r in rows] == list(range(len(tasks)))
    assert all(r["environment"] is None for r in rows)
    assert [json.loads(r["tools"]) for r in rows] == [
        rollout_conversation({**t, "response": {"output": []}}).tools for t in tasks
    ]
    result = gym("export", "prompts", source, "-o", out, "--min-pass-rate", "0.5")
    assert result.exit_code == 2
    assert f"{source}:1: a task row has no rollouts" in result.output


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[1, 2]", "a row must be a JSON object, got list"),
        ('{"task_index": 0, "responses_create_params": {"input": "hi"}}', "field `reward`: missing"),
        (
            '{"task_index": 0, "reward": "high", "response": {"output": []}, "responses_create_params": {"input": "x"}}',
            "field `reward`: must be a finite number, got 'high'",
        ),
        (
            '{"task_index": "0", "reward": 1, "response": {"output": []}, "responses_create_params": {"input": "x"}}',
            "field `task_index`: must be an integer",
        ),
        ('{"task_index": 0, "reward": 1, "response": {"output": []}}', "field `responses_create_params`: missing"),
        (
            '{"task_index": 0, "reward": 1, "response": {"output": []}, '
            '"responses_create_params": {"input": [{"role": 3, "content": "x"}]}}',
            "field `responses_create_params.input[0]",
        ),
        (
            '{"task_index": 0, "reward": 1, "response": {"output": [{"type": "function_call", "name": "f"}]}, '
            '"responses_create_params": {"input": "x"}}',
            "field `response.output[0]",
        ),
        (
            '{"task_index": 0, "reward": 1, "response": "done", "responses_create_params": {"input": "x"}}',
            "field `response`: must be a Responses object, got str",
        ),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_row_that_is_not_a_rollout_names_file_line_and_field(tmp_path, line, problem):
    source = tmp_path / "rollouts.jsonl"
    good = json.dumps(answer(0, 1.0, "fine"))
    source.write_text(f"{good}\n\n{line}\n")
    out = tmp_path / "sft.jsonl"
    result = gym("export", "sft", source, "-o", out)
    assert result.exit_code == 2, result.output
    assert f"{source}:3: " in result.output and problem in result.output, result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_bad_usage_exits_2(tmp_path):
    source = write_jsonl(tmp_path / "rollouts.jsonl", [answer(0, 1.0, "fine")])
    for args, message in [
        (("-o", tmp_path / "out.csv"), "must end in .jsonl or .parquet"),
        (("-o", source), "is one of the input files"),
        (("-o", tmp_path), "is a directory"),
    ]:
        result = gym("export", "sft", source, *args)
        assert result.exit_code == 2 and message in result.output, result.output
    result = gym("export", "sft", tmp_path / "missing.jsonl", "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 2 and "missing.jsonl: file not found" in result.output
    (tmp_path / "empty.jsonl").write_text("\n")
    result = gym("export", "dpo", tmp_path / "empty.jsonl", "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 2 and "empty.jsonl: no rows" in result.output


def test_parquet_without_datasets_is_a_clear_error(tmp_path, monkeypatch):
    source = write_jsonl(tmp_path / "rollouts.jsonl", [answer(0, 1.0, "fine")])
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    result = gym("export", "sft", source, "-o", tmp_path / "out.parquet")
    assert result.exit_code == 2
    assert "writing .parquet needs Hugging Face datasets" in result.output and "gym-cli[export]" in result.output
    assert gym("export", "sft", source, "-o", tmp_path / "out.jsonl").exit_code == 0


def test_nothing_left_exits_1_and_writes_nothing(tmp_path):
    source = write_jsonl(tmp_path / "rollouts.jsonl", [answer(0, 0.0, "wrong")])
    out = tmp_path / "sft.jsonl"
    result = gym("export", "sft", source, "-o", out, "--summary-json", tmp_path / "s.json")
    assert result.exit_code == 1
    assert "nothing to export" in result.output and not out.exists()
    assert json.loads((tmp_path / "s.json").read_text())["dropped"] == {"below_threshold": 1}


# --- the samples gym-train's TRL tests train on ---------------------------------------------------


def _train_fixture_exports(two_runs: dict[str, Path], folder: Path) -> dict[str, str]:
    """The text of each sample export: SFT on counter's, multi_step's and math's example rollouts;
    DPO and GRPO prompts on the two counter runs."""
    examples = [
        ROOT / f"plugins/resources/{name}/data/example_rollouts.jsonl" for name in ("counter", "multi_step", "math")
    ]
    # Paths as the command sees them do not matter: the exports hold none.
    commands = {
        "export_sft.jsonl": ("sft", *examples),
        "export_dpo.jsonl": ("dpo", two_runs["bad"], two_runs["good"]),
        "export_prompts.jsonl": ("prompts", two_runs["good"], two_runs["bad"]),
    }
    texts = {}
    for name, (mode, *inputs) in commands.items():
        assert gym("export", mode, *inputs, "-o", folder / name).exit_code == 0
        texts[name] = (folder / name).read_text()
    return texts


def test_train_fixtures_are_current(two_runs, tmp_path):
    """packages/gym-train/tests/fixtures holds what gym export writes now (regenerate: set
    GYM_REGENERATE_EXPORT_FIXTURES=1 and run this test)."""
    texts = _train_fixture_exports(two_runs, tmp_path)
    if os.environ.get(REGENERATE):
        TRAIN_FIXTURES.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (TRAIN_FIXTURES / name).write_text(text)
    for name, text in texts.items():
        path = TRAIN_FIXTURES / name
        assert path.is_file() and path.read_text() == text, (
            f"{path} is stale: {REGENERATE}=1 uv run pytest {Path(__file__).relative_to(ROOT)} -k train_fixtures"
        )
        assert load(path) == read_jsonl(path)


def test_rewards_are_compared_as_numbers(tmp_path):
    """An integer reward and a float one are the same reward; a boolean is not a reward."""
    rows = [answer(0, 1, "int"), answer(0, 1.0, "float")]
    source = write_jsonl(tmp_path / "r.jsonl", rows)
    assert gym("export", "dpo", source, "-o", tmp_path / "d.jsonl").exit_code == 1
    source = write_jsonl(tmp_path / "bool.jsonl", [{**rows[0], "reward": True}])
    result = gym("export", "sft", source, "-o", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and "bool.jsonl:1: field `reward`: must be a finite number, got True" in result.output
