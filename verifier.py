"""
verifier.py: final-answer extraction and the binary math reward (the "reward" of GRAFT).

reward(response, gold, require_box=True) -> 1.0 if the response's final answer is equivalent to
gold, else 0.0; it never raises and never hangs (past TIMEOUT_S a comparison scores 0.0).
extract_answer(response, require_box=True) -> the answer string, or None. The default is the
paper's rule, the last complete box or no answer; require_box=False (--lenient-answers) lets a
response without a box answer after '####' or 'the answer is'. The rules, examples and the
time-out design: docs/verifier.md.
"""

import atexit
import json
import logging
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

TIMEOUT_S = 1.0               # seconds the sympy comparison may take; past that it scores 0
STARTUP_S = 30.0              # seconds the helper process may take to import math-verify
REL_TOL = Fraction(1, 10**6)  # relative tolerance, only when a side is an explicit decimal
EXACT_REL_TOL = 1e-40         # two exact forms that agree this well at 50 digits are equal
MAX_CHARS = 1000              # longer extracted answers are rejected (scored 0)
MAX_DIGITS = 10_000           # reject numeric powers with more digits (10^{100000}, towers)
MAX_ARGUMENT = 10_000         # reject n!, \binom{n}{k}, \gcd, ... when a literal exceeds this

log = logging.getLogger(__name__)
_warned = set()
_THIS_FILE = os.path.abspath(__file__)  # for the helper process, whatever the cwd is by then


def _warn_once(kind, message):
    if kind not in _warned:
        _warned.add(kind)
        log.warning("verifier: %s; scored 0 (warned once per kind)", message)


# -----------------------------------------------------------------------------
# extraction

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
_TOKEN = re.compile(r"[^\s${}]+")
_BRACE = re.compile(r"\\.|[{}]", re.S)
_HASHES = re.compile(r"####[ \t]*(?=[-+$\\(.\d])")  # GSM8K '#### 72', not a '#### Step 2' heading
_ANSWER_IS = re.compile(r"answer\**\s*(?:is\b\s*:?|:)", re.I)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _group(text, i):
    """text[i] is '{': (its content, the index after its closing '}'), or (None, -1) if unclosed."""
    depth = 0
    for m in _BRACE.finditer(text, i):
        if m.group() == "{":
            depth += 1
        elif m.group() == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:m.start()], m.end()
    return None, -1


def _box_argument(text, i):
    """The argument of a box whose name ends at i: {...}, or one token as in MATH's '\\boxed 5'."""
    if i < len(text) and text[i] == "{":
        return _group(text, i)
    m = _TOKEN.match(text, i)
    if m and text[i - 1].isspace():
        return m.group(), m.end()
    return None, -1


def _rest_of_sentence(text):
    """The first line of text up to its first full stop, without $, \\( \\) and bold markers."""
    line = text.lstrip().split("\n", 1)[0]
    m = _SENTENCE_END.search(line)
    line = line[:m.start()] if m else line
    line = re.sub(r"(?<!\\)\$|(?<!\\)\\[()\[\]]|\*\*", "", line)
    return line.strip(" :*").rstrip(".").strip()


def extract_answer(response, require_box=True):
    """The final answer of a response as a string, or None if it has none (docs/verifier.md).

    require_box=True is the paper's rule: the last complete box, else no answer. With
    require_box=False a response without any box falls back to '#### ', then 'the answer is'."""
    if not isinstance(response, str):
        return None
    boxes = list(_BOX.finditer(response))
    if boxes:
        content, _ = _box_argument(response, boxes[-1].end())
        if content is None or not content.strip():
            return None  # the last box is unterminated (truncated) or empty: no fallback
        return content.strip()
    if require_box:
        return None
    for pattern in (_HASHES, _ANSWER_IS):
        last = None
        for last in pattern.finditer(response):
            pass
        if last is not None:
            return _rest_of_sentence(response[last.end():]) or None
    return None


def _gold_answer(gold):
    """A bare gold stays as it is; a full solution (with a box or '####') is reduced first."""
    if "\\boxed" in gold or "\\fbox" in gold or "####" in gold:
        return extract_answer(gold, require_box=False)
    return gold.strip() or None


