"""Whether a question gives its answer away, however the answer is encoded in it.

A proposer is asked for a question that does not name its answer. A question that names it in
some code (reversed, split, shifted, spelt letter by letter) hands every solver a free win that
needs no search and teaches solvers to decode instead of search. :func:`leak` names the class of
encoding it finds, looking at the question through several readings, each a stream of tokens:

* every reading starts from :func:`skeleton` (NFKC, Unicode's look-alikes of Latin letters read as
  those letters, so are letter symbols and Braille, accents and invisible characters dropped,
  case folded);
* ``spelt``: the answer's letters, separators dropped, run across word boundaries (``"Si new-y"``);
* ``reversed``: the same, read backwards (letters reversed, or each word, or the word order);
* ``split``: pieces of the answer written in two or three places (a prefix here, a suffix there),
  or in quoted fragments;
* ``substitution``: under any Caesar shift (ROT-n), the mirrored alphabet (Atbash) or a QWERTY
  key to either side;
* ``leetspeak``: digits and symbols for letters (``s1n3wy``, ``$|n€wy``);
* ``numbers``: letters as their places in the alphabet (a=1, a=0 or z=1), as numbers or number words;
* ``acrostic``: the first (or last) letters of consecutive words; a phonetic alphabet (alfa,
  bravo...) is one;
* ``phonetic``: the words of a phonetic alphabet, whatever stands between them (``S as in Sierra``);
* ``letters``: letters standing alone as words, whatever stands between them (``S, then I, then N``);
* ``anagram``: the answer's letters in another order, over whole words;
* ``interleaved``: every second or third letter of a stretch (``sxixnxexwxy``);
* ``encoding``: the answer's bytes in Base64, hex or binary, under ROT47, or in Morse code.

A match must start and end at word boundaries of its reading: ``"environment"`` does not name
iron. Each class also has a least answer length below which a chance match in an honest question
is too likely (a three-letter answer read backwards is often a word); shorter answers are still
caught written out, whole or letter by letter (:func:`~sparring.envs.search.filters.gives_away`).
"""

from __future__ import annotations

import base64
import bisect
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from sparring.envs.search.lookalikes import LOOKALIKES
from sparring.envs.search.scoring import normalize_answer

__all__ = ["leak", "skeleton"]

