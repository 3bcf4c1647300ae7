"""A safe arithmetic evaluator: Python's expression syntax read with ``ast``, only numbers, arithmetic and a few
math functions, every size bounded. Nothing is ever passed to eval or exec.

    evaluate("2 * (3 + 4) ** 2")   -> 98
    evaluate("sqrt(2) * pi")       -> 4.442882938158366
    evaluate("__import__('os')")   -> CalculatorError: ... only the functions ...
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

Number = int | float

MAX_EXPRESSION_CHARS = 1000
MAX_NODES = 500
MAX_INT_BITS = 13_000  # about 3900 decimal digits: below Python's 4300-digit limit on printing an int
MAX_FACTORIAL = 1000

BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log2": math.log2, "log10": math.log10,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh, "hypot": math.hypot,
    "degrees": math.degrees, "radians": math.radians, "floor": math.floor, "ceil": math.ceil,
    "factorial": math.factorial, "gcd": math.gcd,
}


class CalculatorError(ValueError):
    """An expression the calculator will not or cannot evaluate; the message says which part and why."""


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression (Python syntax; ``^`` is refused, say ``**``)."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("give an expression to evaluate, such as '2 * (3 + 4)'")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is {len(expression)} characters long; the limit is "
                              f"{MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as e:
        raise CalculatorError(f"not an arithmetic expression: {getattr(e, 'msg', None) or type(e).__name__}") \
            from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"the expression has more than {MAX_NODES} parts; split it up")
    try:
        return _value(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large for a floating-point number") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    except (ValueError, TypeError) as e:
        if isinstance(e, CalculatorError):
            raise
        raise CalculatorError(f"math error: {e}") from None


def _value(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return _checked(node.value)
    if isinstance(node, ast.Name):
        if node.id not in CONSTANTS:
            raise CalculatorError(f"unknown name {node.id!r}; the constants are {', '.join(CONSTANTS)}")
        return CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _value(node.left), _value(node.right)
        _check_size(node.op, left, right)
        return _checked(BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise CalculatorError("'^' is not a power here: write 2 ** 3 for 2 to the power 3")
    if isinstance(node, ast.Call):
        return _call(node)
    raise CalculatorError(f"{_describe(node)} is not allowed: only numbers, + - * / // % **, parentheses, "
                          f"the constants {', '.join(CONSTANTS)} and the functions {', '.join(FUNCTIONS)}")


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        raise CalculatorError(f"only the functions {', '.join(FUNCTIONS)} can be called")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise CalculatorError(f"{node.func.id}() takes plain arguments only")
    args = [_value(a) for a in node.args]
    if node.func.id == "factorial" and args and isinstance(args[0], int) and args[0] > MAX_FACTORIAL:
        raise CalculatorError(f"factorial is limited to n <= {MAX_FACTORIAL}")
    return _checked(FUNCTIONS[node.func.id](*args))


def _check_size(op: ast.operator, left: Number, right: Number) -> None:
    """Refuse before computing an integer result over MAX_INT_BITS (a float overflows on its own)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    if isinstance(op, ast.Pow) and right > 0 and abs(left) > 1:
        if right * math.log2(abs(left)) > MAX_INT_BITS:
            raise CalculatorError(f"{left} ** {right} is too large (results are limited to about "
                                  f"{int(MAX_INT_BITS * math.log10(2))} digits)")
    if isinstance(op, ast.Mult) and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
        raise CalculatorError(f"the product is too large (results are limited to about "
                              f"{int(MAX_INT_BITS * math.log10(2))} digits)")


def _checked(value: Any) -> Number:
    if isinstance(value, complex):
        raise CalculatorError("the result is a complex number, which the calculator does not handle")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"the result is too large (limited to about {int(MAX_INT_BITS * math.log10(2))} "
                              f"digits)")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"attribute access (.{node.attr})"
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return f"the operator {type(node.op).__name__}"
    return {"Compare": "a comparison", "Subscript": "indexing", "Lambda": "a lambda", "BoolOp": "and/or",
            "IfExp": "if/else"}.get(type(node).__name__, f"a {type(node).__name__}")
