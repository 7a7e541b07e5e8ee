#!/bin/bash
# interleaved before/after of bench.memory_writes: before = 0735efa, after = HEAD (clean worktrees)
set -e
OUT=$1; mkdir -p $OUT
for pair in ${PAIRS:-1 2 3 4}; do
  if [ $((pair % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for side in $order; do
    cd <worktree>/$side
    PYTHONPATH=<worktree>/$side HF_HUB_OFFLINE=1 python -m bench.memory_writes --ops 40 --out $OUT/run$pair-$side > $OUT/run$pair-$side.log 2>&1
    echo "$pair $side done $(date +%T)"
  done
done
