"""Tests for verifier.py: extraction, gold reduction, equivalence policy, robustness, time-outs.

Every case carries its expected verdict and, as its pytest id, the reason. Run:
    python -m pytest tests/test_verifier.py -q
"""

import logging
import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import verifier  # noqa: E402
from verifier import extract_answer, reward  # noqa: E402

# A hang guard, not a timing: a call that starts the helper may wait its STARTUP_S, then the 1 s comparison; a busy
# machine stays far below, a hang does not (issue 56: no test assumes quiet cores).
HANG_BOUND_S = verifier.STARTUP_S + 30


def boxed(answer):
    """A typical model ending around a boxed answer."""
    return f"Putting it together, the final answer is $\\boxed{{{answer}}}$."


def case(pred, gold, expected, reason):
    return pytest.param(pred, gold, expected, id=reason)


def check(cases):
    return pytest.mark.parametrize("pred, gold, expected", cases)


# -----------------------------------------------------------------------------
# extraction: what counts as the final answer

EXTRACTION = [
    ("\\boxed{42}", "42", "plain box"),
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", "nested braces inside the box"),
    ("\\boxed{\\text{(B)}}", "\\text{(B)}", "nested text command"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}", "escaped braces do not close the box"),
    ("\\fbox{7}", "7", "fbox counts as a box"),
    ("\\boxed {5}", "5", "space before the brace"),
    ("hence $\\boxed 5$", "5", "MATH-style box without braces"),
    ("first \\boxed{1}, then I recheck and get \\boxed{2}", "2", "the last box wins"),
    ("\\boxed{1}\n\\boxed{2}", "2", "adjacent boxes without a separator: the last one"),
    ("x = \\boxed{2} and x = \\boxed{-3}", "-3", "words between boxes: the last one"),
    ("$\\boxed{2}$ and $\\boxed{-3}$", "-3", "boxes joined by 'and': still the last one"),
    ("\\boxed{1}, \\boxed{2}, and \\boxed{3}", "3", "boxes joined by commas: still the last one"),
    ("\\boxed{3} ... so it is \\boxed{4", None, "truncated last box: no answer, no fallback"),
    ("The answer is 5. \\boxed{", None, "unterminated box beats an 'answer is'"),
    ("\\boxed{}", None, "empty box: no answer"),
    ("\\boxed{7} but then \\boxed{ }", None, "empty last box: no fallback to an earlier box"),
    ("\\boxed{\\boxed{5}}", "5", "box inside a box"),
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
     "matrix row separator inside a box"),
    ("#### 5 ... and finally \\boxed{6}", "6", "a box beats ####"),
    ("The answer is 5. \\boxed{6} is what I got", "6", "a box beats 'the answer is'"),
    ("I have no idea.", None, "no answer at all"),
    ("", None, "empty response"),
    (None, None, "not a string"),
]

# Without any box the paper's rule finds no answer; the lenient rule (require_box=False) looks
# after '####', then after 'the answer is' / 'Answer:'. Expected: the lenient rule's answer.
EXTRACTION_LENIENT = [
    ("She has 3 + 4 = 7 apples.\n#### 7", "7", "GSM8K ####"),
    ("#### 1,234\nsome trailing text", "1,234", "#### takes the rest of its line"),
    ("The answer is 4.\n#### 5", "5", "#### beats 'the answer is'"),
    ("#### Step 1: add\n3 + 4 = 7, so the answer is 7.", "7", "a markdown heading is not ####"),
    ("The answer is 42.", "42", "'the answer is', sentence period dropped"),
    ("Thus the answer is 3.5.", "3.5", "decimal point is not a sentence end"),
    ("The answer is .5.", ".5", "leading decimal point kept"),
    ("The answer is $18.", "18", "dollar sign dropped"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}",
     "Minerva format"),
    ("**Answer:** 17", "17", "markdown bold 'Answer:'"),
    ("Answer:\n\n17", "17", "answer on the next line"),
    ("The answer is 3. Wait, no: the answer is 4.", "4", "the last 'answer is' wins"),
    ("I have no idea.", None, "no answer at all, also when lenient"),
]


@pytest.mark.parametrize("response, expected", [pytest.param(r, e, id=i) for r, e, i in EXTRACTION])
def test_extract_answer(response, expected):
    """A response with a box: the same answer under both rules."""
    assert extract_answer(response) == expected
    assert extract_answer(response, require_box=False) == expected


@pytest.mark.parametrize("response, expected", [pytest.param(r, e, id=i) for r, e, i in EXTRACTION_LENIENT])
def test_extract_answer_without_a_box(response, expected):
    """The paper's rule (the default) finds no answer without a box; the lenient rule does."""
    assert extract_answer(response) is None
    assert extract_answer(response, require_box=False) == expected


# -----------------------------------------------------------------------------
# the final answer, graded through reward()

