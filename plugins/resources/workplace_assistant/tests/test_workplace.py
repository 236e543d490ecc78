"""Unit tests of the pure parts: the generated tables, each tool's rules and messages, the row
labels each change leaves, and verification by replay (no servers)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gym_workplace_assistant.plugin import workplace_assistant_metrics
from gym_workplace_assistant.tables import DIRECTORY, TableSizes, generate
from gym_workplace_assistant.verify import (
    ReplayTimeout,
    ground_truth_actions,
    normalized_row,
    replay,
    reward_for,
    states_equal,
    tables_equal,
)
from gym_workplace_assistant.workplace import TOOL_NAMES, WRITE_TOOLS, Workplace

PACKAGE = Path(__file__).resolve().parents[1]
TABLES = generate()


def fresh() -> Workplace:
    return Workplace(TABLES)


def act(name: str, **arguments) -> tuple[str, str]:
    return name, json.dumps(arguments)


def reward(predicted, expected) -> float:
    return reward_for(TABLES, predicted, expected)


SEND = {"recipient": "ben.carter@lumenfield.com", "subject": "Hi", "body": "Hello"}
EVENT = {
    "event_name": "Design review",
    "participant_email": "greta.lindqvist@lumenfield.com",
    "event_start": "2023-12-05 11:00:00",
    "duration": "30",
}
TASK = {
    "task_name": "Write tests",
    "assigned_to_email": "tomas.okafor@lumenfield.com",
    "list_name": "Backlog",
    "due_date": "2023-12-15",
    "board": "Back end",
}
CUSTOMER = {"customer_name": "Ada Byron", "assigned_to_email": "ravi.kapoor@lumenfield.com", "status": "Lead"}


# --- the tables -----------------------------------------------------------------------------------


def test_tables_are_deterministic_and_have_the_spec_sizes_and_columns():
    again = generate()
    for name in ("emails", "calendar_events", "project_tasks", "crm", "analytics"):
        assert getattr(TABLES, name).rows == getattr(again, name).rows, name
    sizes = {
        name: len(getattr(TABLES, name))
        for name in ("emails", "calendar_events", "project_tasks", "crm", "analytics", "plots")
    }
    assert sizes == {
        "emails": 500,
        "calendar_events": 300,
        "project_tasks": 300,
        "crm": 200,
        "analytics": 1000,
        "plots": 0,
    }
    assert len(DIRECTORY) == 20 and len(set(DIRECTORY)) == 20
    assert TABLES.emails.columns == ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body")
    assert generate(seed=1).emails.rows != TABLES.emails.rows
    assert len(generate(sizes=TableSizes(emails=7)).emails) == 7
    for name in ("emails", "calendar_events", "project_tasks", "crm", "analytics"):
        table = getattr(TABLES, name)
        assert all(isinstance(cell, str) for row in table.rows for cell in row), name
        assert table.labels == list(range(len(table))), name
    ids = TABLES.calendar_events.values("event_id")
    assert ids[:2] == ["00000000", "00000001"] and all(len(i) == 8 for i in ids)


def test_the_example_file_is_what_its_script_writes():
    spec = importlib.util.spec_from_file_location("make_examples", PACKAGE / "data" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = [
        json.loads(line) for line in (PACKAGE / "data" / "example.jsonl").read_text().splitlines() if line.strip()
    ]
    assert shipped == json.loads(json.dumps(module.rows()))
    assert {row["conformance"]["reward"] for row in shipped} == {0.0, 1.0}


def test_there_are_27_tools():
    assert len(TOOL_NAMES) == 27 and WRITE_TOOLS < set(TOOL_NAMES)


# --- directory and email --------------------------------------------------------------------------


def test_directory_search_is_a_case_insensitive_regex():
    w = fresh()
    assert w.company_directory_find_email_address("Priya") == ["priya.raman@lumenfield.com"]
    assert w.company_directory_find_email_address("^(mei|ben)\\.") == [
        "ben.carter@lumenfield.com",
        "mei.chen@lumenfield.com",
    ]
    assert w.company_directory_find_email_address("") == "Name not provided."
    assert w.company_directory_find_email_address("zzz") == []


def test_email_information_by_id():
    w = fresh()
    assert w.email_get_email_information_by_id("00000333", "subject") == {
        "subject": "Task Update on Document caching layer"
    }
    assert w.email_get_email_information_by_id("333", "subject") == "Email not found."
    assert w.email_get_email_information_by_id("00000333", "colour") == "Field not found."
    assert w.email_get_email_information_by_id(None, "subject") == "Email ID not provided."
    assert w.email_get_email_information_by_id("00000333") == "Field not provided."


def test_email_search_matches_every_word_newest_first_with_dates_and_pages():
    w = fresh()
    found = w.email_search_emails("caching layer TOMAS", page_size=2)
    assert found["pagination"]["page_size"] == 2 and found["pagination"]["total_pages"] == -(
        -found["pagination"]["total_emails"] // 2
    )
    dates = [e["sent_datetime"] for e in found["emails"]]
    assert dates == sorted(dates, reverse=True)
    everything = w.email_search_emails("caching layer tomas", page_size=100)["emails"]
    assert all(
        "caching layer" in f"{e['subject']} {e['body']}".lower()
        and "tomas" in f"{e['subject']} {e['body']} {e['sender/recipient']}"
        for e in everything
    )
    day = w.email_search_emails("", date_min="2023-11-25", date_max="2023-11-25", page_size=100)["emails"]
    assert day and all(e["sent_datetime"].startswith("2023-11-25") for e in day)
    assert w.email_search_emails("no such words here") == "No emails found."
    assert w.email_search_emails("", page=999)["emails"] == []
    with pytest.raises(ValueError):
        w.email_search_emails("", date_min="yesterday")


def test_send_email_validates_lowercases_and_numbers_without_padding():
    w = fresh()
    assert w.email_send_email("ben", "s", "b") == "Invalid recipient email address."
    assert w.email_send_email("ben@lumenfield", "s", "b") == "Invalid recipient email address."
    assert w.email_send_email("", "s", "b") == "Recipient, subject, or body not provided."
    assert w.email_send_email("a@b.c", "s", None) == "Recipient, subject, or body not provided."
    assert w.email_send_email("Ben.Carter@Lumenfield.com", "Hi", "Hello") == "Email sent successfully."
    assert w.email_send_email("a@b.c", "Hi", "Hello") == "Email sent successfully."
    assert w.emails.rows[-2] == ("500", "outbox", "ben.carter@lumenfield.com", "Hi", "2023-11-30 23:59:00", "Hello")
    assert w.emails.rows[-1][0] == "501"  # "500" is the lexicographic maximum now


def test_delete_forward_and_reply_email():
    w = fresh()
    assert w.email_delete_email("00000999") == "Email not found."
    assert w.email_delete_email("00000003") == "Email deleted successfully."
    assert w.email_delete_email("00000003") == "Email not found."
    assert w.email_forward_email("00000474") == "Email ID or recipient not provided."
    assert w.email_forward_email("00000474", "ben") == "Invalid recipient email address."
    assert w.email_forward_email("00000003", "ben@x.com") == "Email not found."
    assert w.email_forward_email("00000474", "BEN.CARTER@lumenfield.com") == "Email forwarded successfully."
    original = w.emails.records(w.emails.where("email_id", "00000474"))[0]
    assert w.emails.rows[-1][2:4] == ("ben.carter@lumenfield.com", f"FW: {original['subject']}")
    assert w.emails.rows[-1][5] == original["body"]
    assert w.email_reply_email("00000474") == "Email ID or body not provided."
    assert w.email_reply_email("00000474", "Thanks") == "Email replied successfully."
    assert w.emails.rows[-1][1:4] == ("outbox", original["sender/recipient"], f"RE: {original['subject']}")


# --- calendar -------------------------------------------------------------------------------------


def test_calendar_create_validates_and_returns_a_padded_id():
    w = fresh()
    assert w.calendar_create_event(**{**EVENT, "event_name": ""}) == "Event name not provided."
    assert w.calendar_create_event(**{**EVENT, "duration": None}) == "Event duration not provided."
    assert w.calendar_create_event(**{**EVENT, "event_start": "2023-12-05 11:00"}).startswith(
        "Event start must be a timestamp"
    )
    assert w.calendar_create_event(**{**EVENT, "duration": "-30"}).startswith("Duration must be a positive")
    assert w.calendar_create_event(**{**EVENT, "duration": "half an hour"}).startswith("Duration must be a positive")
    assert w.calendar_create_event(**{**EVENT, "participant_email": "Greta.Lindqvist@LUMENFIELD.com"}) == "00000300"
    assert w.calendar_events.rows[-1] == (
        "00000300",
        "Design review",
        "greta.lindqvist@lumenfield.com",
        "2023-12-05 11:00:00",
        "30",
    )


def test_calendar_ids_must_have_8_digits():
    w = fresh()
    message = "Event ID must be an 8-digit string, such as '00000123'."
    assert w.calendar_delete_event("100") == message
    assert w.calendar_get_event_information_by_id("100", "event_name") == message
    assert w.calendar_update_event("100", "event_name", "x") == message
    assert w.calendar_delete_event("00000999") == "Event not found."
    assert w.calendar_get_event_information_by_id("00000100", "duration") == {"duration": "60"}


def test_calendar_update_validates_the_field_and_value():
    w = fresh()
    assert w.calendar_update_event("00000100", "location", "x").startswith("Field not valid.")
    assert w.calendar_update_event("00000100", "duration", "0").startswith("Duration must be a positive")
    assert w.calendar_update_event("00000100", "event_start", "tomorrow").startswith("Event start must be")
    assert w.calendar_update_event("00000100", "event_name", None) == "Event ID, field, or new value not provided."
    assert w.calendar_update_event("00000999", "event_name", "x") == "Event not found."
    assert (
        w.calendar_update_event("00000100", "participant_email", "MEI.CHEN@lumenfield.com")
        == "Event updated successfully."
    )
    assert w.calendar_get_event_information_by_id("00000100", "participant_email") == {
        "participant_email": "mei.chen@lumenfield.com"
    }


def test_calendar_search_by_text_and_time_newest_first():
    w = fresh()
    found = w.calendar_search_events("DESIGN review", time_min="2023-12-01", page_size=50)
    starts = [e["event_start"] for e in found["events"]]
    assert starts and starts == sorted(starts, reverse=True) and all(s >= "2023-12-01" for s in starts)
    assert all("design review" in e["event_name"].lower() for e in found["events"])
    by_participant = w.calendar_search_events("greta.lindqvist", page_size=500)["events"]
    assert by_participant and all(e["participant_email"].startswith("greta") for e in by_participant)
    assert w.calendar_search_events("nothing like this") == "No events found."


# --- analytics ------------------------------------------------------------------------------------


def test_analytics_aggregates_per_day():
    w = fresh()
    day = w.analytics.where("date_of_visit", "2023-11-20")
    assert w.analytics_total_visits_count("2023-11-20", "2023-11-20") == {"2023-11-20": len(day)}
    engaged = sum(row[5] == "True" for row in day)
    assert w.analytics_engaged_users_count("2023-11-20", "2023-11-20") == {"2023-11-20": engaged}
    direct = sum(row[4] == "direct" for row in day)
    assert w.analytics_traffic_source_count("2023-11-20", "2023-11-20", "direct") == {"2023-11-20": direct}
    average = sum(float(row[3]) for row in day) / len(day)
    assert w.analytics_get_average_session_duration("2023-11-20", "2023-11-20") == {"2023-11-20": average}
    assert sorted(w.analytics_total_visits_count("2023-11-01", "2023-11-03")) == [
        "2023-11-01",
        "2023-11-02",
        "2023-11-03",
    ]
    visitor = day[0][1]
    assert w.analytics_get_visitor_information_by_id(visitor)[0]["visitor_id"] == visitor
    assert w.analytics_get_visitor_information_by_id("nobody") == "Visitor not found."


def test_create_plot_validates_and_appends_the_path():
    w = fresh()
    assert w.analytics_create_plot("2023-11-01", "2023-11-15", "visits", "line").startswith(
        "Value to plot must be one of"
    )
    assert w.analytics_create_plot("2023-11-01", "2023-11-15", "total_visits", "pie").startswith(
        "Plot type must be one of"
    )
    assert w.analytics_create_plot(None, "2023-11-15", "total_visits", "line") == "Start date not provided."
    path = w.analytics_create_plot("2023-11-01", "2023-11-15", "total_visits", "line")
    assert path == "plots/2023-11-01_2023-11-15_total_visits_line.png"
    assert (w.plots.rows, w.plots.labels) == ([(path,)], [0])


# --- project management ---------------------------------------------------------------------------


def test_search_tasks_needs_a_filter_and_matches_email_exactly():
    w = fresh()
    assert w.project_management_search_tasks() == "No search parameters provided."
    assert w.project_management_search_tasks(assigned_to_email="tomas") == "Invalid email address."
    mine = w.project_management_search_tasks(assigned_to_email="TOMAS.OKAFOR@lumenfield.com", board="back END")
    assert mine and all(
        t["assigned_to_email"] == "tomas.okafor@lumenfield.com" and t["board"] == "Back end" for t in mine
    )
    named = w.project_management_search_tasks(task_name="report generation")
    assert {t["task_id"] for t in named} >= {"00000284", "00000296"}


def test_create_task_validates_assignee_list_and_board():
    w = fresh()
    assert w.project_management_create_task(**{**TASK, "due_date": None}).startswith("Missing task details")
    answer = w.project_management_create_task(**{**TASK, "assigned_to_email": "priya.raman@lumenfield.com"})
    assert answer.startswith("Assignee email not valid")
    assert w.project_management_create_task(**{**TASK, "list_name": "backlog"}).startswith("List not valid")
    assert w.project_management_create_task(**{**TASK, "board": "Backend"}).startswith("Board not valid")
    assert (
        w.project_management_create_task(**{**TASK, "assigned_to_email": "TOMAS.okafor@lumenfield.com"}) == "00000300"
    )
    assert w.project_tasks.rows[-1] == (
        "00000300",
        "Write tests",
        "tomas.okafor@lumenfield.com",
        "Backlog",
        "2023-12-15",
        "Back end",
    )


def test_update_and_delete_task():
    w = fresh()
    assert w.project_management_update_task("00000296", "priority", "high").startswith("Field not valid")
    assert w.project_management_update_task("00000296", "list_name", "Done").startswith("List not valid")
    assert w.project_management_update_task("00000296", "board", "QA").startswith("Board not valid")
    assert w.project_management_update_task("00000296", "assigned_to_email", "x@y.com").startswith(
        "Assignee email not valid"
    )
    assert w.project_management_update_task("00000999", "list_name", "Completed") == "Task not found."
    assert w.project_management_update_task("00000296", "list_name", "In Review") == "Task updated successfully."
    assert w.project_management_get_task_information_by_id("00000296", "list_name") == {"list_name": "In Review"}
    assert w.project_management_delete_task("00000296") == "Task deleted successfully."
    assert w.project_management_get_task_information_by_id("00000296", "list_name") == "Task not found."


# --- CRM ------------------------------------------------------------------------------------------


def test_search_customers_filters_and_pages():
    w = fresh()
    assert w.customer_relationship_manager_search_customers() == "No search parameters provided."
    found = w.customer_relationship_manager_search_customers(
        status="lead", last_contact_date_min="2023-09-01", page_size=100
    )
    assert found["customers"] and all(
        c["status"] == "Lead" and c["last_contact_date"] >= "2023-09-01" for c in found["customers"]
    )
    assert found["pagination"]["total_customers"] == len(found["customers"])
    assert w.customer_relationship_manager_search_customers(customer_name="nobody at all") == "No customers found."


def test_update_add_and_delete_customer():
    w = fresh()
    assert w.customer_relationship_manager_update_customer("00000005", "status", "lead").startswith("Status not valid")
    assert w.customer_relationship_manager_update_customer("00000005", "product_interest", "Food").startswith(
        "Product interest not valid"
    )
    assert w.customer_relationship_manager_update_customer("00000999", "status", "Won") == "Customer not found."
    assert (
        w.customer_relationship_manager_update_customer("00000005", "customer_email", "HUGO@X.COM")
        == "Customer updated successfully."
    )
    assert w.crm.where("customer_id", "00000005")[0][3] == "hugo@x.com"
    assert w.customer_relationship_manager_add_customer("Ada", None, "Lead").startswith(
        "Please provide all required fields"
    )
    assert w.customer_relationship_manager_add_customer(**{**CUSTOMER, "customer_email": "ADA@B.IO"}) == "00000200"
    assert w.crm.rows[-1] == (
        "00000200",
        "ravi.kapoor@lumenfield.com",
        "Ada Byron",
        "ada@b.io",
        None,
        None,
        None,
        "Lead",
        None,
        "",
    )
    assert w.customer_relationship_manager_delete_customer("00000200") == "Customer deleted successfully."
    assert w.customer_relationship_manager_delete_customer("00000200") == "Customer not found."


def test_updating_a_field_that_is_no_column_adds_one():
    w = fresh()
    w.customer_relationship_manager_update_customer("00000005", "region", "EMEA")
    assert w.crm.columns[-1] == "region"
    assert w.crm.where("customer_id", "00000005")[0][-1] == "EMEA" and w.crm.rows[0][-1] is None
    assert not states_equal(w, fresh())


# --- row labels -----------------------------------------------------------------------------------


def test_labels_after_each_kind_of_change():
    w = fresh()
    w.email_delete_email("00000001")
    assert w.emails.labels[:3] == [0, 2, 3]  # deletion keeps labels
    w.email_send_email(**SEND)
    assert w.emails.labels == list(range(500))  # sending relabels 0..n-1
    w.calendar_delete_event("00000001")
    w.calendar_create_event(**EVENT)
    w.calendar_create_event(**EVENT)
    assert w.calendar_events.labels[:2] == [0, 2] and w.calendar_events.labels[-2:] == [0, 0]  # appended as label 0
    w.project_management_delete_task("00000000")
    w.project_management_create_task(**TASK)
    assert w.project_tasks.labels == list(range(300))
    w.customer_relationship_manager_delete_customer("00000000")
    w.customer_relationship_manager_add_customer(**CUSTOMER)
    assert w.crm.labels == list(range(200))
    for _ in range(3):
        w.analytics_create_plot("2023-11-01", "2023-11-02", "total_visits", "bar")
    assert w.plots.labels == [0, 1, 2]


def test_same_rows_with_a_different_label_history_are_not_equal():
    delete, add = (
        act("customer_relationship_manager_delete_customer", customer_id="00000005"),
        act("customer_relationship_manager_add_customer", **CUSTOMER),
    )
    one, other = replay(TABLES, [delete, add]), replay(TABLES, [add, delete])
    assert one.crm.rows == other.crm.rows and one.crm.labels != other.crm.labels
    assert reward([add, delete], [delete, add]) == 0.0
    assert reward([delete, add], [delete, add]) == 1.0
    # Calendar creation does not relabel: there the order does not matter.
    remove, create = act("calendar_delete_event", event_id="00000100"), act("calendar_create_event", **EVENT)
    assert reward([create, remove], [remove, create]) == 1.0


# --- verification ---------------------------------------------------------------------------------


def test_every_column_but_status_list_and_board_is_compared_lowercased():
    columns = ("customer_name", "status", "notes")
    assert normalized_row(columns, ("Ada", "Lead", 5)) == ("ada", "Lead", None)
    assert (
        reward(
            [act("email_send_email", **{**SEND, "subject": "HI", "body": "HELLO"})], [act("email_send_email", **SEND)]
        )
        == 1.0
    )
    update = {"customer_id": "00000005", "field": "notes"}
    upper = act("customer_relationship_manager_update_customer", **update, new_value="CALL BACK")
    lower = act("customer_relationship_manager_update_customer", **update, new_value="call back")
    assert reward([upper], [lower]) == 1.0
    # status keeps its case: "Won" is valid, so only its exact spelling passes validation anyway;
    # list_name and board values are compared as they are.
    rename = {"task_id": "00000296", "field": "task_name"}
    assert (
        reward(
            [act("project_management_update_task", **rename, new_value="X")],
            [act("project_management_update_task", **rename, new_value="x")],
        )
        == 1.0
    )


def test_non_string_cells_compare_as_null():
    # A duration given as a number is stored as is, and compares equal to any other non-string.
    as_int = act("calendar_create_event", **{**EVENT, "duration": 30})
    as_float = act("calendar_create_event", **{**EVENT, "duration": 30.0})
    as_text = act("calendar_create_event", **EVENT)
    assert reward([as_int], [as_float]) == 1.0
    assert reward([as_int], [as_text]) == 0.0


def test_actions_that_cannot_run_are_skipped():
    send = act("email_send_email", **SEND)
    broken = [
        ("email_send_email", '{"recipient": '),  # not JSON
        ("email_send_email", "[1, 2]"),  # not an object
        ("email_send", json.dumps(SEND)),  # no such tool
        ("email_send_email", json.dumps({**SEND, "cc": "x@y.z"})),  # an argument it does not take
        ("email_send_email", json.dumps({"recipient": "a@b.c"})),  # missing ones: only a message
        ("calendar_create_event", json.dumps({**EVENT, "duration": [30]})),  # a value that breaks validation
        ("email_search_emails", json.dumps({"date_min": "yesterday"})),  # read-only, and raising
        ("company_directory_find_email_address", json.dumps({"name": "("})),
    ]
    assert reward(broken + [send], [send]) == 1.0
    assert reward(broken, []) == 1.0
    assert reward(broken, [send]) == 0.0


def test_read_only_calls_change_nothing():
    reads = [
        act("email_search_emails", query="caching"),
        act("calendar_search_events", query="design"),
        act("project_management_search_tasks", board="Design"),
        act("analytics_total_visits_count"),
    ]
    assert reward(reads, []) == 1.0


def test_ground_truth_forms():
    assert ground_truth_actions("delete the email") == []
    assert ground_truth_actions(None) == []
    assert ground_truth_actions([{"name": "email_delete_email", "arguments": '{"email_id": "00000001"}'}]) == [
        ("email_delete_email", '{"email_id": "00000001"}')
    ]
    # Arguments already parsed replay the same.
    parsed = ground_truth_actions([{"name": "email_send_email", "arguments": SEND}])
    assert reward([act("email_send_email", **SEND)], parsed) == 1.0


def test_null_arguments_replay_as_given():
    # Replay calls the tool with the arguments as parsed: an explicit null notes is stored as null,
    # the default is the empty string; both compare as null vs "" → different.
    with_null = act("customer_relationship_manager_add_customer", **CUSTOMER, notes=None)
    default = act("customer_relationship_manager_add_customer", **CUSTOMER)
    assert reward([with_null], [default]) == 0.0


def test_replay_honours_its_deadline():
    with pytest.raises(ReplayTimeout):
        replay(TABLES, [act("email_send_email", **SEND)] * 10, deadline=0.0)


def test_tables_equal_checks_columns_labels_and_rows():
    a, b = fresh(), fresh()
    assert tables_equal(a.emails, b.emails)
    b.emails.labels = [label + 1 for label in b.emails.labels]
    assert not tables_equal(a.emails, b.emails)
    c = fresh()
    c.emails.set_where("email_id", "00000001", "subject", "Other")
    assert not tables_equal(a.emails, c.emails)


def test_aggregate_metrics_per_category_and_timeouts():
    rows = [
        {"reward": 1.0, "category": "workplace_assistant_email"},
        {"reward": 0.0, "category": "workplace_assistant_email"},
        {"reward": 0.0, "category": "workplace_assistant_crm", "reason": "timeout"},
        {"reward": 1.0},
    ]
    assert workplace_assistant_metrics(rows) == {
        "workplace_assistant/workplace_assistant_crm/mean/reward": 0.0,
        "workplace_assistant/workplace_assistant_email/mean/reward": 0.5,
        "workplace_assistant/timeout_rate": 0.25,
    }
