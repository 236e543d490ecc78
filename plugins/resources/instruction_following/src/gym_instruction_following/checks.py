"""The 54 instruction checks of the ``instruction_following`` environment (spec §8), as pure functions.

Each check takes the model's text and the instruction's parameters, and answers whether the text
follows the instruction. :data:`INSTRUCTIONS` maps every instruction id to its check and the names of
its parameters; :func:`grade` runs a row's list of instructions and never raises (a check that raises,
or is configured with missing or unexpected parameters, counts as not followed, with the reason).

Everything here works offline: the sentence and word tokenizers are NLTK's classes used without
downloaded data (an untrained Punkt tokenizer given a fixed list of English abbreviations, and NLTK's
Treebank-style word tokenizer), and language detection is ``langdetect`` with its bundled profiles
and a fixed seed, so that a text always gets the same verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import langdetect
from langdetect import DetectorFactory
from langdetect.detector_factory import init_factory
from langdetect.lang_detect_exception import LangDetectException
from nltk.tokenize import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

__all__ = [
    "INSTRUCTIONS",
    "Instruction",
    "InstructionResult",
    "count_sentences",
    "detect_language",
    "grade",
    "split_sentences",
    "star_paragraphs",
    "word_tokenize",
]

# langdetect is random unless seeded: with a fixed seed one text always gets one language.
DetectorFactory.seed = 0
init_factory()  # load the bundled language profiles now (in the worker's preload), not on first use

LESS_THAN = "less than"
AT_LEAST = "at least"

# --- helpers --------------------------------------------------------------------------------------

# Common English abbreviations, so that the untrained Punkt tokenizer does not end a sentence after
# them (Punkt's English model learns such a list from a corpus; this one is fixed and documented).
_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "inc", "ltd", "co", "corp", "vs", "etc", "e.g",
    "i.e", "cf", "al", "fig", "vol", "approx", "dept", "gov", "capt",
    "lt", "col", "sgt", "mt", "ave", "blvd", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "u.s", "u.k", "a.m", "p.m", "ph.d",
}  # fmt: skip
_punkt_parameters = PunktParameters()
_punkt_parameters.abbrev_types = set(_ABBREVIATIONS)
_SENTENCES = PunktSentenceTokenizer(_punkt_parameters)
_WORDS = NLTKWordTokenizer()


def count_sentences(text: str) -> int:
    """The number of sentences of ``text`` by the Punkt sentence tokenizer (see the module docs)."""
    return len(_SENTENCES.tokenize(text))


def word_tokenize(text: str) -> list[str]:
    """NLTK-style word tokens: Punkt sentences, each split by the Treebank word tokenizer, so that
    punctuation marks are tokens of their own."""
    return [token for sentence in _SENTENCES.tokenize(text) for token in _WORDS.tokenize(sentence)]


def detect_language(text: str) -> str | None:
    """The langdetect language code of ``text`` (deterministic: fixed seed), or None where langdetect
    cannot tell (no letters, say)."""
    try:
        return langdetect.detect(text)
    except LangDetectException:
        return None


# The rule-based splitter of split_sentences. A protected period is replaced by a character that
# cannot occur in model text until the split is done.
_DOT = "\x00"
_TITLES = re.compile(r"(Mr|St|Mrs|Ms|Dr)\.")
_WEB = re.compile(r"\.(com|net|org|io|gov|edu|me)")
_DECIMAL = re.compile(r"([0-9])\.([0-9])")
_ELLIPSIS = re.compile(r"\.{2,}")
_STARTERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever)"
)
_ACRONYM_THEN_STARTER = re.compile(r"([A-Z]\.[A-Z]\.(?:[A-Z]\.)?) " + _STARTERS)
_ACRONYM = re.compile(r"([A-Za-z])\.([A-Za-z])\.(?:([A-Za-z])\.)?")
_SUFFIX_THEN_STARTER = re.compile(r" (Inc|Ltd|Jr|Sr|Co)\. " + _STARTERS)
_SUFFIX = re.compile(r" (Inc|Ltd|Jr|Sr|Co)\.")
_STOP = "\x01"


def split_sentences(text: str) -> list[str]:
    """The rule-based sentence splitter of spec §8 (*split_sentences*).

    Newlines become spaces; periods in titles (Mr. St. Mrs. Ms. Dr.), company and name suffixes
    (Inc. Ltd. Jr. Sr. Co.), web suffixes (.com...), decimals, initials and acronyms do not end a
    sentence; a run of periods is one sentence end. Pieces end after ``.``, ``?`` and ``!``, are
    stripped, and a trailing empty piece is dropped.
    """
    text = " " + text.replace("\n", " ") + "  "
    text = _TITLES.sub(lambda m: m.group(1) + _DOT, text)
    text = _WEB.sub(lambda m: _DOT + m.group(1), text)
    text = _DECIMAL.sub(lambda m: m.group(1) + _DOT + m.group(2), text)
    text = _ELLIPSIS.sub(lambda m: _DOT * len(m.group(0)) + _STOP, text)
    text = text.replace("Ph.D.", f"Ph{_DOT}D{_DOT}")
    text = _ACRONYM_THEN_STARTER.sub(lambda m: m.group(1) + _STOP + " " + m.group(2), text)
    text = _ACRONYM.sub(lambda m: "".join(c + _DOT for c in m.groups() if c), text)
    text = _SUFFIX_THEN_STARTER.sub(lambda m: " " + m.group(1) + _STOP + " " + m.group(2), text)
    text = _SUFFIX.sub(lambda m: " " + m.group(1) + _DOT, text)
    text = re.sub(r" ([A-Za-z])\.", lambda m: " " + m.group(1) + _DOT, text)
    # A closing quote after the end mark belongs to the sentence.
    for before, after in (
        (".\u201d", "\u201d."),
        ('."', '".'),
        ('!"', '"!'),
        ('?"', '"?'),
    ):
        text = text.replace(before, after)
    for mark in ".?!":
        text = text.replace(mark, mark + _STOP)
    pieces = [piece.replace(_DOT, ".").strip() for piece in text.split(_STOP)]
    if pieces and not pieces[-1]:
        pieces.pop()
    return pieces


def _paragraph_count(pieces: Sequence[str]) -> int | None:
    """The number of non-blank pieces, where a blank piece may only be first or last; None if a
    blank piece sits in the middle."""
    count = len(pieces)
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index not in (0, len(pieces) - 1):
                return None
            count -= 1
    return count


def star_paragraphs(text: str) -> list[str]:
    """The pieces of ``text`` between ``***`` paragraph separators (blank pieces included)."""
    return re.split(r"\s?\*\*\*\s?", text)


def _compare(actual: int, relation: str, n: Any) -> bool:
    """``less than`` or ``at least``; any other relation is an error (the check fails)."""
    if relation == LESS_THAN:
        return actual < n
    if relation == AT_LEAST:
        return actual >= n
    raise ValueError(f"unknown relation {relation!r}: expected {LESS_THAN!r} or {AT_LEAST!r}")


def _compare_or_at_least(actual: int, relation: Any, n: Any) -> bool:
    """``less than``; anything else means at least."""
    return actual < n if relation == LESS_THAN else actual >= n


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text, flags=re.IGNORECASE))


# --- IFEval checks --------------------------------------------------------------------------------


def keywords_existence(text: str, *, keywords: Sequence[str]) -> bool:
    return all(re.search(keyword, text, flags=re.IGNORECASE) for keyword in keywords)


def keywords_frequency(text: str, *, keyword: str, frequency: int, relation: str) -> bool:
    return _compare(_count(keyword, text), relation, frequency)


def keywords_forbidden_words(text: str, *, forbidden_words: Sequence[str]) -> bool:
    return not any(re.search(r"\b" + word + r"\b", text, flags=re.IGNORECASE) for word in forbidden_words)


def keywords_letter_frequency(text: str, *, letter: str, let_frequency: int, let_relation: str) -> bool:
    if not isinstance(letter, str) or len(letter) != 1 or not "a" <= letter.lower() <= "z":
        raise ValueError(f"letter must be one ASCII letter, got {letter!r}")
    return _compare_or_at_least(text.lower().count(letter.lower()), let_relation, let_frequency)


def language_response_language(text: str, *, language: str) -> bool:
    detected = detect_language(text)
    return detected is None or detected == language


def number_sentences(text: str, *, num_sentences: int, relation: str) -> bool:
    return _compare(count_sentences(text), relation, num_sentences)


def number_paragraphs(text: str, *, num_paragraphs: int) -> bool:
    count = _paragraph_count(star_paragraphs(text))
    return count is not None and count == num_paragraphs


def number_words(text: str, *, num_words: int, relation: str) -> bool:
    return _compare(len(re.findall(r"\w+", text)), relation, num_words)


def nth_paragraph_first_word(text: str, *, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    pieces = text.split("\n\n")
    count = sum(1 for piece in pieces if piece.strip())
    if not 1 <= nth_paragraph <= count:
        return False
    paragraph = pieces[nth_paragraph - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    found = ""
    for char in word:
        if char in ".,?!'\"":
            break
        found += char.lower()
    return count == num_paragraphs and found == first_word.lower()


def number_placeholders(text: str, *, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", text)) >= num_placeholders


def postscript(text: str, *, postscript_marker: str) -> bool:
    if postscript_marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif postscript_marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + postscript_marker.lower() + r".*$"
    return bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))


def number_bullet_lists(text: str, *, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


def constrained_response(text: str) -> bool:
    return any(option in text for option in ("My answer is yes.", "My answer is no.", "My answer is maybe."))


def number_highlighted_sections(text: str, *, num_highlights: int) -> bool:
    single = sum(1 for span in re.findall(r"\*[^\n\*]*\*", text) if span.strip("*").strip())
    double = sum(1 for span in re.findall(r"\*\*[^\n\*]*\*\*", text) if span[2:-2].strip())
    return single + double >= num_highlights


def multiple_sections(text: str, *, section_spliter: str, num_sections: int) -> bool:
    return len(re.split(r"\s?" + section_spliter + r"\s?\d+\s?", text)) - 1 >= num_sections


def json_format(text: str) -> bool:
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        body = body.removeprefix(fence)
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def title(text: str) -> bool:
    return any(span.lstrip("<").rstrip(">").strip() for span in re.findall(r"<<[^\n]+>>", text))


def two_responses(text: str) -> bool:
    pieces = text.split("******")
    kept = []
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index not in (0, len(pieces) - 1):
                return False
        else:
            kept.append(piece)
    return len(kept) == 2 and kept[0].strip() != kept[1].strip()


def repeat_prompt(text: str, *, prompt_to_repeat: str) -> bool:
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


def end_checker(text: str, *, end_phrase: str) -> bool:
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def quotation(text: str) -> bool:
    text = text.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


def capital_word_frequency(text: str, *, capital_frequency: int, capital_relation: str) -> bool:
    capitals = sum(1 for word in word_tokenize(text) if word.isupper())
    return _compare_or_at_least(capitals, capital_relation, capital_frequency)


def english_capital(text: str) -> bool:
    if not text.isupper():
        return False
    detected = detect_language(text)
    return detected is None or detected == "en"


def english_lowercase(text: str) -> bool:
    if not text.islower():
        return False
    detected = detect_language(text)
    return detected is None or detected == "en"


def no_comma(text: str) -> bool:
    return "," not in text


# --- Open-Instruct / IFBench checks ---------------------------------------------------------------


def repeat_phrase(text: str, *, phrase: str, small_n: int) -> bool:
    reference = phrase.split()
    matches = re.findall(f"{reference[0]} .*? {reference[-1]}", text)
    if not matches or len(matches) != small_n:
        return False
    differences = 0
    for match in matches:
        words = match.split()
        if len(words) != len(reference):
            return False
        differences = sum(1 for a, b in zip(words, reference) if a != b)
        if differences > 1:
            return False
    return differences == 1  # the last match changes exactly one word


def copy_text(text: str, *, prompt_to_repeat: str) -> bool:
    return text.strip().lower() == prompt_to_repeat.strip().lower()


def copy_span_idx(text: str, *, prompt_to_repeat: str, n_start: int, n_end: int) -> bool:
    return text.strip().lower() == prompt_to_repeat[n_start:n_end].strip().lower()


def sentence_hyphens(text: str) -> bool:
    pieces = text.split("-")
    sentences = split_sentences(text.replace("-", " "))
    return all(piece == piece.strip() and piece == sentence for piece, sentence in zip(pieces, sentences))


def no_adjacent_consecutive(text: str) -> bool:
    words = text.split()
    return not any(ord(b[0].lower()) - ord(a[0].lower()) == 1 for a, b in pairwise(words))


def square_brackets(text: str) -> bool:
    return all(word.startswith("[") and word.endswith("]") for word in text.split())


def word_once(text: str, *, keyword: str) -> bool:
    return _count(keyword, text) == 1


def exclude_word_harder(text: str, *, keyword: str) -> bool:
    return f" {keyword} " not in text


def paragraphs(text: str) -> bool:
    return _paragraph_count(star_paragraphs(text)) == 2


def paragraphs2(text: str) -> bool:
    return _paragraph_count(text.split("\n\n")) == 2


def first_word_sent(text: str, *, first_word: str) -> bool:
    for sentence in split_sentences(text):
        if not sentence.strip() or sentence.split()[0].strip().lower() != first_word.lower():
            return False
    return True


def first_word_answer(text: str, *, first_word: str) -> bool:
    return bool(text.strip()) and text.split()[0].strip().lower() == first_word.lower()


def _last_word(text: str) -> str:
    return re.sub(r"[^\w\s]", "", text.split()[-1].strip()).lower()


def last_word_sent(text: str, *, last_word: str) -> bool:
    for sentence in split_sentences(text):
        if not sentence.strip() or _last_word(sentence) != last_word.lower():
            return False
    return True


def last_word_answer(text: str, *, last_word: str) -> bool:
    return bool(text.strip()) and _last_word(text) == last_word.lower()


def bigram_wrapping(text: str) -> bool:
    words = text.split()
    return all(words[i].startswith("<<") and words[i + 1].endswith(">>") for i in range(0, len(words) - 1, 2))


def copying_multiple(text: str, *, prompt_to_repeat: str, N: int) -> bool:
    pieces = text.split("******")
    prompt = prompt_to_repeat.strip().lower()
    return len(pieces) == N and all(piece.strip().lower() == prompt for piece in pieces)


def punctuation_dot(text: str) -> bool:
    return "." not in text


def punctuation_exclamation(text: str) -> bool:
    return "!" not in text


def lowercase_counting(text: str, *, N: int) -> bool:
    return len(re.findall(r"\b[a-z]+\b", text)) <= N


def letter_counting(text: str, *, N: int, relation: str) -> bool:
    letters = len(re.findall(r"[a-zA-Z]", text))
    if relation == AT_LEAST:
        return letters >= N
    if relation == LESS_THAN:
        return letters < N
    return False


def counting_composition(text: str, *, n_sent: int, n_words: int) -> bool:
    pieces = star_paragraphs(text)
    if _paragraph_count(pieces) != 3:
        return False
    for piece in pieces:
        sentences = split_sentences(piece)
        if len(sentences) != n_sent:
            return False
        if any(len(word_tokenize(sentence)) != n_words for sentence in sentences):
            return False
    return True


def count_unique(text: str) -> bool:
    words = word_tokenize(text)
    return len(words) == len(set(words))


def count_increment_word(text: str, *, keyword1: str, keyword2: str) -> bool:
    return _count(keyword1, text) == 1 and _count(keyword2, text) == 2


def palindrome(text: str) -> bool:
    return any(word == word[::-1] for word in text.split())


def keyword_specific_position(text: str, *, keyword: str, n: int, m: int) -> bool:
    sentences = split_sentences(text)
    if not 1 <= n <= len(sentences):
        return False
    words = word_tokenize(sentences[n - 1])
    return 1 <= m <= len(words) and words[m - 1] == keyword


def start_end(text: str) -> bool:
    words = word_tokenize(text)
    return len(words) >= 2 and words[0].lower() == words[-1].lower()


# --- the registry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """An instruction id's check and the parameters it takes (all of them required)."""

    check: Callable[..., bool]
    parameters: tuple[str, ...] = ()


