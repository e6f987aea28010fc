#!/usr/bin/env bash
# The MiniLM demo outputs, one list of commands for both of their users: `make demo` writes them into demo/ (ignored
# by git), the gallery's minilm-demo recipe into reports/ (scripts/gallery.py). Every file goes into OUT (default demo).
# Runs offline on the all-MiniLM-L6-v2 weights that the dev extras install. POSVIZ is the posviz command to use
# (default: posviz on PATH), PYPDFIUM2 the page renderer (default: pypdfium2 on PATH). SOURCE_DATE_EPOCH, when set, is the report's
# date (the demo passes the last commit's time, so the PDF is the same bytes on every machine).
set -euo pipefail
out=${1:-demo}
posviz=${POSVIZ:-posviz}
pdfium=${PYPDFIUM2:-pypdfium2}
model=${DEMO_MODEL:-sentence-transformers/all-MiniLM-L6-v2}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} MPLBACKEND=${MPLBACKEND:-Agg}
mkdir -p "$out"
$posviz heatmap "$model" -o "$out/minilm-heatmap.png"
$posviz toeplitzness "$model" sinusoidal:512x384 gaussian:512x384:0 -o "$out/minilm-toeplitzness.txt"
$posviz toeplitzness "$model" --format json -o "$out/minilm-toeplitzness.json"
$posviz report "$model" -o "$out/minilm-report.pdf"
PYPDFIUM_LOGLEVEL=warning $pdfium render "$out/minilm-report.pdf" -o "$out" --prefix minilm-report-page- --scale 1.25 -f png > /dev/null
$posviz heads "$model" --layer 0 --dpi 100 -o "$out/minilm-heads-layer0.png" -o "$out/minilm-heads-layer0.txt"
$posviz heads "$model" --layers all -o "$out/minilm-heads-all-layers.png" -o "$out/minilm-heads.json"
