"""The pure parts of text_to_sql's verdict (spec §13): dialects, the judge's prompt, its verdict, and
where the SQL is found.

- :func:`normalise_dialect` — ``sql_dialect`` stripped, lowercased and de-aliased
  (``postgres``/``pg`` → ``postgresql``, ``sqlite3`` → ``sqlite``); anything else is a ``ValueError``
  naming the field and the allowed values.
- :func:`judge_prompt` — the user message of a judge call: dialect, schema and data, question,
  then queries A and B between their markers.
- :func:`verdict_label` — which label the judge's text gives in the judge's verdict mode (guarded:
  the last label outside echoed data; reference: §2's first-occurrence rule), None when it holds neither.
- :func:`extract_sql` — spider2_lite's extraction rule (§12 step 2), shared with ``gym_sql``;
  :func:`extraction_is_cheap` says when it may run inline rather than in a worker process.
"""

from __future__ import annotations

from gym_core.judge import GUARDED, VerdictMode, find_label

from gym_sql.extract import extract_spider2_sql

__all__ = [
    "ALLOWED_DIALECTS",
    "DIALECT_ALIASES",
    "INLINE_MAX_CHARS",
    "extract_sql",
    "extraction_is_cheap",
    "judge_prompt",
    "normalise_dialect",
    "verdict_label",
]

ALLOWED_DIALECTS = ("mysql", "postgresql", "sqlite")
DIALECT_ALIASES = {"postgres": "postgresql", "pg": "postgresql", "sqlite3": "sqlite"}

#: Texts up to this length are searched inline (gym_sql's extraction is linear); longer ones in a worker.
INLINE_MAX_CHARS = 16_384

#: spider2_lite's rule: the last ```sql block, else the last generic block that starts like a
#: statement, else raw text from the first statement keyword; None when there is no SQL.
extract_sql = extract_spider2_sql


def normalise_dialect(value: str) -> str:
    """``value`` stripped, lowercased and with its alias resolved; a ``ValueError`` naming the field
    and the allowed values when it is none of ``mysql``, ``postgresql``, ``sqlite``."""
    dialect = value.strip().lower()
    dialect = DIALECT_ALIASES.get(dialect, dialect)
    if dialect not in ALLOWED_DIALECTS:
        aliases = ", ".join(f"{alias} ({target})" for alias, target in DIALECT_ALIASES.items())
        raise ValueError(
            f"sql_dialect must be one of {', '.join(ALLOWED_DIALECTS)} (case and surrounding spaces ignored; "
            f"aliases: {aliases}), got {value!r}"
        )
    return dialect


def judge_prompt(dialect: str, context: str, question: str, sql_a: str, sql_b: str) -> str:
    """The judge's user message, its sections in the spec's order."""
    return (
        f"<|SQL Dialect|>\n{dialect}\n\n"
        f"<|Database Schema and Sample Data|>\n{context}\n\n"
        f"<|Natural Language Question|>\n{question}\n\n"
        f"<|Start of SQL Query A|>\n{sql_a}\n<|End of SQL Query A|>\n\n"
        f"<|Start of SQL Query B|>\n{sql_b}\n<|End of SQL Query B|>"
    )


def verdict_label(text: str, equal_label: str, not_equal_label: str, mode: VerdictMode = GUARDED) -> str | None:
    """The label the judge's ``text`` decides on (:func:`gym_core.judge.find_label`): in guarded mode
    the one occurring last outside echoed data, in reference mode the first (§2's rule, gameable);
    None when neither occurs (a verdict of *not equal* too, recorded as no label)."""
    return find_label(text, (equal_label, not_equal_label), mode)


def extraction_is_cheap(text: str) -> bool:
    """Whether :func:`extract_sql` may run inline on ``text``: the extraction is linear
    (:mod:`gym_sql.extract`), so any text of bounded length; a longer one goes to a worker, under
    ``extract_timeout_s``, as a defence in depth."""
    return len(text) <= INLINE_MAX_CHARS
