#!/usr/bin/env python3
"""Layering check: every include of normlab's library goes down the layer order, never up or sideways.

The library lives in layer folders, mirrored in src/<layer>/ and include/normlab/<layer>/. A
file may include headers of its own layer and of layers below it (lower rank). Two distinct
layers of the same rank are siblings and may not include each other (nn and data).

Usage:
  check_layers.py REPO_ROOT
      Checks the layout as it is. Prints "layers: PASS (N files)" and exits 0, or prints one
      line per problem and exits 1:
        FILE:LINE: <layer> includes <layer> (<header>)      an include going up or sideways
        FILE: not in a layer folder                         a file directly in src/ or include/normlab/
  check_layers.py --plan MAPPING REPO_ROOT
      For the flat layout before the move: MAPPING has one line per current file,
      "<current path> -> <new path>" (blank lines and lines starting with '#' are ignored).
      Each file, and each header it includes, is taken to live in the layer of its new path;
      prints the includes that would then go the wrong way, in the same format, with the
      current paths. Also reports current files missing from the mapping, mapping entries
      whose file does not exist, and new paths outside a layer folder. Exit 0 when clean.

The kernels layer is entered through its public headers only (KERNELS_PUBLIC): nn through
include/normlab/kernels/ops.h alone, the layers above it also through capabilities.h:
        FILE:LINE: <layer> includes kernels (<header>): <why>

The unit tests mirror the layers: every file under tests/unit/ sits in tests/unit/<layer>/, the
layer it mainly tests (tests may include any layer's public headers; only tests/unit/kernels/
may include the kernels' private headers, src/kernels/...):
        FILE: unit test not in a layer folder               a file directly in tests/unit/ or in
                                                            a folder that is not a layer
        FILE:LINE: unit test outside tests/unit/kernels/ includes a private kernels header (<header>)

Includes understood: "normlab/<layer>/..." (quoted or <angled>), and quoted private headers of
src/: relative to the including file's folder, then to src/ (e.g. "comm/backends.h" or
"kernels/kernels.h" resolve to src/<path>), then to src/<layer>/ for each layer. Other includes
(the standard library, LibTorch, generated headers) are not checked.
"""

import os
import re
import sys

# The layer order, lowest first. Equal rank = siblings: neither may include the other.
LAYERS = {
    "util": 0,    # file I/O, safetensors, logging, names, errors
    "kernels": 1,  # normlab's own CPU and CUDA kernels (src/kernels/cpu, src/kernels/cuda)
    "nn": 2,      # norms, linear, rope, attention, mlp, init, schemes, model, loss, activation checkpointing
    "data": 2,    # tokenizer, shards, loader, text input, data prepare
    "config": 3,  # the run configuration, its YAML, sweep grids
    "distributed": 4,  # communicator, comm backends, FSDP
    "eval": 5,    # evaluate, tasks, diagnostics, generate, info: what the trainer evaluates with
    "train": 6,   # trainer, optimizer, schedule, checkpoints, stability, export
    "sweep": 7,   # sweeps and their reports
    "testing": 8,  # test support for normlab's and its users' tests (equivalence of two models)
}

# The kernels wing is entered through its public headers only: nn (the model) through the ops
# header alone, the layers above it also through the capabilities header; its private headers
# (src/kernels/...) are the wing's own, and among the unit tests only tests/unit/kernels/ may
# include them.
KERNELS_OPS = "include/normlab/kernels/ops.h"
KERNELS_PUBLIC = {KERNELS_OPS, "include/normlab/kernels/capabilities.h"}


def kernels_entry_problem(src_layer, target):
    """Why a file of src_layer may not include `target` of the kernels layer, or None."""
    if src_layer == "kernels":
        return None
    if target not in KERNELS_PUBLIC:
        return "a private header of the kernels wing"
    if src_layer == "nn" and target != KERNELS_OPS:
        return "nn reaches the kernels through %s only" % KERNELS_OPS
    return None

ROOTS = ("include/normlab", "src")
SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".h.in")
# Files that need no layer folder (build glue and generated headers).
ALLOWED_ANYWHERE = {"src/pch.h", "src/build_config.h.in", "src/CMakeLists.txt", "include/normlab/version.h.in"}
# Generated headers that may be included from anywhere.
GENERATED = {"build_config.h", "normlab/version.h"}

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^">]+)[">]')


