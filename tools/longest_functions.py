#!/usr/bin/env python3
"""The longest function bodies of C++ and CUDA sources.

Usage: longest_functions.py [--max N] [--top K] PATHS...

PATHS are files or folders (searched recursively for .cpp .cc .cxx .h .hpp .cu .cuh). Prints the
K longest functions (default 20), one per line as "FILE:LINE NAME LINES", where LINE is the line
of the body's opening brace and LINES counts from that line to the closing brace, inclusive.
With --max N, also lists every function longer than N lines and exits 1 when there is one.

A function is a brace block at namespace or class scope whose preceding text (since the last
';', '{' or '}' at that scope) ends with a ')' and optional qualifiers: const, volatile,
noexcept(...), override, final, &, &&, mutable, try, a trailing return type "-> T", or a
member-initializer list ": a_(x), b_{y}". Everything inside a function (lambdas, local classes)
counts toward it. Namespace, class, struct, union and enum bodies and "= {" initialisers are not
functions. The scanner skips comments, string and character literals (raw strings included,
digit separators 1'000 are not character literals), preprocessor lines and #if 0 blocks.
"""

import os
import re
import sys

EXTENSIONS = (".cpp", ".cc", ".cxx", ".h", ".hpp", ".cu", ".cuh")
QUALIFIERS = {"const", "volatile", "override", "final", "noexcept", "mutable", "&", "&&", "try",
              "constexpr", "consteval", "throw"}
SCOPE_KEYWORDS = {"namespace", "class", "struct", "union", "extern"}
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}


class Scanner:
    """Turns a source text into (char, line) items with comments and preprocessor lines
    removed (a space stands for them and for any whitespace) and each string or character
    literal replaced by one '"' item."""

    def __init__(self, text):
        self.text = text
        self.n = len(text)

    def items(self):
        text, n = self.text, self.n
        i, line = 0, 1
        at_line_start = True  # only whitespace seen since the last newline
        if_zero_depth = 0     # > 0 while inside "#if 0"
        while i < n:
            c = text[i]
            if c == "\n":
                line += 1
                at_line_start = True
                i += 1
                yield (" ", line)
                continue
            if c in " \t\r\f\v":
                i += 1
                yield (" ", line)
                continue
            if c == "\\" and i + 1 < n and text[i + 1] == "\n":  # line splice
                i += 2
                line += 1
                continue
            if c == "/" and i + 1 < n and text[i + 1] == "/":
                i, line = self._skip_line_comment(i, line)
                continue
            if c == "/" and i + 1 < n and text[i + 1] == "*":
                i, line = self._skip_block_comment(i, line)
                yield (" ", line)
                continue
            if c == "#" and at_line_start:
                i, line, directive = self._skip_directive(i, line)
                words = directive.split()  # "#", keyword, arguments
                if len(words) > 1:
                    kw, rest = words[1], words[2:]
                    if if_zero_depth:
                        if kw in ("if", "ifdef", "ifndef"):
                            if_zero_depth += 1
                        elif kw == "endif" or (kw in ("else", "elif") and if_zero_depth == 1):
                            if_zero_depth -= 1
                    elif kw == "if" and rest and rest[0] == "0":
                        if_zero_depth = 1
                continue
            at_line_start = False
            if if_zero_depth:
                # Inside #if 0: skip to the end of the line (keeping literals from confusing us).
                j = text.find("\n", i)
                i = n if j < 0 else j
                continue
            if c == '"':
                prefix = self._prefix_before(i)
                if prefix in RAW_PREFIXES:
                    i, line = self._skip_raw_string(i, line)
                else:
                    i, line = self._skip_quoted(i, line, '"')
                yield ('"', line)
                continue
            if c == "'":
                run = self._run_before(i)
                if run and run[0].isdigit():  # digit separator: 1'000'000, 0xFF'FF
                    i += 1
                    continue
                i, line = self._skip_quoted(i, line, "'")
                yield ('"', line)
                continue
            yield (c, line)
            i += 1

    def _run_before(self, i):
        j = i
        while j > 0 and (self.text[j - 1].isalnum() or self.text[j - 1] in "_."):
            j -= 1
        return self.text[j:i]

    def _prefix_before(self, i):
        j = i
        while j > 0 and (self.text[j - 1].isalnum() or self.text[j - 1] == "_"):
            j -= 1
        return self.text[j:i]

    def _skip_line_comment(self, i, line):
        text, n = self.text, self.n
        while i < n and text[i] != "\n":
            if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                i += 2
                line += 1
                continue
            i += 1
        return i, line

    def _skip_block_comment(self, i, line):
        j = self.text.find("*/", i + 2)
        j = self.n if j < 0 else j + 2
        return j, line + self.text.count("\n", i, j)

    def _skip_quoted(self, i, line, quote):
        text, n = self.text, self.n
        j = i + 1
        while j < n:
            ch = text[j]
            if ch == "\\":
                if j + 1 < n and text[j + 1] == "\n":
                    line += 1
                j += 2
                continue
            if ch == quote:
                return j + 1, line
            if ch == "\n":  # unterminated: stop at the end of the line
                return j, line
            j += 1
        return n, line

    def _skip_raw_string(self, i, line):
        text = self.text
        paren = text.find("(", i + 1)
        if paren < 0 or paren - i - 1 > 16:
            return self._skip_quoted(i, line, '"')
        delim = text[i + 1:paren]
        end = text.find(")" + delim + '"', paren + 1)
        end = self.n if end < 0 else end + len(delim) + 2
        return end, line + text.count("\n", i, end)

    def _skip_directive(self, i, line):
        """Skips a preprocessor directive (with splices and comments); returns its text."""
        text, n = self.text, self.n
        parts = []
        while i < n and text[i] != "\n":
            if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                i += 2
                line += 1
                parts.append(" ")
                continue
            if text.startswith("//", i):
                i, line = self._skip_line_comment(i, line)
                continue
            if text.startswith("/*", i):
                i, line = self._skip_block_comment(i, line)
                parts.append(" ")
                continue
            parts.append(text[i])
            i += 1
        return i, line, "".join(parts).replace("#", "# ", 1)


