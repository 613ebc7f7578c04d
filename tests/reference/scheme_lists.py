#!/usr/bin/env python3
"""The scheme lists written out in Python and shell against the C++ scheme table.

`normlab schemes --json` prints the table (include/normlab/nn/scheme_table.h). Each list below
names schemes by hand because its file implements them (its own code per scheme); a list may
lack a scheme only where the table here says why, and may not name a scheme the table lacks.
A new scheme in the table therefore fails this check until the reference, the Hugging Face
model and the benchmark peer have it, or until a line below says they do not.

Usage: scheme_lists.py NORMLAB SOURCE_DIR   (prints "scheme lists: PASS"; exits 1 naming the
list and the scheme)
"""
import ast
import json
import os
import re
import subprocess
import sys

# file -> (how its list is found, {scheme: why it may be missing})
LISTS = {
    "tests/reference/normlab_ref.py": ("SCHEMES", {"hyper": "tests/reference/hyper_ref.py"}),
    "src/train/hf/configuration_normlab.py": ("SCHEMES", {}),
    "tools/bench/train_bench.sh": (
        "default", {"hyper": "its options (n, dynamic) are not train_bench.sh's arguments: "
                             "tools/bench/hyper_bench.sh times it against tools/bench/torch_train.py"}),
}


def python_tuple(path, name):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    raise SystemExit(f"{path}: no {name} = (...)")


def shell_default(path):
    m = re.search(r"^schemes=\$\{1:-([a-z_,]+)\}", open(path, encoding="utf-8").read(), re.M)
    if not m:
        raise SystemExit(f"{path}: no schemes=${{1:-a,b,...}} line")
    return m.group(1).split(",")


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    normlab, src = argv[1], argv[2]
    table = [r["name"] for r in json.loads(subprocess.run(
        [normlab, "schemes", "--json"], check=True, capture_output=True, text=True).stdout)]
    problems = []
    for rel, (how, may_lack) in LISTS.items():
        path = os.path.join(src, rel)
        names = shell_default(path) if how == "default" else python_tuple(path, how)
        for s in names:
            if s not in table:
                problems.append(f"{rel}: '{s}' is not a scheme of the C++ table")
        for s in table:
            if s not in names and s not in may_lack:
                problems.append(f"{rel}: lacks scheme '{s}' (add it, or say in "
                                f"tests/reference/scheme_lists.py why it may be missing)")
    for p in problems:
        print(p)
    if problems:
        print(f"scheme lists: FAIL ({len(problems)} problems)")
        return 1
    print(f"scheme lists: PASS ({len(table)} schemes, {len(LISTS)} lists)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
