"""Mathematical equivalence of two answers, judged by math-verify.

We do not write a grader: math-verify (Hugging Face) parses LaTeX into sympy and compares
values, sets, intervals, equations and matrices. Around it we only normalise what it is
known to trip on, each rule documented in `normalize`:

    "$18$", "\\$18"          -> dollar signs dropped
    "25\\%", "25%"           -> a trailing percent sign dropped (the usual MATH convention;
                               math-verify alone gets "50\\%"=="50" but not "2.5\\%"=="2.5")
    "18 eggs", "\\text{18 dollars}" -> plain unit words after a number dropped
                               (math-verify reads "18 eggs" as the product 18*E*g*g*s)
    "Evelyn", "\\text{Evelyn}" -> a word answer (letters only, some word of 4+ letters) is
                               compared as text, case-insensitively: math-verify would read
                               a bare word as a product of symbols, so anagrams would match
    "\\boxed{\\text{Evelyn}}"   -> a box around the whole answer dropped
    "10."                      -> a full stop after a number dropped

Decimals are exact. math-verify rounds a decimal and the value it is compared with to 6
places, so "4.666667" would equal 14/3 and "0.053571" 3/56: a rounded decimal is not the
exact value it approximates (a false positive of the grader). Here every decimal it parses
is read as the exact rational it writes (4.666667 = 4666667/1000000), in numbers, tuples,
intervals, sets, equations and matrices alike: "0.5" equals "\\frac{1}{2}", "0.50" equals
"0.5", "0.333" and "0.333333" do not equal "\\frac{1}{3}", "3.14159" does not equal "\\pi".
`float_rounding=N` (`ets eval --float-rounding N`) allows the tolerance back: decimals
are compared after rounding both sides to N places, as math-verify does (N=6 is its default
and this grader's behaviour before).

Thousands separators ("70,000", "10,\\!000"), `\\text{ cm}` units, `^\\circ`, `\\dfrac`,
`x = 5` against `5` and unordered sets are math-verify's own normalisation. What it does
not read is normalised first: `\\frac\\pi2` (unbraced arguments), `infinity` and `pi` as
words, `90°`, a scale word ("5 million" is 5000000; "18 eggs" is 18), an inequality in one
variable as its interval (`-2 \\le x \\le 7` is `[-2,7]`), and a number in a base by its
digits and base (`52_8` is not `52_9`: math-verify drops the subscript).

Robustness: `is_equivalent` never raises on an answer; garbage is simply not equal. Results are cached.

Timeouts: math-verify bounds each parse and comparison with SIGALRM, which only the main
thread may set. On the main thread we use that (5 s). Off the main thread (a threaded
evaluator, a server) math-verify would refuse, so the comparison runs in one helper
process (spawned once, lazily) on *its* main thread, with our own wall-clock limit as a
backstop: a comparison that hangs there is killed and judged unequal. Spawning means a
script that grades off the main thread must guard its entry point with
`if __name__ == "__main__":`, as all multiprocessing code must.
"""

from __future__ import annotations

import atexit
import functools
import logging
import multiprocessing
import re
import threading
from decimal import Decimal

logger = logging.getLogger(__name__)

TIMEOUT_S = 5                 # math-verify's own limit per parse / comparison
WORKER_TIMEOUT_S = 20         # backstop for one off-main-thread comparison (2 parses + verify)
STARTUP_TIMEOUT_S = 120       # for the helper process to start and import math-verify
MAX_CHARS = 1000              # longer "answers" are compared as strings, never parsed

