#!/usr/bin/env bash
# sharding_layouts.sh for the llama family (grouped-query attention, q/k norm, an untied LM head).
set -euo pipefail
SHARDING_MODEL=llama bash "$(dirname "$0")/sharding_layouts.sh" "$@"
