#!/usr/bin/env bash
# The GPU measurement plan of docs/accelerators.md, one step per device command:
#   bash benchmarks/gpu_plan.sh 1   # conv impls; GPU-vs-CPU first iterations and checkpoints
#   bash benchmarks/gpu_plan.sh 2   # speed table: toy, DCGAN-32, DCGAN-64 RGBA
#   bash benchmarks/gpu_plan.sh 3   # speed table: ResNet-32 (and ours at "highest")
#   bash benchmarks/gpu_plan.sh 4   # bfloat16 vs float32 sample quality (2 seeds)
#   bash benchmarks/gpu_plan.sh short  # one 9-minute command for a 15-minute device budget: step 1,
#                                      # then DCGAN-32 and ResNet-32 at 2 rounds x 10 iterations,
#                                      # each part under its own timeout (ran on an H200, 2026-11-26)
#   bash benchmarks/gpu_plan.sh impls  # what is still open: ours at conv_impl "matmul" against
#                                      # "s2d" (AUTO_IMPLS["gpu"]) on DCGAN-32 and ResNet-32
# Run from the repository root on the device machine, carrying .whl (made here, once, with
# /work/shared/tools/device-wheels). Results go to $OUT (or /tmp/wgan_gpu_results), each via tee
# so that a command cut off at its time limit still leaves what it printed.
set -uo pipefail

step="${1:?usage: gpu_plan.sh 1|2|3|4|short|impls}"
if [[ ! "$step" =~ ^([1234]|short|impls)$ ]]; then
  echo "error: step must be 1, 2, 3, 4, short or impls, got $step" >&2
  exit 2
fi
out="${OUT:-/tmp/wgan_gpu_results}"
mkdir -p "$out"
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD/src"
else
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 WGAN_JAX_DATA_DIR="${WGAN_JAX_DATA_DIR:-/tmp/wgan_gpu_data}"
nvidia-smi -L || true
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"

gpu_table() {
  python3 benchmarks/gpu_table.py "$@"
}

case "$step" in
  1)
    python3 benchmarks/conv_impls.py --calls 25 --batch 64 --json "$out/conv.json" 2>&1 \
      | tee "$out/conv.md"
    gpu_table crosscheck --expect_platform gpu --configs bench_toy,bench_dcgan32,bench_resnet32 \
      --out /tmp/wgan_crosscheck 2>&1 | tee "$out/crosscheck.md"
    cp /tmp/wgan_crosscheck/crosscheck.json "$out/" || true
    ;;
  2)
    gpu_table table --expect_platform gpu --models toy,dcgan32,dcgan64 --rounds 3 --iters 20 \
      --json "$out/table1.json" 2>&1 | tee "$out/table1.md"
    ;;
  3)
    gpu_table table --expect_platform gpu --models resnet32 --rounds 3 --iters 20 \
      --sides ours_f32,ours_bf16,ours_f32_highest,torch_eager,torch_compile \
      --json "$out/table2.json" 2>&1 | tee "$out/table2.md"
    ;;
  4)
    gpu_table quality --expect_platform gpu --seeds 2 --json "$out/quality.json" 2>&1 \
      | tee "$out/quality.md"
    ;;
  short)
    timeout 110 python3 benchmarks/conv_impls.py --calls 15 --batch 64 --json "$out/conv.json" 2>&1 \
      | tee "$out/conv.md"
    timeout 240 python3 benchmarks/gpu_table.py crosscheck --expect_platform gpu \
      --configs bench_toy,bench_dcgan32,bench_resnet32 --out /tmp/wgan_crosscheck 2>&1 \
      | tee "$out/crosscheck.md"
    cp /tmp/wgan_crosscheck/crosscheck.json "$out/" || true
    timeout 200 python3 benchmarks/gpu_table.py table --expect_platform gpu \
      --models dcgan32,resnet32 --rounds 2 --iters 10 \
      --sides ours_f32,ours_bf16,ours_f32_highest,torch_eager,torch_compile \
      --json "$out/table.json" 2>&1 | tee "$out/table.md"
    ;;
  impls)
    for impl in s2d matmul; do
      timeout 200 python3 benchmarks/gpu_table.py table --expect_platform gpu \
        --models dcgan32,resnet32 --rounds 3 --iters 10 --sides ours_f32,ours_bf16 \
        --override "model.conv_impl=$impl" --json "$out/impl_$impl.json" 2>&1 \
        | tee "$out/impl_$impl.md"
    done
    ;;
esac