ANSWER_CHOICE = [
    case("\\boxed{1} then \\boxed{2}", "2", 1.0, "last complete box counts"),
    case("\\boxed{1} then \\boxed{2}", "1", 0.0, "an earlier box does not count"),
    case("\\boxed{1} then \\boxed{2", "1", 0.0, "truncated last box scores 0, no fallback"),
    case("\\boxed{1} then \\boxed{2", "2", 0.0, "truncated last box scores 0 even if right"),
    case("\\boxed{}", "0", 0.0, "empty box scores 0"),
    case("The answer is 12.", "12", 0.0, "paper rule: no box, no answer, even if 'the answer is' is right"),
    case("... \n#### 72", "72", 0.0, "paper rule: no box, no answer, even after a right ####"),
    case("I think it's 12", "12", 0.0, "no recognisable final answer scores 0"),
    case("\\boxed{2} \\text{ or } \\boxed{3}", "2", 0.0, "hedging between two boxes is wrong"),
    case("\\boxed{2} and \\boxed{-3}", "-3, 2", 0.0, "only the last box counts, not a list spread over boxes"),
    case("\\boxed{2} and \\boxed{-3}", "-3", 1.0, "the last of two joined boxes counts"),
    case("\\boxed{{{{{{{{{{{{{{5}}}}}}}}}}}}}}", "5", 1.0, "redundant braces, however deep"),
]

# require_box=False (--lenient-answers): a response without a box may answer in words or after ####
LENIENT = [
    case("The answer is 12.", "12", 1.0, "no box: 'the answer is'"),
    case("... \n#### 72", "72", 1.0, "no box: GSM8K ####"),
    case("Answer: 3/4", "0.75", 1.0, "no box: 'Answer:' and the usual equivalence"),
    case("The answer is 13.", "12", 0.0, "no box, wrong answer"),
    case("I think it's 12", "12", 0.0, "no recognisable final answer scores 0"),
    case("#### 12 ... so \\boxed{13}", "12", 0.0, "a box beats ####, also when lenient"),
    case("The answer is 12. \\boxed{1", "12", 0.0, "a truncated last box: no fallback, also when lenient"),
    case("\\boxed{12}", "12", 1.0, "a box counts under both rules"),
]

# golds are reduced by their own (lenient) rule: a GSM8K gold after '####' needs no box, while
# the response is held to the paper's rule (these run with the default require_box=True)
GOLD = [
    case("\\boxed{0.6}", "We find $x = \\frac{3}{5}$, so the answer is $\\boxed{\\frac{3}{5}}$.", 1.0,
         "MATH solution gold reduced to its box"),
    case("\\boxed{12}", "She buys 3 packs: 3*4 = <<3*4=12>>12 pens.\n#### 12", 1.0,
         "GSM8K rationale gold reduced to ####"),
    case("\\boxed{1000}", "Total is <<10*100=1000>>1000.\n#### 1,000", 1.0,
         "GSM8K gold with thousands separator"),
    case("\\boxed{13}", "She buys 3 packs: 3*4 = <<3*4=12>>12 pens.\n#### 12", 0.0,
         "GSM8K rationale gold, wrong answer"),
    case("\\boxed{3}", "$\\boxed{3}$", 1.0, "gold that is just a box"),
    case("\\boxed{3}", "  3  ", 1.0, "bare gold with spaces"),
    case("\\boxed{3}", "$3$", 1.0, "bare gold in dollar delimiters"),
]