#: Letters in code points that decomposition keeps but no one sees (Hangul fillers).
_INVISIBLE = {"\u115f", "\u1160", "\u3164", "\uffa0"}
#: A Latin letter's name: "LATIN SMALL LETTER SCRIPT G", "LATIN LETTER SMALL CAPITAL R".
_LATIN_NAME = re.compile(r"\bLATIN (?:SMALL |CAPITAL )?LETTER (?:[A-Z]+ )*?([A-Z])\b|SYMBOL LETTER ([A-Z])$")
#: Digits and symbols read as letters, each with the letter it stands for ("i" also for "l").
_LEET = str.maketrans(
    {"4": "a", "@": "a", "8": "b", "(": "c", "<": "c", "{": "c", "[": "c", "¢": "c", "3": "e", "€": "e", "6": "g"}
    | {"9": "g", "1": "i", "!": "i", "|": "i", "l": "i", "0": "o", "5": "s", "$": "s", "7": "t", "+": "t", "2": "z"}
)
#: Two-letter words too common to count as a piece of an answer outside quotes.
_COMMON_PAIRS = set(
    "am an as at be by do go he hi if in is it me my no of oh ok on or ox so to up us we ah aw eh id".split()
)
#: Words of one or two letters too common to begin or end an anagram over several words.
_SHORT_WORDS = _COMMON_PAIRS | {"a", "i"}
#: Quoted fragments (straight, curly and angle quotes, backticks).
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|‘([^’]+)’|«([^»]+)»|`([^`]+)`|(?<![a-z0-9])'([^']+)'(?![a-z0-9])")
#: Words of phonetic alphabets (ICAO/NATO, the RAF's, the US police's...): each stands for its
#: first letter.
_PHONETIC = set(
    """alfa alpha bravo charlie delta echo foxtrot golf hotel india juliett juliet kilo lima mike november
    oscar papa quebec romeo sierra tango uniform victor whiskey whisky xray yankee zulu able baker dog easy
    fox george how item jig king love nan oboe peter queen roger sugar tare uncle william yoke zebra adam
    boy charles david edward frank henry ida john lincoln mary nora ocean paul robert sam tom union young
    ace beer charlie don emma freddie harry johnnie london monkey nuts orange pip queenie robert sugar toc
    vic x yorker sigma iota nu epsilon omega upsilon ypsilon alpha beta gamma kappa lambda mu omicron pi
    rho tau zeta""".split()
)
_DASHES = str.maketrans("_•·–—−", "-..---")
_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_KEYBOARD = {
    1: str.maketrans("".join(r[:-1] for r in _ROWS), "".join(r[1:] for r in _ROWS)),
    -1: str.maketrans("".join(r[1:] for r in _ROWS), "".join(r[:-1] for r in _ROWS)),
}
#: Braille's cells for a to z, by their raised dots.
_BRAILLE_DOTS = (
    "1 12 14 145 15 124 1245 125 24 245 13 123 134 1345 135 1234 12345 1235 234 2345 136 1236 2456 1346 13456 1356"
)
_BRAILLE = {
    chr(0x2800 + sum(1 << (int(d) - 1) for d in dots)): letter
    for dots, letter in zip(_BRAILLE_DOTS.split(), "abcdefghijklmnopqrstuvwxyz", strict=True)
}
_MORSE_CODES = ".- -... -.-. -.. . ..-. --. .... .. .--- -.- .-.. -- -. --- .--. --.- .-. ... - ..- ...- .--"
_MORSE = dict(zip((_MORSE_CODES + " -..- -.-- --..").split(), "abcdefghijklmnopqrstuvwxyz", strict=True))
_NUMBER_WORDS = {
    w: n
    for n, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty twentyone twentytwo twentythree twentyfour twentyfive twentysix".split()
    )
}
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_SMALL_NUMBER = re.compile(r"^\d{1,3}$")
_WORD = re.compile(r"[^\W_]+")
#: What separates words in the leetspeak reading, and what it drops from a word: leetspeak's
#: symbols ($, |, @...) are punctuation elsewhere.
_LEET_SEPARATOR = re.compile(r"[\s\-.,;:/\\]+")
_NOT_LEET = re.compile(r"[^\w@$!|+(<{\[¢€]|_")


@lru_cache(maxsize=65536)
def _fold(char: str) -> str:
    """One character's skeleton: its look-alike letter, else its decomposition without marks, case folded."""
    if char in _INVISIBLE or unicodedata.category(char) in {"Cf", "Mn", "Me"}:
        return ""
    if char in LOOKALIKES:
        return LOOKALIKES[char]
    if char in _BRAILLE:
        return _BRAILLE[char]
    out = []
    for part in unicodedata.normalize("NFKD", char):
        if unicodedata.combining(part) or unicodedata.category(part) == "Cf":
            continue
        if part in LOOKALIKES:
            out.append(LOOKALIKES[part])
        elif ord(part) >= 128 and (part.isalpha() or unicodedata.category(part) == "So"):  # 🅰, 🇸
            named = _LATIN_NAME.search(unicodedata.name(part, ""))
            out.append((named.group(1) or named.group(2)) if named else part)
        else:
            out.append(part)
    # Case folding can make a look-alike (Cherokee's small letters fold to its capitals).
    return "".join(LOOKALIKES.get(c, c) for c in "".join(out).casefold()).lower()


def skeleton(text: str) -> str:
    """``text`` as it reads: compatibility forms (NFKC), look-alikes of other scripts and symbol
    blocks as the Latin letter or digit they resemble (Unicode TR39's confusables, and Latin letter
    variants and letter symbols by name), Braille cells as their letters, accents and invisible
    characters dropped, case folded.

    Example:
        >>> skeleton("Ｓіɴеẉʏ"), skeleton("s\u200bi\u0301new\u0443")
        ('sinewy', 'sinewy')
    """
    return "".join(_fold(c) for c in unicodedata.normalize("NFKC", text))


@dataclass(frozen=True)
class _Reading:
    """Tokens of one reading of the question, concatenated; a match must start and end at a cut."""

    text: str
    cuts: frozenset[int]
    order: tuple[int, ...]
    """The cuts in order."""
    raw: str = ""
    """The text before a substitution (the leetspeak reading): a match must change something."""

    @classmethod
    def of(cls, tokens: Iterable[str], raw: Iterable[str] | None = None) -> _Reading:
        tokens = [t for t in tokens if t]
        order, at = [0], 0
        for token in tokens:
            at += len(token)
            order.append(at)
        return cls("".join(tokens), frozenset(order), tuple(order), "".join(raw) if raw is not None else "")

    def spans(self, needle: str) -> Iterable[tuple[int, int]]:
        """Where ``needle`` occurs from cut to cut."""
        start = self.text.find(needle)
        while start >= 0:
            if start in self.cuts and start + len(needle) in self.cuts:
                yield start, start + len(needle)
            start = self.text.find(needle, start + 1)

    def has(self, needle: str) -> bool:
        """Whether ``needle`` occurs from cut to cut (and, in a substituted reading, stands for something else)."""
        if self.raw:
            return any(not self.raw[a:b].isalpha() for a, b in self.spans(needle))
        return any(True for _ in self.spans(needle))

    def token_at(self, at: int) -> str:
        """The token that holds position ``at``."""
        i = bisect.bisect_right(self.order, at)
        return self.text[self.order[i - 1] : self.order[i]]

    def runs(self, most: int) -> Iterable[tuple[int, int]]:
        """Every stretch from cut to cut of at most ``most`` characters."""
        order = self.order
        for i, a in enumerate(order):
            j = i + 1
            while j < len(order) and order[j] - a <= most:
                yield a, order[j]
                j += 1


def _words(text: str) -> list[str]:
    """Letters and digits of ``text`` (a skeleton), split at everything else."""
    return _WORD.findall(text)


def _shift(word: str, n: int) -> str:
    return "".join(chr((ord(c) - 97 + n) % 26 + 97) if "a" <= c <= "z" else c for c in word)


def _keyboard(word: str, step: int) -> str:
    """``word`` typed with each hand one key to the right (``step`` 1) or left (-1) on a QWERTY keyboard."""
    return word.translate(_KEYBOARD[step])


def _interleaved(needle: str, reading: _Reading) -> bool:
    """Whether ``needle`` is every second or third letter of a stretch of ``reading`` (one filler
    letter or two between its letters)."""
    n = len(needle)
    for a, b in reading.runs(3 * n + 2):
        run = reading.text[a:b]
        if len(run) < 2 * n - 1:
            continue
        if any(run[offset::k] == needle for k in (2, 3) for offset in range(k)):
            return True
    return False


def _atbash(word: str) -> str:
    return "".join(chr(219 - ord(c)) if "a" <= c <= "z" else c for c in word)


def _orders(words: Sequence[str]) -> list[str]:
    """The answer's letters backwards: all of them, each word, and the word order."""
    joined = "".join(words)
    forms = [joined[::-1], "".join(w[::-1] for w in words), "".join(reversed(words))]
    return [f for f in dict.fromkeys(forms) if f != joined]


@dataclass
class _Question:
    """The readings of one question."""

    plain: _Reading
    leet: _Reading
    numbers: list[int]
    firsts: str
    lasts: str
    phonetic: str
    letters: str
    quoted: list[str]

    @classmethod
    def of(cls, question: str) -> _Question:
        text = skeleton(question)
        spaced = text.split()
        words = _words(text)
        numbers: list[int] = []
        for word in words:
            digits = _ORDINAL.match(word) or _SMALL_NUMBER.match(word)
            value = int(digits.group(1) if digits.groups() else digits.group(0)) if digits else _NUMBER_WORDS.get(word)
            if value is None:
                continue
            if numbers and numbers[-1] == 20 and 0 < value < 10 and not digits:  # "twenty-three"
                numbers[-1] += value
            else:
                numbers.append(value)
        chunks = [_NOT_LEET.sub("", t) for t in _LEET_SEPARATOR.split(text)]
        whole = [_words(t) for t in spaced]
        return cls(
            plain=_Reading.of(words),
            leet=_Reading.of((c.translate(_LEET) for c in chunks), raw=chunks),
            numbers=numbers,
            firsts="".join(w[0][0] for w in whole if w),
            lasts="".join(w[-1][-1] for w in whole if w),
            phonetic="".join(w[0] for w in words if w in _PHONETIC),
            letters="".join(w[0] for w in whole if len(w) == 1 and len(w[0]) == 1 and w[0].isalpha()),
            quoted=["".join(_words(next(g for g in m.groups() if g))) for m in _QUOTED.finditer(text)],
        )


def _split(needle: str, breaks: set[int], q: _Question) -> bool:
    """Whether ``needle`` is two or three pieces of the question, or any number of quoted ones,
    one of them ending inside one of the answer's words (``breaks``: where its words meet)."""
    pieces: dict[str, bool] = {}  # piece -> quoted
    loose = set(q.letters) - {"a", "i"}  # a letter standing alone ("sin", "e", "wy"), but not a word
    for a, b in q.plain.runs(len(needle) - 1):
        piece = q.plain.text[a:b]
        if piece not in needle:
            continue
        if len(piece) >= 3 or (len(piece) == 2 and piece not in _COMMON_PAIRS) or piece in loose:
            pieces.setdefault(piece, False)
    for fragment in q.quoted:
        if 0 < len(fragment) < len(needle):
            pieces[fragment] = True
    # best[(end, inside)] = fewest pieces, all quoted?
    best: dict[tuple[int, bool], tuple[int, bool]] = {(0, False): (0, True)}
    for start in range(len(needle)):
        for inside in (False, True):
            if (start, inside) not in best:
                continue
            count, all_quoted = best[(start, inside)]
            for piece, quoted in pieces.items():
                if not needle.startswith(piece, start):
                    continue
                end = start + len(piece)
                key = (end, inside or (end < len(needle) and end not in breaks))
                value = (count + 1, all_quoted and quoted)
                if key not in best or value < best[key]:
                    best[key] = value
    if (len(needle), True) not in best:
        return False
    count, all_quoted = best[(len(needle), True)]
    return 2 <= count <= 3 or (count > 3 and all_quoted)


def _anagram(needle: str, reading: _Reading) -> bool:
    """Whether a stretch of ``reading`` from cut to cut has ``needle``'s letters in another order.

    A stretch over several words may not start or end with a short common word ("means a" holds
    the letters of "seaman" by chance).
    """
    wanted, n = sorted(needle), len(needle)
    for a in reading.order:
        b = a + n
        if b not in reading.cuts or sorted(reading.text[a:b]) != wanted or reading.text[a:b] == needle:
            continue
        ends = {reading.token_at(a), reading.token_at(b - 1)}
        if b - a == len(reading.token_at(a)) or not ends & _SHORT_WORDS:
            return True
    return False


def _as_numbers(letters: str) -> list[list[int]]:
    """The letters as their places in the alphabet (a=1, a=0, z=1) and as character codes."""
    places = [ord(c) - 96 for c in letters]
    return [
        places,
        [p - 1 for p in places],
        [27 - p for p in places],
        [p + 96 for p in places],
        [p + 64 for p in places],
    ]


def _rot47(text: str) -> str:
    return "".join(chr(33 + (ord(c) - 33 + 47) % 94) if "!" <= c <= "~" else c for c in text)


def _encoded(answer: str, words: Sequence[str], question: str, text: str) -> bool:
    """Whether ``question`` (``text``: its skeleton) holds the answer as bytes (Base64, hex, binary),
    under ROT47 or in Morse code."""
    joined = "".join(words)
    forms = {answer.strip(), joined, joined.upper(), joined.capitalize(), " ".join(words), " ".join(words).title()}
    packed = "".join(unicodedata.normalize("NFKC", question).split())
    if any(base64.b64encode(f.encode()).decode().rstrip("=") in packed for f in forms if f):
        return True
    if any(_rot47(f) in question for f in forms if len(f) >= 4):
        return True
    hexes = "".join(re.findall(r"[0-9a-f]+", re.sub(r"0x|\\x", " ", text)))
    bits = "".join(re.findall(r"[01]+", text))
    # Dots and dashes in any of their forms; a letter or digit between codes breaks the word.
    codes = re.findall(r"[.\-_•·–—−]+|[^\W_]+", text)
    morse = "".join(_MORSE.get(t.translate(_DASHES), " ") for t in codes)
    if any(w in morse for w in (joined, joined[::-1])):
        return True
    cased = {c for w in (joined, joined[::-1]) for c in (w, w.upper(), w.capitalize())}
    return any(w.encode().hex() in hexes or "".join(f"{b:08b}" for b in w.encode()) in bits for w in cased)


def _in_sequence(needle: Sequence[int], seq: Sequence[int]) -> bool:
    n = len(needle)
    return any(list(seq[i : i + n]) == list(needle) for i in range(len(seq) - n + 1))


def leak(answer: str, question: str) -> str | None:
    """The class of encoding in which ``question`` names ``answer`` (see the module), or None.

    Example:
        >>> leak("Sinewy", "Which word, read backwards, is ywenis?"), leak("Sinewy", "Is it 19-9-14-5-23-25?")
        ('reversed', 'numbers')
        >>> leak("Sinewy", "Which adjective means lean and muscular, like a tendon?")
    """
    words = [w for w in (_words(skeleton(answer))) if normalize_answer(w)]
    needle = "".join(words)
    n = len(needle)
    if n < 3 or not needle.isascii() or not needle.isalpha():
        return None  # written out whole, letter by letter or with look-alikes, filters.gives_away finds it
    q = _Question.of(question)
    acronym = answer.isupper() and "".join(_words(answer.casefold())) == needle and n <= 10
    backwards = _orders(words)
    both = [needle, *backwards]
    breaks = {sum(len(w) for w in words[: i + 1]) for i in range(len(words) - 1)}
    checks: list[tuple[str, int, bool]] = [
        ("spelt", 4, q.plain.has(needle)),
        ("reversed", 4, any(q.plain.has(b) for b in backwards)),
        ("leetspeak", 3, any(q.leet.has(w.translate(_LEET)) for w in both)),
        ("numbers", 3, any(_in_sequence(p, q.numbers) for w in both for p in _as_numbers(w))),
        # An acronym's expansion is its acrostic by nature: an honest question, not a code.
        ("acrostic", 4, not acronym and any(w in q.firsts or w in q.lasts for w in both)),
        ("phonetic", 3, any(w in q.phonetic for w in both)),
        ("letters", 4, any(w in q.letters for w in both) or _anagram(needle, _Reading.of(q.letters))),
        ("anagram", 5, _anagram(needle, q.plain) or _anagram(needle.translate(_LEET), q.leet)),
        ("interleaved", 4, any(_interleaved(w, q.plain) for w in both)),
    ]
    for name, least, found in checks:
        if n >= least and found:
            return name
    ciphered = [_shift(w, k) for w in both for k in range(1, 26)]
    ciphered += [f(w) for w in both for f in (_atbash, lambda w: _keyboard(w, 1), lambda w: _keyboard(w, -1))]
    if n >= 4 and any(q.plain.has(c) for c in ciphered):
        return "substitution"
    glued = ["".join(f"{p:{width}}" for p in places) for w in both for places in _as_numbers(w) for width in ("", "02")]
    if n >= 3 and any(q.plain.has(g) for g in glued):
        return "numbers"
    if _encoded(answer, words, question, skeleton(question)):
        return "encoding"
    if n >= 5 and (_split(needle, breaks, q) or _split(needle[::-1], set(), q)):
        return "split"
    return None
