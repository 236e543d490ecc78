"""One simulated workplace (a rollout's state) and its 27 tools, as plain methods (no I/O).

The server calls them for the model's tool calls; :mod:`gym_workplace_assistant.verify` calls them
again to replay a trajectory. Each tool returns what the model sees (a string, a dict or a list);
a failed validation is a plain message string, and anything else wrong (a missing argument, one
it does not take, an unreadable date) raises, which the callers report as
``Error executing tool '<name>': <message>``.

Ids are compared as the strings the tables hold (``"00000057"``, not ``57``). Row labels follow
the reference's DataFrame operations exactly, because verification compares them (see
:class:`~gym_workplace_assistant.tables.Table`): deleting keeps labels; sending an email, creating a
task and adding a customer relabel the table 0..n-1; creating an event appends a row labelled 0;
a plot is appended labelled with the row count.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import regex

from gym_workplace_assistant.tables import BOARDS, LIST_NAMES, PRODUCTS, STATUSES, Table, Tables

__all__ = [
    "Workplace",
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "CURRENT_TIME",
    "PLOT_VALUES",
    "PLOT_TYPES",
    "EVENT_FIELDS",
    "tool_error",
]

CURRENT_TIME = "2023-11-30 23:59:00"
PLOT_VALUES = (
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
EVENT_FIELDS = ("event_name", "participant_email", "event_start", "duration")
EMAIL_PATTERN = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
EVENT_ID_PATTERN = re.compile(r"[0-9]{8}")
# The directory search takes a regular expression from the model: bounded (and run off the event
# loop by the server) so that a pathological one cannot stall the server.
DIRECTORY_REGEX_TIMEOUT_S = 0.2


def tool_error(name: str, exc: BaseException) -> str:
    """What the model sees when a tool raised."""
    return f"Error executing tool '{name}': {exc}"


def _quoted(choices: tuple[str, ...]) -> str:
    return ", ".join(f"'{choice}'" for choice in choices)


def _when(value: str) -> datetime:
    """A date or timestamp argument (``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM:SS``); raises if unreadable."""
    return datetime.fromisoformat(value.strip())


def _next_id(table: Table, column: str, *, width: int | None = 8) -> str:
    """The id after the largest one (compared as strings, as the reference's ``.max()`` does)."""
    ids = table.values(column)
    if not ids:
        raise ValueError(f"no {column} to continue from: the table is empty")
    following = str(int(max(ids)) + 1)
    return following.zfill(width) if width else following


def _paginate(items: list[dict[str, Any]], key: str, page: Any, page_size: Any) -> dict[str, Any] | str:
    page, page_size = int(page), int(page_size)
    if page < 1 or page_size < 1:
        return "Page and page size must be positive integers."
    start = (page - 1) * page_size
    return {
        key: items[start : start + page_size],
        "pagination": {
            f"total_{key}": len(items),
            "page": page,
            "page_size": page_size,
            "total_pages": math.ceil(len(items) / page_size),
        },
    }


class Workplace:
    """The tables of one rollout. :meth:`fresh` copies the generated ones (cheaply: rows are shared)."""

    __slots__ = ("emails", "calendar_events", "project_tasks", "crm", "analytics", "plots", "directory")

    def __init__(self, tables: Tables):
        self.emails = tables.emails.copy()
        self.calendar_events = tables.calendar_events.copy()
        self.project_tasks = tables.project_tasks.copy()
        self.crm = tables.crm.copy()
        self.analytics = tables.analytics  # read-only: never copied
        self.plots = tables.plots.copy()
        self.directory = tables.directory

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run tool ``name`` with ``arguments`` as keyword arguments; raises for an unknown tool,
        arguments it does not take, and whatever the tool raises."""
        if name not in TOOL_NAMES:
            raise ValueError(f"unknown tool {name!r}")
        method: Callable[..., Any] = getattr(self, name)
        return method(**arguments)

    # --- directory -------------------------------------------------------------------------------

    def company_directory_find_email_address(self, name: str = "") -> list[str] | str:
        if name == "":
            return "Name not provided."
        pattern = regex.compile(name, regex.IGNORECASE)
        deadline = time.monotonic() + DIRECTORY_REGEX_TIMEOUT_S
        found = []
        for address in self.directory:
            # One time budget for the whole directory (raises TimeoutError past it).
            if pattern.search(address, timeout=max(deadline - time.monotonic(), 1e-3)):
                found.append(address)
        return found

    # --- email -----------------------------------------------------------------------------------

    def email_get_email_information_by_id(
        self, email_id: str | None = None, field: str | None = None
    ) -> dict[str, Any] | str:
        if not email_id:
            return "Email ID not provided."
        if not field:
            return "Field not provided."
        found = self.emails.where("email_id", email_id)
        if not found:
            return "Email not found."
        record = self.emails.records(found[:1])[0]
        return {field: record[field]} if field in record else "Field not found."

    def email_search_emails(
        self,
        query: str = "",
        date_min: str | None = None,
        date_max: str | None = None,
        page: int = 1,
        page_size: int = 5,
    ) -> dict[str, Any] | str:
        words = query.lower().split()
        table = self.emails
        subject, body, other, sent = (table.column(c) for c in ("subject", "body", "sender/recipient", "sent_datetime"))
        rows = [
            row for row in table.rows if all(w in f"{row[subject]} {row[body]} {row[other]}".lower() for w in words)
        ]
        rows.sort(key=lambda row: row[sent], reverse=True)
        if date_min:
            low = _when(date_min).date()
            rows = [row for row in rows if _when(row[sent]).date() >= low]
        if date_max:
            high = _when(date_max).date()
            rows = [row for row in rows if _when(row[sent]).date() <= high]
        if not rows:
            return "No emails found."
        return _paginate(table.records(rows), "emails", page, page_size)

    def email_send_email(
        self, recipient: str | None = None, subject: str | None = None, body: str | None = None
    ) -> str:
        if not recipient or not subject or not body:
            return "Recipient, subject, or body not provided."
        if "@" not in recipient or "." not in recipient:
            return "Invalid recipient email address."
        email_id = _next_id(self.emails, "email_id", width=None)  # not zero-padded, as in the reference
        self.emails.append_relabelled((email_id, "outbox", recipient.lower(), subject, CURRENT_TIME, body))
        return "Email sent successfully."

    def email_delete_email(self, email_id: str | None = None) -> str:
        if not email_id:
            return "Email ID not provided."
        if not self.emails.where("email_id", email_id):
            return "Email not found."
        self.emails.delete_where("email_id", email_id)
        return "Email deleted successfully."

    def email_forward_email(self, email_id: str | None = None, recipient: str | None = None) -> str:
        if not email_id or not recipient:
            return "Email ID or recipient not provided."
        found = self.emails.where("email_id", email_id)
        if not found:
            return "Email not found."
        if "@" not in recipient or "." not in recipient:
            return "Invalid recipient email address."
        email = self.emails.records(found[:1])[0]
        result = self.email_send_email(recipient, f"FW: {email['subject']}", email["body"])
        return "Email forwarded successfully." if result == "Email sent successfully." else result

    def email_reply_email(self, email_id: str | None = None, body: str | None = None) -> str:
        if not email_id or not body:
            return "Email ID or body not provided."
        found = self.emails.where("email_id", email_id)
        if not found:
            return "Email not found."
        email = self.emails.records(found[:1])[0]
        result = self.email_send_email(email["sender/recipient"], f"RE: {email['subject']}", body)
        return "Email replied successfully." if result == "Email sent successfully." else result

    # --- calendar --------------------------------------------------------------------------------

    @staticmethod
    def _event_id_problem(event_id: Any) -> str | None:
        if not isinstance(event_id, str) or not EVENT_ID_PATTERN.fullmatch(event_id):
            return "Event ID must be an 8-digit string, such as '00000123'."
        return None

    @staticmethod
    def _event_value_problem(field: str, value: Any) -> str | None:
        if field == "event_start":
            try:
                datetime.strptime(value, "%Y-%m-%d %H:%M:%S")
            except (TypeError, ValueError):
                return "Event start must be a timestamp in the format 'YYYY-MM-DD HH:MM:SS'."
        if field == "duration":
            try:
                minutes = int(value)
            except (TypeError, ValueError):
                minutes = 0
            if minutes <= 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                return "Duration must be a positive whole number of minutes."
        return None

    def calendar_get_event_information_by_id(
        self, event_id: str | None = None, field: str | None = None
    ) -> dict[str, Any] | str:
        if not event_id:
            return "Event ID not provided."
        if not field:
            return "Field not provided."
        if problem := self._event_id_problem(event_id):
            return problem
        found = self.calendar_events.where("event_id", event_id)
        if not found:
            return "Event not found."
        record = self.calendar_events.records(found[:1])[0]
        return {field: record[field]} if field in record else "Field not found."

    def calendar_search_events(
        self,
        query: str = "",
        time_min: str | None = None,
        time_max: str | None = None,
        page: int = 1,
        page_size: int = 5,
    ) -> dict[str, Any] | str:
        table = self.calendar_events
        name, participant, start = (table.column(c) for c in ("event_name", "participant_email", "event_start"))
        needle = query.lower()
        rows = [
            row for row in table.rows if needle in str(row[name]).lower() or needle in str(row[participant]).lower()
        ]
        if time_min:
            low = _when(time_min)
            rows = [row for row in rows if _when(row[start]) >= low]
        if time_max:
            high = _when(time_max)
            rows = [row for row in rows if _when(row[start]) <= high]
        rows.sort(key=lambda row: row[start], reverse=True)
        if not rows:
            return "No events found."
        return _paginate(table.records(rows), "events", page, page_size)

    def calendar_create_event(
        self,
        event_name: str | None = None,
        participant_email: str | None = None,
        event_start: str | None = None,
        duration: str | None = None,
    ) -> str:
        if not event_name:
            return "Event name not provided."
        if not participant_email:
            return "Participant email not provided."
        if not event_start:
            return "Event start not provided."
        if not duration:
            return "Event duration not provided."
        if problem := self._event_value_problem("event_start", event_start) or self._event_value_problem(
            "duration", duration
        ):
            return problem
        event_id = _next_id(self.calendar_events, "event_id")
        # The reference concatenates a one-row frame without ignore_index: the new row is labelled 0.
        self.calendar_events.append_labelled(
            (event_id, event_name, participant_email.lower(), event_start, duration), 0
        )
        return event_id

    def calendar_delete_event(self, event_id: str | None = None) -> str:
        if not event_id:
            return "Event ID not provided."
        if problem := self._event_id_problem(event_id):
            return problem
        if not self.calendar_events.where("event_id", event_id):
            return "Event not found."
        self.calendar_events.delete_where("event_id", event_id)
        return "Event deleted successfully."

    def calendar_update_event(
        self, event_id: str | None = None, field: str | None = None, new_value: str | None = None
    ) -> str:
        if not event_id or not field or not new_value:
            return "Event ID, field, or new value not provided."
        if problem := self._event_id_problem(event_id):
            return problem
        if field not in EVENT_FIELDS:
            return f"Field not valid. Please choose from: {_quoted(EVENT_FIELDS)}."
        if problem := self._event_value_problem(field, new_value):
            return problem
        if field == "participant_email":
            new_value = new_value.lower()
        if not self.calendar_events.where("event_id", event_id):
            return "Event not found."
        self.calendar_events.set_where("event_id", event_id, field, new_value)
        return "Event updated successfully."

    # --- analytics -------------------------------------------------------------------------------

    def _visits(self, time_min: str | None, time_max: str | None) -> list[tuple[Any, ...]]:
        # Dates compare as strings, as in the reference.
        rows = self.analytics.rows
        if time_min:
            rows = [row for row in rows if row[0] >= time_min]
        if time_max:
            rows = [row for row in rows if row[0] <= time_max]
        return rows

    def analytics_get_visitor_information_by_id(self, visitor_id: str | None = None) -> list[dict[str, Any]] | str:
        if not visitor_id:
            return "Visitor ID not provided."
        found = self.analytics.where("visitor_id", visitor_id)
        return self.analytics.records(found) if found else "Visitor not found."

    def analytics_create_plot(
        self,
        time_min: str | None = None,
        time_max: str | None = None,
        value_to_plot: str | None = None,
        plot_type: str | None = None,
    ) -> str:
        if not time_min:
            return "Start date not provided."
        if not time_max:
            return "End date not provided."
        if value_to_plot not in PLOT_VALUES:
            return f"Value to plot must be one of {_quoted(PLOT_VALUES)}."
        if plot_type not in PLOT_TYPES:
            return f"Plot type must be one of {_quoted(PLOT_TYPES)}."
        file_path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
        self.plots.append_labelled((file_path,), len(self.plots))  # df.loc[len(df)] = ...
        return file_path

    def analytics_total_visits_count(self, time_min: str | None = None, time_max: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self._visits(time_min, time_max):
            counts[row[0]] = counts.get(row[0], 0) + 1
        return counts

    def analytics_engaged_users_count(self, time_min: str | None = None, time_max: str | None = None) -> dict[str, int]:
        engaged = self.analytics.column("user_engaged")
        counts: dict[str, int] = {}
        for row in self._visits(time_min, time_max):
            counts[row[0]] = counts.get(row[0], 0) + (str(row[engaged]).lower() == "true")
        return counts

    def analytics_traffic_source_count(
        self, time_min: str | None = None, time_max: str | None = None, traffic_source: str | None = None
    ) -> dict[str, int] | str:
        if not traffic_source:
            return "Traffic source not provided."
        source = self.analytics.column("traffic_source")
        counts: dict[str, int] = {}
        for row in self._visits(time_min, time_max):
            counts[row[0]] = counts.get(row[0], 0) + (row[source] == traffic_source)
        return counts

    def analytics_get_average_session_duration(
        self, time_min: str | None = None, time_max: str | None = None
    ) -> dict[str, float]:
        duration = self.analytics.column("session_duration_seconds")
        totals: dict[str, list[float]] = {}
        for row in self._visits(time_min, time_max):
            totals.setdefault(row[0], []).append(float(row[duration]))
        return {day: sum(values) / len(values) for day, values in totals.items()}

    # --- project management ----------------------------------------------------------------------

    def _assignees(self) -> set[str]:
        return set(self.project_tasks.values("assigned_to_email"))

    def project_management_get_task_information_by_id(
        self, task_id: str | None = None, field: str | None = None
    ) -> dict[str, Any] | str:
        if not task_id:
            return "Task ID not provided."
        if not field:
            return "Field not provided."
        found = self.project_tasks.where("task_id", task_id)
        if not found:
            return "Task not found."
        record = self.project_tasks.records(found[:1])[0]
        return {field: record[field]} if field in record else "Field not found."

    def project_management_search_tasks(
        self,
        task_name: str | None = None,
        assigned_to_email: str | None = None,
        list_name: str | None = None,
        due_date: str | None = None,
        board: str | None = None,
    ) -> list[dict[str, Any]] | str:
        if not any((task_name, assigned_to_email, list_name, due_date, board)):
            return "No search parameters provided."
        table = self.project_tasks
        rows = table.rows
        if assigned_to_email:
            if not EMAIL_PATTERN.fullmatch(assigned_to_email):
                return "Invalid email address."
            i = table.column("assigned_to_email")
            rows = [row for row in rows if str(row[i]).lower() == assigned_to_email.lower()]
        for column, needle in (
            ("task_name", task_name),
            ("list_name", list_name),
            ("due_date", due_date),
            ("board", board),
        ):
            if needle:
                i, needle = table.column(column), needle.lower()
                rows = [row for row in rows if needle in str(row[i]).lower()]
        return table.records(rows)

    def project_management_create_task(
        self,
        task_name: str | None = None,
        assigned_to_email: str | None = None,
        list_name: str | None = None,
        due_date: str | None = None,
        board: str | None = None,
    ) -> str:
        if not all((task_name, assigned_to_email, list_name, due_date, board)):
            return "Missing task details: task_name, assigned_to_email, list_name, due_date and board are all required."
        assigned_to_email = assigned_to_email.lower()
        if assigned_to_email not in self._assignees():
            return "Assignee email not valid. Please choose from the list of team members."
        if list_name not in LIST_NAMES:
            return f"List not valid. Please choose from: {_quoted(LIST_NAMES)}."
        if board not in BOARDS:
            return f"Board not valid. Please choose from: {_quoted(BOARDS)}."
        task_id = _next_id(self.project_tasks, "task_id")
        self.project_tasks.append_relabelled((task_id, task_name, assigned_to_email, list_name, due_date, board))
        return task_id

    def project_management_delete_task(self, task_id: str | None = None) -> str:
        if not task_id:
            return "Task ID not provided."
        if not self.project_tasks.where("task_id", task_id):
            return "Task not found."
        self.project_tasks.delete_where("task_id", task_id)
        return "Task deleted successfully."

    def project_management_update_task(
        self, task_id: str | None = None, field: str | None = None, new_value: str | None = None
    ) -> str:
        if not task_id or not field or not new_value:
            return "Task ID, field, or new value not provided."
        if field not in self.project_tasks.columns:
            return f"Field not valid. Please choose from: {_quoted(self.project_tasks.columns)}."
        if field == "board" and new_value not in BOARDS:
            return f"Board not valid. Please choose from: {_quoted(BOARDS)}."
        if field == "list_name" and new_value not in LIST_NAMES:
            return f"List not valid. Please choose from: {_quoted(LIST_NAMES)}."
        if field == "assigned_to_email":
            new_value = new_value.lower()
            if new_value not in self._assignees():
                return "Assignee email not valid. Please choose from the list of team members."
        if not self.project_tasks.where("task_id", task_id):
            return "Task not found."
        self.project_tasks.set_where("task_id", task_id, field, new_value)
        return "Task updated successfully."

    # --- customer relationship manager -----------------------------------------------------------

    def customer_relationship_manager_search_customers(
        self,
        customer_name: str | None = None,
        customer_email: str | None = None,
        product_interest: str | None = None,
        status: str | None = None,
        assigned_to_email: str | None = None,
        last_contact_date_min: str | None = None,
        last_contact_date_max: str | None = None,
        follow_up_by_min: str | None = None,
        follow_up_by_max: str | None = None,
        page: int = 1,
        page_size: int = 5,
    ) -> dict[str, Any] | str:
        filters = (
            customer_name,
            customer_email,
            product_interest,
            status,
            assigned_to_email,
            last_contact_date_min,
            last_contact_date_max,
            follow_up_by_min,
            follow_up_by_max,
        )
        if not any(filters):
            return "No search parameters provided."
        table = self.crm
        rows = table.rows
        for column, needle in (
            ("customer_name", customer_name),
            ("customer_email", customer_email),
            ("product_interest", product_interest),
            ("status", status),
            ("assigned_to_email", assigned_to_email),
        ):
            if needle:
                i, needle = table.column(column), needle.lower()
                rows = [row for row in rows if needle in str(row[i]).lower()]
        for column, low, high in (
            ("last_contact_date", last_contact_date_min, last_contact_date_max),
            ("follow_up_by", follow_up_by_min, follow_up_by_max),
        ):
            i = table.column(column)
            if low:
                rows = [row for row in rows if str(row[i]) >= low]
            if high:
                rows = [row for row in rows if str(row[i]) <= high]
        if not rows:
            return "No customers found."
        return _paginate(table.records(rows), "customers", page, page_size)

    def customer_relationship_manager_update_customer(
        self, customer_id: str | None = None, field: str | None = None, new_value: str | None = None
    ) -> str:
        if not customer_id or not field or not new_value:
            return "Customer ID, field, or new value not provided."
        if field == "status" and new_value not in STATUSES:
            return f"Status not valid. Please choose from: {_quoted(STATUSES)}."
        if field == "product_interest" and new_value not in PRODUCTS:
            return f"Product interest not valid. Please choose from: {_quoted(PRODUCTS)}."
        if field in ("customer_email", "assigned_to_email"):
            new_value = new_value.lower()
        if not self.crm.where("customer_id", customer_id):
            return "Customer not found."
        self.crm.set_where("customer_id", customer_id, field, new_value)
        return "Customer updated successfully."

    def customer_relationship_manager_add_customer(
        self,
        customer_name: str | None = None,
        assigned_to_email: str | None = None,
        status: str | None = None,
        customer_email: str | None = None,
        customer_phone: str | None = None,
        last_contact_date: str | None = None,
        product_interest: str | None = None,
        notes: str = "",
        follow_up_by: str | None = None,
    ) -> str:
        if not all((customer_name, assigned_to_email, status)):
            return "Please provide all required fields: customer_name, assigned_to_email, status."
        assigned_to_email = assigned_to_email.lower()
        if customer_email:
            customer_email = customer_email.lower()
        customer_id = _next_id(self.crm, "customer_id")
        row = {
            "customer_id": customer_id,
            "assigned_to_email": assigned_to_email,
            "customer_name": customer_name,
            "customer_email": customer_email,
            "customer_phone": customer_phone,
            "last_contact_date": last_contact_date,
            "product_interest": product_interest,
            "status": status,
            "follow_up_by": follow_up_by,
            "notes": notes,
        }
        self.crm.append_relabelled(tuple(row.get(column) for column in self.crm.columns))
        return customer_id

    def customer_relationship_manager_delete_customer(self, customer_id: str | None = None) -> str:
        if not customer_id:
            return "Customer ID not provided."
        if not self.crm.where("customer_id", customer_id):
            return "Customer not found."
        self.crm.delete_where("customer_id", customer_id)
        return "Customer deleted successfully."


TOOL_NAMES = tuple(
    name
    for name, value in vars(Workplace).items()
    if inspect.isfunction(value)
    and name.startswith(
        (
            "company_directory_",
            "email_",
            "calendar_",
            "analytics_",
            "project_management_",
            "customer_relationship_manager_",
        )
    )
)
# The tools that change a table; replaying the others cannot change the outcome, so verify skips them.
WRITE_TOOLS = frozenset(
    {
        "email_send_email",
        "email_delete_email",
        "email_forward_email",
        "email_reply_email",
        "calendar_create_event",
        "calendar_delete_event",
        "calendar_update_event",
        "analytics_create_plot",
        "project_management_create_task",
        "project_management_delete_task",
        "project_management_update_task",
        "customer_relationship_manager_update_customer",
        "customer_relationship_manager_add_customer",
        "customer_relationship_manager_delete_customer",
    }
)
