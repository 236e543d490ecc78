"""Finding the SQL query in a model's answer: the two extraction rules of the environments spec.

- :func:`extract_bird_sql` (§11 bird_sql): the last ````` ```sql ... ``` ````` block, comments and
  surrounding noise removed; ``SELECT 1`` when there is no block.
- :func:`extract_spider2_sql` (§12 spider2_lite, shared with text_to_sql): the last ``sql`` block,
  else the last generic block that starts like a statement, else raw text from the first
  statement keyword.

Both are pure and linear-time in the length of the text, whatever it holds. The spec states the
rules as regular expressions (quoted in the comments below); run by a backtracking engine, the
fenced-block ones are polynomial on model output: after a fence with no closing fence, each way of
splitting a whitespace run between ``\\s*``, the lazy body and ``\\s*`` is tried (cubic: 4,000
spaces took half a minute), and bird's ``.*?[a-zA-Z].*?`` and ``/\\*.*?\\*/`` rescan the rest of
the text from every letter or every unclosed ``/*`` (quadratic). So the blocks and comments are
found by forward scans (``str.find`` and single-character searches) that give exactly the matches
``re.findall``/``re.sub`` give, each character examined a bounded number of times. The patterns
kept as regular expressions match fixed-length text (a fence tag, a keyword) or are anchored, so
they cannot backtrack far.
"""

from __future__ import annotations

import re

__all__ = ["BIRD_FILLER_SQL", "extract_bird_sql", "extract_spider2_sql"]

#: What bird_sql executes when the answer holds no ```sql block (a quirk of the reference, kept).
BIRD_FILLER_SQL = "SELECT 1"

_FENCE = "```"
_BIRD_OPENING = "```sql"  # case-sensitive
_LETTER = re.compile(r"[a-zA-Z]")
_COMMENT_START = re.compile(r"--|/\*")
_WHITESPACE = re.compile(r"\s+")
_LEADING_BOLD = re.compile(r"^\*\*.*\*\*")  # anchored: one greedy pass and one scan back

# A regular expression for the tag, not str.find: IGNORECASE also lets "ſ" (U+017F) match "s".
_SQL_OPENING = re.compile(r"```sql", re.IGNORECASE)
_GENERIC_OPENING = re.compile(r"```")
_NON_SPACE = re.compile(r"\S")  # \s is str.isspace, so str.rstrip() drops exactly what \s* would
_STATEMENT_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\s", re.IGNORECASE)
_RAW_START = re.compile(r"(SELECT|INSERT|UPDATE|DELETE|WITH)\s", re.IGNORECASE)


def _bird_blocks(text: str) -> list[str]:
    """``re.findall(r"```sql(.*?[a-zA-Z].*?)```", text, re.DOTALL)``, in one forward scan.

    From an opening ```` ```sql ```` the pattern's match takes the first letter after the tag, then
    the first ```` ``` ```` after that letter (the closing fence may come after other fences). When
    an opening has no such letter-then-fence, no later opening has one either (its first letter
    is no earlier), so the scan stops there.
    """
    blocks = []
    pos = 0
    while (opening := text.find(_BIRD_OPENING, pos)) >= 0:
        body = opening + len(_BIRD_OPENING)
        letter = _LETTER.search(text, body)
        if letter is None:
            break
        closing = text.find(_FENCE, letter.end())
        if closing < 0:
            break
        blocks.append(text[body:closing])
        pos = closing + len(_FENCE)
    return blocks


