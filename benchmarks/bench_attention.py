"""Benchmark 11: ``posviz attention`` against a plain Hugging Face forward with ``output_attentions=True``.

Makes a BERT-base-shaped checkpoint (12 layers, 12 heads, hidden 768, 512 positions; random weights saved with
``save_pretrained``, with a WordPiece tokenizer trained on the packaged docstrings corpus), then runs, as whole processes
and alternately:

* ``posviz attention CKPT --corpus cpython-3.11.7-docstrings --seq-len 512 --layers all --max-blocks B --batch-size 1
  --format json`` (every statistic of all 144 heads);
* the plain script a user would start from: load the same model (eager) and tokenizer, cut the same blocks, and
  run ``model(ids, output_attentions=True)`` over them, keeping nothing.

Targets (issue 21): posviz at most 1.3x the plain forward's time; memory for 12 layers x 12 heads x 512 positions
under 1 GB (reported as posviz's peak resident memory and its excess over the plain forward's).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import alternate, markdown_table, posviz_cmd

from posviz.train.corpus import DEMO_CORPUS

PLAIN_SCRIPT = r"""
import sys
import torch
from transformers import AutoModel, AutoTokenizer
from posviz.observe.corpus_blocks import make_token_blocks
from posviz.train.corpus import DEMO_CORPUS, load_corpus

ckpt, blocks, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tok = AutoTokenizer.from_pretrained(ckpt)
model = AutoModel.from_pretrained(ckpt, attn_implementation="eager").to(device).eval()
ids = make_token_blocks(tok, load_corpus([DEMO_CORPUS]), 512, blocks).ids
with torch.inference_mode():
    for row in ids:
        out = model(input_ids=torch.as_tensor(row[None]).to(device), output_attentions=True)
        torch.cuda.synchronize() if device == "cuda" else None
"""


def make_checkpoint(work: Path) -> Path:
    """Build (once) the BERT-base-shaped checkpoint and its tokenizer."""
    folder = work / "bert-base-shape-attention"
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import BertConfig, BertModel

    from posviz.train.corpus import packaged_corpus
    from posviz.train.tokenizer import train_tokenizer

    tok = train_tokenizer(packaged_corpus(DEMO_CORPUS, 3000), vocab_size=8000, model_max_length=512)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=512)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    ckpt = make_checkpoint(args.work)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "plain.py"
        script.write_text(PLAIN_SCRIPT)
        commands = {
            "posviz attention": posviz_cmd("attention", str(ckpt), "--corpus", DEMO_CORPUS, "--seq-len", "512",
                                           "--layers", "all", "--max-blocks", str(args.blocks), "--batch-size", "1",
                                           "--device", args.device, "--format", "json"),
            "plain HF forward, output_attentions=True": [sys.executable, str(script), str(ckpt), str(args.blocks), args.device],
        }
        results = alternate(commands, args.repeats)
    rows = [m.row() for m in results.values()]
    posviz, plain = results["posviz attention"], results["plain HF forward, output_attentions=True"]
    print(markdown_table(rows))
    print(f"\n{args.blocks} blocks of 512 tokens, 12 layers x 12 heads, device {args.device}: "
          f"time ratio {posviz.wall / plain.wall:.2f}x (target <= 1.3x); peak {posviz.peak:.0f} MiB "
          f"(plain {plain.peak:.0f} MiB, excess {posviz.peak - plain.peak:.0f} MiB; target < 1 GB)")


if __name__ == "__main__":
    main()
