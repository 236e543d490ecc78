"""The ``workplace_assistant`` resources server: 27 tools over a simulated workplace (email,
calendar, web analytics, project board, CRM, company directory), verified by replay.

``seed_session`` gives the rollout a fresh copy of the generated tables
(:mod:`gym_workplace_assistant.tables`); each ``@tool`` method runs one tool of
:class:`~gym_workplace_assistant.workplace.Workplace` on them and answers ``{"output": <result>}``.
As in the reference, tool calls are forgiving: keys with null values are dropped, and any failure
(an argument missing or not taken, a value that breaks the tool) answers
``{"output": "Error executing tool '<name>': <message>"}`` with status 200. A call in a session
that was never seeded (or was closed or lost) is refused with gym's ``session_expired`` (409), which
fails the rollout; a name that is no tool never reaches the server (gym's agents answer the model
"unknown tool" themselves).

``verify`` ignores the session: it replays the response's function calls and the row's
``ground_truth`` in two fresh workplaces, in a thread under ``verify_timeout_s``, and compares the
tables (:mod:`gym_workplace_assistant.verify`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import msgspec
from litestar import Request

from gym_core import ResourcesServer, Session, ToolError, tool
from gym_core.schemas import SeedSessionRequest, VerifyRequest, VerifyResponse

from gym_workplace_assistant.config import WorkplaceAssistantConfig
from gym_workplace_assistant.tables import Tables, TableSizes, generate
from gym_workplace_assistant.verify import ReplayTimeout, ground_truth_actions, predicted_actions, reward_for
from gym_workplace_assistant.workplace import Workplace, tool_error

__all__ = [
    "GroundTruthAction",
    "WorkplaceAssistantVerifyRequest",
    "WorkplaceAssistantVerifyResponse",
    "WorkplaceAssistantServer",
]

OFF_LOOP_TOOLS = frozenset({"company_directory_find_email_address"})


def _arg(description: str) -> Any:
    return msgspec.Meta(description=description)


# Argument types of the tools (their JSON schema is what the model sees).
EmailId = Annotated[str, _arg("The 8-digit ID of the email, e.g. '00000057'.")]
EventId = Annotated[str, _arg("The 8-digit ID of the event, e.g. '00000123'.")]
TaskId = Annotated[str, _arg("The 8-digit ID of the task, e.g. '00000042'.")]
CustomerId = Annotated[str, _arg("The 8-digit ID of the customer, e.g. '00000017'.")]
Page = Annotated[int, _arg("The page of results to return, from 1.")]
PageSize = Annotated[int, _arg("How many results a page holds.")]
DateMin = Annotated[str, _arg("The earliest date to include, 'YYYY-MM-DD'.")]
DateMax = Annotated[str, _arg("The latest date to include, 'YYYY-MM-DD'.")]
TimeMin = Annotated[str, _arg("The earliest date or time to include, 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM:SS'.")]
TimeMax = Annotated[str, _arg("The latest date or time to include, 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM:SS'.")]


class GroundTruthAction(msgspec.Struct, kw_only=True):
    """One reference action: a tool name and its arguments (a JSON string, as in the reference's rows)."""

    name: str
    arguments: str | dict[str, Any]


class WorkplaceAssistantVerifyRequest(VerifyRequest, kw_only=True):
    ground_truth: list[GroundTruthAction] | str
    id: int | str
    category: str
    environment_name: str

    def __post_init__(self) -> None:
        # Lax coercion of the integer id, as the reference's rows have it ("0").
        if isinstance(self.id, str):
            text = self.id.strip()
            if not text.lstrip("+-").isdigit():
                raise ValueError(f"id must be an integer, got {self.id!r}")
            self.id = int(text)


class WorkplaceAssistantVerifyResponse(VerifyResponse, kw_only=True):
    reason: str | None = None  # only when no verdict was reached: "timeout"


class WorkplaceAssistantServer(ResourcesServer):
    config: WorkplaceAssistantConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not isinstance(self.config, WorkplaceAssistantConfig):  # built without a config: the defaults
            self.config = WorkplaceAssistantConfig()
        options = self.config
        sizes = TableSizes(
            emails=options.emails,
            calendar_events=options.calendar_events,
            project_tasks=options.project_tasks,
            crm=options.crm,
            analytics=options.analytics,
        )
        self.tables: Tables = generate(options.seed, sizes)

    # --- sessions and tool calls -----------------------------------------------------------------

    async def seed_session(self, session: Session, body: SeedSessionRequest) -> None:
        self.sessions.set(session.id, Workplace(self.tables))

    def _run(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run tool ``name`` on the caller's workplace: ``arguments`` are a tool method's locals."""
        session = arguments.pop("session")
        arguments.pop("self", None)
        workplace: Workplace = self.existing_session_state(session)
        try:
            return {"output": workplace.call(name, arguments)}
        except Exception as exc:
            return {"output": tool_error(name, exc)}

    def tool_handler(self, spec: Any) -> Callable[[Request], Awaitable[Any]]:
        # The reference calls its tool functions with the body as keyword arguments, null values
        # dropped, and shows the model every failure; gym's default handler would decode the body
        # against the schema and answer 422 instead.
        method = getattr(self, spec.method_name)

        async def call(request: Request) -> Any:
            run = functools.partial(self._call_tool, spec.name, method, await request.body(), self.session(request))
            # The directory search evaluates the model's regular expression: in a thread, under its time budget.
            return await asyncio.to_thread(run) if spec.name in OFF_LOOP_TOOLS else run()

        return call

    def _call_tool(self, name: str, method: Callable[..., Any], raw: bytes, session: Session) -> dict[str, Any]:
        # A forged cookie (403) or a session never seeded, closed or lost (409) fails the rollout,
        # as gym's session contract has it, before the body is read.
        self.existing_session_state(session)
        arguments = msgspec.json.decode(raw or b"{}")  # not JSON: a 400
        if not isinstance(arguments, dict):
            raise ToolError(f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}", 422)
        arguments = {key: value for key, value in arguments.items() if value is not None}
        if "session" in arguments:  # would collide with the injected session
            return {"output": tool_error(name, TypeError(f"{name}() got an unexpected keyword argument 'session'"))}
        try:
            return method(session=session, **arguments)
        except TypeError as exc:  # arguments the tool does not take, or missing ones
            return {"output": tool_error(name, exc)}

    # --- verification ----------------------------------------------------------------------------

    async def verify(self, session: Session, body: WorkplaceAssistantVerifyRequest) -> WorkplaceAssistantVerifyResponse:
        predicted = predicted_actions(body.response)
        expected = ground_truth_actions(body.ground_truth)  # a plain string: no action
        limit = self.config.verify_timeout_s
        deadline = time.monotonic() + limit
        try:
            reward = await asyncio.wait_for(
                asyncio.to_thread(reward_for, self.tables, predicted, expected, deadline), limit + 1.0
            )
        except (ReplayTimeout, TimeoutError):
            self.log.warning(
                "workplace_assistant: replaying %d predicted actions took over %.1f s", len(predicted), limit
            )
            return WorkplaceAssistantVerifyResponse(reward=0.0, reason="timeout")
        return WorkplaceAssistantVerifyResponse(reward=reward)

    # --- the tools -------------------------------------------------------------------------------

    @tool
    def company_directory_find_email_address(
        self,
        session: Session,
        name: Annotated[str, _arg("Part of the person's name (a case-insensitive regular expression).")] = "",
    ) -> dict[str, Any]:
        """Find the email addresses of the company directory that contain the given name."""
        return self._run("company_directory_find_email_address", locals())

    @tool
    def email_get_email_information_by_id(
        self,
        session: Session,
        email_id: EmailId,
        field: Annotated[
            str, _arg("The field to return: email_id, inbox/outbox, sender/recipient, subject, sent_datetime or body.")
        ],
    ) -> dict[str, Any]:
        """Get one field of an email by its ID."""
        return self._run("email_get_email_information_by_id", locals())

    @tool
    def email_search_emails(
        self,
        session: Session,
        query: Annotated[
            str, _arg("Words that must all appear in the subject, the body or the sender/recipient.")
        ] = "",
        date_min: DateMin = None,  # type: ignore[assignment]
        date_max: DateMax = None,  # type: ignore[assignment]
        page: Page = 1,
        page_size: PageSize = 5,
    ) -> dict[str, Any]:
        """Search emails by words and sent date, newest first, a page at a time."""
        return self._run("email_search_emails", locals())

    @tool
    def email_send_email(
        self,
        session: Session,
        recipient: Annotated[str, _arg("The recipient's email address.")],
        subject: Annotated[str, _arg("The subject of the email.")],
        body: Annotated[str, _arg("The body of the email.")],
    ) -> dict[str, Any]:
        """Send an email."""
        return self._run("email_send_email", locals())

    @tool
    def email_delete_email(self, session: Session, email_id: EmailId) -> dict[str, Any]:
        """Delete an email by its ID."""
        return self._run("email_delete_email", locals())

    @tool
    def email_forward_email(
        self,
        session: Session,
        email_id: EmailId,
        recipient: Annotated[str, _arg("The email address to forward it to.")],
    ) -> dict[str, Any]:
        """Forward an email to a recipient (subject 'FW: <subject>', the same body)."""
        return self._run("email_forward_email", locals())

    @tool
    def email_reply_email(
        self, session: Session, email_id: EmailId, body: Annotated[str, _arg("The body of the reply.")]
    ) -> dict[str, Any]:
        """Reply to an email's sender/recipient (subject 'RE: <subject>')."""
        return self._run("email_reply_email", locals())

    @tool
    def calendar_get_event_information_by_id(
        self,
        session: Session,
        event_id: EventId,
        field: Annotated[
            str, _arg("The field to return: event_id, event_name, participant_email, event_start or duration.")
        ],
    ) -> dict[str, Any]:
        """Get one field of a calendar event by its ID."""
        return self._run("calendar_get_event_information_by_id", locals())

    @tool
    def calendar_search_events(
        self,
        session: Session,
        query: Annotated[
            str, _arg("Text to find in the event name or the participant's email (case-insensitive).")
        ] = "",
        time_min: TimeMin = None,  # type: ignore[assignment]
        time_max: TimeMax = None,  # type: ignore[assignment]
        page: Page = 1,
        page_size: PageSize = 5,
    ) -> dict[str, Any]:
        """Search calendar events by text and start time, latest first, a page at a time."""
        return self._run("calendar_search_events", locals())

    @tool
    def calendar_create_event(
        self,
        session: Session,
        event_name: Annotated[str, _arg("The name of the event.")],
        participant_email: Annotated[str, _arg("The email address of the participant.")],
        event_start: Annotated[str, _arg("The start of the event, 'YYYY-MM-DD HH:MM:SS'.")],
        duration: Annotated[str, _arg("The duration of the event in minutes, e.g. '60'.")],
    ) -> dict[str, Any]:
        """Create a calendar event; returns the new event's ID."""
        return self._run("calendar_create_event", locals())

    @tool
    def calendar_delete_event(self, session: Session, event_id: EventId) -> dict[str, Any]:
        """Delete a calendar event by its ID."""
        return self._run("calendar_delete_event", locals())

    @tool
    def calendar_update_event(
        self,
        session: Session,
        event_id: EventId,
        field: Annotated[str, _arg("The field to change: event_name, participant_email, event_start or duration.")],
        new_value: Annotated[str, _arg("The new value of the field.")],
    ) -> dict[str, Any]:
        """Change one field of a calendar event."""
        return self._run("calendar_update_event", locals())

    @tool
    def analytics_get_visitor_information_by_id(
        self, session: Session, visitor_id: Annotated[str, _arg("The ID of the website visitor.")]
    ) -> dict[str, Any]:
        """Get the website visits of a visitor by their ID."""
        return self._run("analytics_get_visitor_information_by_id", locals())

    @tool
    def analytics_create_plot(
        self,
        session: Session,
        time_min: DateMin,
        time_max: DateMax,
        value_to_plot: Annotated[
            str,
            _arg(
                "What to plot: total_visits, session_duration_seconds, user_engaged, visits_direct, visits_referral, "
                "visits_search_engine or visits_social_media."
            ),
        ],
        plot_type: Annotated[str, _arg("The kind of plot: bar, line, scatter or histogram.")],
    ) -> dict[str, Any]:
        """Plot a website analytics value over a date range; returns the plot's file path."""
        return self._run("analytics_create_plot", locals())

    @tool
    def analytics_total_visits_count(
        self, session: Session, time_min: DateMin = None, time_max: DateMax = None
    ) -> dict[str, Any]:  # type: ignore[assignment]
        """Count the website visits of each day in a date range."""
        return self._run("analytics_total_visits_count", locals())

    @tool
    def analytics_engaged_users_count(
        self, session: Session, time_min: DateMin = None, time_max: DateMax = None
    ) -> dict[str, Any]:  # type: ignore[assignment]
        """Count the engaged visitors of each day in a date range."""
        return self._run("analytics_engaged_users_count", locals())

    @tool
    def analytics_traffic_source_count(
        self,
        session: Session,
        time_min: DateMin = None,  # type: ignore[assignment]
        time_max: DateMax = None,  # type: ignore[assignment]
        traffic_source: Annotated[
            str, _arg("The traffic source: direct, referral, search engine or social media.")
        ] = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Count the visits from one traffic source on each day of a date range."""
        return self._run("analytics_traffic_source_count", locals())

    @tool
    def analytics_get_average_session_duration(
        self,
        session: Session,
        time_min: DateMin = None,
        time_max: DateMax = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """The average session duration, in seconds, of each day in a date range."""
        return self._run("analytics_get_average_session_duration", locals())

    @tool
    def project_management_get_task_information_by_id(
        self,
        session: Session,
        task_id: TaskId,
        field: Annotated[
            str, _arg("The field to return: task_id, task_name, assigned_to_email, list_name, due_date or board.")
        ],
    ) -> dict[str, Any]:
        """Get one field of a project task by its ID."""
        return self._run("project_management_get_task_information_by_id", locals())

    @tool
    def project_management_search_tasks(
        self,
        session: Session,
        task_name: Annotated[str, _arg("Text to find in the task name.")] = None,  # type: ignore[assignment]
        assigned_to_email: Annotated[str, _arg("The assignee's email address (exact).")] = None,  # type: ignore[assignment]
        list_name: Annotated[str, _arg("The list: Backlog, In Progress, In Review or Completed.")] = None,  # type: ignore[assignment]
        due_date: Annotated[str, _arg("The due date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        board: Annotated[str, _arg("The board: Back end, Front end or Design.")] = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Search project tasks; give at least one filter."""
        return self._run("project_management_search_tasks", locals())

    @tool
    def project_management_create_task(
        self,
        session: Session,
        task_name: Annotated[str, _arg("The name of the task.")],
        assigned_to_email: Annotated[str, _arg("The email address of the assignee (a team member).")],
        list_name: Annotated[str, _arg("The list: Backlog, In Progress, In Review or Completed.")],
        due_date: Annotated[str, _arg("The due date, 'YYYY-MM-DD'.")],
        board: Annotated[str, _arg("The board: Back end, Front end or Design.")],
    ) -> dict[str, Any]:
        """Create a project task; returns the new task's ID."""
        return self._run("project_management_create_task", locals())

    @tool
    def project_management_delete_task(self, session: Session, task_id: TaskId) -> dict[str, Any]:
        """Delete a project task by its ID."""
        return self._run("project_management_delete_task", locals())

    @tool
    def project_management_update_task(
        self,
        session: Session,
        task_id: TaskId,
        field: Annotated[str, _arg("The field to change: task_name, assigned_to_email, list_name, due_date or board.")],
        new_value: Annotated[str, _arg("The new value of the field.")],
    ) -> dict[str, Any]:
        """Change one field of a project task."""
        return self._run("project_management_update_task", locals())

    @tool
    def customer_relationship_manager_search_customers(
        self,
        session: Session,
        customer_name: Annotated[str, _arg("Text to find in the customer's name.")] = None,  # type: ignore[assignment]
        customer_email: Annotated[str, _arg("Text to find in the customer's email address.")] = None,  # type: ignore[assignment]
        product_interest: Annotated[
            str, _arg("The product interest: Software, Hardware, Services, Consulting or Training.")
        ] = None,  # type: ignore[assignment]
        status: Annotated[str, _arg("The status: Qualified, Won, Lost, Lead or Proposal.")] = None,  # type: ignore[assignment]
        assigned_to_email: Annotated[str, _arg("Text to find in the email address of the customer's owner.")] = None,  # type: ignore[assignment]
        last_contact_date_min: Annotated[str, _arg("The earliest last contact date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        last_contact_date_max: Annotated[str, _arg("The latest last contact date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        follow_up_by_min: Annotated[str, _arg("The earliest follow-up date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        follow_up_by_max: Annotated[str, _arg("The latest follow-up date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        page: Page = 1,
        page_size: PageSize = 5,
    ) -> dict[str, Any]:
        """Search customers; give at least one filter. A page at a time."""
        return self._run("customer_relationship_manager_search_customers", locals())

    @tool
    def customer_relationship_manager_update_customer(
        self,
        session: Session,
        customer_id: CustomerId,
        field: Annotated[str, _arg("The field to change, e.g. status, product_interest, customer_email, notes.")],
        new_value: Annotated[str, _arg("The new value of the field.")],
    ) -> dict[str, Any]:
        """Change one field of a customer record."""
        return self._run("customer_relationship_manager_update_customer", locals())

    @tool
    def customer_relationship_manager_add_customer(
        self,
        session: Session,
        customer_name: Annotated[str, _arg("The customer's name.")],
        assigned_to_email: Annotated[str, _arg("The email address of the team member who owns the customer.")],
        status: Annotated[str, _arg("The status: Qualified, Won, Lost, Lead or Proposal.")],
        customer_email: Annotated[str, _arg("The customer's email address.")] = None,  # type: ignore[assignment]
        customer_phone: Annotated[str, _arg("The customer's phone number.")] = None,  # type: ignore[assignment]
        last_contact_date: Annotated[str, _arg("The last contact date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
        product_interest: Annotated[
            str, _arg("The product interest: Software, Hardware, Services, Consulting or Training.")
        ] = None,  # type: ignore[assignment]
        notes: Annotated[str, _arg("Notes about the customer.")] = "",
        follow_up_by: Annotated[str, _arg("The follow-up date, 'YYYY-MM-DD'.")] = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Add a customer; returns the new customer's ID."""
        return self._run("customer_relationship_manager_add_customer", locals())

    @tool
    def customer_relationship_manager_delete_customer(
        self, session: Session, customer_id: CustomerId
    ) -> dict[str, Any]:
        """Delete a customer by their ID."""
        return self._run("customer_relationship_manager_delete_customer", locals())
