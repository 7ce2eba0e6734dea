"""Calculator tool: safe arithmetic by walking a whitelisted ``ast`` tree (never ``eval``).

A ``<calc>`` call is model-written text, so it is parsed with ``ast.parse(mode="eval")`` and
evaluated by a small interpreter that accepts only numbers, ``+ - * / // % **``, unary ``+ -``,
parentheses, the constants ``pi``/``e`` and a few ``math`` functions. Everything else (names,
attributes, calls to anything not listed, subscripts, comprehensions, strings, comparisons, lambdas)
is an error naming the construct. Sizes are bounded before computing -- an integer power or product
whose result would have more than ``max_digits`` digits is refused without being computed -- so
``9**9**9`` costs microseconds.

Output formatting: integers exactly (``str(int)``); floats with ``precision`` significant digits,
and integral floats below 1e15 without the ``.0`` (``6/3`` -> ``2``).
"""

import ast
import math
import threading
import time
import warnings

from mojax.rollout.tools.result import ToolResult

# Common non-ASCII spellings a model may write; everything else non-ASCII is refused by name.
_TRANSLATE = str.maketrans(
    {"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "^": "**", "（": "(", "）": ")"}
)
_LOG10_2 = math.log10(2)


# ``_parse`` swaps the process's warning filters (``warnings.catch_warnings``, not thread-safe): tool
# calls run on several threads, so one swap at a time, else a thread could restore another's filter
_PARSE_LOCK = threading.Lock()


def _parse(text: str) -> ast.Expression:
    """``ast.parse(text, mode="eval")`` with Python's ``SyntaxWarning`` silenced: text such as
    ``1or 2`` (a number run into a keyword) warns "invalid decimal literal" and parses, and under
    ``-W error`` the same warning would raise instead, so the model would read another
    observation. Silenced, the observation is the same under every warning filter."""
    with _PARSE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(text, mode="eval")


class CalculatorError(ValueError):
    """A bad or unsafe expression; the message is what the model is shown."""


def _int_digits(bits: int) -> int:
    return int(bits * _LOG10_2) + 1


class Calculator:
    """Evaluates arithmetic expressions safely.

    Args:
      max_length: longest accepted expression (characters), checked before parsing.
      max_depth: deepest accepted expression tree (nested operators / calls).
      max_digits: largest integer (decimal digits) an operand or result may have.
      max_exponent: largest absolute integer exponent in ``a ** n``.
      precision: significant digits of a float result.
    """

    _FUNCS = {
        "sqrt": (math.sqrt, 1, 1),
        "abs": (abs, 1, 1),
        "min": (min, 1, 16),
        "max": (max, 1, 16),
        "round": (round, 1, 2),
        "floor": (math.floor, 1, 1),
        "ceil": (math.ceil, 1, 1),
        "exp": (math.exp, 1, 1),
        "log": (math.log, 1, 2),
        "log2": (math.log2, 1, 1),
        "log10": (math.log10, 1, 1),
        "sin": (math.sin, 1, 1),
        "cos": (math.cos, 1, 1),
        "tan": (math.tan, 1, 1),
        "factorial": (math.factorial, 1, 1),
        "gcd": (math.gcd, 1, 16),
    }
    _CONSTS = {"pi": math.pi, "e": math.e}
    _BINOPS = {
        ast.Add: "+",
        ast.Sub: "-",
        ast.Mult: "*",
        ast.Div: "/",
        ast.FloorDiv: "//",
        ast.Mod: "%",
        ast.Pow: "**",
    }

    def __init__(
        self,
        max_length: int = 512,
        max_depth: int = 100,
        max_digits: int = 1000,
        max_exponent: int = 10_000,
        precision: int = 12,
    ):
        for name, value in (
            ("max_length", max_length),
            ("max_depth", max_depth),
            ("max_digits", max_digits),
            ("max_exponent", max_exponent),
            ("precision", precision),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Calculator: {name} must be a positive int, got {value!r}")
        self.max_length = max_length
        self.max_depth = max_depth
        self.max_digits = max_digits
        self.max_exponent = max_exponent
        self.precision = precision

    # ----------------------------------------------------------------------------------- public API

    def run(self, expression: str) -> ToolResult:
        """Evaluates ``expression``; a bad one gives ``exit_reason="error"``, ``"Error: ..."``."""
        start = time.monotonic()
        try:
            output = self.format(self.evaluate(expression))
        except CalculatorError as e:
            return ToolResult(
                output=f"Error: {e}",
                error=str(e),
                exit_reason="error",
                duration_s=time.monotonic() - start,
            )
        return ToolResult(output=output, duration_s=time.monotonic() - start)

    def evaluate(self, expression: str) -> int | float:
        """The value of ``expression`` (int or finite float); raises ``CalculatorError``."""
        if not isinstance(expression, str):
            raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
        text = expression.translate(_TRANSLATE).strip().rstrip("=").strip()
        if not text:
            raise CalculatorError("empty expression")
        if len(text) > self.max_length:
            raise CalculatorError(f"expression longer than {self.max_length} characters")
        bad = next((c for c in text if not (c.isascii() and (c.isprintable() or c in " \t"))), None)
        if bad is not None:
            raise CalculatorError(f"unsupported character {bad!r} (U+{ord(bad):04X})")
        try:
            tree = _parse(text)
        except SyntaxError as e:
            raise CalculatorError(f"syntax error: {e.msg}") from None
        except (RecursionError, MemoryError, ValueError):
            raise CalculatorError("expression too deeply nested") from None
        try:
            return self._eval(tree.body, 0)
        except RecursionError:
            raise CalculatorError("expression too deeply nested") from None

    def format(self, value: int | float) -> str:
        """Integers exactly; floats with ``precision`` significant digits (no trailing ``.0``)."""
        if isinstance(value, int):
            return str(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.{self.precision}g}"

    # ------------------------------------------------------------------------------------ internals

    def _check_int(self, value: int) -> int:
        if _int_digits(abs(value).bit_length()) > self.max_digits + 1 or (
            len(str(abs(value))) > self.max_digits
        ):
            raise CalculatorError(f"number too large (more than {self.max_digits} digits)")
        return value

    def _check(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalculatorError(f"result is not a real number ({type(value).__name__})")
        if isinstance(value, int):
            return self._check_int(value)
        if math.isnan(value):
            raise CalculatorError("undefined result (nan)")
        if math.isinf(value):
            raise CalculatorError("overflow (result is infinite)")
        return value

    def _eval(self, node, depth: int):
        if depth > self.max_depth:
            raise CalculatorError(f"expression nested deeper than {self.max_depth} levels")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise CalculatorError(f"unsupported literal {node.value!r}")
            return self._check(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            value = self._eval(node.operand, depth + 1)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINOPS:
            left = self._eval(node.left, depth + 1)
            right = self._eval(node.right, depth + 1)
            return self._check(self._binop(node.op, left, right))
        if isinstance(node, ast.Name):
            if node.id not in self._CONSTS:
                raise CalculatorError(f"unknown name {node.id!r}")
            return self._CONSTS[node.id]
        if isinstance(node, ast.Call):
            return self._check(self._call(node, depth))
        raise CalculatorError(f"unsupported syntax: {type(node).__name__}")

    def _binop(self, op, a, b):
        symbol = self._BINOPS[type(op)]
        both_int = isinstance(a, int) and isinstance(b, int)
        if symbol == "*" and both_int:
            if _int_digits(abs(a).bit_length() + abs(b).bit_length()) > self.max_digits + 1:
                raise CalculatorError(f"number too large (more than {self.max_digits} digits)")
        if symbol == "**":
            if isinstance(b, int) and abs(b) > self.max_exponent:
                raise CalculatorError(f"exponent larger than {self.max_exponent}")
            if both_int and b > 0 and abs(a) > 1:
                if _int_digits((abs(a).bit_length() - 1) * b) > self.max_digits + 1:
                    raise CalculatorError(f"number too large (more than {self.max_digits} digits)")
        try:
            if symbol == "+":
                return a + b
            if symbol == "-":
                return a - b
            if symbol == "*":
                return a * b
            if symbol == "/":
                return a / b
            if symbol == "//":
                return a // b
            if symbol == "%":
                return a % b
            result = a**b
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("overflow (result too large)") from None
        if isinstance(result, complex):
            raise CalculatorError("complex result (fractional power of a negative number)")
        return result

    def _call(self, node: ast.Call, depth: int):
        if not isinstance(node.func, ast.Name):
            raise CalculatorError(f"unsupported syntax: call of {type(node.func).__name__}")
        if node.func.id not in self._FUNCS:
            raise CalculatorError(f"unknown function {node.func.id!r}")
        name = node.func.id
        fn, lo, hi = self._FUNCS[name]
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError(f"{name}() takes positional numbers only")
        if not lo <= len(node.args) <= hi:
            raise CalculatorError(f"{name}() takes {lo}..{hi} arguments, got {len(node.args)}")
        args = [self._eval(a, depth + 1) for a in node.args]
        if name == "factorial":
            if not isinstance(args[0], int) or args[0] < 0:
                raise CalculatorError("factorial() needs a non-negative integer")
            if args[0] > 400:  # 400! has 869 digits; bound before computing
                raise CalculatorError("factorial() argument larger than 400")
        if name == "gcd" and not all(isinstance(a, int) for a in args):
            raise CalculatorError("gcd() needs integers")
        if name == "round" and len(args) == 2 and not isinstance(args[1], int):
            raise CalculatorError("round() needs an integer number of digits")
        try:
            return fn(*args)
        except (ValueError, OverflowError) as e:
            raise CalculatorError(f"{name}(): {e}") from None
