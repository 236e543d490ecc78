"""Write ``example.jsonl``: tasks on the tables of the default seed, each with the response the
conformance kit verifies and the reward it must get (the row's ``conformance`` field).

    uv run python plugins/resources/workplace_assistant/data/make_examples.py

The tool schemas come from the server itself, so the rows offer exactly what ``GET /tools``
serves; the tests check that the file equals what this script writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from gym_workplace_assistant.server import WorkplaceAssistantServer
from gym_workplace_assistant.tables import generate
from gym_workplace_assistant.workplace import Workplace, tool_error

HERE = Path(__file__).resolve().parent

SYSTEM_PROMPT = (
    "You are the assistant of Priya Raman (priya.raman@lumenfield.com) at Lumenfield. You act through the tools "
    "on her email, calendar, website analytics, project board and customer records. Today's date is Thursday, "
    "2023-11-30 and the current time is 23:59:00: take 'now', 'today' and 'tomorrow' from it. Meetings must not "
    "start before 9am or end after 6pm. Look up email addresses in the company directory rather than guessing them, "
    "make only the changes the request asks for, and say briefly what you did when you are done."
)


def tools() -> list[dict[str, Any]]:
    return msgspec.to_builtins(WorkplaceAssistantServer().tool_definitions())


def call(name: str, arguments: dict[str, Any] | str, call_id: str) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"type": "function_call", "name": name, "arguments": text, "call_id": call_id, "status": "completed"}


def output(call_id: str, result: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps({"output": result})}


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def trajectory(steps: list[tuple[str, dict[str, Any] | str]], final: str) -> dict[str, Any]:
    """A Responses object whose output is the whole agent loop: each call, what the server answers
    it (played on a fresh workplace), then the assistant's ``final`` message."""
    workplace = Workplace(generate())
    items: list[dict[str, Any]] = []
    for index, (name, arguments) in enumerate(steps):
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            result = workplace.call(name, parsed)
        except Exception as exc:
            result = tool_error(name, exc)
        items.append(call(name, arguments, f"call_{index}"))
        items.append(output(f"call_{index}", result))
    items.append(message(final))
    return {"id": "resp_example", "object": "response", "status": "completed", "model": "example", "output": items}


def gt(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(arguments)}


def row(
    index: int,
    category: str,
    request: str,
    ground_truth: list[dict[str, str]] | str,
    response: dict[str, Any],
    reward: float,
    live_calls: list[tuple[str, dict[str, Any]]] = (),
) -> dict[str, Any]:
    conformance: dict[str, Any] = {"response": response, "reward": reward}
    if live_calls:
        conformance["tool_calls"] = [{"name": name, "arguments": arguments} for name, arguments in live_calls]
    return {
        "id": index,
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": request}],
            "tools": tools(),
            "parallel_tool_calls": False,
            "temperature": 1.0,
        },
        "ground_truth": ground_truth,
        "category": f"workplace_assistant_{category}",
        "environment_name": "workplace_assistant",
        "conformance": conformance,
    }


