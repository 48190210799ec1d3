#!/usr/bin/env bash
# Full training run on the GPU machine, sized for one <= 10-minute device call.
# Usage (repo root): bash tools/train/device_run.sh [extra train.py args]
# Reads .traindata/train/*.txt.xz and .traindata/heldout/wikitext2-test.txt (a git-ignored copy of
# ../shared/data/corpora, carried to the device). Results go to $RES (default /tmp/weft-train); when
# $OUT is set (device tool) they are packed as $OUT/res.tar.part-NN (<= 15 MB each) plus summary/log.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
RES=${RES:-/tmp/weft-train}
WORK=${WORK:-/tmp/weft-train-work}
mkdir -p "$RES" "$WORK"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
python3 tools/train/train.py all --train-dir .traindata/train --heldout .traindata/heldout/wikitext2-test.txt \
  --out-dir "$RES" --work-dir "$WORK" --time-budget-s "${BUDGET:-330}" "$@" 2>&1 | tee "$RES/run.log"
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp "$RES/run.log" "$OUT/" 2>/dev/null
  cp "$RES/summary.json" "$OUT/" 2>/dev/null
  tar -C "$RES" -cf - . | split -b 15000000 -d - "$OUT/res.tar.part-"
  ls -la "$OUT"
fi
exit $rc