_NUMBER = r"[-+]?(?:\d[\d,]*)?\.?\d+"
# A number followed by plain words: "18 eggs", "5 square feet". "pi" is a constant, not a unit.
_NUMBER_WORDS = re.compile(rf"^({_NUMBER})\s+((?:[A-Za-z]{{2,}}\.?\s*)+)$")
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}$")
_WORDS = re.compile(r"^[A-Za-z]+(?:\s+[A-Za-z]+)*$")
_UNBRACED_FRAC = re.compile(r"\\([dt]?frac)\s*(\\[A-Za-z]+|[^\s{}\\])\s*(\\[A-Za-z]+|[^\s{}\\])")
_INFINITY_WORD = re.compile(r"(?<![\\A-Za-z])(?:infinity|inf)\b", re.IGNORECASE)
_PI_WORD = re.compile(r"(?<![\\A-Za-z])pi\b")
_SCALES = {"dozen": 12, "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_LE = ("\\le", "\\leq", "≤")
_LESS = r"(<|\\leq?|≤)"
# a < x <= b (one variable, lower bound first); x <= b, x > a.
_CHAINED = re.compile(rf"([^<>=≤≥]+?)\s*{_LESS}\s*[A-Za-z]\s*{_LESS}\s*([^<>=≤≥]+)")
_ONE_SIDED = re.compile(rf"[A-Za-z]\s*(<|>|\\leq?|\\geq?|≤|≥)\s*([^<>=≤≥]+)")
_BASED = re.compile(r"([0-9A-Z]+)_\{?(\d+)\}?")  # digits above 9 as capitals, as MATH writes them
_BOXED_ALL = re.compile(r"^\\(?:boxed|fbox)\s*\{")


def _as_words(s: str) -> str | None:
    """`s` as lower-case text if it is a word answer ("Evelyn", "\\text{Monday}"), else None."""
    wrapped = _TEXT_WRAP.match(s)
    inner = wrapped.group(1).strip() if wrapped else s
    if _WORDS.match(inner) and any(len(w) >= 4 for w in inner.split()):
        return " ".join(inner.lower().split())
    return None


def _in_base(s: str) -> tuple[str, str] | None:
    """(digits, base) of a number written in a base, `52_8` or `4210_{5}`; else None."""
    m = _BASED.fullmatch(s.replace(" ", ""))
    return (m.group(1), m.group(2)) if m else None


def _unbox(s: str) -> str:
    """`s` without a `\\boxed{...}` / `\\fbox{...}` that wraps all of it."""
    while True:
        m = _BOXED_ALL.match(s)
        if not m:
            return s
        depth = 0
        for i in range(m.end() - 1, len(s)):
            if s[i] == "{" and s[i - 1] != "\\":
                depth += 1
            elif s[i] == "}" and s[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    break
        if i != len(s) - 1 or depth != 0:
            return s          # the box closes before the end: it does not wrap all of it
        s = s[m.end():-1].strip()


def normalize(answer: str) -> str:
    """The light clean-up applied to both sides before math-verify sees them."""
    s = answer.strip()
    s = s.replace("\\$", "").replace("$", "").strip()
    s = s.replace("°", "^\\circ")  # the degree sign as typed, as LaTeX writes it
    s = _unbox(s)
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    wrapped = _TEXT_WRAP.match(s)
    # Unwrap \text{...} only around a number ("\text{18 dollars}"): unwrapping words would
    # let math-verify read them as products of symbols, so anagrams would compare equal.
    if wrapped and re.match(_NUMBER, wrapped.group(1).strip()):
        s = wrapped.group(1).strip()
    s = re.sub(r"\\?%$", "", s).strip()
    if re.fullmatch(rf"{_NUMBER}\.", s):   # "10." (a sentence's full stop after the number)
        s = s[:-1]
    # What math-verify does not read: \frac's arguments unbraced beyond two digits
    # (\frac\pi2), constants as words, an inequality where an interval is meant.
    s = _UNBRACED_FRAC.sub(r"\\\1{\2}{\3}", s)
    s = _INFINITY_WORD.sub(r"\\infty", s)
    s = _PI_WORD.sub(r"\\pi", s)
    s = _as_interval(s)
    words = _NUMBER_WORDS.match(s)
    if words:
        scale = _SCALES.get(words.group(2).split()[0].lower().rstrip("."))
        # "5 million" is 5000000; "18 eggs" is 18 (a unit)
        s = words.group(1) if scale is None else _times(words.group(1), scale)
    return s


def _times(number: str, scale: int) -> str:
    value = Decimal(number.replace(",", "")) * scale
    return format(value.normalize() if value != value.to_integral() else value.to_integral(), "f")


def _as_interval(s: str) -> str:
    """An inequality in one variable as the interval it means: `-2 \\le x \\le 7` -> `[-2,7]`,
    `x > 3` -> `(3,\\infty)`; anything else as it is."""
    m = _CHAINED.fullmatch(s)
    if m:
        return (f"{'[' if m.group(2) != '<' else '('}{m.group(1).strip()},{m.group(4).strip()}"
                f"{']' if m.group(3) != '<' else ')'}")
    m = _ONE_SIDED.fullmatch(s)
    if m:
        op, bound = m.group(1), m.group(2).strip()
        if op in ("<", ">"):
            return f"(-\\infty,{bound})" if op == "<" else f"({bound},\\infty)"
        return f"(-\\infty,{bound}]" if op in _LE else f"[{bound},\\infty)"
    return s


@functools.lru_cache(maxsize=65536)
def _parse(text: str, timeout: int | None):
    """math-verify's parse, cached: a vote compares each answer with many others."""
    from math_verify import parse

    # Wrapping in \boxed{} tells math-verify where the answer is, so a bare "3, 5" or
    # "x = 2" is read whole rather than searched for the first number in it.
    return parse("\\boxed{" + text + "}", parsing_timeout=timeout)


def _exact(parsed: list) -> list:
    """math-verify's parse with every decimal read as the rational it writes: exact, so a
    rounded decimal never equals the value it rounds (module doc, "Decimals are exact")."""
    from sympy import Basic, Float, MatrixBase, Rational

    def rational(f):
        return Rational(str(f))

    out = []
    for item in parsed:
        if isinstance(item, MatrixBase):
            item = item.applyfunc(lambda e: e.xreplace({f: rational(f) for f in e.atoms(Float)}))
        elif isinstance(item, Basic):
            item = item.xreplace({f: rational(f) for f in item.atoms(Float)})
        out.append(item)
    return out


def _verify_strings(gold: str, pred: str, timeout: int | None, float_rounding: int | None = None) -> bool:
    """math-verify on two normalised strings. Runs in this process or in the worker."""
    from math_verify import verify

    try:
        g, p = _parse(gold, timeout), _parse(pred, timeout)
        if not g or not p:
            return False
        if float_rounding is None:
            g, p = _exact(g), _exact(p)
            return bool(verify(g, p, timeout_seconds=timeout))
        return bool(verify(g, p, float_rounding=float_rounding, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - a grader must never crash an evaluation
        return False


def _warm_up() -> bool:
    import math_verify  # noqa: F401 - the import is most of a fresh worker's start-up time

    return True


class _Unsettled(Exception):
    """A comparison that was cut off: judged unequal, but not cached (a retry may settle it)."""


class _Worker:
    """One spawned process that runs math-verify on its own main thread (see module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = None

    def _started(self):
        with self._lock:
            if self._pool is None:
                pool = multiprocessing.get_context("spawn").Pool(1)
                try:
                    # Start-up (a Python and sympy import) must not count against a comparison.
                    pool.apply_async(_warm_up).get(STARTUP_TIMEOUT_S)
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
            return self._pool

    def verify(self, gold: str, pred: str, float_rounding: int | None = None) -> bool:
        try:
            pool = self._started()
            return pool.apply_async(_verify_strings, (gold, pred, TIMEOUT_S, float_rounding)).get(WORKER_TIMEOUT_S)
        except multiprocessing.TimeoutError:
            logger.warning("grading %r vs %r took over %ss; judged unequal", pred, gold, WORKER_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a dead worker is recreated on the next call
            logger.warning("grading worker failed (%s); judged unequal", exc)
        self.close()
        raise _Unsettled

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.terminate()
                self._pool = None


_worker = _Worker()
atexit.register(_worker.close)


def is_equivalent(predicted: str | None, ground_truth: str | None, *, float_rounding: int | None = None) -> bool:
    """Whether `predicted` is mathematically equal to `ground_truth`. Never raises.

    Decimals are exact by default; `float_rounding=N` compares them after rounding to N
    decimal places (the module doc, "Decimals are exact")."""
    if not isinstance(predicted, str) or not isinstance(ground_truth, str):
        return False  # None (no answer) and non-strings are never equal to anything
    if float_rounding is not None and (not isinstance(float_rounding, int) or float_rounding < 0):
        raise ValueError(f"float_rounding must be an integer >= 0 (decimal places) or None, got {float_rounding!r}")
    try:
        return _is_equivalent(predicted, ground_truth, float_rounding)
    except _Unsettled:
        return False


@functools.lru_cache(maxsize=65536)
def _is_equivalent(predicted: str, ground_truth: str, float_rounding: int | None = None) -> bool:
    pred, gold = normalize(predicted), normalize(ground_truth)
    if not pred or not gold:
        return False
    if pred == gold:
        return True
    based = _in_base(pred), _in_base(gold)
    if None not in based:  # math-verify drops a subscript: 52_8 would equal 52_9
        return based[0] == based[1]
    words = _as_words(pred), _as_words(gold)
    if words != (None, None):
        return words[0] == words[1]
    if len(pred) > MAX_CHARS or len(gold) > MAX_CHARS:
        return " ".join(pred.split()) == " ".join(gold.split())
    if threading.current_thread() is threading.main_thread():
        return _verify_strings(gold, pred, TIMEOUT_S, float_rounding)
    return _worker.verify(gold, pred, float_rounding)


def answers_match(a: str | None, b: str | None) -> bool:
    """Symmetric equivalence for grouping votes: either side may play the ground truth."""
    if a is None or b is None:
        return False
    if b < a:               # one cache entry per unordered pair
        a, b = b, a
    return is_equivalent(a, b) or is_equivalent(b, a)