# -----------------------------------------------------------------------------
# normalisation (string level; math-verify normalises the rest)

_TEXT = r"\\(?:text|textbf|textrm|textit|textnormal|mathrm|mathbf|mbox|emph)\s*"
_CLEAN = [(re.compile(p), r) for p, r in [
    (r"\\?\$", ""), (r"(?<!\\)\\[()\[\]]", ""),                   # \$, $ and \( \) \[ \]
    ("\u2212", "-"), ("\u221e", r"\\infty "), ("\u221a", r"\\sqrt "), ("\u00b7", r"\\cdot "),
    ("\u00d7", r"\\times "),
    (r"\\(?:left|right)\s*\.", ""), (r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])", ""),
    (r"\\[dt]frac", r"\\frac"), (r"\\[dt]binom", r"\\binom"), (r"\\varnothing", r"\\emptyset"),
    (r"(?<=\d)(?:(?<!\\)\\[,!:; ]|~)(?=\d)", ""),                # 1\,000 -> 1000
    (r"(?<!\\)\\[,!:; ]|\\q?quad(?![A-Za-z])|~|\\(?:display|text)style", " "),
    (r"\{,\}", ","),                                             # 1{,}000 -> 1,000
    (r"\*\*", "^"), (r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi"),     # plain-text math
    (r"\^\s*\{?\s*\\circ\s*\}?|\u00b0|\\degree(?![A-Za-z])|(?<=\d)\s*\\circ$", ""),
    (r"\\?%", ""), (_TEXT + r"\{\s*\}", ""),                     # percent; emptied \text{}
    (_TEXT + r"\{\s*(\(?[A-E]\)?)\s*\}", r"\1"),                 # \textbf{(B)} -> (B)
    (r"\s+", " "),
]]
_UNIT_TAIL = re.compile(_TEXT + r"\{([^{}]*)\}(?:\s*\^\s*\{?\d\}?)?$")
_WRAPPED = re.compile(_TEXT + r"\{")
_INNER_TEXT = re.compile(_TEXT + r"\{([^{}]*)\}")
_ASSIGN = re.compile(r"\\?[A-Za-z]\w*(?:_\{\w+\}|_\w)? ?=(?!=) ?")
_COLUMN = re.compile(r"\\begin\{([pb])matrix\}([^&]*)\\end\{\1matrix\}")

# Words next to which a number is not the answer by itself: they change its value ("12 thousand",
# "5 squared", "half of 12", "two boxes of 6"), make it a bound or a guess ("more than 5", "about
# 12"), deny it ("not 12"), or offer another ("12 or 13"). Plurals are covered ("thirds").
# A comparative alone is a difference, the answer to "how many more": "12 more apples" is 12.
_VALUE_WORDS = set("""
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred thousand million billion trillion dozen half halve third quarter fourth fifth sixth
    seventh eighth ninth tenth hundredth thousandth millionth twice double triple thrice
    plus minus times multiplied divided over squared cubed factorial negative log ln sin cos tan
    sqrt pi infinity mod modulo base binary octal hex hexadecimal
    than least most above below under within between approximately approx about around
    roughly nearly almost circa estimate estimated
    not no never none nor neither without except excluding but or either if unless when whenever
    otherwise assume assuming suppose maybe perhaps possibly probably unlikely guess bound wrong
    incorrect false invalid impossible cannot
""".split())
# Before a number these apply an operation to it ("the square of 5", "a multiple of 5"); after
# it they count things ("12 square feet", "12 factors"). So "the sum is 12" is not taken either.
_VALUE_WORDS_BEFORE = set("""
    square cube cubic root power exponent sum difference product quotient ratio multiple factor
    divisor divisible reciprocal inverse opposite absolute complement supplement
""".split())
_UP_TO = re.compile(r"\bup to\b|\band up\b")  # "up to 12", "12 and up": bounds
_PHRASE_WORD = r"[A-Za-z][A-Za-z'\u2019-]*"
_IN_WORDS = re.compile(  # words, one number, words: 'she has 12 apples', '18 dollars'
    rf"(?P<before>(?:{_PHRASE_WORD}[ ,:]+)*)(?P<number>[-+]?\d(?:[\d.,/]*\d)?)"
    rf"(?P<after>(?:[ ,:]+{_PHRASE_WORD})*)")


