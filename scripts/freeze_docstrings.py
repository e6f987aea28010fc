"""Freeze the docstrings of a CPython standard library into a packaged corpus (``posviz/train/corpora/``).

The packaged default corpus ``cpython-3.11.7-docstrings`` was made by running this
script under CPython 3.11.7 (a build with its whole standard library: a python.org or
pyenv build; distributions such as Debian split modules out). It writes the
documents as a JSON array (UTF-8, non-ASCII as is) compressed with gzip (no file
name, no time stamp), and prints the SHA-256 of the JSON, which
``posviz.train.corpus.PACKAGED`` records and checks at every load.

Usage (from the repository root)::

    python3.11 scripts/freeze_docstrings.py --check    # this Python reproduces the packaged file's bytes?
    python3.11 scripts/freeze_docstrings.py -o posviz/train/corpora/cpython-3.11.7-docstrings.json.gz

The docstrings are the Python Software Foundation's, under the PSF License Agreement
(``posviz/train/corpora/LICENSE-PSF.txt``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from posviz.train.corpus import DEMO_CORPUS, PACKAGED, corpus_json, extract_docstrings  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", type=Path, help="write the gzipped JSON here")
    p.add_argument("--check", action="store_true", help=f"compare with the packaged {DEMO_CORPUS} instead")
    args = p.parse_args()
    body = corpus_json(extract_docstrings())
    digest = hashlib.sha256(body).hexdigest()
    print(f"CPython {platform.python_version()} ({sys.executable}): {len(body)} bytes, sha256 {digest}")
    if args.check:
        wanted = PACKAGED[DEMO_CORPUS].sha256
        same = digest == wanted
        print(f"{'the same as' if same else 'differs from'} the packaged {DEMO_CORPUS} (sha256 {wanted})")
        return 0 if same else 1
    if args.output is None:
        p.error("give -o FILE or --check")
    args.output.write_bytes(gzip.compress(body, compresslevel=9, mtime=0))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
