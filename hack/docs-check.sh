#!/usr/bin/env bash
# The documentation check: links between Markdown files, and the command blocks of README.md and the user and
# admin guides run against the environment `make run` starts (in $DOCS_CLUSTER_DIR, default .cluster-docs,
# stopped again). `hack/docs-check.sh links` checks the links alone (no cluster). See hack/docs_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 hack/docs_check.py "${1:-all}"
