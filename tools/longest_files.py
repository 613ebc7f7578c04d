#!/usr/bin/env python3
"""The longest files of a source tree.

Usage: longest_files.py [--max N] [--top K] PATHS...

PATHS are files or folders, searched recursively for every text file (C++, CUDA, the Python the
library embeds, CMake; a file with a NUL byte in its first 8 KiB is binary and skipped). Prints
the K longest files (default 20), one per line as "FILE LINES". With --max N, also lists every
file longer than N lines and exits 1 when there is one; otherwise prints "file length: PASS".
"""

import os
import sys


def sources(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for folder, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                yield os.path.join(folder, name)


def is_text(path):
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main(argv):
    limit, top, paths = None, 20, []
    args = iter(argv)
    for a in args:
        if a == "--max":
            limit = int(next(args))
        elif a == "--top":
            top = int(next(args))
        else:
            paths.append(a)
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    counts = sorted(((line_count(p), p) for p in sources(paths) if is_text(p)), key=lambda c: (-c[0], c[1]))
    for n, p in counts[:top]:
        print(f"{p} {n}")
    if limit is None:
        return 0
    over = [(n, p) for n, p in counts if n > limit]
    if over:
        print(f"\nfiles longer than {limit} lines (split them by concern):")
        for n, p in over:
            print(f"  {p} {n}")
        return 1
    print(f"file length: PASS ({len(counts)} files, none over {limit} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
