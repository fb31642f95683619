"""Specification of the look-alike search (:mod:`course_lib.autograder.lookalike`) on a
generated class of chapter 2 (``softmax``, ``scaled_dot_product_attention``, ``self_attention``).

The class is made here: the starter stubs and the solution come from the chapter's notebooks;
three independent correct styles (explicit loops, einsum, matmul with ``transpose``) are written
below; a student is a style whose local names are renamed and whose text is reformatted at
random (spacing, line breaks and comments inside brackets, blank lines, quotes, indent width,
parentheses around a right-hand side, trailing commas), as a copier hiding a copy would.
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import keyword
import random
import textwrap
import tokenize
from collections.abc import Mapping

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.autograder.lookalike import (
    GUARANTEE,
    KEPT_NAMES,
    REFERENCE,
    THRESHOLD,
    Pair,
    find_lookalikes,
    fingerprints,
    normalise,
)

FUNCTIONS = ("softmax", "scaled_dot_product_attention", "self_attention")


def _functions(notebook: str) -> dict[str, str]:
    """The source of each graded function of a chapter 2 notebook, read with json and ast."""
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    out = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        text = "".join(cell["source"])
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # an IPython magic
        lines = text.splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS:
                out[node.name] = "\n".join(lines[node.lineno - 1 : node.end_lineno]) + "\n"
    assert set(out) == set(FUNCTIONS), notebook
    return out


STARTER = _functions("exercises/02_self_attention.ipynb")
SOLUTION = _functions("solutions/02_self_attention.ipynb")
#: Names a student cannot rename: the signatures' names and the graded functions.
FIXED = {t.string for src in STARTER.values() for t in tokenize.generate_tokens(io.StringIO(src).readline)}

STYLES: dict[str, dict[str, str]] = {
    "loops": {
        "softmax": """
            moved = x.movedim(dim, -1)
            rows = moved.reshape(-1, moved.shape[-1])
            result = torch.zeros_like(rows)
            for i in range(rows.shape[0]):
                row = rows[i]
                top = row.max()
                if torch.isinf(top) and top < 0:
                    continue
                total = 0.0
                for j in range(row.shape[0]):
                    result[i, j] = math.exp(row[j] - top)
                    total = total + result[i, j]
                result[i] = result[i] / total
            return result.reshape(moved.shape).movedim(-1, dim)
        """,
        "scaled_dot_product_attention": """
            d = q.shape[-1]
            n_q, n_k = q.shape[-2], k.shape[-2]
            scores = torch.zeros(*q.shape[:-1], n_k, dtype=q.dtype)
            for l in range(n_q):
                for s in range(n_k):
                    scores[..., l, s] = (q[..., l, :] * k[..., s, :]).sum(-1) / math.sqrt(d)
            if mask is not None:
                scores = scores.masked_fill(mask.logical_not(), -math.inf)
            weights = softmax(scores, dim=-1)
            out = torch.zeros(*weights.shape[:-1], v.shape[-1], dtype=v.dtype)
            for s in range(n_k):
                out = out + weights[..., s, None] * v[..., s, None, :]
            return out, weights
        """,
        "self_attention": """
            projected = []
            for weight in (W_q, W_k, W_v):
                rows = []
                for n in range(x.shape[0]):
                    rows.append(torch.mm(x[n], weight))
                projected.append(torch.stack(rows))
            queries, keys, values = projected
            return scaled_dot_product_attention(queries, keys, values, mask=mask)
        """,
    },
    "einsum": {
        "softmax": """
            peak = torch.amax(x, dim=dim, keepdim=True)
            peak = torch.nan_to_num(peak, neginf=0.0)
            exps = torch.exp(x - peak)
            denom = torch.einsum("...i->...", exps.movedim(dim, -1)).unsqueeze(-1).movedim(-1, dim)
            return torch.nan_to_num(exps / denom)
        """,
        "scaled_dot_product_attention": """
            scale = q.size(-1) ** -0.5
            logits = torch.einsum("...ld,...sd->...ls", q, k) * scale
            if mask is not None:
                logits = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
            attn = softmax(logits, dim=-1)
            context = torch.einsum("...ls,...sv->...lv", attn, v)
            return context, attn
        """,
        "self_attention": """
            queries = torch.einsum("nte,ed->ntd", x, W_q)
            keys = torch.einsum("nte,ed->ntd", x, W_k)
            values = torch.einsum("nte,ed->ntd", x, W_v)
            output, weights = scaled_dot_product_attention(queries, keys, values, mask)
            return output, weights
        """,
    },
    "matmul": {
        "softmax": """
            biggest = x.max(dim, keepdim=True)[0]
            biggest = torch.where(biggest == float("-inf"), torch.zeros_like(biggest), biggest)
            numer = (x - biggest).exp()
            denom = numer.sum(dim, keepdim=True).clamp(min=1e-30)
            return numer / denom
        """,
        "scaled_dot_product_attention": """
            dk = k.shape[-1]
            att = torch.matmul(q, k.transpose(-1, -2))
            att = att / dk ** 0.5
            if mask is not None:
                att = att.masked_fill(mask == 0, float("-inf"))
            att = softmax(att, -1)
            return torch.matmul(att, v), att
        """,
        "self_attention": """
            Q = torch.matmul(x, W_q)
            K = torch.matmul(x, W_k)
            V = torch.matmul(x, W_v)
            return scaled_dot_product_attention(Q, K, V, mask)
        """,
    },
}


def submission(bodies: Mapping[str, str]) -> dict[str, str]:
    """The starter notebook's functions with these bodies in place of ``raise NotImplementedError()``."""
    out = {}
    for f, stub in STARTER.items():
        head = stub[: stub.index("    # YOUR CODE HERE")]
        out[f] = head + textwrap.indent(textwrap.dedent(bodies[f]).strip("\n"), "    ") + "\n"
    return out