def _changes_value(words, before=False):
    """Does a word of `words` (text) make a number next to it more than a plain quantity?"""
    vocabulary = _VALUE_WORDS | _VALUE_WORDS_BEFORE if before else _VALUE_WORDS
    words = words.lower()
    return bool(_UP_TO.search(words)) or any(  # "up" alone: "12 push-ups" is a count
        w in vocabulary or w.removesuffix("s") in vocabulary  # "thirds", "halves"
        for w in re.findall(r"[a-z]+", words))


def _quantity_in_words(s, words_before=False):
    """The one number of an answer in words, or None: '18 dollars' -> '18', and with words_before
    'she has 12 apples' -> '12'. None on a math sign, a word of _VALUE_WORDS (before the number
    also _VALUE_WORDS_BEFORE), or a one-letter word but a leading 'a' or 'I' (a variable: 'x is 5')."""
    m = _IN_WORDS.fullmatch(s)
    if not m or not (m["before"] or m["after"]) or _number(m["number"]) is None:
        return None
    if m["before"] and not words_before:
        return None
    before, after = re.findall(r"[A-Za-z]+", m["before"]), re.findall(r"[A-Za-z]+", m["after"])
    for i, word in enumerate(before + after):
        if len(word) == 1 and not (i < len(before) - 1 and word in ("a", "A", "I")):
            return None
    if _changes_value(m["before"], before=True) or _changes_value(m["after"]):
        return None
    return m["number"]


def _clean(s):
    """String-level normalisation (docs/verifier.md) -> (the variable an assignment names, or None;
    the cleaned answer). 'x = 3' -> ('x', '3'); '3' -> (None, '3')."""
    s = s.strip()
    while s.startswith("{") and _group(s, 0)[1] == len(s):
        s = s[1:-1].strip()  # {{5}} -> 5: redundant braces, however deep
    for pattern, repl in _CLEAN:
        s = pattern.sub(repl, s)
    s = s.strip().rstrip(".").rstrip()
    while (m := _UNIT_TAIL.search(s)) and m.start() > 0 and m.group(1).strip() not in ("i", "e"):
        if _changes_value(m.group(1)):  # 12\text{ thousand} -> 12 thousand: not a unit, so
            s = s[:m.start()].strip() + " " + m.group(1).strip()  # unwrapped, lest math-verify
            break                                                  # drop the \text{} as one
        s = s[:m.start()].strip()  # 5\text{ cm}^2 -> 5
    while (m := _WRAPPED.match(s)) and _group(s, m.end() - 1)[1] == len(s):
        s = s[m.end():-1].strip()  # \text{5 cm} -> 5 cm
    name, m = None, _ASSIGN.match(s)
    if m and m.end() < len(s) and not re.search(r"[=,]", s[m.end():]):
        name, s = _key(m.group().rstrip(" =")), s[m.end():]  # x = 3 -> 3, named x
    q = _quantity_in_words(s)
    if q is not None:
        s = q  # 18 dollars -> 18
    m = _COLUMN.fullmatch(s)
    if m and "\\\\" in m[2]:  # a column vector is an ordered tuple: (1, 2) matches it
        s = "(" + ", ".join(e.strip() for e in m[2].split("\\\\") if e.strip()) + ")"
    return name, s.strip().rstrip(".").rstrip()


def _key(s):
    """A canonical spelling for the string check: no spaces, no braces around one character."""
    s = re.sub(r"(?<!\\)\{(\w)\}", r"\1", s.replace(" ", ""))
    return s.lower() if s.isalpha() and len(s) > 1 else s


_CHOICE = re.compile(r"\(([A-E])\)\s*(.*)|([A-E])", re.S)