NUMBERS = [
    case("\\frac12", "0.5", 1.0, "DESIGN pitfall: boxed frac12 equals 0.5"),
    case("0.5", "\\frac{1}{2}", 1.0, "decimal equals exact fraction"),
    case("1,000", "1000", 1.0, "DESIGN pitfall: thousands separator"),
    case("1,000,000", "1000000", 1.0, "two thousands separators"),
    case("12,345.67", "12345.67", 1.0, "thousands separator with decimals"),
    case("1{,}000", "1000", 1.0, "LaTeX {,} thousands separator"),
    case("1\\,000", "1000", 1.0, "thin-space thousands separator"),
    case("10000", "10,\\!000", 1.0, "MATH-style 10,\\!000 gold"),
    case("0.33", "\\frac{1}{3}", 0.0, "0.33 is not 1/3 (relative error 1%)"),
    case("0.3333333", "\\frac{1}{3}", 1.0, "0.3333333 is 1/3 within 1e-6 relative"),
    case("\\frac{1}{3}", "0.3333333", 1.0, "tolerance is symmetric in pred and gold"),
    case("0.33333", "\\frac{1}{3}", 0.0, "five 3s are 1e-5 off: not equal"),
    case("3", "3.0000001", 1.0, "decimal gold within 1e-6 relative"),
    case("1000001", "1000000", 0.0, "integers are exact, no tolerance"),
    case("1000000.5", "1000000", 1.0, "policy: 1e-6 is relative, also for large numbers"),
    case("0.0000001", "0", 0.0, "relative tolerance: nothing is close to an exact 0"),
    case("-5", "-5", 1.0, "negative integer"),
    case("-5", "5", 0.0, "sign matters"),
    case("-0", "0", 1.0, "minus zero is zero"),
    case("033", "33", 1.0, "AIME-style leading zeros"),
    case("18.00", "18", 1.0, "trailing zeros of a decimal"),
    case("0", "0.0", 1.0, "zero as decimal"),
    case("0.1", "\\frac{1}{10}", 1.0, "one tenth"),
    case(".5", "1/2", 1.0, "decimal without a leading zero"),
    case("-\\frac{3}{4}", "-0.75", 1.0, "negative fraction vs decimal"),
    case("\\frac{-3}{4}", "-\\frac34", 1.0, "sign inside or outside the fraction"),
    case("3/4", "\\frac{3}{4}", 1.0, "slash fraction"),
    case("\\frac{4}{8}", "\\frac{1}{2}", 1.0, "unreduced fraction"),
    case("\\frac{7}{3}", "2\\frac{1}{3}", 1.0, "mixed number means whole plus fraction"),
    case("-2\\frac{1}{3}", "-\\frac73", 1.0, "negative mixed number"),
    case("1e6", "1000000", 1.0, "scientific notation"),
    case("1.5\\times10^{3}", "1500", 1.0, "times ten to the power"),
    case("0.\\overline{3}", "\\frac13", 1.0, "repeating decimal is exact"),
    case("0.1\\overline{6}", "\\frac16", 1.0, "repeating decimal with a fixed part"),
    case("0.\\overline{3}", "0.33", 0.0, "repeating decimal vs a rounded one"),
    case("\\frac{1}{0}", "0.5", 0.0, "division by zero is not a number"),
    case("2^{10}", "1024", 1.0, "power evaluates"),
    case("10^{6}", "1000000", 1.0, "power of ten"),
    # tiny values: every numeric comparison is relative, so it never collapses to 'both are ~0'
    case("\\frac{1}{501!}", "\\frac{1}{500!}", 0.0, "1/501! is not 1/500! (both below 1e-1000)"),
    case("\\frac{1}{500!}", "\\frac{1}{500!}", 1.0, "1/500! is itself"),
    case("1/500!", "\\frac{1}{500!}", 1.0, "1/500!, two spellings"),
    case("\\frac{1}{500 \\cdot 499!}", "\\frac{1}{500!}", 1.0, "1/500!, written as 1/(500 * 499!)"),
    case("\\frac{1}{500!}", "0", 0.0, "a tiny value is not 0"),
    case("10^{-401}", "10^{-400}", 0.0, "10^-401 is not 10^-400"),
    case("10^{-400}", "10^{-400}", 1.0, "10^-400 is itself"),
    case("0.1\\times10^{-399}", "10^{-400}", 1.0, "10^-400, in scientific notation"),
    case("1+10^{-30}", "1", 0.0, "exact forms have no absolute tolerance either"),
    # scientific notation in LaTeX and in programming e-notation
    case("1.5e-4", "1.5\\times10^{-4}", 1.0, "e-notation vs times ten to the power"),
    case("1.5e-4", "1.5 \\cdot 10^{-4}", 1.0, "e-notation vs cdot ten to the power"),
    case("1.5\\times10^{-4}", "0.00015", 1.0, "times ten to the power vs the decimal"),
    case("1.5E-4", "0.00015", 1.0, "capital E"),
    case("1.6e-4", "1.5\\times10^{-4}", 0.0, "another mantissa"),
    case("1.5e-5", "1.5\\times10^{-4}", 0.0, "another exponent"),
    case("3\\times10^{2}", "300", 1.0, "an integer in scientific notation"),
    case("-10^{3}", "-1000", 1.0, "minus ten to the power"),
]

FORMATTING = [
    case("\\dfrac{3}{4}", "\\frac34", 1.0, "dfrac"),
    case("\\tfrac{3}{4}", "0.75", 1.0, "tfrac"),
    case("\\left(\\frac{1}{2}, 3\\right)", "(\\frac12,3)", 1.0, "left/right delimiters"),
    case("\\left( \\frac{1}{2}, 3 \\right)", "(0.5,3)", 1.0, "left/right with a decimal inside"),
    case("\\!5\\,", "5", 1.0, "spacing commands"),
    case("\\frac{1}{2}\\quad", "\\frac12", 1.0, "quad"),
    case("45^\\circ", "45", 1.0, "degrees"),
    case("30^{\\circ}", "30", 1.0, "degrees in braces"),
    case("45\u00b0", "45", 1.0, "unicode degree sign"),
    case("90^\\circ", "\\frac{\\pi}{2}", 0.0, "degrees are dropped, not converted to radians"),
    case("25\\%", "25", 1.0, "percent sign ignored"),
    case("6", "6\\%", 1.0, "percent sign in gold ignored"),
    case("50\\%", "0.5", 0.0, "policy: percent is dropped, not divided by 100"),
    case("5\\text{ cm}", "5", 1.0, "units in text"),
    case("12 \\mbox{ ft}^2", "12", 1.0, "squared units in mbox"),
    case("\\frac{1}{2} \\text{ cup}", "\\frac12", 1.0, "units after a fraction"),
    case("\\text{5 apples}", "5", 1.0, "whole answer in text with a unit word"),
    case("18 dollars", "18", 1.0, "plain unit word"),
    case("\\$18", "18", 1.0, "dollar sign"),
    case("\\$1.50", "1.5", 1.0, "dollars and cents"),
    case("\\$1,000", "1000", 1.0, "dollars with thousands separator"),
    case("x=3", "3", 1.0, "assignment matches the value"),
    case("x = 3", "x=3", 1.0, "assignment on both sides"),
    case("k = 7", "7", 1.0, "other variable names"),
    case("x=4", "3", 0.0, "assignment of a wrong value"),
    case("10101_{2}", "10101_2", 1.0, "base subscript with or without braces"),
    case("312_7", "312_4", 0.0, "the same digits in another base are another number"),
    case("312_4", "312_4", 1.0, "the same numeral in the same base"),
    case("312_{4}", "312_4", 1.0, "base 4 with braces"),
    case("0312_4", "312_4", 1.0, "a leading zero in base 4"),
    case("313_4", "312_4", 0.0, "another digit in base 4"),
    case("312", "312_4", 1.0, "bare digits are read in the gold's base"),
    case("312_4", "312", 1.0, "bare gold digits are read in the response's base"),
    case("54", "312_4", 0.0, "the base-ten value (3*16+1*4+2 = 54) is not the numeral asked for"),
    case("1A_{16}", "1a_{16}", 1.0, "hexadecimal digits in any case"),
    case("x_1", "x_2", 0.0, "a variable's index is not a base"),
    case("x_1", "x_1", 1.0, "a variable with an index is itself"),
]

