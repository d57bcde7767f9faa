#!/usr/bin/env python3
# File: extract_upstream.py
# Cuts named namespace-scope declarations out of a pinned upstream C++/CUDA source,
# verbatim, into a generated header: the build-time step of the conformance adapters
# whose upstream kernels sit in translation units that also hold torch host code (vLLM's
# csrc/cache_kernels.cu, csrc/sampler.cu, ...), which cannot be compiled without torch.
# The header is written into the build folder and never committed; its text is the
# pinned file's, byte for byte, for every item it holds.
#
#   extract_upstream.py --output H --input FILE ITEM... [--input FILE ITEM...]...
#
# ITEM is KIND:NAME:
#   function:NAME   every namespace-scope function definition named NAME (templates and
#                   their full specialisations: "function:f<int, float>" picks the one
#                   specialisation; a bare name picks the definitions written without
#                   template arguments after the name)
#   constant:NAME   every namespace-scope declaration statement that declares NAME
#                   (`NAME =`, `NAME{`, `NAME[`), variable templates included
#   type:NAME       every namespace-scope struct/class/union/enum definition named NAME
# Each item keeps its enclosing namespaces and the preprocessor conditionals it sits in
# (#if/#ifdef/#ifndef with the #elif/#else branches before it), re-emitted around it, so
# that the header means what the source means. Items are written in command-line order.
# A name that matches nothing, or a file whose braces do not balance, is an error
# (exit status 1): a pinned release that renamed a kernel fails the build, loudly.
import argparse
import hashlib
import re
import sys


class ExtractError(Exception):
    pass


def mask_source(text):
    """The text with comments, string and character literals and preprocessor lines
    replaced by spaces (newlines kept, so offsets and lines stay), and the directives:
    a list of (offset, directive text). Braces and parentheses are then matched on code
    only."""
    out = list(text)
    directives = []
    i, n = 0, len(text)
    line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n" else j + 1
            directives.append((i, re.sub(r"\\\n", " ", text[i:j])))
            blank(i, j)
            i = j
            continue
        line_start = False
        if c == "\n":
            line_start = True
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ExtractError("unterminated comment")
            blank(i, j + 2)
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            if end < 0:
                raise ExtractError("unterminated raw string")
            j = end + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\n":
                    raise ExtractError("unterminated literal at offset %d" % i)
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out), directives


NAMESPACE_HEADER = re.compile(r"^\s*((?:inline\s+)?namespace(?:\s+[\w:]+)?|extern)\s*$")
RECORD_HEADER = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:struct|class|union|enum)\b", re.S)


class Item:
    def __init__(self, start, end, body_open, namespaces, conditionals):
        self.start, self.end, self.body_open = start, end, body_open
        self.namespaces = namespaces      # namespace headers, outermost first
        self.conditionals = conditionals  # per open #if group: its directives so far


def match_brace(code, i, open_c, close_c):
    depth = 0
    for k in range(i, len(code)):
        if code[k] == open_c:
            depth += 1
        elif code[k] == close_c:
            depth -= 1
            if depth == 0:
                return k
    raise ExtractError("unbalanced '%s' at offset %d" % (open_c, i))


def top_level_items(text, code, directives):
    """Every declaration at namespace scope: (start, end) spans of the masked code, with
    its namespaces and conditional context."""
    items = []
    namespaces = []  # (header text, offset of its closing brace)
    conditionals = []
    pending = list(directives)
    i, n = 0, len(code)
    item_start = None

    def advance_directives(upto):
        while pending and pending[0][0] < upto:
            off, d = pending.pop(0)
            word = re.match(r"#\s*(\w*)", d).group(1)
            if word in ("if", "ifdef", "ifndef"):
                conditionals.append([d.strip()])
            elif word in ("elif", "elifdef", "elifndef", "else"):
                if not conditionals:
                    raise ExtractError("#%s without #if" % word)
                conditionals[-1].append(d.strip())
            elif word == "endif":
                if not conditionals:
                    raise ExtractError("#endif without #if")
                conditionals.pop()

    while i < n:
        c = code[i]
        if namespaces and i == namespaces[-1][1]:
            namespaces.pop()
            item_start = None
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if item_start is None:
            item_start = i
        if c == "{":
            header = code[item_start:i]
            if NAMESPACE_HEADER.match(header):
                namespaces.append((text[item_start:i].strip(), match_brace(code, i, "{", "}")))
                item_start = None
                i += 1
                continue
            close = match_brace(code, i, "{", "}")
            j = close + 1
            while j < n and code[j].isspace():
                j += 1
            if j < n and code[j] == ";":
                end = j + 1
            elif header.rstrip().endswith("=") or RECORD_HEADER.match(header):
                end = code.index(";", close) + 1
            else:
                end = close + 1
            body_open = i
        elif c == ";":
            end, body_open = i + 1, None
        elif c == "}":
            raise ExtractError("unbalanced '}' at offset %d" % i)
        else:
            if c == "(":
                i = match_brace(code, i, "(", ")")
            i += 1
            continue
        # Directives are masked, so an item starts at code: the conditionals around it are
        # re-emitted from the context, never copied as text.
        advance_directives(item_start)
        items.append(Item(item_start, end, body_open, [h for h, _ in namespaces], [list(g) for g in conditionals]))
        i = end
        item_start = None
    if namespaces:
        raise ExtractError("unterminated namespace '%s'" % namespaces[-1][0])
    return items