def _choice(s):
    """A multiple-choice label: 'B' or '(B)' -> ('B', ''); '(B) 12' -> ('B', '12'); else None."""
    m = _CHOICE.fullmatch(s)
    return (m[1] or m[3], (m[2] or "").strip()) if m else None


_REAL = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d{1,3})?|[+-]?\.\d+"
_NUMBER = re.compile(
    rf"(?P<real>{_REAL})"
    rf"|(?:(?P<mantissa>{_REAL})\\(?:times|cdot)|(?P<tsign>[+-]?))"  # 1.5\times10^{-4}, -10^{3}, 10^6
    rf"10\^(?:\{{(?P<exp>[+-]?\d+)\}}|(?P<exp1>[+-]?\d))"
    rf"|(?P<sign>[+-]?)(?:\\frac\{{(?P<n>{_REAL})\}}\{{(?P<d>{_REAL})\}}"
    rf"|(?P<n2>{_REAL})/(?P<d2>{_REAL}))"
    rf"|(?P<msign>[+-]?)(?P<whole>\d+)\\frac\{{(?P<mn>\d+)\}}\{{(?P<md>\d+)\}}"
    rf"|(?P<rsign>[+-]?)(?P<int>\d*)\.(?P<fixed>\d*)\\overline\{{?(?P<period>\d+)\}}?")


def _number(s):
    """(exact value, is_decimal) if s is a plain number, fraction or mixed number, else None."""
    if len(s) > 100 or re.search(r"\d \d", s):
        return None
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s.replace(" ", ""))
    m = _NUMBER.fullmatch(s)
    if not m:
        return None
    real = lambda t: Fraction(t.replace(",", ""))
    if m["real"]:
        value = real(m["real"])
    elif m["exp"] or m["exp1"]:  # scientific notation, 1.5\times10^{-4}, or a power of ten, 10^{-400}
        exponent = int(m["exp"] or m["exp1"])
        if abs(exponent) > MAX_DIGITS:
            return None  # left to _dangerous
        mantissa = real(m["mantissa"]) if m["mantissa"] else Fraction(-1 if m["tsign"] == "-" else 1)
        return mantissa * Fraction(10) ** exponent, bool(re.search(r"[.eE]", m["mantissa"] or ""))
    elif m["period"]:  # a repeating decimal, 0.1\overline{6} = (16 - 1) / 90: exact
        head = m["int"] + m["fixed"]
        value = Fraction(int(head + m["period"]) - int(head or "0"),
                         10 ** len(m["fixed"]) * (10 ** len(m["period"]) - 1))
        return (-value if m["rsign"] == "-" else value), False
    elif m["whole"]:  # a mixed number, 2\frac{1}{2}
        if int(m["mn"]) >= int(m["md"]):
            return None
        value = int(m["whole"]) + Fraction(int(m["mn"]), int(m["md"]))
        value = -value if m["msign"] == "-" else value
    else:
        if real(m["d"] or m["d2"]) == 0:
            return None
        value = real(m["n"] or m["n2"]) / real(m["d"] or m["d2"])
        value = -value if m["sign"] == "-" else value
    return value, bool(re.search(r"[.eE]", s))


def _close(a, b):
    (x, x_decimal), (y, y_decimal) = a, b
    if x_decimal or y_decimal:
        return abs(x - y) <= REL_TOL * max(abs(x), abs(y))
    return x == y


_BASE_NUMERAL = re.compile(r"([0-9A-Za-z]*\d[0-9A-Za-z]*)_\{?\(?(\d+)\)?\}?")
_DIGITS = re.compile(r"[0-9A-Za-z]+")


def _base_numeral(s):
    """(value, base) of a numeral with a base subscript, 312_4 or 1A_{16}; None for anything else
    (x_1 has no digit before the subscript, 19_8 has a digit that base 8 lacks)."""
    m = _BASE_NUMERAL.fullmatch(s.replace(" ", ""))
    if not m or not 2 <= int(m[2]) <= 36:
        return None
    try:
        return int(m[1], int(m[2])), int(m[2])
    except ValueError:  # a digit the base does not have
        return None