def tokenize_head(chars):
    """Tokens of a declaration head: identifiers, '::', '->', '&&', single punctuation, and the
    balanced groups '()', '[]', '{}' collapsed to one token each."""
    text = "".join(chars)
    tokens = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        m = IDENT_RE.match(text, i)
        if m:
            tokens.append(m.group(0))
            i = m.end()
            continue
        if c.isdigit():
            j = i
            while j < n and (text[j].isalnum() or text[j] in "._"):
                j += 1
            tokens.append(text[i:j])
            i = j
            continue
        if c in "([{":
            close = {"(": ")", "[": "]", "{": "}"}[c]
            depth, j = 0, i
            while j < n:
                if text[j] in "([{":
                    depth += 1
                elif text[j] in ")]}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            tokens.append(c + close)
            i = j + 1
            continue
        two = text[i:i + 2]
        if two in ("::", "->", "&&"):
            tokens.append(two)
            i += 2
            continue
        tokens.append(c)
        i += 1
    return tokens


def init_list_start(tokens):
    """Index of the ':' that starts a member-initializer list (after ') qualifiers'), or -1."""
    for k, tok in enumerate(tokens):
        if tok != ":":
            continue
        j = k - 1
        while j >= 0 and tokens[j] in QUALIFIERS:
            j -= 1
        if j >= 0 and tokens[j] == "()":
            return k
    return -1


def strip_signature_tail(tokens):
    """The tokens up to and including the parameter list, or None when the head does not end
    like a function declarator."""
    t = list(tokens)
    k = init_list_start(t)
    if k >= 0:
        if not t[k + 1:] or t[-1] not in ("()", "{}"):
            return None
        t = t[:k]
    # A trailing return type: "-> T" after the parameter list.
    if "->" in t:
        k = len(t) - 1 - t[::-1].index("->")
        if "()" in t[:k]:
            t = t[:k]
    while t:
        if t[-1] in QUALIFIERS:
            t.pop()
        elif t[-1] == "()" and len(t) >= 2 and t[-2] in ("noexcept", "throw"):
            t.pop()
            t.pop()
        elif t[-1] == "[]" and len(t) >= 2 and t[-2] == "[]":  # [[attributes]] after the declarator
            t.pop()
            t.pop()
        else:
            break
    if t and t[-1] == "()":
        return t
    return None


