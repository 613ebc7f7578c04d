#!/usr/bin/env python3
"""Two zero-shot multiple-choice tasks for `normlab eval --tasks` (docs/evaluation.md).

Usage: make_tasks.py CORPUS.txt OUT_DIR [--items 200] [--seed 0]

Writes, deterministically for a seed:
  OUT_DIR/kjv_next_verse.jsonl  from the built-in corpus (data/kjv/corpus.txt: chapters of one
                                verse per line, separated by blank lines): the context is a verse,
                                the choices are the verse that follows it and three verses drawn
                                from elsewhere; pick the true next verse.
  OUT_DIR/arithmetic.jsonl      the paper's basic-arithmetic format: "Calculate 2 + 5 =" with four
                                numeric choices, one right.
Each line: {"context": str, "choices": [str, ...], "answer": int}; choices start with the space
that separates them from the context.
"""
import argparse
import json
import os
import random


def write(path, items):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for it in items:
            f.write(json.dumps(it) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)

    chapters = [c.strip().split("\n")[1:] for c in open(a.corpus, encoding="utf-8").read().split("\n\n")]
    chapters = [c for c in chapters if len(c) >= 2]
    verses = [v for c in chapters for v in c]
    items = []
    while len(items) < a.items:
        ch = rng.choice(chapters)
        i = rng.randrange(len(ch) - 1)
        right = ch[i + 1]
        wrong = set()
        while len(wrong) < 3:
            v = rng.choice(verses)
            if v != right and v != ch[i]:
                wrong.add(v)
        choices = [right] + sorted(wrong)
        rng.shuffle(choices)
        items.append({"context": ch[i], "choices": [" " + c for c in choices], "answer": choices.index(right)})
    write(os.path.join(a.out, "kjv_next_verse.jsonl"), items)

    items = []
    while len(items) < a.items:
        x, y = rng.randrange(0, 20), rng.randrange(0, 20)
        op = rng.choice(["+", "-"])
        right = x + y if op == "+" else x - y
        wrong = set()
        while len(wrong) < 3:
            w = right + rng.choice([-3, -2, -1, 1, 2, 3, 10, -10])
            wrong.add(w)
        choices = [right] + sorted(wrong)
        rng.shuffle(choices)
        items.append({"context": f"Calculate {x} {op} {y} =", "choices": [f" {c}" for c in choices],
                      "answer": choices.index(right)})
    write(os.path.join(a.out, "arithmetic.jsonl"), items)
    print(f"make_tasks: {a.items} items each in {a.out}/kjv_next_verse.jsonl, arithmetic.jsonl")


if __name__ == "__main__":
    main()