def rows() -> list[dict[str, Any]]:
    reply_body = "Thanks for the update - I will get back to you tomorrow."
    search = {"query": "Task Update on Document caching layer tomas"}
    reply = {"email_id": "00000333", "body": reply_body}

    event = {
        "event_name": "Design review",
        "participant_email": "greta.lindqvist@lumenfield.com",
        "event_start": "2023-12-05 11:00:00",
        "duration": "30",
    }
    # Case differs from the ground truth: the tool lowercases the address, verify lowercases the name.
    event_as_typed = {**event, "event_name": "design Review", "participant_email": "Greta.Lindqvist@Lumenfield.com"}

    move_right = {"task_id": "00000296", "field": "list_name", "new_value": "In Review"}
    move_wrong = {**move_right, "task_id": "00000284"}  # Aiko's task of the same name

    drop = {"customer_id": "00000005"}
    add = {
        "customer_name": "Farid Novak",
        "assigned_to_email": "ravi.kapoor@lumenfield.com",
        "status": "Lead",
        "customer_email": "farid.novak@quillon.com",
    }

    forward = {"email_id": "00000474", "recipient": "ben.carter@lumenfield.com"}
    plot = {"time_min": "2023-11-01", "time_max": "2023-11-15", "value_to_plot": "total_visits", "plot_type": "line"}
    visits = {"time_min": "2023-11-20", "time_max": "2023-11-20"}

    return [
        row(
            0,
            "email",
            f"Reply to Tomas's latest email about 'Task Update on Document caching layer' with '{reply_body}'",
            [gt("email_reply_email", reply)],
            trajectory([("email_search_emails", search), ("email_reply_email", reply)], "I replied to Tomas."),
            1.0,
            [("email_search_emails", search), ("email_reply_email", reply)],
        ),
        row(
            1,
            "calendar",
            "Schedule a 30-minute 'Design review' with Greta on December 5 at 11am.",
            [gt("calendar_create_event", event)],
            trajectory(
                [
                    ("company_directory_find_email_address", {"name": "greta"}),
                    ("calendar_create_event", event_as_typed),
                ],
                "The design review with Greta is on your calendar.",
            ),
            1.0,
            [("company_directory_find_email_address", {"name": "greta"}), ("calendar_create_event", event_as_typed)],
        ),
        row(
            2,
            "project_management",
            "Move Nadia's task 'Develop prototype for report generation' to In Review.",
            [gt("project_management_update_task", move_right)],
            trajectory(
                [("project_management_update_task", move_wrong)], "Moved it to In Review."
            ),  # the wrong task: Aiko's of the same name
            0.0,
        ),
        row(
            3,
            "customer_relationship_manager",
            "Hugo Kowalski's account (customer 00000005) is closed: delete it, then add Farid Novak "
            "(farid.novak@quillon.com) as a new Lead owned by Ravi Kapoor.",
            [
                gt("customer_relationship_manager_delete_customer", drop),
                gt("customer_relationship_manager_add_customer", add),
            ],
            # The same rows in the end, in the other order: the row labels differ, so the reward is 0.
            trajectory(
                [
                    ("customer_relationship_manager_add_customer", add),
                    ("customer_relationship_manager_delete_customer", drop),
                ],
                "Added Farid Novak and removed Hugo Kowalski.",
            ),
            0.0,
        ),
        row(
            4,
            "email",
            "Forward Mei's email about the hardware feedback from a customer to Ben Carter.",
            [gt("email_forward_email", forward)],
            # Malformed: arguments that are not JSON, then a tool that does not exist; neither runs.
            trajectory(
                [("email_forward_email", '{"email_id": "00000474", "recipient": '), ("email_forward", forward)],
                "Forwarded.",
            ),
            0.0,
        ),
        row(
            5,
            "analytics",
            "Make a line plot of the total visits from November 1 to November 15.",
            [gt("analytics_create_plot", plot)],
            trajectory(
                [("analytics_create_plot", plot)], "Here it is: plots/2023-11-01_2023-11-15_total_visits_line.png"
            ),
            1.0,
            [("analytics_create_plot", plot)],
        ),
        row(
            6,
            "analytics",
            "How many visits did the website get on November 20?",
            "No change is needed: the answer is the visit count of 2023-11-20.",  # a plain string: no action
            trajectory([("analytics_total_visits_count", visits)], "10 visits."),
            1.0,
            [("analytics_total_visits_count", visits)],
        ),
        row(
            7,
            "analytics",
            "How many visits did the website get on November 20?",
            "No change is needed: the answer is the visit count of 2023-11-20.",
            # Nothing was asked to change, but the model sent an email: the emails differ.
            trajectory(
                [
                    ("analytics_total_visits_count", visits),
                    (
                        "email_send_email",
                        {"recipient": "ben.carter@lumenfield.com", "subject": "Visits", "body": "10 visits on Nov 20."},
                    ),
                ],
                "10 visits; I told Ben.",
            ),
            0.0,
        ),
    ]


def main() -> None:
    lines = [json.dumps(r) for r in rows()]
    (HERE / "example.jsonl").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} rows to {HERE / 'example.jsonl'}")


if __name__ == "__main__":
    main()