def _entry(check: Callable[..., bool], *parameters: str) -> Instruction:
    return Instruction(check, parameters)


INSTRUCTIONS: dict[str, Instruction] = {
    # IFEval
    "keywords:existence": _entry(keywords_existence, "keywords"),
    "keywords:frequency": _entry(keywords_frequency, "keyword", "frequency", "relation"),
    "keywords:forbidden_words": _entry(keywords_forbidden_words, "forbidden_words"),
    "keywords:letter_frequency": _entry(keywords_letter_frequency, "letter", "let_frequency", "let_relation"),
    "language:response_language": _entry(language_response_language, "language"),
    "length_constraints:number_sentences": _entry(number_sentences, "num_sentences", "relation"),
    "length_constraints:number_paragraphs": _entry(number_paragraphs, "num_paragraphs"),
    "length_constraints:number_words": _entry(number_words, "num_words", "relation"),
    "length_constraints:nth_paragraph_first_word": _entry(
        nth_paragraph_first_word, "num_paragraphs", "nth_paragraph", "first_word"
    ),
    "detectable_content:number_placeholders": _entry(number_placeholders, "num_placeholders"),
    "detectable_content:postscript": _entry(postscript, "postscript_marker"),
    "detectable_format:number_bullet_lists": _entry(number_bullet_lists, "num_bullets"),
    "detectable_format:constrained_response": _entry(constrained_response),
    "detectable_format:number_highlighted_sections": _entry(number_highlighted_sections, "num_highlights"),
    "detectable_format:multiple_sections": _entry(multiple_sections, "section_spliter", "num_sections"),
    "detectable_format:json_format": _entry(json_format),
    "detectable_format:title": _entry(title),
    "combination:two_responses": _entry(two_responses),
    "combination:repeat_prompt": _entry(repeat_prompt, "prompt_to_repeat"),
    "startend:end_checker": _entry(end_checker, "end_phrase"),
    "startend:quotation": _entry(quotation),
    "change_case:capital_word_frequency": _entry(capital_word_frequency, "capital_frequency", "capital_relation"),
    "change_case:english_capital": _entry(english_capital),
    "change_case:english_lowercase": _entry(english_lowercase),
    "punctuation:no_comma": _entry(no_comma),
    # Open-Instruct / IFBench
    "copy:repeat_phrase": _entry(repeat_phrase, "phrase", "small_n"),
    "copy:copy": _entry(copy_text, "prompt_to_repeat"),
    "copy:copying_simple": _entry(copy_text, "prompt_to_repeat"),
    "new:copy_span_idx": _entry(copy_span_idx, "prompt_to_repeat", "n_start", "n_end"),
    "detectable_format:sentence_hyphens": _entry(sentence_hyphens),
    "keywords:no_adjacent_consecutive": _entry(no_adjacent_consecutive),
    "detectable_format:square_brackets": _entry(square_brackets),
    "keywords:word_once": _entry(word_once, "keyword"),
    "keywords:word_count_different_numbers": _entry(keywords_frequency, "keyword", "frequency", "relation"),
    "keywords:exclude_word_harder": _entry(exclude_word_harder, "keyword"),
    "paragraphs:paragraphs": _entry(paragraphs),
    "paragraphs:paragraphs2": _entry(paragraphs2),
    "first_word:first_word_sent": _entry(first_word_sent, "first_word"),
    "first_word:first_word_answer": _entry(first_word_answer, "first_word"),
    "last_word:last_word_sent": _entry(last_word_sent, "last_word"),
    "last_word:last_word_answer": _entry(last_word_answer, "last_word"),
    "detectable_format:bigram_wrapping": _entry(bigram_wrapping),
    "copy:copying_multiple": _entry(copying_multiple, "prompt_to_repeat", "N"),
    "punctuation:punctuation_dot": _entry(punctuation_dot),
    "punctuation:punctuation_exclamation": _entry(punctuation_exclamation),
    "count:lowercase_counting": _entry(lowercase_counting, "N"),
    "letters:letter_counting": _entry(letter_counting, "N", "relation"),
    "letters:letter_counting2": _entry(keywords_letter_frequency, "letter", "let_frequency", "let_relation"),
    "count:counting_composition": _entry(counting_composition, "n_sent", "n_words"),
    "count:count_unique": _entry(count_unique),
    "count:count_increment_word": _entry(count_increment_word, "keyword1", "keyword2"),
    "keywords:palindrome": _entry(palindrome),
    "keywords:keyword_specific_position": _entry(keyword_specific_position, "keyword", "n", "m"),
    "keywords:start_end": _entry(start_end),
}