STRUCTURES = [
    case("2, -3", "-3, 2", 1.0, "a list of solutions is unordered"),
    case("1, 2, 3", "3, 2, 1", 1.0, "longer unordered list"),
    case("\\{1, 2, 3\\}", "1, 2, 3", 1.0, "set braces around a list"),
    case("x = 2 \\text{ or } x = -3", "-3, 2", 1.0, "solutions written as x = .. or x = .."),
    case("1\\pm\\sqrt{2}", "1+\\sqrt2, 1-\\sqrt2", 1.0, "plus-minus expands to a list"),
    case("2", "2, -3", 0.0, "a missing solution"),
    case("2, -3, 5", "2, -3", 0.0, "an extra solution"),
    case("(1,2]", "(1,2)", 0.0, "interval endpoints: closed is not open"),
    case("[2, 5)", "[2,5]", 0.0, "interval endpoints: open is not closed"),
    case("(1, 2]", "(1,2]", 1.0, "same half-open interval"),
    case("(-\\infty, 0]", "(-\\infty,0]", 1.0, "unbounded interval"),
    case("(-\\infty,-1)\\cup(1,\\infty)", "(1,\\infty)\\cup(-\\infty,-1)", 1.0,
         "union of intervals in any order"),
    case("1 < x < 2", "(1,2)", 1.0, "inequality matches its interval"),
    case("x > 3", "(3, \\infty)", 1.0, "one-sided inequality matches its interval"),
    case("(3, -2)", "(3,-2)", 1.0, "ordered pair"),
    case("(3, -2)", "(-2, 3)", 0.0, "ordered pair: order matters"),
    case("(1, 2, 3)", "(3,2,1)", 0.0, "triple: order matters"),
    case("x=5, y=3", "(5,3)", 1.0, "named coordinates match the pair"),
    case("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 1.0,
         "column vector"),
    case("\\begin{pmatrix}2\\\\1\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 0.0,
         "column vector: order matters"),
    case("(1, 2)", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 1.0, "a tuple matches the column vector"),
    case("\\begin{pmatrix}2\\\\1\\end{pmatrix}", "(1, 2)", 0.0, "column vector vs tuple: order matters"),
    case("\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 1.0,
         "bmatrix equals pmatrix"),
    case("\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 0.0,
         "transposed matrix"),
    case("\\begin{pmatrix}0.5&0\\\\0&1\\end{pmatrix}", "\\begin{pmatrix}\\frac12&0\\\\0&1\\end{pmatrix}",
         1.0, "matrix entries: decimal vs fraction"),
    case("\\emptyset", "\\varnothing", 1.0, "empty set spellings"),
    case("(10^{-401}, 1)", "(10^{-400}, 1)", 0.0, "tiny values inside a tuple stay apart"),
    case("(\\frac{1}{501!}, 1)", "(\\frac{1}{500!}, 1)", 0.0, "tiny exact values inside a tuple stay apart"),
    case("(\\frac{1}{500!}, 1)", "(\\frac{1}{500!}, 1)", 1.0, "the same tuple of tiny values"),
    case("(0.0000001, 1)", "(0.0000002, 1)", 0.0, "decimals inside a tuple: relative, not rounded to 6 places"),
    case("(0.3333333, 1)", "(\\frac13, 1)", 1.0, "decimals inside a tuple within 1e-6 relative"),
    case("(1.5e-4, 2)", "(1.5\\times10^{-4}, 2)", 1.0, "e-notation inside a tuple"),
]