def strip_comments(text):
    """The text with comments blanked (newlines kept, so line numbers hold); strings are kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def includes_of(path):
    """[(line, kind, name)] for the #include lines of `path`; kind is '"' or '<'."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    result = []
    for lineno, line in enumerate(text.split("\n"), 1):
        m = INCLUDE_RE.match(line)
        if m:
            result.append((lineno, m.group(1), m.group(2).strip()))
    return result


def source_files(repo):
    """Paths relative to `repo` (with '/') of the checked files under the roots, sorted."""
    files = []
    for root in ROOTS:
        base = os.path.join(repo, root)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in filenames:
                if name.endswith(SUFFIXES):
                    rel = os.path.relpath(os.path.join(dirpath, name), repo).replace(os.sep, "/")
                    files.append(rel)
    return sorted(files)


def split_root(rel):
    """(root, parts below it) for a path under one of ROOTS, else (None, None)."""
    for root in ROOTS:
        if rel.startswith(root + "/"):
            return root, rel[len(root) + 1:].split("/")
    return None, None


def layer_of(rel):
    """(layer, error): the layer folder of a repository-relative path, or why it has none."""
    root, parts = split_root(rel)
    if root is None:
        return None, "not under include/normlab/ or src/"
    if len(parts) < 2:
        return None, "not in a layer folder"
    if parts[0] not in LAYERS:
        return None, "in an unknown layer folder '%s' (known: %s)" % (parts[0], ", ".join(LAYERS))
    return parts[0], None


def wrong_way(src_layer, dst_layer):
    """True when src_layer may not include dst_layer."""
    if src_layer == dst_layer:
        return False
    return LAYERS[dst_layer] >= LAYERS[src_layer]


def resolve(repo, including, kind, name, exists):
    """The repository-relative path an include names, or None when it is not normlab's.

    `exists(rel)` says whether a repository-relative path is a file of the tree being checked.
    A "normlab/..." include always resolves to include/normlab/... (whether it exists or not),
    so that a stale or mistyped header still gets checked by its folder."""
    if name in GENERATED:
        return None
    if name.startswith("normlab/"):
        return "include/" + name
    if kind != '"':
        return None
    candidates = [os.path.normpath(os.path.join(os.path.dirname(including), name)).replace(os.sep, "/"),
                  "src/" + name]
    candidates += ["src/%s/%s" % (layer, name) for layer in LAYERS]
    for cand in candidates:
        if exists(cand):
            return cand
    return None


def unit_test_problems(repo):
    """The files under tests/unit/ that are not in tests/unit/<layer>/, and how many were seen."""
    base = os.path.join(repo, "tests", "unit")
    problems, seen = [], 0
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), repo).replace(os.sep, "/")
            parts = rel.split("/")[2:]
            seen += 1
            if len(parts) != 2 or parts[0] not in LAYERS:
                problems.append("%s: unit test not in a layer folder (tests/unit/<layer>/: %s)"
                                % (rel, ", ".join(LAYERS)))
            if parts[0] == "kernels" or not name.endswith(SUFFIXES):
                continue
            for lineno, kind, inc in includes_of(os.path.join(dirpath, name)):
                if kind == '"' and inc.startswith("kernels/"):
                    problems.append("%s:%d: unit test outside tests/unit/kernels/ includes a private "
                                    "kernels header (%s)" % (rel, lineno, inc))
    return problems, seen


def check_tree(repo):
    files = source_files(repo)
    present = set(files)
    problems, tests_seen = unit_test_problems(repo)
    checked = 0
    for rel in files:
        if rel in ALLOWED_ANYWHERE:
            continue
        layer, err = layer_of(rel)
        if err:
            problems.append("%s: %s" % (rel, err))
            continue
        checked += 1
        for lineno, kind, name in includes_of(os.path.join(repo, rel)):
            target = resolve(repo, rel, kind, name, present.__contains__)
            if target is None or target in ALLOWED_ANYWHERE:
                continue
            dst, derr = layer_of(target)
            if derr:
                problems.append("%s:%d: %s includes a header %s (%s)" % (rel, lineno, layer, derr, name))
            elif target.startswith("include/") and target not in present:
                problems.append("%s:%d: %s includes a header that does not exist (%s)" % (rel, lineno, layer, name))
            elif wrong_way(layer, dst):
                problems.append("%s:%d: %s includes %s (%s)" % (rel, lineno, layer, dst, name))
            elif dst == "kernels" and kernels_entry_problem(layer, target):
                problems.append("%s:%d: %s includes kernels (%s): %s"
                                % (rel, lineno, layer, name, kernels_entry_problem(layer, target)))
    return files, checked + tests_seen, problems