_COMMENTS = ("TODO check", "(N, T, D)", "numerically stable", "see lecture 2", "todo", "ok")
_NAMES = ("val", "tmp", "res", "acc", "mat", "vec", "arr", "buf", "cur", "item", "part", "z")


def fresh_names(source: str, rng: random.Random) -> dict[str, str]:
    """A random renaming of the local names of ``source`` (new names a student might choose)."""
    names, depth = set(), 0
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for t, after in itertools.pairwise(toks):
        depth += (t.string in "([{") - (t.string in ")]}") if t.type == tokenize.OP else 0
        if t.type == tokenize.NAME and not (depth and after.string == "="):  # not a keyword argument
            names.add(t.string)
    local = names - FIXED - KEPT_NAMES - set(keyword.kwlist)
    return {n: f"{rng.choice(_NAMES)}_{i}{rng.randint(0, 99)}" for i, n in enumerate(sorted(local))}


def restyle(source: str, rng: random.Random, renames: Mapping[str, str] | None = None) -> str:
    """``source`` renamed and re-rendered with random formatting (the same tokens, same meaning)."""
    renames = fresh_names(source, rng) if renames is None else renames
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
    unit = rng.choice(("    ", "  ", "\t", "        "))
    out: list[str] = []
    level = depth = 0
    line_start, prev, wrap = True, None, 0
    calls: list[bool] = []  # per open bracket: is it a call's (or a signature's)?
    for i, t in enumerate(toks):
        typ, s = t.type, t.string
        if typ in (tokenize.ENCODING, tokenize.ENDMARKER, tokenize.NL):
            continue
        if typ == tokenize.INDENT or typ == tokenize.DEDENT:
            level += 1 if typ == tokenize.INDENT else -1
            continue
        if typ == tokenize.NEWLINE:
            out.append(")" * wrap + _line_end(rng))
            wrap = 0
            line_start, prev = True, None
            continue
        if typ == tokenize.NAME and s in renames and (prev is None or prev.string != "."):
            s = renames[s]
        if typ == tokenize.STRING:
            s = _requoted(s, rng)
        if line_start:
            out.append(unit * level)
            line_start = False
        elif prev is not None:
            out.append(_space(prev, t, rng))
        if typ == tokenize.OP and s in "([{":
            calls.append(
                s == "("
                and prev is not None
                and ((prev.type == tokenize.NAME and not keyword.iskeyword(prev.string)) or prev.string in ")]")
            )
        elif typ == tokenize.OP and s in ")]}":
            if calls.pop() and prev is not None and prev.string not in "(," and rng.random() < 0.2:
                out.append(",")  # a trailing comma in a call or a signature
        out.append(s)
        depth = len(calls)
        if depth == 0 and (s == "return" or (s == "=" and not wrap)) and toks[i + 1].type != tokenize.NEWLINE:
            if rng.random() < 0.3:
                out.append(" (\n" + unit * (level + 1))  # black's parentheses around a long right-hand side
                wrap += 1
                prev = None
                continue
        if depth > 0 and s in ",([{" and rng.random() < 0.3:
            out.append(_break_in_brackets(rng))
            prev = None
            continue
        prev = t
    return "".join(out)