EXPRESSIONS = [
    case("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}", 1.0, "sqrt2 over 2, two spellings"),
    case("\\frac{1}{\\sqrt{3}}", "\\frac{\\sqrt{3}}{3}", 1.0, "rationalised denominator"),
    case("3\\sqrt{2}", "\\sqrt{18}", 1.0, "simplified radical"),
    case("\\sqrt{8}", "2\\sqrt{2}", 1.0, "simplified radical, other way"),
    case("\\frac{\\sqrt{3}}{2}", "0.8660254", 1.0, "exact form vs decimal within 1e-6"),
    case("\\frac{\\sqrt{3}}{2}", "0.866", 0.0, "exact form vs a rounded decimal"),
    case("6\\sqrt{3}", "10.3923", 1.0, "rounded decimal within 1e-6 relative"),
    case("\\sqrt{2}", "1.414", 0.0, "rounded decimal beyond 1e-6 relative"),
    case("2\\pi", "2 \\pi", 1.0, "pi with spacing"),
    case("\\frac{\\pi}{2}", "\\pi/2", 1.0, "pi over 2, two spellings"),
    case("\\pi", "3.14", 0.0, "pi is not 3.14"),
    case("x^2+1", "1+x^2", 1.0, "commuted polynomial"),
    case("x^2 - 4x + 4", "(x-2)^2", 1.0, "expanded vs factored"),
    case("x^2+2", "x^2+1", 0.0, "different polynomial"),
    case("\\frac{x}{501!}", "\\frac{x}{500!}", 0.0, "tiny exact coefficients stay apart"),
    case("\\sqrt{5+2\\sqrt{6}}", "\\sqrt{2}+\\sqrt{3}", 1.0, "a nested radical equals its denested form"),
    case("\\frac{3}{2}x", "1.5x", 1.0, "decimal coefficient"),
    case("y = 2x + 3", "y=2x+3", 1.0, "line equation"),
    case("y = 3 + 2x", "y=2x+3", 1.0, "line equation, reordered"),
    case("1+2i", "2i+1", 1.0, "complex number"),
    case("\\log_2 8", "3", 1.0, "logarithm evaluates"),
    case("\\binom{5}{2}", "10", 1.0, "binomial evaluates"),
    case("5!", "120", 1.0, "factorial evaluates"),
    case("\\infty", "\\infty", 1.0, "infinity"),
    case("-\\infty", "\\infty", 0.0, "minus infinity"),
    case("x", "y", 0.0, "different variables"),
    case("pi/2", "\\frac{\\pi}{2}", 1.0, "plain-text pi"),
    case("x**2+1", "x^2+1", 1.0, "plain-text power"),
    case("sqrt(2)/2", "\\frac{\\sqrt{2}}{2}", 1.0, "plain-text sqrt"),
    case("\u221a2/2", "\\frac{\\sqrt{2}}{2}", 1.0, "unicode square root"),
    case("2\u03c0", "2\\pi", 1.0, "unicode pi"),
    case("(-\u221e, 3]", "(-\\infty,3]", 1.0, "unicode infinity"),
    case("\u22125", "-5", 1.0, "unicode minus sign"),
]

CHOICES_AND_TEXT = [
    case("\\text{(B)}", "B", 1.0, "choice letter in text and parentheses"),
    case("\\textbf{(B)}", "(B)", 1.0, "choice letter in bold"),
    case("(D)", "\\textbf{(D)}", 1.0, "bold gold letter"),
    case("\\mathrm{(E)}", "E", 1.0, "choice letter in mathrm"),
    case("\\textbf{(C)}", "(B)", 0.0, "wrong choice letter"),
    case("A", "(B)", 0.0, "wrong bare letter"),
    case("\\textbf{(B)}\\ 12", "B", 1.0, "AMC style label and value: the label matches"),
    case("\\textbf{(B)}\\ 12", "12", 1.0, "AMC style label and value: the value matches"),
    case("12", "B", 0.0, "a value cannot match a bare letter gold"),
    case("\\text{Tuesday}", "Tuesday", 1.0, "word answer in text"),
    case("\\text{even}", "\\text{Even}", 1.0, "word answers ignore case"),
    case("\\text{odd}", "\\text{even}", 0.0, "different words"),
    case("\\text{No solution}", "\\text{no solution}", 1.0, "phrase answer"),
]


# Issue 28, item 6: four kinds of answers a careful human grader accepts, and their wrong
# neighbours. Each response is graded under both rules: (paper rule, lenient rule). A boxed
# answer scores the same under both; an unboxed one scores 0 under the paper rule.


def both(response, gold, paper, lenient, reason):
    return pytest.param(response, gold, paper, lenient, id=reason)


PERCENT = [
    both(boxed("50\\%"), "50", 1.0, 1.0, "percent sign next to the gold number"),
    both(boxed("50%"), "50", 1.0, 1.0, "bare percent sign"),
    both(boxed("50"), "50\\%", 1.0, 1.0, "gold with a percent sign, answer without"),
    both(boxed("50\\%"), "50%", 1.0, 1.0, "both with a percent sign"),
    both(boxed("50 percent"), "50", 1.0, 1.0, "percent as a word"),
    both(boxed("50\\text{ percent}"), "50\\%", 1.0, 1.0, "percent as a word in text"),
    both(boxed("12.5\\%"), "12.5", 1.0, 1.0, "decimal percentage"),
    both("The answer is 50%.", "50", 0.0, 1.0, "unboxed percentage: lenient only"),
    both("The answer is 50 percent.", "50\\%", 0.0, 1.0, "unboxed percent word: lenient only"),
    both("She saves half.\n#### 50%", "50", 0.0, 1.0, "GSM8K #### with a percent sign"),
    both(boxed("51\\%"), "50", 0.0, 0.0, "percent sign next to another number"),
    both(boxed("50"), "51\\%", 0.0, 0.0, "gold percentage, another number"),
    both(boxed("50 percent"), "5", 0.0, 0.0, "percent word next to another number"),
    both(boxed("50\\%"), "0.5", 0.0, 0.0, "policy: 50% is not the fraction 0.5"),
    both(boxed("0.5"), "50\\%", 0.0, 0.0, "policy: 0.5 is not the percentage 50%"),
    both("The answer is 51%.", "50", 0.0, 0.0, "unboxed percentage, another number"),
]

