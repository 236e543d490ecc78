"""The extraction rules (§11 bird_sql, §12 spider2_lite) against the spec's own regular expressions,
and their cost on degenerate answers.

The reference below is the spec's rules written as the spec states them, with Python's ``re``:
obviously right, and polynomial on some texts (after a ```` ```sql ```` fence with no closing
fence, 4,000 spaces took half a minute). :mod:`gym_sql.extract` must give the same results on
every text, in linear time. Hypothesis compares the two on random texts built from fences, tags,
keywords, comment marks, whitespace and newlines; the degenerate families are checked at a small
size against the reference and at a large size against their known answer. No test asserts a
duration: a regression shows as a test running into pytest-timeout's limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gym_core.workers import WorkerPool, WorkerTimeout

from gym_sql.extract import BIRD_FILLER_SQL, extract_bird_sql, extract_spider2_sql
from gym_sql.server import extract_bounded

# --- the reference: the spec's regular expressions -------------------------------------------------

SPEC_BIRD_BLOCK = re.compile(r"```sql(.*?[a-zA-Z].*?)```", re.DOTALL)
SPEC_BIRD_COMMENT = re.compile(r"--.*?$|/\*.*?\*/", re.DOTALL)
SPEC_SQL_BLOCK = re.compile(r"```sql\s*([\s\S]*?)\s*```", re.IGNORECASE)
SPEC_ANY_BLOCK = re.compile(r"```\s*([\s\S]*?)\s*```")
SPEC_STATEMENT_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\s", re.IGNORECASE)
SPEC_RAW_START = re.compile(r"(SELECT|INSERT|UPDATE|DELETE|WITH)\s", re.IGNORECASE)


def reference_bird_sql(text: str) -> tuple[str, bool]:
    """§11 step 2, line by line."""
    matches = SPEC_BIRD_BLOCK.findall(text) if text else []
    sql = matches[-1] if matches else "SELECT 1"
    sql = SPEC_BIRD_COMMENT.sub("", sql)
    sql = re.sub(r"\s+", " ", sql)
    sql = re.sub(r"^\*\*.*\*\*", "", sql)
    return sql.strip(), bool(matches)


def reference_spider2_sql(text: str) -> str | None:
    """§12 step 2, line by line."""
    if not text:
        return None
    blocks = SPEC_SQL_BLOCK.findall(text)
    if blocks:
        return blocks[-1].strip()
    for block in reversed(SPEC_ANY_BLOCK.findall(text)):
        if SPEC_STATEMENT_START.match(block.strip()):
            return block.strip()
    start = SPEC_RAW_START.search(text)
    if start is None:
        return None
    end = text.rfind(";")
    sql = text[start.start() : end + 1] if end >= start.start() else text[start.start() :]
    return sql.strip().rstrip(";") + ";"


# --- random texts ------------------------------------------------------------------------------------

# The pieces the rules react to: fences and stray backticks, tags in several cases (and "ſ", which
# IGNORECASE matches to "s"), statement keywords and prose "with ", comment marks, "**", letters,
# digits, ";", and whitespace of every kind \s knows (newlines, tabs, NEL, line separator...).
PIECES = [
    "```",
    "`",
    "``",
    "````",
    "sql",
    "SQL",
    "Sql",
    "ſql",
    "```sql",
    "```SQL",
    "```sql\n",
    "select ",
    "SELECT\t",
    "SELECT\n",
    "with ",
    "WITH\n",
    "insert ",
    "drop ",
    "create\n",
    "explain ",
    "--",
    "-",
    "/*",
    "*/",
    "/",
    "*",
    "**",
    "a",
    "x",
    "1",
    ";",
    ";;",
    "'",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\xa0",
    "\u2028",
    "\u3000",
]
TEXTS = st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=40).map("".join)

PROPERTY = settings(max_examples=1500, derandomize=True, deadline=None, database=None)


@PROPERTY
@given(TEXTS)
def test_spider2_extraction_equals_the_spec_rule(text):
    assert extract_spider2_sql(text) == reference_spider2_sql(text)


@PROPERTY
@given(TEXTS)
def test_bird_extraction_equals_the_spec_rule(text):
    assert extract_bird_sql(text) == reference_bird_sql(text)


@PROPERTY
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.lists(st.sampled_from(PIECES), max_size=12))
def test_fenced_answers_equal_the_spec_rules(before, inside):
    # Texts shaped like answers: prose, then a fence (closed or not) around SQL-ish text.
    for fence in ("```sql", "```SQL", "```"):
        for closing in ("```", ""):
            text = "".join(before) + fence + "".join(inside) + closing
            assert extract_spider2_sql(text) == reference_spider2_sql(text), text
            assert extract_bird_sql(text) == reference_bird_sql(text), text


def test_whitespace_is_what_backslash_s_matches():
    # The scans strip with str.strip/rstrip where the spec's patterns use \s: the same characters.
    every_character = "".join(map(chr, range(0x110000)))
    assert re.findall(r"\s", every_character) == [c for c in every_character if c.isspace()]


# --- degenerate answers --------------------------------------------------------------------------------

# (name, text of size n, the spider2 answer, the bird answer): the answers in closed form, checked
# against the reference at small n, then against gym_sql.extract at large n.
FAMILIES: list[tuple[str, Callable[[int], str], Callable[[int], str | None], Callable[[int], tuple[str, bool]]]] = [
    ("unclosed sql fence, spaces", lambda n: "```sql" + " " * n, lambda n: None, lambda n: (BIRD_FILLER_SQL, False)),
    ("unclosed fence, spaces", lambda n: "```" + " " * n, lambda n: None, lambda n: (BIRD_FILLER_SQL, False)),
    ("unclosed SQL fence, newlines", lambda n: "```SQL" + "\n" * n, lambda n: None, lambda n: (BIRD_FILLER_SQL, False)),
    (
        "unclosed fence, mixed whitespace",
        lambda n: "```\n" + " \t\n\r" * n + "x",
        lambda n: None,
        lambda n: (BIRD_FILLER_SQL, False),
    ),
    (
        "unclosed sql fence, whitespace then a query",
        lambda n: "```sql\n" + " \n" * n + "SELECT 1",
        lambda n: "SELECT 1;",
        lambda n: (BIRD_FILLER_SQL, False),
    ),
    ("unclosed sql fence, letters", lambda n: "```sql " + "a" * n, lambda n: None, lambda n: (BIRD_FILLER_SQL, False)),
    (
        "closed block, long inner whitespace",
        lambda n: "```sql SELECT" + " " * n + "x```",
        lambda n: "SELECT" + " " * n + "x",
        lambda n: ("SELECT x" if n else "SELECTx", True),
    ),
    (
        "unclosed block comments",
        lambda n: "```sql select " + "/* " * n + "```",
        lambda n: "select" + " /*" * n,
        lambda n: ("select" + " /*" * n, True),
    ),
    (
        "many 'with '",
        lambda n: "with " * n,
        lambda n: ("with " * n).strip() + ";" if n else None,
        lambda n: (BIRD_FILLER_SQL, False),
    ),
    (
        "many 'with ' after an unclosed fence",
        lambda n: "```sql\n" + "with \n" * n,
        lambda n: ("with \n" * n).strip() + ";" if n else None,
        lambda n: (BIRD_FILLER_SQL, False),
    ),
    (
        "many openings, one closing",
        lambda n: "```sql x " * n + "```",
        lambda n: "x" if n else None,
        lambda n: ("x", True) if n else (BIRD_FILLER_SQL, False),
    ),
    ("backticks", lambda n: "`" * n, lambda n: None, lambda n: (BIRD_FILLER_SQL, False)),
    (
        "bold marks",
        lambda n: "```sql**" + "a **" * n + "```",
        lambda n: "**" + "a **" * n,
        lambda n: ("", True) if n else (BIRD_FILLER_SQL, False),
    ),
]
FAMILY_IDS = [name for name, *_ in FAMILIES]


@pytest.mark.parametrize(("name", "make", "spider2", "bird"), FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 60])
def test_degenerate_families_small_equal_the_reference(name, make, spider2, bird, n):
    text = make(n)
    assert reference_spider2_sql(text) == spider2(n)
    assert reference_bird_sql(text) == bird(n)
    assert extract_spider2_sql(text) == spider2(n)
    assert extract_bird_sql(text) == bird(n)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "make", "spider2", "bird"), FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("n", [1_000, 2_000, 4_000, 200_000])
def test_degenerate_families_large_finish_with_the_same_answer(name, make, spider2, bird, n):
    # The spec's patterns, run by `re`, take seconds to hours on these (cubic or quadratic in n).
    text = make(n)
    assert extract_spider2_sql(text) == spider2(n)
    assert extract_bird_sql(text) == bird(n)


# --- extraction off the event loop ----------------------------------------------------------------


async def test_short_answers_are_extracted_inline_and_long_ones_in_a_worker():
    async with WorkerPool(1, time_limit_s=60.0, memory_limit_mb=None, preload=["gym_sql.extract"]) as pool:
        short = "Here:\n```sql\nSELECT 1\n```"
        assert await extract_bounded(pool, extract_spider2_sql, short, inline_max_chars=len(short)) == "SELECT 1"
        assert pool.pids == []  # workers start lazily: none was needed
        long = "Let me think. " * 1000 + short
        assert await extract_bounded(pool, extract_bird_sql, long, inline_max_chars=len(short)) == ("SELECT 1", True)
        assert len(pool.pids) == 1


@pytest.mark.timeout(120)
async def test_a_runaway_extraction_is_stopped_at_its_limit():
    # The spec's own pattern, cubic on this text (hours), stands in for a rule that regressed.
    runaway = "```sql" + " " * 20_000
    async with WorkerPool(1, time_limit_s=60.0, memory_limit_mb=None, preload=["gym_sql.extract"]) as pool:
        with pytest.raises(WorkerTimeout):
            await extract_bounded(pool, SPEC_SQL_BLOCK.findall, runaway, inline_max_chars=100, time_limit_s=1.0)
        # The killed worker was replaced; the real rule answers the same text at once.
        assert await extract_bounded(pool, extract_spider2_sql, runaway, inline_max_chars=100) is None