@dataclass(frozen=True)
class InstructionResult:
    """One instruction's verdict; ``error`` says why a check could not run (None when it ran)."""

    followed: bool
    error: str | None = None


def check_instruction(text: str, instruction_id: str, kwargs: Mapping[str, Any] | None) -> InstructionResult:
    """Whether ``text`` follows one instruction. Null kwargs are ``{}`` and null values are dropped;
    an unknown id, an unexpected or missing parameter, or a check that raises is not followed."""
    instruction = INSTRUCTIONS.get(instruction_id)
    if instruction is None:
        return InstructionResult(False, f"unknown instruction id {instruction_id!r}")
    given = {key: value for key, value in (kwargs or {}).items() if value is not None}
    unexpected = sorted(set(given) - set(instruction.parameters))
    if unexpected:
        return InstructionResult(False, f"{instruction_id}: unexpected parameter(s) {', '.join(unexpected)}")
    missing = [name for name in instruction.parameters if name not in given]
    if missing:
        return InstructionResult(False, f"{instruction_id}: missing parameter(s) {', '.join(missing)}")
    try:
        return InstructionResult(bool(instruction.check(text, **given)))
    except Exception as exc:  # noqa: BLE001 -- a bad parameter value (a wrong type, an invalid regex): not followed
        return InstructionResult(False, f"{instruction_id}: {type(exc).__name__}: {exc}")


def grade(
    text: str,
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[Mapping[str, Any] | None],
) -> list[InstructionResult]:
    """The verdict of each ``(instruction id, kwargs)`` pair, truncated to the shorter list."""
    return [check_instruction(text, iid, kwargs) for iid, kwargs in zip(instruction_ids, kwargs_list)]