def function_name(sig):
    """A readable name from the tokens of a signature ending in its parameter list."""
    t = sig[:-1]
    if "operator" in t[-4:]:
        k = len(t) - 1 - t[::-1].index("operator")
        name = ["operator" + " ".join(t[k + 1:]).replace(" ", "")]
        j = k - 1
    else:
        name, j = [], len(t) - 1
    while j >= 0:
        tok = t[j]
        if tok == "::" or tok == "~" or (IDENT_RE.fullmatch(tok) and (not name or name[0] in ("::", "~", "<>"))):
            name.insert(0, tok)
            j -= 1
        elif tok == ">" and name and name[0] == "::":  # Foo<T>::bar: keep Foo<...>
            depth, k = 0, j
            while k >= 0:
                if t[k] == ">":
                    depth += 1
                elif t[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            name.insert(0, "<>")
            j = k - 1
        else:
            break
    joined = "".join(name).replace("<>::", "<...>::")
    if not joined or joined in ("::", "~"):
        if "=" in t:  # a lambda stored in a variable: name it by the variable
            k = t.index("=")
            if k > 0 and IDENT_RE.fullmatch(t[k - 1]):
                return t[k - 1] + " (lambda)"
        return "<anonymous>"
    return joined


def classify(tokens):
    """('func', signature) | ('scope', name) | ('other', None) for the head before a '{'."""
    if not tokens:
        return "other", None
    if tokens[-1] == "=":
        return "other", None
    sig = strip_signature_tail(tokens)
    if sig is not None:
        return "func", sig
    keywords = [t for t in tokens if t in SCOPE_KEYWORDS or t == "enum"]
    if keywords and keywords[0] != "enum":
        # The class name: the identifier after the last class-key, before any base list.
        name = ""
        for k, tok in enumerate(tokens):
            if tok in ("class", "struct", "union") and k + 1 < len(tokens):
                rest = [x for x in tokens[k + 1:] if IDENT_RE.fullmatch(x) and x not in ("final", "alignas")]
                if rest:
                    name = rest[0]
        return "scope", name if keywords[-1] in ("class", "struct", "union") else ""
    return "other", None


def in_init_list_brace(head_tokens):
    """True when a '{' now is a member's brace initializer inside a constructor's init list."""
    k = init_list_start(head_tokens)
    if k < 0 or k == len(head_tokens) - 1:
        return False
    last = head_tokens[-1]
    return bool(IDENT_RE.fullmatch(last)) or last == ">"


def functions_of(path):
    """[(line, name, lines)] of the functions of one file, and a warning or None."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    items = list(Scanner(text).items())
    found = []
    # The stack of open blocks: (kind, name, start line). Functions are recognised only while
    # every open block is a 'scope' (namespace, class, extern "C").
    stack = []
    head = []  # characters since the last ';', '{' or '}' at scope level
    i, n = 0, len(items)
    while i < n:
        c, line = items[i]
        at_scope = all(kind == "scope" for kind, _, _ in stack)
        if not at_scope:
            if c == "{":
                stack.append(("inner", "", line))
            elif c == "}":
                kind, name, start = stack.pop()
                if kind == "func":
                    found.append((start, name, line - start + 1))
                if all(k == "scope" for k, _, _ in stack):
                    head = []
            i += 1
            continue
        if c == ";":
            head = []
        elif c == "}":
            if stack:
                stack.pop()
            head = []
        elif c == "{":
            tokens = tokenize_head(head)
            if in_init_list_brace(tokens):
                # Consume the balanced initializer and keep building the head.
                depth = 0
                while i < n:
                    ch = items[i][0]
                    depth += ch == "{"
                    depth -= ch == "}"
                    head.append(ch)
                    if depth == 0:
                        break
                    i += 1
                i += 1
                continue
            kind, info = classify(tokens)
            if kind == "func":
                prefix = "".join(name + "::" for k, name, _ in stack if k == "scope" and name)
                stack.append(("func", prefix + function_name(info), line))
            elif kind == "scope":
                stack.append(("scope", info, line))
            else:
                stack.append(("other", "", line))
            head = []
        else:
            head.append(c)
        i += 1
    warning = None
    if stack:
        warning = "%s: %d unclosed brace(s) at the end (unbalanced preprocessor branches?)" % (path, len(stack))
    return found, warning


def source_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(EXTENSIONS):
                        yield os.path.join(dirpath, name)
        else:
            yield p


def main(argv):
    import argparse
    parser = argparse.ArgumentParser(description="The longest function bodies of C++ sources.")
    parser.add_argument("--max", type=int, default=None, help="exit 1 when a function is longer than N lines")
    parser.add_argument("--top", type=int, default=20, help="how many of the longest to print (default 20)")
    parser.add_argument("paths", nargs="+", help="files or folders")
    args = parser.parse_args(argv[1:])

    rows = []
    for path in source_files(args.paths):
        found, warning = functions_of(path)
        if warning:
            print("warning: " + warning, file=sys.stderr)
        rows += [(lines, path, line, name) for line, name, lines in found]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    width = max((len("%s:%d" % (r[1], r[2])) for r in rows[:args.top]), default=0)
    for lines, path, line, name in rows[:args.top]:
        print("%-*s %s %d" % (width, "%s:%d" % (path, line), name, lines))
    if args.max is not None:
        over = [r for r in rows if r[0] > args.max]
        if over:
            print("%d function(s) longer than %d lines:" % (len(over), args.max))
            for lines, path, line, name in over:
                print("%s:%d %s %d" % (path, line, name, lines))
            return 1
        print("no function longer than %d lines (%d functions)" % (args.max, len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
