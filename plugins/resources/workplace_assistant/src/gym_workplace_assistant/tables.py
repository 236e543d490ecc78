"""The simulated workplace's data: six tables and the company directory, generated from a seed.

Nothing is downloaded or bundled: :func:`generate` builds every table with ``random.Random(seed)``
from the lists of names, subjects, products... below, so the same seed and sizes always give the
same tables (the example tasks in ``data/example.jsonl`` refer to the rows of the default seed).

Every cell is a string, as the reference loads its CSV files (``dtype=str``). A :class:`Table`
keeps its rows as tuples with pandas-style row labels beside them; copying a table copies two lists
of references, never a row, so a fresh environment per rollout (and two per verification) is cheap,
and rows nobody changed stay the very same objects (which makes comparing tables fast).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

__all__ = [
    "Table",
    "Tables",
    "TableSizes",
    "DEFAULT_SEED",
    "DIRECTORY",
    "USER_EMAIL",
    "EMAIL_COLUMNS",
    "CALENDAR_COLUMNS",
    "TASK_COLUMNS",
    "CRM_COLUMNS",
    "ANALYTICS_COLUMNS",
    "PLOT_COLUMNS",
    "LIST_NAMES",
    "BOARDS",
    "PRODUCTS",
    "STATUSES",
    "TRAFFIC_SOURCES",
    "generate",
]

DEFAULT_SEED = 1130

EMAIL_COLUMNS = ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body")
CALENDAR_COLUMNS = ("event_id", "event_name", "participant_email", "event_start", "duration")
TASK_COLUMNS = ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board")
CRM_COLUMNS = (
    "customer_id",
    "assigned_to_email",
    "customer_name",
    "customer_email",
    "customer_phone",
    "last_contact_date",
    "product_interest",
    "status",
    "follow_up_by",
    "notes",
)
ANALYTICS_COLUMNS = (
    "date_of_visit",
    "visitor_id",
    "page_views",
    "session_duration_seconds",
    "traffic_source",
    "user_engaged",
)
PLOT_COLUMNS = ("file_path",)

LIST_NAMES = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
TRAFFIC_SOURCES = ("direct", "referral", "search engine", "social media")

DOMAIN = "lumenfield.com"
# The company: 20 people. The user (the assistant's principal) is the first.
PEOPLE = (
    "priya.raman",
    "tomas.okafor",
    "greta.lindqvist",
    "marcus.bell",
    "aiko.tanaka",
    "diego.alvarez",
    "hannah.weiss",
    "kwame.mensah",
    "sofia.russo",
    "liam.oconnor",
    "nadia.haddad",
    "oscar.pereira",
    "ingrid.holm",
    "ravi.kapoor",
    "chloe.martin",
    "yusuf.demir",
    "elena.popescu",
    "ben.carter",
    "mei.chen",
    "jonas.becker",
)
DIRECTORY = tuple(f"{person}@{DOMAIN}" for person in PEOPLE)
USER_EMAIL = DIRECTORY[0]
ENGINEERS = DIRECTORY[1:11]  # assignees of project tasks
SALES = DIRECTORY[11:17]  # owners of CRM customers

TASK_VERBS = ("Develop", "Design", "Refactor", "Test", "Document", "Optimize", "Deploy", "Review", "Fix", "Prototype")
TASK_OBJECTS = (
    "prototype for report generation",
    "login flow",
    "billing service",
    "search index",
    "onboarding screens",
    "notification emails",
    "data export API",
    "dashboard widgets",
    "permissions model",
    "mobile layout",
    "audit logging",
    "payment webhooks",
    "caching layer",
    "style guide",
    "settings page",
)
EVENT_NAMES = (
    "Sprint planning",
    "Product demo",
    "Design review",
    "Budget meeting",
    "Customer call",
    "Team lunch",
    "Quarterly review",
    "Architecture sync",
    "Hiring interview",
    "Marketing sync",
    "Security training",
    "Retrospective",
)
EMAIL_TOPICS = (
    "the Q4 roadmap",
    "the customer feedback survey",
    "the office move",
    "the security audit",
    "the hiring plan",
    "the conference booth",
    "the pricing update",
    "the release checklist",
    "the vendor contract",
    "the team offsite",
)
CUSTOMER_FIRST = (
    "Alma",
    "Bruno",
    "Celia",
    "Dmitri",
    "Esther",
    "Farid",
    "Gloria",
    "Hugo",
    "Iris",
    "Jamal",
    "Katrin",
    "Luca",
    "Maya",
    "Nikolai",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Stefan",
    "Tara",
)
CUSTOMER_LAST = (
    "Andersen",
    "Baptiste",
    "Costa",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Horvat",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Lambert",
    "Moreau",
    "Novak",
    "Ortiz",
    "Petrov",
    "Quiroga",
    "Richter",
    "Santos",
    "Vidal",
)
CUSTOMER_DOMAINS = ("brightpath.io", "corvex.net", "halcyon.co", "northgate.org", "quillon.com", "zephyra.biz")
CRM_NOTES = (
    "Asked for a demo next quarter.",
    "Budget approved, waiting on legal.",
    "Prefers email over calls.",
    "Interested in a multi-year deal.",
    "Evaluating two competitors.",
    "Needs on-site support.",
)

NOW = datetime(2023, 11, 30, 23, 59, 0)


@dataclass(frozen=True)
class TableSizes:
    """How many rows each generated table has (the reference's sizes by default)."""

    emails: int = 500
    calendar_events: int = 300
    project_tasks: int = 300
    crm: int = 200
    analytics: int = 1000


class Table:
    """Rows (tuples of cells) with pandas-style row labels: what the reference keeps in a DataFrame."""

    __slots__ = ("columns", "rows", "labels")

    def __init__(self, columns: tuple[str, ...], rows: list[tuple[Any, ...]], labels: list[int] | None = None):
        self.columns = columns
        self.rows = rows
        self.labels = list(range(len(rows))) if labels is None else labels

    def copy(self) -> Table:
        return Table(self.columns, list(self.rows), list(self.labels))

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> int:
        return self.columns.index(name)

    def values(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def records(self, rows: list[tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
        """Rows as ``{column: cell}`` dicts (``to_dict(orient="records")``)."""
        return [dict(zip(self.columns, row)) for row in (self.rows if rows is None else rows)]

    def where(self, name: str, value: Any) -> list[tuple[Any, ...]]:
        i = self.columns.index(name)
        return [row for row in self.rows if row[i] == value]

    def delete_where(self, name: str, value: Any) -> None:
        """Drop the rows whose ``name`` cell equals ``value``; the others keep their labels."""
        i = self.columns.index(name)
        kept = [(row, label) for row, label in zip(self.rows, self.labels) if row[i] != value]
        self.rows = [row for row, _ in kept]
        self.labels = [label for _, label in kept]

    def set_where(self, name: str, value: Any, field: str, new_value: Any) -> None:
        """Set ``field`` to ``new_value`` in the rows whose ``name`` cell equals ``value`` (a field
        that is not a column yet becomes one, null elsewhere, as ``df.loc[mask, field] = v`` does)."""
        if field not in self.columns:
            self.columns = (*self.columns, field)
            self.rows = [(*row, None) for row in self.rows]
        i, j = self.columns.index(name), self.columns.index(field)
        self.rows = [row[:j] + (new_value,) + row[j + 1 :] if row[i] == value else row for row in self.rows]

    def append_relabelled(self, row: tuple[Any, ...]) -> None:
        """Append a row and relabel the whole table 0..n-1 (``pd.concat(..., ignore_index=True)``)."""
        self.rows.append(row)
        self.labels = list(range(len(self.rows)))

    def append_labelled(self, row: tuple[Any, ...], label: int) -> None:
        """Append a row with the given label (duplicates allowed, as ``pd.concat`` makes them)."""
        self.rows.append(row)
        self.labels.append(label)


@dataclass(frozen=True)
class Tables:
    """The generated data: one :class:`Table` per workplace table, and the directory."""

    emails: Table
    calendar_events: Table
    project_tasks: Table
    crm: Table
    analytics: Table
    plots: Table
    directory: tuple[str, ...]


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _day(value: date) -> str:
    return value.strftime("%Y-%m-%d")


def _random_moment(rng: random.Random, start: datetime, end: datetime) -> datetime:
    seconds = int((end - start).total_seconds())
    return start + timedelta(seconds=rng.randrange(seconds))


def _emails(rng: random.Random, n: int, tasks: list[str]) -> Table:
    start = datetime(2023, 9, 1)
    rows = []
    for i in range(n):
        other = rng.choice(DIRECTORY[1:])
        first = other.split(".")[0].capitalize()
        kind = rng.randrange(4)
        if kind == 0:
            task = rng.choice(tasks)
            subject = f"Task Update on {task}"
            body = f"Hi, quick update on {task}: it is {rng.choice(('on track', 'blocked on review', 'almost done'))}. {first}"
        elif kind == 1:
            topic = rng.choice(EMAIL_TOPICS)
            subject = f"Question about {topic}"
            body = f"Could you share your thoughts on {topic} before {rng.choice(('Friday', 'Monday', 'the next sync'))}? Thanks, {first}"
        elif kind == 2:
            event = rng.choice(EVENT_NAMES)
            subject = f"Agenda for the {event.lower()}"
            body = f"Please find below the agenda for the {event.lower()}. Add anything I missed. {first}"
        else:
            product = rng.choice(PRODUCTS)
            subject = f"{product} feedback from a customer"
            body = f"A customer sent feedback on our {product.lower()} offering; summary attached. {first}"
        moment = _random_moment(rng, start, NOW - timedelta(hours=1)).replace(second=0)
        direction = "inbox" if rng.random() < 0.7 else "outbox"
        rows.append((f"{i:08d}", direction, other, subject, _stamp(moment), body))
    return Table(EMAIL_COLUMNS, rows)


def _calendar(rng: random.Random, n: int) -> Table:
    first_day = date(2023, 8, 1)
    rows = []
    for i in range(n):
        day = first_day + timedelta(days=rng.randrange(153))  # to the end of December
        duration = rng.choice((30, 60, 90))
        start_minutes = rng.randrange(9 * 60, 18 * 60 - duration + 1, 30)
        start = datetime(day.year, day.month, day.day, start_minutes // 60, start_minutes % 60)
        rows.append((f"{i:08d}", rng.choice(EVENT_NAMES), rng.choice(DIRECTORY[1:]), _stamp(start), str(duration)))
    return Table(CALENDAR_COLUMNS, rows)


def _tasks(rng: random.Random, n: int) -> Table:
    rows = []
    for i in range(n):
        name = f"{rng.choice(TASK_VERBS)} {rng.choice(TASK_OBJECTS)}"
        due = date(2023, 10, 1) + timedelta(days=rng.randrange(120))
        rows.append((f"{i:08d}", name, rng.choice(ENGINEERS), rng.choice(LIST_NAMES), _day(due), rng.choice(BOARDS)))
    return Table(TASK_COLUMNS, rows)


def _crm(rng: random.Random, n: int) -> Table:
    rows = []
    for i in range(n):
        first, last = rng.choice(CUSTOMER_FIRST), rng.choice(CUSTOMER_LAST)
        contact = date(2023, 6, 1) + timedelta(days=rng.randrange(180))
        follow = contact + timedelta(days=rng.randrange(7, 90))
        rows.append(
            (
                f"{i:08d}",
                rng.choice(SALES),
                f"{first} {last}",
                f"{first.lower()}.{last.lower()}@{rng.choice(CUSTOMER_DOMAINS)}",
                f"555-{rng.randrange(100, 1000)}-{rng.randrange(1000, 10000)}",
                _day(contact),
                rng.choice(PRODUCTS),
                rng.choice(STATUSES),
                _day(follow),
                rng.choice(CRM_NOTES),
            )
        )
    return Table(CRM_COLUMNS, rows)


def _analytics(rng: random.Random, n: int) -> Table:
    visits = []
    for _ in range(n):
        day = date(2023, 10, 1) + timedelta(days=rng.randrange(61))  # October and November
        duration = rng.randrange(5, 1800)
        visits.append(
            (
                _day(day),
                f"{rng.getrandbits(32):08x}",
                str(rng.randrange(1, 25)),
                str(duration),
                rng.choice(TRAFFIC_SOURCES),
                "True" if duration > 300 and rng.random() < 0.8 else "False",
            )
        )
    visits.sort(key=lambda visit: visit[0])
    return Table(ANALYTICS_COLUMNS, visits)


def generate(seed: int = DEFAULT_SEED, sizes: TableSizes = TableSizes()) -> Tables:
    """Every table, built deterministically from ``seed``: the same arguments give equal tables."""
    rng = random.Random(seed)
    tasks = _tasks(rng, sizes.project_tasks)
    task_names = sorted({row[1] for row in tasks.rows}) or list(TASK_OBJECTS)
    return Tables(
        emails=_emails(rng, sizes.emails, task_names),
        calendar_events=_calendar(rng, sizes.calendar_events),
        project_tasks=tasks,
        crm=_crm(rng, sizes.crm),
        analytics=_analytics(rng, sizes.analytics),
        plots=Table(PLOT_COLUMNS, []),
        directory=DIRECTORY,
    )