def _line_end(rng: random.Random) -> str:
    """The end of a logical line: sometimes a comment before it, sometimes a blank line after."""
    comment = "  # " + rng.choice(_COMMENTS) if rng.random() < 0.2 else ""
    return comment + "\n" + "\n" * (rng.random() < 0.2)


def _break_in_brackets(rng: random.Random) -> str:
    """A line break inside brackets: sometimes a comment before it, a random indent after."""
    comment = "  # " + rng.choice(_COMMENTS) if rng.random() < 0.3 else ""
    return comment + "\n" + " " * rng.randint(0, 12)


def _requoted(s: str, rng: random.Random) -> str:
    """A string literal ``s``, half the time in single quotes where that means the same."""
    if s[0] == '"' and not s.startswith('"""') and "'" not in s and "\\" not in s:
        return "'" + s[1:-1] + "'" if rng.random() < 0.5 else s
    return s


_WORDS = (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)


def _space(prev: tokenize.TokenInfo, cur: tokenize.TokenInfo, rng: random.Random) -> str:
    """A separator that keeps both tokens as they are: a space where one is needed, else random."""
    if (prev.type in _WORDS and cur.type in _WORDS) or tokenize.NUMBER in (prev.type, cur.type):
        return " " * rng.randint(1, 2)
    if prev.type == cur.type == tokenize.OP and not {prev.string, cur.string} & set("()[]{},"):
        return " "
    return " " * rng.randint(0, 2)


def restyled(functions: Mapping[str, str], rng: random.Random) -> dict[str, str]:
    return {f: restyle(src, rng) for f, src in functions.items()}


def test_the_generated_sources_are_python():
    rng = random.Random(0)
    for style in STYLES.values():
        for _ in range(20):
            for src in restyled(submission(style), rng).values():
                ast.parse(src)
    for src in restyled(SOLUTION, rng).values():
        ast.parse(src)


#: The parameters each graded function's extra statements may use.
PARAMETERS = {
    "softmax": ("x",),
    "scaled_dot_product_attention": ("q", "k", "v"),
    "self_attention": ("x", "W_q", "W_k", "W_v"),
}
_METHODS = ("sum", "mean", "abs", "clone", "detach", "float", "contiguous", "transpose", "reshape", "view")
_METHODS += ("size", "dim", "amax", "amin", "norm", "flatten", "unsqueeze", "squeeze", "exp", "softmax")
_TORCH = ("zeros_like", "ones_like", "isfinite", "isnan", "clamp", "cat", "stack", "sqrt", "exp", "log", "where")
_FIELDS = ("shape", "dtype", "device", "T", "mT", "ndim")


