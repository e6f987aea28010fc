#!/usr/bin/env bash
# The checks that need a CUDA device, in one run of about 8 minutes on one H100/H200, from the repository's root:
#
#   bash benchmarks/gpu_checks.sh [OUT]      # logs in OUT (default gpu-checks/)
#
# 1. tests/unit/test_tiled_fused.py: the fused tiled kernel compiled and run on the GPU against the PyTorch tiles;
# 2. benchmark 16 (attention statistics at long context) with the fused kernel and with the PyTorch tiles, tiny LLaMA
#    at 2k, 8k and 32k with --check, then the Llama-3.2-1B shape at 32k in bfloat16 with the fused kernel.
# It needs only what a CUDA machine with PyTorch, Triton, transformers and pytest has: posviz runs from this folder.
set -u
out=${1:-gpu-checks}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
"$py" -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers",
transformers.__version__, torch.cuda.get_device_name(0))' 2>&1 | tee "$out/versions.txt"
timeout 240 "$py" -m pytest -q -p no:randomly -p no:cacheprovider tests/unit/test_tiled_fused.py 2>&1 | tee "$out/fused-tests.log"
for kernel in triton torch; do
    timeout 300 "$py" benchmarks/bench_long_context.py --device cuda --check --sizes 2048 8192 32768 --kernel "$kernel" 2>&1 \
        | tee "$out/bench16-tiny-$kernel.md"
done
timeout 180 "$py" benchmarks/bench_long_context.py --device cuda --shape llama-3.2-1b --dtype bfloat16 --sizes 32768 --layers 0 \
    --kernel triton 2>&1 | tee "$out/bench16-1b-triton.md"