SENTENCES = [
    both("The answer is 12 apples.", "12", 0.0, 1.0, "unboxed number and unit word"),
    both("The final answer is 12 apples in total.", "12", 0.0, 1.0, "unboxed, several words after"),
    both("The answer is: she has 12 apples.", "12", 0.0, 1.0, "unboxed sentence around the number"),
    both("So the answer is that Janet makes $18 every day at the farmers' market.", "18", 0.0, 1.0,
         "unboxed sentence with a dollar sign"),
    both("The answer is $12$ apples.", "12", 0.0, 1.0, "unboxed, the number in math mode"),
    both(boxed("12 \\text{ apples}"), "12", 1.0, 1.0, "boxed number and unit in text"),
    both(boxed("12 apples"), "12", 1.0, 1.0, "boxed number and plain unit word"),
    both(boxed("\\text{12 apples}"), "12", 1.0, 1.0, "boxed text with number and unit"),
    both(boxed("\\text{She has 12 apples}"), "12", 1.0, 1.0, "boxed sentence"),
    both(boxed("\\text{She has } 12 \\text{ apples}"), "12", 1.0, 1.0, "boxed sentence in pieces"),
    both(boxed("12 square feet"), "12", 1.0, 1.0, "a square unit after the number"),
    both(boxed("\\text{a total of 12 apples}"), "12", 1.0, 1.0, "boxed sentence opening with 'a'"),
    both("The answer is 12 more apples.", "12", 0.0, 1.0, "a difference: 'how many more'"),
    both("The answer is 13 apples.", "12", 0.0, 0.0, "unboxed, another number"),
    both("The answer is: she has 13 apples.", "12", 0.0, 0.0, "unboxed sentence, another number"),
    both(boxed("13 apples"), "12", 0.0, 0.0, "boxed unit word, another number"),
    both(boxed("12 \\text{ apples}"), "13", 0.0, 0.0, "boxed unit in text, another gold"),
    both(boxed("\\text{She has 13 apples}"), "12", 0.0, 0.0, "boxed sentence, another number"),
    both("The answer is 3 apples and 4 pears.", "4", 0.0, 0.0, "two numbers: not the last one"),
    both(boxed("12 \\text{ dollars and } 50 \\text{ cents}"), "12", 0.0, 0.0, "12.50 is not 12"),
    both(boxed("12 thousand"), "12", 0.0, 0.0, "a multiplier word changes the value"),
    both(boxed("12\\text{ thousand}"), "12", 0.0, 0.0, "a multiplier word in text is not a unit"),
    both(boxed("5 squared"), "5", 0.0, 0.0, "an operation word changes the value"),
    both(boxed("the square of 5"), "5", 0.0, 0.0, "an operation before the number"),
    both(boxed("half of 12"), "12", 0.0, 0.0, "a fraction word changes the value"),
    both(boxed("two boxes of 6"), "6", 0.0, 0.0, "a number word is a second number"),
    both("The answer is more than 5.", "5", 0.0, 0.0, "a bound is not the value"),
    both("The answer is not 12.", "12", 0.0, 0.0, "a negation"),
    both(boxed("12 \\text{ or more}"), "12", 0.0, 0.0, "a hedge"),
    both(boxed("up to 12"), "12", 0.0, 0.0, "a bound in words"),
    both(boxed("\\text{June 5}"), "\\text{July 5}", 0.0, 0.0, "a gold's words count: June is not July"),
]

EQUATIONS = [
    both(boxed("x=5"), "5", 1.0, 1.0, "boxed equation vs bare gold"),
    both(boxed("x = 5"), "5", 1.0, 1.0, "boxed equation with spaces"),
    both(boxed("5"), "x=5", 1.0, 1.0, "bare answer vs equation gold"),
    both(boxed("x = 5"), "x=5", 1.0, 1.0, "equation vs equation"),
    both(boxed("x = \\frac{1}{2}"), "0.5", 1.0, 1.0, "equation with a fraction vs a decimal"),
    both(boxed("n = 12 \\text{ apples}"), "12", 1.0, 1.0, "equation with a unit"),
    both("The answer is x = 5.", "5", 0.0, 1.0, "unboxed equation: lenient only"),
    both("The answer is $x = 5$.", "x=5", 0.0, 1.0, "unboxed equation in math mode vs equation gold"),
    both(boxed("x = 5"), "6", 0.0, 0.0, "equation with another value"),
    both(boxed("x=6"), "x=5", 0.0, 0.0, "equation vs equation, another value"),
    both(boxed("6"), "x=5", 0.0, 0.0, "bare answer vs equation gold, another value"),
    both(boxed("x = -5"), "5", 0.0, 0.0, "equation with the opposite value"),
    both("The answer is x = 6.", "5", 0.0, 0.0, "unboxed equation, another value"),
    both(boxed("y = 5"), "x=5", 0.0, 0.0, "another variable: y = 5 is not the line x = 5"),
    both(boxed("x = 2x+3"), "y=2x+3", 0.0, 0.0, "another variable on the left of a line"),
    both(boxed("2x = 10"), "5", 0.0, 0.0, "an unsolved equation is not the value"),
    both(boxed("x > 5"), "5", 0.0, 0.0, "an inequality is not the value"),
    both(boxed("x = 5"), "x > 5", 0.0, 0.0, "the value is not the inequality"),
    both(boxed("x \\geq 5"), "x > 5", 0.0, 0.0, "another inequality"),
    both(boxed("x = 5 \\text{ or } x = -5"), "5", 0.0, 0.0, "an extra solution"),
    both(boxed("x=5, y=3"), "5", 0.0, 0.0, "two equations vs one value"),
]