def extra_statement(function: str, rng: random.Random) -> str:
    """A random statement a student may add to ``function`` (a check, a debug line, a temporary)."""

    def expr(depth: int) -> str:
        param = rng.choice(PARAMETERS[function])
        kind = rng.randrange(5 if depth else 3)
        if kind == 0:
            return f"{param}.{rng.choice(_FIELDS)}"
        if kind in (1, 2):
            args = [rng.choice((str(rng.randint(-2, 3)), param)) for _ in range(rng.randint(kind == 2, 2))]
            args += ["dim=-1"] * (rng.random() < 0.3)
            call = f"{param}.{rng.choice(_METHODS)}" if kind == 1 else f"torch.{rng.choice(_TORCH)}"
            return f"{call}({', '.join(args)})"
        if kind == 3:
            return f"{expr(depth - 1)} {rng.choice(('+', '-', '*', '/', '@'))} {expr(depth - 1)}"
        return f"({expr(depth - 1)})[{rng.randint(-1, 2)}]"

    form = rng.randrange(3)
    if form == 0:
        return f"assert {expr(1)} {rng.choice(('==', '!=', '<=', '>='))} {expr(1)}"
    if form == 1:
        return f"print({expr(2)})"
    return f"tmp_{rng.randint(0, 9)} = {expr(2)}"


def with_extras(function: str, body: str, rng: random.Random, n: int) -> str:
    """``body`` with ``n`` random :func:`extra_statement` lines inserted before top-level lines."""
    lines = textwrap.dedent(body).strip("\n").splitlines()
    for _ in range(n):
        tops = [i for i, line in enumerate(lines) if not line[0].isspace()]
        at = rng.choice(tops)
        lines[at:at] = [extra_statement(function, rng)]
    return "\n".join(lines)


def generated_class(n: int, seed: int, copies: int) -> tuple[dict[str, dict[str, str]], set[tuple[str, str]]]:
    """``n`` students: each function one of the styles with random extra statements; ``copies`` of
    them copy another student (renamed, reformatted, one statement added to half of them).
    Returns the class and the copied pairs (sorted names)."""
    rng = random.Random(seed)
    students: dict[str, dict[str, str]] = {}
    bodies: dict[str, dict[str, str]] = {}
    for i in range(n - copies):
        name = f"s{i:04d}"
        bodies[name] = {
            f: with_extras(f, STYLES[rng.choice(list(STYLES))][f], rng, rng.randint(2, 4)) for f in FUNCTIONS
        }
        students[name] = submission(bodies[name])
    planted = set()
    for i, original in enumerate(rng.sample(sorted(students), copies)):
        name = f"s{n - copies + i:04d}"
        changed = {f: with_extras(f, b, rng, 1) if i % 2 else b for f, b in bodies[original].items()}
        students[name] = restyled(submission(changed), rng)
        planted.add((original, name))
    return students, planted


def tokens(source: str) -> list[str]:
    return [t for t, _ in normalise(source)]


# -- normalisation -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_renaming_and_reformatting_leave_the_normalised_tokens_unchanged(seed):
    rng = random.Random(seed)
    for functions in [submission(style) for style in STYLES.values()] + [SOLUTION]:
        for src in functions.values():
            assert tokens(restyle(src, rng)) == tokens(src)


def test_comments_docstrings_and_blank_lines_leave_no_token():
    plain = "def f(x):\n    y = x + 1\n    return y\n"
    noisy = 'def f(x):\n    """Add one."""\n\n    # the sum\n    y = x + 1  # one\n\n    "a string as a comment"\n    return y\n'
    assert tokens(noisy) == tokens(plain)


def test_one_line_forms_equal_their_block_forms():
    assert tokens("if c: a = 1; b = 2\n") == tokens("if c:\n    a = 1\n    b = 2\n")
    assert tokens("class A(): pass\n") == tokens("class A:\n    pass\n")
    assert tokens("x = (a + b)\nreturn (x)\n") == tokens("x = a + b\nreturn x\n")
    assert tokens("f(a, b,)\n") == tokens("f(a, b)\n")


