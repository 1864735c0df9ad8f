"""The Python package binds the library: no rule's message and no default is
written in its Python sources as well as in the library's C++ (docs/architecture.md,
"The run plan"). Exit 1 naming each copy.

  python_binds.py SOURCE_TREE [EXTRA_PY...]

EXTRA_PY: further Python files to check as if they were the package's (the test's
probe, which must be caught)."""

import ast
import pathlib
import re
import sys

# The library's files whose messages the package must take from it: the run plan,
# Accordion's rule, schedules, regime-detect's settings and GraVAC's.
LIBRARY = ["lib/plan/*.cpp", "lib/regime/detect.cpp", "lib/regime/levels.cpp", "lib/regime/gravac.cpp",
           "lib/io/schedule.cpp", "lib/app/regime_detect.cpp"]
# Keyword arguments whose default is the library's: the package binds it, never a literal.
BOUND_DEFAULTS = {"eta", "interval", "low", "high", "theta_min", "theta_max", "epsilon", "window", "omega",
                  "theta_s", "policy", "throughput", "gain"}
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def library_phrases(root):
    """String literals of three words and 20 characters or more from the library's messages."""
    phrases = set()
    for pattern in LIBRARY:
        for path in sorted(root.glob(pattern)):
            for line in path.read_text().splitlines():
                if line.lstrip().startswith(("//", "#include")):
                    continue
                for text in LITERAL.findall(line):
                    text = text.strip(" :;,()'")
                    if len(text.split()) >= 3 and len(text) >= 20:
                        phrases.add(text)
    return phrases


def python_strings(path):
    """The string constants and f-string parts of a Python file, docstrings left out."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append((node.lineno, node.value))
    return tree, out


def literal_defaults(tree):
    """(line, name) of each keyword argument in BOUND_DEFAULTS given a literal default."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            pairs = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg in BOUND_DEFAULTS and isinstance(default, ast.Constant) and default.value is not None \
                        and not isinstance(default.value, bool):
                    found.append((default.lineno, arg.arg))
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    phrases = library_phrases(root)
    if len(phrases) < 40:
        print(f"python_binds: found only {len(phrases)} library phrases in {LIBRARY}", file=sys.stderr)
        return 1
    files = sorted((root / "python/accordion").glob("*.py")) + [pathlib.Path(p) for p in sys.argv[2:]]
    copies = []
    for path in files:
        tree, strings = python_strings(path)
        for line, text in strings:
            for phrase in phrases:
                if phrase in text:
                    copies.append(f"{path}:{line}: the library's message '{phrase}' written again")
        for line, name in literal_defaults(tree):
            copies.append(f"{path}:{line}: {name}= has a literal default; bind the library's")
    for copy in copies:
        print("FAIL: " + copy, file=sys.stderr)
    if copies:
        return 1
    print(f"python_binds: ok ({len(files)} Python files, {len(phrases)} library phrases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
