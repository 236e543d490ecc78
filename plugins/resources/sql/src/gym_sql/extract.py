"""Finding the SQL query in a model's answer: the two extraction rules of the environments spec.

- :func:`extract_bird_sql` (§11 bird_sql): the last ````` ```sql ... ``` ````` block, comments and
  surrounding noise removed; ``SELECT 1`` when there is no block.
- :func:`extract_spider2_sql` (§12 spider2_lite, shared with text_to_sql): the last ``sql`` block,
  else the last generic block that starts like a statement, else raw text from the first
  statement keyword.

Both are pure and linear-time on ordinary text (non-greedy matches between fixed fences).
"""

from __future__ import annotations

import re

__all__ = ["BIRD_FILLER_SQL", "extract_bird_sql", "extract_spider2_sql"]

#: What bird_sql executes when the answer holds no ```sql block (a quirk of the reference, kept).
BIRD_FILLER_SQL = "SELECT 1"

_BIRD_BLOCK = re.compile(r"```sql(.*?[a-zA-Z].*?)```", re.DOTALL)
# DOTALL without MULTILINE: ``$`` is the end of the text, so ``--`` deletes everything after it.
_BIRD_COMMENT = re.compile(r"--.*?$|/\*.*?\*/", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")
_LEADING_BOLD = re.compile(r"^\*\*.*\*\*")

_SQL_BLOCK = re.compile(r"```sql\s*([\s\S]*?)\s*```", re.IGNORECASE)
_ANY_BLOCK = re.compile(r"```\s*([\s\S]*?)\s*```")
_STATEMENT_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\s", re.IGNORECASE)
_RAW_START = re.compile(r"(SELECT|INSERT|UPDATE|DELETE|WITH)\s", re.IGNORECASE)


def extract_bird_sql(text: str) -> tuple[str, bool]:
    """``(sql, had_codeblock)`` from ``text`` by bird_sql's rule.

    The last non-greedy ```` ```sql(...)``` ```` match holding a letter (the tag is lowercase and
    case-sensitive), or :data:`BIRD_FILLER_SQL` when there is none; then comments removed (``--``
    up to the end of the whole text, ``/* */``), whitespace runs collapsed to one space, a leading
    ``**...**`` removed (greedy, and only when the text then starts with ``**``: after the collapse a
    block that began with a newline starts with a space, so it keeps its bold title, as the
    reference does), and stripped. The result may be empty.
    """
    matches = _BIRD_BLOCK.findall(text) if text else []
    had_codeblock = bool(matches)
    sql = matches[-1] if matches else BIRD_FILLER_SQL
    sql = _BIRD_COMMENT.sub("", sql)
    sql = _WHITESPACE.sub(" ", sql)
    sql = _LEADING_BOLD.sub("", sql)
    return sql.strip(), had_codeblock


def extract_spider2_sql(text: str) -> str | None:
    """The query in ``text`` by spider2_lite's rule, or None when there is none.

    1. The last ```` ```sql ``` ```` block (tag case-insensitive), stripped (possibly empty).
    2. Else, from the last generic ```` ``` ``` ```` block back to the first, the first whose
       content starts with SELECT/INSERT/UPDATE/DELETE/WITH/CREATE/ALTER/DROP and a space.
    3. Else the raw text from the first ``SELECT|INSERT|UPDATE|DELETE|WITH`` followed by
       whitespace (anywhere, even inside prose: "with ") to the last ``;`` (or the end), trailing
       ``;`` replaced by exactly one.
    """
    if not text:
        return None
    blocks = _SQL_BLOCK.findall(text)
    if blocks:
        return blocks[-1].strip()
    for block in reversed(_ANY_BLOCK.findall(text)):
        if _STATEMENT_START.match(block.strip()):
            return block.strip()
    start = _RAW_START.search(text)
    if start is None:
        return None
    end = text.rfind(";")
    sql = text[start.start() : end + 1] if end >= start.start() else text[start.start() :]
    return sql.strip().rstrip(";") + ";"
