#!/usr/bin/env bash
# checkpoint_layouts.sh for a llama model: saved on dp2-tp2-pp2, resumed on tp2, dp4, pp2 and one
# rank, each continuing the uninterrupted single-rank run.
LAYOUT_MODEL=llama exec bash "$(dirname "$0")/checkpoint_layouts.sh" "$@"