def test_what_the_code_does_is_kept():
    """Calls, attributes, operators, builtins and the block structure stay as written."""
    base = tokens("y = torch.matmul(q, k)\n")
    assert tokens("y = torch.einsum(q, k)\n") != base
    assert tokens("y = q @ k\n") != base
    assert tokens("y = np.matmul(q, k)\n") != base
    assert tokens("y = torch.matmul(q, k)\nfor i in range(3):\n    y = y\n") != tokens(
        "y = torch.matmul(q, k)\nfor i in len(3):\n    y = y\n"
    )
    assert tokens("a = 1\n") == tokens("b = 'text'\n")  # names and literals are placeholders


def test_source_that_does_not_tokenize_is_a_value_error_naming_source():
    with pytest.raises(ValueError, match="source"):
        normalise("def f(:\n    x = '''open\n")
    with pytest.raises(TypeError, match="source: expected str"):
        fingerprints(b"x = 1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        fingerprints("x = 1", window=0)


# -- fingerprints ------------------------------------------------------------------------------


def _statements(rng: random.Random, n: int) -> str:
    return "\n".join(extra_statement("self_attention", rng) for _ in range(n)) + "\n"


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_shared_run_of_the_guaranteed_length_shares_a_fingerprint(seed):
    """Winnowing's guarantee: a run of at least GUARANTEE normalised tokens in both sources
    is seen, wherever it lies and whatever surrounds it."""
    rng = random.Random(seed)
    shared = _statements(rng, rng.randint(1, 3))
    while len(normalise(shared)) < GUARANTEE:
        shared += _statements(rng, 1)
    a = _statements(rng, rng.randint(0, 4)) + shared + _statements(rng, rng.randint(0, 4))
    b = _statements(rng, rng.randint(0, 4)) + shared + _statements(rng, rng.randint(0, 4))
    assert {h for h, _ in fingerprints(a)} & {h for h, _ in fingerprints(b)}


def test_fingerprints_are_the_same_in_every_process(tmp_path):
    """Stable across runs and machines (not Python's salted ``hash``)."""
    import subprocess
    import sys

    src = SOLUTION["scaled_dot_product_attention"]
    (tmp_path / "src.py").write_text(src)
    module = ROOT / "course_lib" / "autograder" / "lookalike.py"  # loaded alone: no torch to import
    code = (
        "import sys, json, types, importlib.util as u\n"
        "pkg = sys.modules['lk'] = types.ModuleType('lk')\n"  # a bare package for its relative imports
        f"pkg.__path__ = [{str(module.parent)!r}]\n"
        f"spec = u.spec_from_file_location('lk.lookalike', {str(module)!r})\n"
        "m = sys.modules['lk.lookalike'] = u.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "print(json.dumps(m.fingerprints(open(sys.argv[1]).read())))"
    )
    outs = set()
    for salt in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "src.py")],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": salt, "PATH": "/usr/bin:/bin"},
        )
        outs.add(done.stdout)
    assert len(outs) == 1
    assert [tuple(f) for f in json.loads(outs.pop())] == fingerprints(src)


# -- the search --------------------------------------------------------------------------------


def _find(students, **kw):
    return find_lookalikes(students, starter=STARTER, solution=SOLUTION, **kw)


def _student_pairs(pairs: list[Pair]) -> set[tuple[str, str]]:
    return {(p.a, p.b) for p in pairs if p.b != REFERENCE}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_a_generated_class_exactly_the_planted_copies_are_found(seed):
    """200 students, each function in one of three styles with 2 to 4 statements of their own;
    10 renamed and reformatted copies (half with one statement added): every copy is found,
    and no pair of independent students is."""
    students, planted = generated_class(200, seed, copies=10)
    pairs = _find(students)
    assert _student_pairs(pairs) == planted
    assert all(p.similarity >= THRESHOLD for p in pairs)


def test_independent_correct_solutions_in_different_styles_are_not_look_alikes():
    students = {style: submission(bodies) for style, bodies in STYLES.items()}
    assert _find(students) == []