TUPLES = [
    both(boxed("(1, 2)"), "(1,2)", 1.0, 1.0, "pair with a space"),
    both(boxed("\\left( 1, 2 \\right)"), "(1,2)", 1.0, 1.0, "pair with left/right"),
    both(boxed("(3, -4)"), "(3,-4)", 1.0, 1.0, "pair with a negative entry"),
    both(boxed("\\left(3,-4\\right)"), "(3, -4)", 1.0, 1.0, "left/right vs spaced gold"),
    both(boxed("( 3 , - 4 )"), "(3,-4)", 1.0, 1.0, "pair with spaces everywhere"),
    both(boxed("(1,\\ 2)"), "(1,2)", 1.0, 1.0, "pair with a LaTeX space"),
    both(boxed("\\left( \\frac{1}{2}, -\\frac{3}{4} \\right)"), "(0.5,-0.75)", 1.0, 1.0,
         "pair of fractions vs decimals"),
    both(boxed("(x, y) = (1, 2)"), "(1,2)", 1.0, 1.0, "named pair"),
    both(boxed("x = 1, y = 2"), "(1,2)", 1.0, 1.0, "coordinates as equations"),
    both(boxed("x = 1 \\text{ and } y = 2"), "(1,2)", 1.0, 1.0, "coordinates joined by 'and'"),
    both(boxed("(1, 2, 3)"), "(1,2,3)", 1.0, 1.0, "triple"),
    both("The answer is (1, 2).", "(1,2)", 0.0, 1.0, "unboxed pair: lenient only"),
    both("The answer is $\\left(3, -4\\right)$.", "(3,-4)", 0.0, 1.0,
         "unboxed pair in math mode: lenient only"),
    both(boxed("(2, 1)"), "(1,2)", 0.0, 0.0, "pair in the wrong order"),
    both(boxed("(1, 3)"), "(1,2)", 0.0, 0.0, "pair with another entry"),
    both(boxed("(3, 4)"), "(3,-4)", 0.0, 0.0, "pair with a lost sign"),
    both(boxed("(-4, 3)"), "(3,-4)", 0.0, 0.0, "pair swapped"),
    both(boxed("(x, y) = (2, 1)"), "(1,2)", 0.0, 0.0, "named pair in the wrong order"),
    both(boxed("1, 2"), "(1,2)", 0.0, 0.0, "two values are not the pair (or interval) (1, 2)"),
    both(boxed("(1, 2)"), "1, 2", 0.0, 0.0, "a pair (or interval) is not two solutions"),
    both(boxed("(2, 1)"), "\\{1,2\\}", 0.0, 0.0, "a pair is not a set"),
    both(boxed("\\{1, 2\\}"), "(1,2)", 0.0, 0.0, "a set is not a pair"),
    both(boxed("[1, 2]"), "(1,2)", 0.0, 0.0, "brackets are a closed interval, not the pair"),
    both(boxed("x = 1 \\text{ or } x = 2"), "(1,2)", 0.0, 0.0, "two alternatives are not the pair"),
    both(boxed("x=2 \\text{ and } y=1"), "(1,2)", 0.0, 0.0, "coordinates with swapped values"),
    both(boxed("(1, 2)"), "(1,2,3)", 0.0, 0.0, "pair vs triple"),
    both("The answer is (2, 1).", "(1,2)", 0.0, 0.0, "unboxed pair in the wrong order"),
]


@pytest.mark.parametrize("response, gold, paper, lenient", PERCENT + SENTENCES + EQUATIONS + TUPLES)
def test_grader_cases_under_both_rules(response, gold, paper, lenient):
    assert reward(response, gold) == paper
    assert reward(response, gold, require_box=False) == lenient


@check(ANSWER_CHOICE + GOLD)
def test_answer_and_gold(pred, gold, expected):
    assert reward(pred, gold) == expected


@check(LENIENT)
def test_lenient_answers(pred, gold, expected):
    assert reward(pred, gold, require_box=False) == expected


@check(NUMBERS + FORMATTING + STRUCTURES + EXPRESSIONS + CHOICES_AND_TEXT)
def test_equivalence(pred, gold, expected):
    assert reward(boxed(pred), gold) == expected


def test_synthetic_task_format():
    """The tiny pair's arithmetic task: 'answer \\boxed{answer}', sometimes after a trace."""
    assert reward("81 \\boxed{81}", "81") == 1.0
    assert reward("7*30+7*8=210+56=266 \\boxed{266}", "266") == 1.0
    assert reward("6+0=6,7+3=10,8+5+1=14 \\boxed{1406}", "1406") == 1.0
    assert reward("6+0=6,7+3=10,8+5+1=14 \\boxed{1405}", "1406") == 0.0


# -----------------------------------------------------------------------------
# robustness: never raise, never hang


