"""The example databases of the plugin, written by code (no download, no binary files in git).

``build_example_databases(directory)`` writes ``school.sqlite`` and ``cricket.sqlite`` into
``directory`` from the statements below; the same statements always give the same tables and rows.
A server with no ``db_dir`` option builds them into a temporary directory at start-up; to keep a
copy (e.g. to point ``db_dir`` at it)::

    python -m gym_sql.examples DIRECTORY
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

__all__ = ["EXAMPLE_DATABASES", "build_example_databases"]

_SCHOOL = """
CREATE TABLE schools (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    county TEXT NOT NULL,
    enrollment INTEGER NOT NULL,
    free_meals INTEGER NOT NULL
);
CREATE TABLE scores (
    school_id INTEGER NOT NULL REFERENCES schools(id),
    year INTEGER NOT NULL,
    avg_math REAL,
    avg_reading REAL
);
CREATE TABLE numbers (n INTEGER PRIMARY KEY);
INSERT INTO schools VALUES
    (1, 'Oakland High', 'Alameda', 1800, 1200),
    (2, 'Berkeley High', 'Alameda', 3200, 900),
    (3, 'Fremont Prep', 'Alameda', 600, 60),
    (4, 'Fresno Central', 'Fresno', 2400, 1900),
    (5, 'Clovis West', 'Fresno', 2100, 500),
    (6, 'Tamalpais High', 'Marin', 1500, 150),
    (7, 'Redwood High', 'Marin', 1700, 170),
    (8, 'Caf\u00e9 Acad\u00e9mie', 'Fresno', 300, 240);
INSERT INTO scores VALUES
    (1, 2022, 480.5, 495.0), (1, 2023, 490.0, 501.5),
    (2, 2022, 540.0, 560.0), (2, 2023, 545.5, 558.0),
    (3, 2022, 610.0, 600.0), (3, 2023, 620.0, 605.0),
    (4, 2022, 450.0, 470.0), (4, 2023, NULL, 468.0),
    (5, 2022, 520.0, 515.0), (5, 2023, 525.0, 519.0),
    (6, 2022, 580.0, 590.0), (6, 2023, 585.0, 592.0),
    (7, 2022, 575.0, 580.0), (7, 2023, 572.0, 584.0),
    (8, 2023, 430.0, 455.0);
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 100)
INSERT INTO numbers SELECT n FROM seq;
"""

_CRICKET = """
CREATE TABLE player (
    player_id INTEGER PRIMARY KEY,
    player_name TEXT NOT NULL,
    country TEXT NOT NULL
);
CREATE TABLE match (
    match_id INTEGER PRIMARY KEY,
    season INTEGER NOT NULL,
    venue TEXT NOT NULL
);
CREATE TABLE batting (
    match_id INTEGER NOT NULL REFERENCES match(match_id),
    player_id INTEGER NOT NULL REFERENCES player(player_id),
    runs INTEGER NOT NULL
);
INSERT INTO player VALUES
    (1, 'A Sharma', 'India'), (2, 'B Smith', 'Australia'), (3, 'C Khan', 'Pakistan'),
    (4, 'D Perera', 'Sri Lanka'), (5, 'E Jones', 'England'), (6, 'F Kumar', 'India');
INSERT INTO match VALUES
    (101, 2021, 'Mumbai'), (102, 2021, 'Chennai'), (103, 2022, 'Kolkata'), (104, 2022, 'Mumbai');
INSERT INTO batting VALUES
    (101, 1, 45), (101, 2, 12), (101, 3, 78), (101, 6, 5),
    (102, 1, 60), (102, 4, 33), (102, 5, 21), (102, 6, 0),
    (103, 2, 90), (103, 3, 10), (103, 4, 7), (103, 5, 44),
    (104, 1, 15), (104, 2, 20), (104, 3, 25), (104, 6, 101);
"""

#: db_id -> the statements that build it.
EXAMPLE_DATABASES: dict[str, str] = {"school": _SCHOOL, "cricket": _CRICKET}


def build_example_databases(directory: str | Path) -> list[Path]:
    """Write ``<db_id>.sqlite`` for each example database into ``directory`` (created if needed),
    replacing any file of that name; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for db_id, script in EXAMPLE_DATABASES.items():
        path = directory / f"{db_id}.sqlite"
        partial = path.with_suffix(".sqlite.partial")
        partial.unlink(missing_ok=True)
        conn = sqlite3.connect(partial)
        try:
            conn.executescript(script)
            conn.commit()
        finally:
            conn.close()
        partial.replace(path)  # readers never see a half-built file
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m gym_sql.examples DIRECTORY")
    for written_path in build_example_databases(sys.argv[1]):
        print(written_path)