def _same_numeral(pred, gold):
    """True / False when a side has a base subscript (312_4), None when neither has. Both
    subscripted: same base and value; bare digits are read in the subscript's base."""
    p, g = _base_numeral(pred), _base_numeral(gold)
    if p is None and g is None:
        return None
    if p is not None and g is not None:
        return p == g
    (value, base), other = (p, gold) if p is not None else (g, pred)
    other = other.replace(" ", "")
    if not _DIGITS.fullmatch(other):
        return False
    try:
        return int(other, base) == value
    except ValueError:
        return False


_E_NOTATION = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")


def _e_notation_as_latex(s):
    """1.5e-4 -> 1.5\\times10^{-4}: math-verify reads 1.5e-4 as 1.5 * e - 4 (Euler's number)."""
    return _E_NOTATION.sub(r"\1\\times10^{\2}", s)


_NUM = r"(\d+(?:\.\d+)?)"
_NUM_POW = re.compile(  # a numeric power: 10^{5}, (2)^3, {9}^{-1}, 10**5
    rf"(?:\({_NUM}\)|\{{{_NUM}\}}|{_NUM})\s*(?:\^|\*\*)\s*(?:\{{\s*(-?{_NUM})\s*\}}|(-?{_NUM}))")


def _dangerous(s):
    """Does s obviously ask sympy to build an astronomically large number? (cheap pre-screen)"""
    while m := _NUM_POW.search(s):  # collapse numeric powers, innermost first: 2^{2^{2^{2}}}
        base = float(m[1] or m[2] or m[3])
        exponent = float(m[4] or m[6])
        digits = abs(exponent * math.log10(base)) if base > 0 else 0.0
        if digits > MAX_DIGITS:
            return True
        value = 0 if base == 0 else round(base**exponent) if digits < 15 else 10**16
        s = s[:m.start()] + str(value) + s[m.end():]
    if re.search(r"!|\\binom|\\choose|\\gcd|\\lcm|\\Gamma|\\prod|mod", s):
        return any(len(n) > 5 or int(n) > MAX_ARGUMENT for n in re.findall(r"\d+", s))
    return False


# -----------------------------------------------------------------------------
# equivalence


def _balanced(s):
    return _group("{" + s + "}", 0)[1] == len(s) + 2


_BRACKET = re.compile(r"\\[{}]|[()\[\]{},]")


def _collection(s):
    """'ordered' for a tuple or interval ((1, 2), [1, 2)), 'unordered' for a set \\{1, 2\\} or a
    bare list (2, -3; x = 2 or x = -3), None for one value, a union, or equations 'x=5, y=3'
    (their names give the order)."""
    words = _INNER_TEXT.sub(r" \1 ", s)
    if re.search(r"\bor\b", words):
        return "unordered"  # alternatives
    if "=" in s or _number(s) is not None:  # 1,000 is one number
        return None
    if re.search(r"\band\b", words):
        return "unordered"
    depth, comma_depths, first_close = 0, set(), None
    for m in _BRACKET.finditer(s):
        if m.group() == ",":
            comma_depths.add(depth)
        elif m.group() in ("(", "[", "{", "\\{"):
            depth += 1
        else:
            depth -= 1
            if depth == 0 and first_close is None:
                first_close = m.end()  # where the group that s opens with closes
    enclosed = first_close == len(s)
    if enclosed and s.startswith("\\{"):
        return "unordered"
    if enclosed and s[0] in "([" and 1 in comma_depths:
        return "ordered"
    return "unordered" if 0 in comma_depths else None


