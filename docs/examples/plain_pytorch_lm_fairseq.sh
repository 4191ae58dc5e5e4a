#!/usr/bin/env bash
# docs/examples/plain_pytorch_lm.py's defaults through fairseq-train: the plugin's
# transformer_lm_<METHOD> with the same sizes (input and output embeddings tied, as the example ties
# them), data, optimizer, schedule (warm-up from 0, then inverse-sqrt), clipping, tokens per
# sample, batch size, updates and seed: the same initial weights for the same seed. Validates
# once, after the last update; saves no checkpoint. Extra flags go last and win (--max-update 400).
#   fairseq-ln-prepare wikitext2          # data/wikitext-2/bin (DATA=path for another)
#   bash docs/examples/plain_pytorch_lm_fairseq.sh METHOD [more fairseq-train flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
method=${1:?usage: plain_pytorch_lm_fairseq.sh METHOD [fairseq-train flags]}
shift
exec fairseq-train "${DATA:-data/wikitext-2/bin}" --user-dir fairseq_layernorm_plugins \
    --task language_modeling --sample-break-mode none --tokens-per-sample 128 \
    --arch "transformer_lm_$method" --share-decoder-input-output-embed --decoder-layers 4 \
    --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 4 --dropout 0.1 \
    --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-8 --lr 2e-3 \
    --lr-scheduler inverse_sqrt --warmup-updates 50 --warmup-init-lr 0 --clip-norm 1.0 \
    --batch-size 8 --max-tokens 1024 --max-update 200 --seed 1 \
    --cpu --num-workers 0 --no-save --log-format simple --log-interval 25 "$@"
