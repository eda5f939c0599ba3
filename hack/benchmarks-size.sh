#!/usr/bin/env bash
# BENCHMARKS.md stays a summary a reader takes in at once: at most 25,000 bytes (make lint and make test check
# it). A new measurement replaces the one it supersedes; history lives in git.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=25000
size=$(wc -c <BENCHMARKS.md)
if ((size > limit)); then
	echo "benchmarks-size: BENCHMARKS.md is $size bytes, over $limit: replace superseded figures rather than add" >&2
	exit 1
fi
echo "benchmarks-size: BENCHMARKS.md $size bytes (limit $limit)"