def _equivalent(pred, gold):
    if len(pred) > MAX_CHARS or len(gold) > MAX_CHARS:
        _warn_once("long", f"an answer longer than {MAX_CHARS} characters was rejected")
        return False
    (p_name, p), (g_name, g) = _clean(pred), _clean(gold)
    if not p or not g:
        return False
    if p_name and g_name and p_name != g_name:
        return False  # 'y = 5' is not 'x = 5' (a horizontal line, not a vertical one)
    if _key(p) == _key(g):
        return True
    gc, pc = _choice(g), _choice(p)
    if gc and pc:
        return gc[0] == pc[0]
    if gc or pc:  # a label against a value: grade the value after the label, '(B) 12' vs '12'
        g, p = (gc[1] if gc else g), (pc[1] if pc else p)
        if not g or not p:
            return False
        if _key(p) == _key(g):
            return True
    # a response's sentence stands for its one number ('she has 12 apples' -> 12); a gold's does
    # not, as its words may be the point ('June 5' is not 'July 5')
    p = _quantity_in_words(" ".join(_INNER_TEXT.sub(r" \1 ", p).split()), words_before=True) or p
    a, b = _number(p), _number(g)
    if a is not None and b is not None:
        return _close(a, b)
    same = _same_numeral(p, g)
    if same is not None:
        return same
    kinds = _collection(p), _collection(g)
    if None not in kinds and kinds[0] != kinds[1]:
        return False  # '1, 2' (two values) is not the pair or interval (1, 2), nor \{1, 2\}
    if not (_balanced(p) and _balanced(g)):
        return False  # '5}' (from 'the answer is 5}') is not an answer
    p, g = _e_notation_as_latex(p), _e_notation_as_latex(g)
    if _dangerous(p) or _dangerous(g):
        _warn_once("huge", "an answer with an astronomically large number was rejected")
        return False
    verdict = _sympy_verdict(g, p)
    if verdict is None:
        _warn_once("timeout", f"the sympy comparison took longer than {TIMEOUT_S} s")
        return False
    return verdict


_DECIMAL = re.compile(r"\d\.\d|(?<![\d.])\.\d")


def _relatively_close(x, y, rel_tol):
    """|x - y| <= rel_tol * max(|x|, |y|) for two finite sympy numbers at 50 digits: relative, so
    two tiny values stay apart (1/500! vs 1/501!)."""
    import sympy
    x, y = sympy.N(x, 50), sympy.N(y, 50)
    if not (x.is_finite and y.is_finite):
        return False
    return bool(abs(x - y) <= sympy.Float(float(rel_tol), 50) * max(abs(x), abs(y)))


_math_verify_numeric_eq = None  # math-verify's own grader.sympy_numeric_eq, kept by _sympy_equal


def _numeric_eq(a, b, float_rounding, numeric_precision):
    """math-verify's grader.sympy_numeric_eq, made relative (helper only; docs/verifier.md).

    Finite numbers: within REL_TOL of their size if either holds a decimal, else EXACT_REL_TOL.
    Exact symbolic forms: False (simplify decides); the rest: math-verify's absolute test."""
    import sympy
    matrix = (sympy.MatrixBase, sympy.MatrixExpr)
    if all(isinstance(x, sympy.Expr) and not isinstance(x, matrix) for x in (a, b)):
        decimal = a.has(sympy.Float) or b.has(sympy.Float)
        if a.is_number and b.is_number and a.is_finite is not False and b.is_finite is not False:
            return _relatively_close(a, b, REL_TOL if decimal else EXACT_REL_TOL)
        if not decimal and not (a.is_number or b.is_number):
            return False
    return _math_verify_numeric_eq(a, b, float_rounding, numeric_precision)


def _sympy_equal(gold, pred):
    """math-verify's parse + verify (its time-outs off; ours is the process) with the decimal
    tolerance for scalars and _numeric_eq. Runs in the helper process."""
    import math_verify
    import sympy
    global _math_verify_numeric_eq
    # we enforce the time-out ourselves: silence math-verify's one-time reminder about it
    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    if _math_verify_numeric_eq is None:  # sympy_expr_eq looks the name up at each call
        _math_verify_numeric_eq = math_verify.grader.sympy_numeric_eq
        math_verify.grader.sympy_numeric_eq = _numeric_eq
    config = [math_verify.LatexExtractionConfig()]
    g = math_verify.parse("\\boxed{" + gold + "}", config, parsing_timeout=None)
    p = math_verify.parse("\\boxed{" + pred + "}", config, parsing_timeout=None)
    if not g or not p:
        return False
    a, b = g[0], p[0]
    if (_DECIMAL.search(gold) or _DECIMAL.search(pred)) and all(
            isinstance(x, sympy.Expr) and x.is_number for x in (a, b)):
        return _relatively_close(a, b, REL_TOL)  # two scalars, one a decimal: relative tolerance
    # allow_set_relation_comp: "1 < x < 2" matches "(1,2)", as a human grader would have it
    return bool(math_verify.verify(g, p, float_rounding=6, allow_set_relation_comp=True,
                                   timeout_seconds=None))


