#!/usr/bin/env bash
# The measurements of docs/plain_pytorch.md: each method of METHODS through the core example
# (plain_pytorch_lm.py) and through fairseq-train (plain_pytorch_lm_fairseq.sh), one run at a
# time, one thread each, logs in runs/plain_pytorch/; a finished run (its log ends in "wall_s")
# is skipped, so a second call resumes. Needs data/wikitext-2/bin (fairseq-ln-prepare wikitext2).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/.venv/bin:$PATH OMP_NUM_THREADS=1
out=runs/plain_pytorch
for method in ${METHODS:-preln b2t admin deepnet}; do
    for side in core fairseq; do
        log=$out/${side}_$method.log
        grep -q '^wall_s' "$log" 2>/dev/null && continue
        start=$(date +%s.%N)
        if [ $side = core ]; then
            nice -n 10 python docs/examples/plain_pytorch_lm.py --method "$method" > "$log" 2>&1
        else
            nice -n 10 bash docs/examples/plain_pytorch_lm_fairseq.sh "$method" > "$log" 2>&1
        fi
        echo "wall_s $(echo "$(date +%s.%N) - $start" | bc) $(date -Is) $(uptime)" >> "$log"
    done
done