def _remove_bird_comments(sql: str) -> str:
    """``re.sub(r"--.*?$|/\\*.*?\\*/", "", sql, flags=re.DOTALL)``, in one forward scan.

    Without MULTILINE ``$`` is the end of the text or just before a final newline, so the first
    ``--`` outside a ``/* */`` comment deletes the rest of the text but such a newline. A ``/*``
    with no ``*/`` after it is kept, and then no later ``/*`` can close either: from there on only
    a ``--`` is searched for.
    """
    kept = []
    pos = 0  # the text before pos is dealt with
    scan = 0  # where to look for the next comment
    block_comments_close = True
    while True:
        if block_comments_close:
            found = _COMMENT_START.search(sql, scan)
            if found is None:
                break
            start = found.start()
            if found.group() == "/*":
                end = sql.find("*/", start + 2)
                if end < 0:
                    block_comments_close = False
                    scan = start + 1
                    continue
                kept.append(sql[pos:start])
                pos = scan = end + 2
                continue
        else:
            start = sql.find("--", scan)
            if start < 0:
                break
        kept.append(sql[pos:start])
        pos = len(sql) - 1 if sql.endswith("\n") else len(sql)
        break
    kept.append(sql[pos:])
    return "".join(kept)


def _fenced_blocks(text: str, opening: re.Pattern[str]) -> list[str]:
    """``re.findall(opening + r"\\s*([\\s\\S]*?)\\s*```", text)``, in one forward scan.

    A block runs from the first non-whitespace character after the opening to the first
    ```` ``` ```` from there, its trailing whitespace dropped. When an opening has no fence after
    it, neither has any later opening, so the scan stops there.
    """
    blocks = []
    pos = 0
    while (fence := opening.search(text, pos)) is not None:
        body = _NON_SPACE.search(text, fence.end())
        if body is None:
            break
        closing = text.find(_FENCE, body.start())
        if closing < 0:
            break
        blocks.append(text[body.start() : closing].rstrip())
        pos = closing + len(_FENCE)
    return blocks


def extract_bird_sql(text: str) -> tuple[str, bool]:
    """``(sql, had_codeblock)`` from ``text`` by bird_sql's rule, in time linear in ``len(text)``.

    The last non-greedy ```` ```sql(.*?[a-zA-Z].*?)``` ```` match (DOTALL; the tag is lowercase and
    case-sensitive), or :data:`BIRD_FILLER_SQL` when there is none; then comments removed
    (``--.*?$|/\\*.*?\\*/`` under DOTALL: ``--`` up to the end of the whole text, ``/* */``),
    whitespace runs collapsed to one space, a leading ``**...**`` removed (greedy, and only when the
    text then starts with ``**``: after the collapse a block that began with a newline starts with a
    space, so it keeps its bold title, as the reference does), and stripped. The result may be
    empty.
    """
    blocks = _bird_blocks(text)
    sql = blocks[-1] if blocks else BIRD_FILLER_SQL
    sql = _remove_bird_comments(sql)
    sql = _WHITESPACE.sub(" ", sql)
    sql = _LEADING_BOLD.sub("", sql)
    return sql.strip(), bool(blocks)


def extract_spider2_sql(text: str) -> str | None:
    """The query in ``text`` by spider2_lite's rule, or None when there is none; in time linear in
    ``len(text)``.

    1. The last ```` ```sql\\s*([\\s\\S]*?)\\s*``` ```` match (tag case-insensitive), stripped
       (possibly empty).
    2. Else, from the last ```` ```\\s*([\\s\\S]*?)\\s*``` ```` match back to the first, the first
       whose content starts with SELECT/INSERT/UPDATE/DELETE/WITH/CREATE/ALTER/DROP and a space.
    3. Else the raw text from the first ``SELECT|INSERT|UPDATE|DELETE|WITH`` followed by
       whitespace (anywhere, even inside prose: "with ") to the last ``;`` (or the end), trailing
       ``;`` replaced by exactly one.
    """
    if not text:
        return None
    blocks = _fenced_blocks(text, _SQL_OPENING)
    if blocks:
        return blocks[-1].strip()
    for block in reversed(_fenced_blocks(text, _GENERIC_OPENING)):
        if _STATEMENT_START.match(block.strip()):
            return block.strip()
    start = _RAW_START.search(text)
    if start is None:
        return None
    end = text.rfind(";")
    sql = text[start.start() : end + 1] if end >= start.start() else text[start.start() :]
    return sql.strip().rstrip(";") + ";"
