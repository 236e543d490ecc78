"""The working code bug-fix tasks are made from: small pure functions, each with the calls its tests make.

Each :class:`Function` is the source of one function (standard library only, no I/O, every loop
bounded by its input) and the argument tuples its generated tests call it with; the expected values
come from running the correct source (ours, on the host) when a repository is generated. Functions
are grouped by :data:`TOPICS` into modules.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Function", "FUNCTIONS", "TOPICS"]


@dataclass(frozen=True)
class Function:
    name: str
    topic: str
    source: str
    cases: tuple[tuple, ...]


FUNCTIONS: tuple[Function, ...] = (
    Function(
        "clamp",
        "numbers",
        '''
def clamp(value, low, high):
    """value limited to the range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
''',
        ((5, 0, 10), (-3, 0, 10), (12, 0, 10), (0, 0, 10), (10, 0, 10)),
    ),
    Function(
        "digit_sum",
        "numbers",
        '''
def digit_sum(number):
    """The sum of the decimal digits of abs(number)."""
    number = abs(number)
    total = 0
    while number > 0:
        total += number % 10
        number //= 10
    return total
''',
        ((0,), (7,), (1234,), (-905,), (1000,)),
    ),
    Function(
        "gcd",
        "numbers",
        '''
def gcd(a, b):
    """The greatest common divisor of two non-negative integers."""
    while b != 0:
        a, b = b, a % b
    return a
''',
        ((12, 18), (7, 5), (0, 9), (48, 180), (17, 17)),
    ),
    Function(
        "is_prime",
        "numbers",
        '''
def is_prime(n):
    """Whether n is a prime number."""
    if n < 2:
        return False
    for divisor in range(2, int(n ** 0.5) + 1):
        if n % divisor == 0:
            return False
    return True
''',
        ((1,), (2,), (9,), (13,), (25,), (97,)),
    ),
    Function(
        "mean",
        "numbers",
        '''
def mean(values):
    """The arithmetic mean of a non-empty list, or None for an empty one."""
    if len(values) == 0:
        return None
    return sum(values) / len(values)
''',
        (([2, 4, 6],), ([],), ([5],), ([1, 2],), ([-3, 3, 9],)),
    ),
    Function(
        "running_total",
        "sequences",
        '''
def running_total(values):
    """The list of prefix sums of values."""
    totals = []
    current = 0
    for value in values:
        current += value
        totals.append(current)
    return totals
''',
        (([1, 2, 3],), ([],), ([5, -5, 5],), ([10],)),
    ),
    Function(
        "chunk",
        "sequences",
        '''
def chunk(items, size):
    """items split into lists of `size` (the last one may be shorter)."""
    pieces = []
    for start in range(0, len(items), size):
        pieces.append(items[start:start + size])
    return pieces
''',
        (([1, 2, 3, 4, 5], 2), ([], 3), ([1, 2, 3], 3), ([1, 2, 3, 4], 1)),
    ),
    Function(
        "dedupe",
        "sequences",
        '''
def dedupe(items):
    """items without repeats, in the order of first appearance."""
    seen = set()
    kept = []
    for item in items:
        if item not in seen:
            seen.add(item)
            kept.append(item)
    return kept
''',
        (([1, 2, 1, 3, 2],), ([],), (["a", "a"],), ([3, 2, 1],)),
    ),
    Function(
        "find_index",
        "sequences",
        '''
def find_index(sorted_items, target):
    """The index of target in a sorted list (binary search), or -1 when absent."""
    low = 0
    high = len(sorted_items) - 1
    while low <= high:
        middle = (low + high) // 2
        if sorted_items[middle] == target:
            return middle
        if sorted_items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1
''',
        (([1, 3, 5, 7, 9], 7), ([1, 3, 5, 7, 9], 1), ([1, 3, 5, 7, 9], 9), ([1, 3, 5], 4), ([], 1)),
    ),
    Function(
        "max_gap",
        "sequences",
        '''
def max_gap(values):
    """The largest difference between neighbours of a list, 0 for fewer than two values."""
    best = 0
    for index in range(1, len(values)):
        gap = abs(values[index] - values[index - 1])
        if gap > best:
            best = gap
    return best