def read_mapping(path):
    """{current path: new path}, and errors for malformed or duplicate lines."""
    mapping, errors = {}, []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "->" not in line:
                errors.append("%s:%d: expected '<current path> -> <new path>'" % (path, lineno))
                continue
            old, new = (s.strip() for s in line.split("->", 1))
            if old in mapping:
                errors.append("%s:%d: %s is mapped twice" % (path, lineno, old))
            mapping[old] = new
    return mapping, errors


def check_plan(repo, mapping_path):
    mapping, problems = read_mapping(mapping_path)
    files = source_files(repo)
    present = set(files)
    # Every file under the roots (CMakeLists.txt included) should be mapped.
    everything = set()
    for root in ROOTS:
        for dirpath, _, filenames in os.walk(os.path.join(repo, root)):
            for name in filenames:
                everything.add(os.path.relpath(os.path.join(dirpath, name), repo).replace(os.sep, "/"))
    for rel in sorted(everything - set(mapping)):
        problems.append("%s: not in the mapping" % rel)
    for old in sorted(set(mapping) - everything):
        problems.append("%s: in the mapping but not in the tree" % old)
    seen = {}
    new_layer = {}
    for old, new in sorted(mapping.items()):
        if new in seen:
            problems.append("%s: mapped to %s, as is %s" % (old, new, seen[new]))
        seen[new] = old
        if old in ALLOWED_ANYWHERE or new in ALLOWED_ANYWHERE:
            continue
        old_root, _ = split_root(old)
        new_root, _ = split_root(new)
        if old_root != new_root:
            problems.append("%s: moves from %s/ to %s" % (old, old_root, new))
        layer, err = layer_of(new)
        if err:
            problems.append("%s -> %s: new path %s" % (old, new, err))
        else:
            new_layer[old] = layer
    # A header and the source that implements it belong to one layer (a warning, not an error).
    warnings = []
    for old, layer in sorted(new_layer.items()):
        if old.startswith("src/") and old.endswith((".cpp", ".cu")):
            stem = os.path.splitext(old[len("src/"):])[0]
            header = "include/normlab/%s.h" % stem
            if header in new_layer and new_layer[header] != layer:
                warnings.append("warning: %s (%s) implements %s (%s)" % (old, layer, header, new_layer[header]))
    violations = []
    for rel in files:
        layer = new_layer.get(rel)
        if layer is None:
            continue
        for lineno, kind, name in includes_of(os.path.join(repo, rel)):
            target = resolve(repo, rel, kind, name, present.__contains__)
            if target is None or target in ALLOWED_ANYWHERE:
                continue
            if target not in present:
                problems.append("%s:%d: includes a header that does not exist (%s)" % (rel, lineno, name))
                continue
            dst = new_layer.get(target)
            if dst is None:
                continue  # unmapped or unplaceable: reported above
            if wrong_way(layer, dst):
                violations.append("%s:%d: %s includes %s (%s)  [%s -> %s]"
                                  % (rel, lineno, layer, dst, name, mapping[rel], mapping[target]))
    return files, new_layer, problems, warnings, violations


def main(argv):
    args = argv[1:]
    if len(args) == 3 and args[0] == "--plan":
        mapping_path, repo = args[1], args[2]
        files, new_layer, problems, warnings, violations = check_plan(repo, mapping_path)
        counts = {}
        for layer in new_layer.values():
            counts[layer] = counts.get(layer, 0) + 1
        print("plan: " + ", ".join("%s %d" % (l, counts.get(l, 0)) for l in LAYERS))
        for line in problems + warnings + violations:
            print(line)
        if problems or violations:
            print("plan: FAIL (%d wrong-way includes, %d other problems)" % (len(violations), len(problems)))
            return 1
        print("plan: PASS (%d files)" % len(new_layer))
        return 0
    if len(args) == 1 and not args[0].startswith("-"):
        repo = args[0]
        if not all(os.path.isdir(os.path.join(repo, r)) for r in ROOTS):
            print("check_layers: %s has no include/normlab/ and src/" % repo, file=sys.stderr)
            return 2
        files, checked, problems = check_tree(repo)
        if problems:
            for line in problems:
                print(line)
            print("layers: FAIL (%d problems in %d files)" % (len(problems), len(files)))
            return 1
        print("layers: PASS (%d files)" % checked)
        return 0
    print("usage: check_layers.py REPO_ROOT\n"
          "       check_layers.py --plan MAPPING REPO_ROOT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
