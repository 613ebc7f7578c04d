#!/usr/bin/env python3
"""Parquet files (FineWeb's format) to gzipped JSONL for `normlab data prepare`.

normlab reads text, JSONL and gzip itself; Parquet needs Apache Arrow, which Debian 12 does not
package for C++, so this bridge uses pyarrow (tools/setup.sh installs it into the venv). It
streams: each input file is read one row group at a time, only the text column, and written as
it goes, so memory holds one row group's texts, never a whole file.

  tools/parquet_to_jsonl.py --input 'fineweb/*.parquet' --text-field text --out fineweb-jsonl/
  normlab data prepare --tokenizer tok.model --input 'fineweb-jsonl/*.jsonl.gz' --out shards/

Writes OUT/<file name without .parquet>.jsonl.gz for each input, one {"text": ...} line per row,
in row order. Inputs are files or glob patterns (quote them), processed in sorted order. An
output file that exists is refused unless --overwrite; each output is written under a temporary
name and renamed when complete, so a failed run leaves no partial file. Errors name the file
(and the row group and row): a pattern that matches nothing, a file that is not Parquet, a
missing text field, a value that is not a string.
"""
import argparse
import glob
import gzip
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", nargs="+", required=True, help="Parquet files or globs")
    ap.add_argument("--text-field", default="text", help="column holding the text")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    a = ap.parse_args()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit("parquet_to_jsonl: pyarrow is missing (tools/setup.sh installs it into the venv)")

    files = []
    for pattern in a.input:
        found = sorted(glob.glob(pattern))
        if not found:
            sys.exit(f"parquet_to_jsonl: {pattern}: no such file (or the pattern matches nothing)")
        files += found
    files = sorted(set(files))
    os.makedirs(a.out, exist_ok=True)
    outs = [os.path.join(a.out, os.path.basename(f).removesuffix(".parquet") + ".jsonl.gz")
            for f in files]
    if len(set(outs)) != len(outs):
        sys.exit("parquet_to_jsonl: two inputs have the same file name; convert them into different --out folders")
    if not a.overwrite:
        for o in outs:
            if os.path.exists(o):
                sys.exit(f"parquet_to_jsonl: {o}: exists (pass --overwrite to replace it)")
    rows = groups = 0
    for path, out in zip(files, outs):
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several types for a file that is not Parquet
            sys.exit(f"parquet_to_jsonl: {path}: not a Parquet file ({e})")
        if a.text_field not in pf.schema_arrow.names:
            sys.exit(f"parquet_to_jsonl: {path}: no column '{a.text_field}' "
                     f"(columns: {', '.join(pf.schema_arrow.names)})")
        tmp = out + f".tmp-{os.getpid()}"
        try:
            with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as w:
                for g in range(pf.num_row_groups):
                    texts = pf.read_row_group(g, columns=[a.text_field]).column(0).to_pylist()
                    for i, t in enumerate(texts):
                        if not isinstance(t, str):
                            raise ValueError(f"{path}: row group {g}, row {i}: '{a.text_field}' is "
                                             f"{type(t).__name__}, not a string")
                        w.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
                    rows += len(texts)
                    groups += 1
            os.replace(tmp, out)
        except BaseException as e:
            if os.path.exists(tmp):
                os.remove(tmp)
            if isinstance(e, ValueError):
                sys.exit(f"parquet_to_jsonl: {e}")
            raise
    print(f"parquet_to_jsonl: {len(files)} files, {groups} row groups, {rows} rows -> {a.out}")


if __name__ == "__main__":
    main()