''',
        (([1, 5, 2],), ([],), ([4],), ([10, 3, 3, 12],)),
    ),
    Function(
        "count_vowels",
        "text",
        '''
def count_vowels(text):
    """How many of text's letters are vowels (a, e, i, o, u; either case)."""
    count = 0
    for letter in text.lower():
        if letter in "aeiou":
            count += 1
    return count
''',
        (("hello",), ("",), ("AEIOU",), ("rhythm",), ("Banana Split",)),
    ),
    Function(
        "is_palindrome",
        "text",
        '''
def is_palindrome(text):
    """Whether text reads the same backwards, ignoring case and non-letters."""
    letters = [c.lower() for c in text if c.isalpha()]
    return letters == letters[::-1]
''',
        (("Racecar",), ("hello",), ("",), ("A man, a plan, a canal: Panama",), ("ab",)),
    ),
    Function(
        "title_case",
        "text",
        '''
def title_case(text):
    """Each word capitalised, words of three letters or fewer kept lower case except the first."""
    words = text.split()
    result = []
    for position, word in enumerate(words):
        if position > 0 and len(word) <= 3:
            result.append(word.lower())
        else:
            result.append(word.capitalize())
    return " ".join(result)
''',
        (("the lord of the rings",), ("",), ("a tale",), ("war and peace",)),
    ),
    Function(
        "word_lengths",
        "text",
        '''
def word_lengths(text):
    """A dict mapping each word of text (split on whitespace) to its length."""
    lengths = {}
    for word in text.split():
        lengths[word] = len(word)
    return lengths
''',
        (("to be or not",), ("",), ("one",), ("aa bbb aa",)),
    ),
    Function(
        "caesar",
        "text",
        '''
def caesar(text, shift):
    """text with each lower-case letter shifted `shift` places in the alphabet (wrapping)."""
    out = []
    for c in text:
        if "a" <= c <= "z":
            out.append(chr((ord(c) - ord("a") + shift) % 26 + ord("a")))
        else:
            out.append(c)
    return "".join(out)
''',
        (("abc", 1), ("xyz", 3), ("hello, world", 13), ("", 5), ("a-b", 25)),
    ),
    Function(
        "grade",
        "records",
        '''
def grade(score):
    """The letter grade of a score from 0 to 100."""
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    if score >= 70:
        return "C"
    return "F"
''',
        ((95,), (90,), (85,), (80,), (72,), (10,)),
    ),
    Function(
        "total_price",
        "records",
        '''
def total_price(items, discount_threshold):
    """The sum of price * quantity over items; 10% off when the sum exceeds discount_threshold."""
    total = 0
    for item in items:
        total += item["price"] * item["quantity"]
    if total > discount_threshold:
        total = total * 9 // 10
    return total
''',
        (
            ([{"price": 10, "quantity": 2}], 100),
            ([{"price": 50, "quantity": 3}], 100),
            ([], 0),
            ([{"price": 100, "quantity": 1}], 100),
        ),
    ),
    Function(
        "group_by_length",
        "records",
        '''
def group_by_length(words):
    """A dict mapping each length to the words of that length, in order."""
    groups = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return groups
''',
        ((["a", "bb", "c", "dd", "eee"],), ([],), (["same", "four"],)),
    ),
    Function(
        "top_scorer",
        "records",
        '''
def top_scorer(scores):
    """The name with the highest score in a dict of name -> score (the first such name in order), or None."""
    best_name = None
    best_score = None
    for name, score in scores.items():
        if best_score is None or score > best_score:
            best_name = name
            best_score = score
    return best_name
''',
        (({"ann": 3, "bob": 5, "cy": 1},), ({},), ({"x": 2, "y": 2},), ({"solo": -1},)),
    ),
    Function(
        "merge_ranges",
        "records",
        '''
def merge_ranges(ranges):
    """Overlapping or touching [start, end] ranges merged, sorted by start."""
    merged = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
''',
        (([[1, 3], [2, 6], [8, 10]],), ([],), ([[1, 4], [4, 5]],), ([[5, 6], [1, 2]],)),
    ),
)

TOPICS: tuple[str, ...] = tuple(dict.fromkeys(f.topic for f in FUNCTIONS))
