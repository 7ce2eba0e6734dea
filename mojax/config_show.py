"""``--config.mode=show``: every key of a resolved config, its value and its one-line help.

The help of a key is the trailing ``# comment`` on the line(s) of ``mojax.defaults.base_config``
that set it (``c.rollout.num_samples = 8  # G`` → help ``G``), read from the source with ``ast`` and
``tokenize``; keys set without a comment, or not set in ``base_config`` at all (method keys,
estimator keyword arguments), get no help.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from collections.abc import Mapping
from typing import Any

__all__ = ["flatten", "help_texts", "show"]


def _dotted(node: ast.expr, root: str) -> str | None:
    """``c.model.variant`` → ``"model.variant"`` when the chain starts at ``root``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == root and parts:
        return ".".join(reversed(parts))
    return None


def _trailing_comments(source: str) -> dict[int, str]:
    """Line number → text of a comment that follows code on that line."""
    out, code_lines = {}, set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] in code_lines:
                out[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(tok.start[0])
            code_lines.add(tok.end[0])
    return out


def help_texts(fn=None, root: str = "c") -> dict[str, str]:
    """Dotted key → help for every ``root.<key> = value  # help`` assignment in ``fn``'s source
    (default ``mojax.defaults.base_config``). A multi-line assignment takes its first trailing
    comment."""
    if fn is None:
        from mojax import defaults

        fn = defaults.base_config
    source = textwrap.dedent(inspect.getsource(fn))
    comments = _trailing_comments(source)
    out = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            key = _dotted(target, root)
            if key is None:
                continue
            for line in range(node.lineno, node.end_lineno + 1):
                if line in comments:
                    out[key] = comments[line]
                    break
    return out


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key → leaf value of a (nested) ``ConfigDict`` / mapping; an empty section is one
    leaf ``{}``."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        elif isinstance(value, Mapping):
            out[path] = {}
        else:
            out[path] = value
    return out


def show(config: Any) -> str:
    """One line per leaf key of ``config``, sorted: ``key = value  # help``."""
    helps = help_texts()
    rows = [(k, repr(v), helps.get(k, "")) for k, v in sorted(flatten(config).items())]
    width = max((len(k) + len(v) + 3 for k, v, _ in rows), default=0)
    lines = []
    for key, value, text in rows:
        line = f"{key} = {value}"
        lines.append(f"{line:<{width}}  # {text}" if text else line)
    return "\n".join(lines) + "\n"