@pytest.mark.parametrize("response, gold", [
    pytest.param(None, "1", id="response None"),
    pytest.param("\\boxed{1}", None, id="gold None"),
    pytest.param(123, "123", id="response int"),
    pytest.param("\\boxed{1}", 1, id="gold int"),
    pytest.param(b"\\boxed{1}", "1", id="response bytes"),
    pytest.param("\\boxed{1}", "", id="empty gold"),
    pytest.param("\\boxed{1}", "\\boxed{1", id="gold with an unterminated box"),
    pytest.param("\\boxed{\x00\ufffd\U0001f600}", "1", id="control and emoji characters"),
    pytest.param("\\boxed{\\frac{1}{}}", "1", id="malformed latex"),
    pytest.param("\\boxed{)(][}{}", "1", id="unbalanced brackets"),
    pytest.param("\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}", "1", id="deeply nested braces"),
    pytest.param("\\boxed{" + "(" * 300 + "1" + ")" * 300 + "}", "2", id="deeply nested parentheses"),
    pytest.param("\\boxed{" + "1+" * 2000 + "1}", "1", id="answer longer than MAX_CHARS"),
    pytest.param("\\boxed{" * 20000, "1", id="many unterminated boxes"),
    pytest.param("\\boxed{1}, " * 20000, "2", id="many joined boxes"),
    pytest.param("word " * 200000 + "\\boxed{7}", "1", id="1 MB response"),
    pytest.param("answer is " * 50000, "1", id="many answer phrases"),
    pytest.param("\\boxed{" + " " * 100000 + "x}", "1", id="long run of spaces"),
])
def test_never_raises(response, gold):
    start = time.monotonic()
    assert reward(response, gold) == 0.0
    assert time.monotonic() - start < HANG_BOUND_S


def test_long_response_still_graded():
    assert reward("word " * 200000 + "\\boxed{7}", "7") == 1.0


ADVERSARIAL = [
    ("10^{100000}", "1", "DESIGN pitfall: ten to the 100000"),
    ("10^100000", "1", "unbraced huge exponent"),
    ("9^{9^{9}}", "1", "power tower"),
    ("2^{2^{2^{2^{2}}}}", "1", "tall power tower of twos"),
    ("10^{10^{10}}", "1", "googolplex-like"),
    ("99999999^{99999999}", "1", "huge base and exponent"),
    ("2^{100000 \\cdot 100000}", "1", "huge exponent as a product (caught by the time-out)"),
    ("(10^{10})!", "1", "factorial of a huge number"),
    ("1000000!", "1", "factorial of a million"),
    ("\\binom{10^{10}}{5000000000}", "1", "huge binomial"),
    ("\\gcd(9^{9^{9}}, 3)", "3", "gcd evaluates its arguments"),
    ("(x+1)^{1000}", "x", "slow symbolic expansion (answered or cut by the time-out)"),
    ("\\sum_{k=1}^{10^{9}} k^{k}", "1", "huge sum"),
]


@pytest.mark.parametrize("pred, gold", [pytest.param(p, g, id=i) for p, g, i in ADVERSARIAL])
def test_adversarial_returns_zero_in_time(pred, gold):
    start = time.monotonic()
    assert reward(boxed(pred), gold) == 0.0
    assert time.monotonic() - start < HANG_BOUND_S


def test_recovers_after_a_timeout():
    """A time-out kills the helper process; the next comparison must still work."""
    assert reward(boxed("2^{100000 \\cdot 100000}"), "1") == 0.0
    assert reward(boxed("x^2+1"), "1+x^2") == 1.0


def test_reward_in_worker_thread():
    """math-verify's own SIGALRM time-out fails off the main thread; ours must not."""
    inputs = [(boxed("12"), "12"), (boxed("\\sqrt{8}"), "2\\sqrt2"), (boxed("x^2+1"), "x^2+2"),
              (boxed("9^{9^{9}}"), "1"), (boxed("2^{100000 \\cdot 100000}"), "1")]
    results, times = {}, {}

    def work(i, response, gold):
        start = time.monotonic()
        results[i] = reward(response, gold)
        times[i] = time.monotonic() - start

    threads = [threading.Thread(target=work, args=(i, r, g)) for i, (r, g) in enumerate(inputs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=4 * HANG_BOUND_S)
    assert results == {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0, 4: 0.0}
    assert max(times.values()) < 4 * HANG_BOUND_S  # five calls share one helper, in turn


def test_warns_once_per_kind(caplog, monkeypatch):
    monkeypatch.setattr(verifier, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="verifier"):
        for _ in range(3):
            assert reward(None, "1") == 0.0
            assert reward(boxed("10^{100000}"), "1") == 0.0
    assert len(caplog.records) == 2


def test_import_is_cheap():
    """Importing verifier loads no sympy / math-verify and starts no process."""
    code = "import sys, verifier; assert 'sympy' not in sys.modules and verifier._helper is None"
    root = os.path.join(os.path.dirname(__file__), "..")
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)


_latexish = st.text(alphabet="0123456789abcxyz{}()[]\\^_,.=+-*/ !$%", max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=st.one_of(st.text(max_size=200), _latexish.map(boxed)), gold=_latexish)
def test_fuzz_never_raises(response, gold):
    assert reward(response, gold) in (0.0, 1.0)