def name_pattern(name):
    """A regex for NAME with its template arguments, whitespace-insensitive."""
    m = re.match(r"^([A-Za-z_]\w*)(<.*>)?$", name)
    if not m:
        raise ExtractError("not a C++ name: '%s'" % name)
    base = re.escape(m.group(1))
    if m.group(2) is None:
        return r"(?<![\w:.>])" + base + r"\s*\("
    args = [re.escape(tok) for tok in re.findall(r"\w+|[^\w\s]", m.group(2))]
    return r"(?<![\w:.>])" + base + r"\s*" + r"\s*".join(args) + r"\s*\("


def selects(kind, name, item, code):
    text = code[item.start:item.end]
    if kind == "function":
        if item.body_open is None or RECORD_HEADER.match(code[item.start:item.body_open]):
            return False
        header = code[item.start:item.body_open]
        return re.search(name_pattern(name), header) is not None
    if kind == "type":
        return re.match(r"^\s*(?:template\s*<.*?>\s*)?(?:struct|class|union|enum(?:\s+class|\s+struct)?)\s+"
                        + re.escape(name) + r"\b", text, re.S) is not None
    if kind == "constant":
        if item.body_open is not None and not code[item.start:item.body_open].rstrip().endswith("="):
            return RECORD_HEADER.match(text) is None and re.search(
                r"(?<![\w:.])" + re.escape(name) + r"\s*\{", code[item.start:item.body_open + 1]) is not None
        return re.search(r"(?<![\w:.])" + re.escape(name) + r"\s*(=|\{|\[)", text) is not None
    raise ExtractError("unknown item kind '%s' (function, constant, type)" % kind)


def emit(item, text):
    lines = ["%s {" % h for h in item.namespaces]
    for group in item.conditionals:
        lines.extend(group)
    lines.append(text[item.start:item.end])
    lines.extend("#endif" for _ in item.conditionals)
    lines.extend("}  // %s" % h for h in reversed(item.namespaces))
    return "\n".join(lines) + "\n"


def extract(path, specs):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code, directives = mask_source(text)
    items = top_level_items(text, code, directives)
    chunks, missing = [], []
    for spec in specs:
        kind, sep, name = spec.partition(":")
        if not sep or not name:
            raise ExtractError("item '%s' is not KIND:NAME" % spec)
        found = [it for it in items if selects(kind, name, it, code)]
        if not found:
            missing.append(spec)
        for it in found:
            chunks.append("// %s: %s, line %d\n" % (spec, path, text.count("\n", 0, it.start) + 1) + emit(it, text))
    if missing:
        raise ExtractError("%s: no namespace-scope definition of %s" % (path, ", ".join(missing)))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return digest, chunks


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--input", nargs="+", action="append", required=True, metavar=("FILE", "ITEM"))
    args = parser.parse_args(argv)
    parts = []
    sources = []
    try:
        for group in args.input:
            if len(group) < 2:
                raise ExtractError("--input %s names no item" % group[0])
            digest, chunks = extract(group[0], group[1:])
            sources.append("//   %s (sha256 %s)" % (group[0], digest))
            parts.extend(chunks)
    except (ExtractError, OSError) as e:
        print("extract_upstream.py: error: %s" % e, file=sys.stderr)
        return 1
    header = ("// Generated by conformance/extract_upstream.py at build time; not committed, not edited.\n"
              "// Verbatim declarations of the pinned upstream sources:\n" + "\n".join(sources) + "\n"
              "#pragma once\n\n")
    text = header + "\n".join(parts)
    try:
        with open(args.output, encoding="utf-8") as f:
            if f.read() == text:
                return 0  # unchanged: keep the timestamp, no rebuild
    except OSError:
        pass
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