# -----------------------------------------------------------------------------
# the helper process that runs _sympy_equal under a time-out


class _Helper:
    """A `python verifier.py --serve` process, answering one [gold, pred] line at a time."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.owner, self.ready = os.getpid(), False
        self.proc = subprocess.Popen(
            [sys.executable, _THIS_FILE, "--serve"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    def read_line(self, timeout):
        """One line from the helper, or None if it does not arrive within timeout seconds."""
        fd, buf, deadline = self.proc.stdout.fileno(), b"", time.monotonic() + timeout
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError("the verifier helper process exited")
            buf += chunk
        return buf

    def ask(self, gold, pred):
        """True / False, an exception name from the helper, or None on time-out."""
        if not self.ready:
            if self.read_line(STARTUP_S) != b"ready\n":
                raise RuntimeError(f"`{sys.executable} verifier.py --serve` did not start")
            self.ready = True
        self.proc.stdin.write(json.dumps([gold, pred]).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.read_line(TIMEOUT_S)
        return None if line is None else json.loads(line)

    def stop(self):
        if self.owner == os.getpid():
            self.proc.kill()
            self.proc.wait()


_helper = None
_helper_lock = threading.Lock()


def _stop_helper():
    if _helper is not None:
        _helper.stop()


def _sympy_verdict(gold, pred):
    """_sympy_equal(gold, pred) in the helper: True, False, or None on time-out."""
    global _helper
    with _helper_lock:
        if _helper is None or _helper.owner != os.getpid():  # first use, or we were forked
            if _helper is None:
                atexit.register(_stop_helper)
            _helper = _Helper()
        try:
            reply = _helper.ask(gold, pred)
        except BaseException:
            _helper.stop()
            _helper = None
            raise
        if reply is None:  # stuck: kill it, and start the next one now so it is ready sooner
            _helper.stop()
            _helper = _Helper()
    if isinstance(reply, str):
        _warn_once(reply, f"{reply} while comparing with math-verify")
        return False
    return reply


def _serve():
    """The helper's loop: one JSON [gold, pred] per line in, one JSON reply per line out."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints of libraries go to stderr, not into our replies
    _sympy_equal("1", "1")  # import and warm up before we say we are ready
    out.write(b"ready\n")
    for line in sys.stdin.buffer:
        try:
            reply = _sympy_equal(*json.loads(line))
        except Exception as e:
            reply = type(e).__name__
        out.write(json.dumps(reply).encode() + b"\n")


# -----------------------------------------------------------------------------


def reward(response: str, gold: str, require_box: bool = True) -> float:
    """1.0 if the final answer of `response` is equivalent to `gold`, else 0.0. Never raises, never
    hangs (a time-out is 0.0). require_box: the paper's last-box rule; False adds the lenient fall-backs."""
    try:
        if not isinstance(response, str) or not isinstance(gold, str):
            _warn_once("type", "response and gold must be str")
            return 0.0
        pred = extract_answer(response, require_box)
        if pred is None:
            return 0.0  # no (complete) final answer: an ordinary wrong response
        g = _gold_answer(gold)
        if g is None:
            _warn_once("gold", "a gold answer was empty, or held no final answer")
            return 0.0
        return 1.0 if _equivalent(pred, g) else 0.0
    except Exception as e:
        detail = e.args[0][:200] if e.args and isinstance(e.args[0], str) else ""
        _warn_once(type(e).__name__, f"{type(e).__name__} while grading ({detail})")
        return 0.0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    elif len(sys.argv) == 3:
        print(reward(sys.argv[1], sys.argv[2]))
    else:
        sys.exit("usage: python verifier.py RESPONSE GOLD   (prints the reward)")
