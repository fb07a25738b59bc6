"""Micro-benchmark of verifier.reward: median and worst per-call time over a fixed list.

    python bench/bench_verifier.py [--repeats 20]

Three groups: the common case (short integers and fractions, as in the training loop's
synthetic task; never touches sympy), answers that need math-verify / sympy (run in the
helper process), and adversarial inputs (rejected up front or cut by the time-out).
The one-off start of the helper process is timed separately. No asserts: this only prints.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import verifier  # noqa: E402

COMMON = [
    ("81 \\boxed{81}", "81"),
    ("7*30+7*8=210+56=266 \\boxed{266}", "266"),
    ("6+0=6,7+3=10,8+5+1=14 \\boxed{1406}", "1406"),
    ("6+0=6,7+3=10,8+5+1=14 \\boxed{1405}", "1406"),
    ("So the answer is $\\boxed{\\frac{1}{2}}$.", "0.5"),
    ("So the answer is $\\boxed{\\dfrac{3}{4}}$.", "\\frac34"),
    ("So the answer is $\\boxed{-12}$.", "12"),
    ("So the answer is $\\boxed{1,000}$.", "1000"),
    ("She pays 3 * 6 = 18 dollars.\n#### 18", "18"),
    ("The answer is 0.3333333.", "\\frac{1}{3}"),
]

SYMPY = [
    ("$\\boxed{\\sqrt{2}/2}$", "\\frac{\\sqrt2}{2}"),
    ("$\\boxed{x^2+1}$", "1+x^2"),
    ("$\\boxed{2, -3}$", "-3, 2"),
    ("$\\boxed{(1,2]}$", "(1,2)"),
    ("$\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}$", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("$\\boxed{3\\sqrt{2}}$", "\\sqrt{18}"),
    ("$\\boxed{\\frac{\\pi}{2}}$", "\\pi/2"),
    ("$\\boxed{(-\\infty,1)\\cup(2,\\infty)}$", "(2,\\infty)\\cup(-\\infty,1)"),
]

ADVERSARIAL = [
    ("$\\boxed{10^{100000}}$", "1"),
    ("$\\boxed{9^{9^{9}}}$", "1"),
    ("$\\boxed{(10^{10})!}$", "1"),
    ("$\\boxed{2^{100000 \\cdot 100000}}$", "1"),  # passes the pre-screen: cut by the time-out
]


def timed(pairs, repeats):
    times = []
    for _ in range(repeats):
        for response, gold in pairs:
            start = time.perf_counter()
            verifier.reward(response, gold)
            times.append(time.perf_counter() - start)
    return times


def report(name, times):
    print(f"{name:<12} calls {len(times):5d}   median {statistics.median(times) * 1e3:9.3f} ms"
          f"   worst {max(times) * 1e3:9.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20,
                        help="passes over the sympy list (ten times as many over the common one)")
    args = parser.parse_args()
    report("common", timed(COMMON, args.repeats * 10))
    start = time.perf_counter()
    verifier.reward("$\\boxed{\\sqrt{4}}$", "2")  # the first sympy answer starts the helper
    print(f"{'helper start':<12} {(time.perf_counter() - start) * 1e3:.0f} ms (once per process)")
    report("sympy", timed(SYMPY, 1))
    report("sympy again", timed(SYMPY, args.repeats))  # math-verify caches recent parses
    report("adversarial", timed(ADVERSARIAL, 1))