def test_a_renamed_and_reformatted_copy_is_the_top_pair():
    rng = random.Random(5)
    students, _ = generated_class(40, seed=5, copies=0)
    students["copier"] = restyled(students["s0007"], rng)
    top = _find(students)[0]
    assert (top.a, top.b) == ("copier", "s0007")
    assert top.similarity == 1.0
    assert {r.function for r in top.regions} == set(FUNCTIONS)


def test_a_copy_of_the_solution_is_reported_as_matching_the_reference():
    rng = random.Random(6)
    students, _ = generated_class(40, seed=6, copies=0)
    students["borrower"] = restyled(SOLUTION, rng)
    pairs = _find(students)
    assert (pairs[0].a, pairs[0].b) == ("borrower", REFERENCE)
    assert pairs[0].similarity == 1.0
    assert all(p.b != REFERENCE for p in pairs[1:])


def test_students_who_left_the_starter_are_never_paired():
    students = {f"blank{i}": dict(STARTER) for i in range(8)}
    assert _find(students) == []


def test_code_every_student_has_is_not_evidence():
    """Statements in more than ``common`` of the submissions are idioms, not copying."""
    rng = random.Random(8)
    idiom = {f: with_extras(f, STYLES["matmul"][f], random.Random(0), 3) for f in FUNCTIONS}
    students = {f"s{i}": submission(idiom) for i in range(30)}
    assert _find(students) == []
    students["copy"] = restyled(students["s3"], rng)
    assert _find(students) == []  # identical to 30 others: nothing singles one of them out
    assert _find(students, common=1.0) != []


def test_a_function_that_does_not_tokenize_is_skipped_and_the_others_still_count():
    students, _ = generated_class(30, seed=9, copies=0)
    students["copier"] = dict(students["s0004"])
    students["copier"]["softmax"] = "def softmax(x, dim=-1:\n    '''open"
    (top,) = [p for p in _find(students) if "copier" in (p.a, p.b)]
    assert {top.a, top.b} == {"copier", "s0004"}
    assert "softmax" not in {r.function for r in top.regions}


def test_regions_point_at_the_copied_lines():
    students, _ = generated_class(30, seed=10, copies=0)
    original = students["s0002"]["self_attention"]
    end = original.index('"""\n', original.index('"""') + 3) + 4  # after the docstring
    students["copier"] = dict(
        students["s0002"], self_attention=original[:end] + "    print(x.shape)\n" * 6 + original[end:]
    )
    (pair,) = [p for p in _find(students) if "copier" in (p.a, p.b)]
    assert (pair.a, pair.b) == ("copier", "s0002")
    (region,) = [r for r in pair.regions if r.function == "self_attention"]
    assert region.a_lines[0] - region.b_lines[0] == 6  # the same lines, six lower in the copy
    assert region.a_lines[1] - region.b_lines[1] == 6
    assert region.b_lines[0] > original[:end].count("\n")  # in the body: the starter never counts


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"sources": [("a", {})]}, "sources: expected a mapping"),
        ({"sources": {1: {}}}, "sources: expected str student ids"),
        ({"sources": {REFERENCE: {}}}, "sources: a student may not be named"),
        ({"sources": {"a": {"softmax": 3}}}, "sources['a']: expected str -> str"),
        ({"starter": None}, "starter: expected a mapping"),
        ({"provided": "def f(): pass"}, "provided: expected a sequence of str, got str"),
        ({"provided": [b"code"]}, "provided: expected a sequence of str, got an item of type bytes"),
        ({"threshold": 1.5}, "threshold: expected a number in [0, 1]"),
        ({"threshold": "high"}, "threshold: expected a float"),
        ({"common": 0.0}, "common: expected a number in (0, 1]"),
    ],
)
def test_bad_arguments_give_a_clear_error_naming_the_argument(kwargs, phrase):
    args = {"sources": {}, "starter": STARTER, "solution": SOLUTION} | kwargs
    sources = args.pop("sources")
    with pytest.raises((TypeError, ValueError)) as caught:
        find_lookalikes(sources, **args)
    assert phrase in str(caught.value)
