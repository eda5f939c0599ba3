#!/usr/bin/env bash
# Seeds fuzz/corpus/{review,policy} from the test fixtures and the shipped policies (the corpus is not committed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
mkdir -p "$here/corpus/review" "$here/corpus/policy"
cp "$root"/tests/fixtures/*.json "$here/corpus/review/"
for f in "$root"/policies/*.yaml; do
  # The policy document is the `policy.yaml: |` block of each ConfigMap.
  awk '/^  policy.yaml: \|/ {on=1; next} on && /^    / {print substr($0, 5); next} on {exit}' "$f" \
    >"$here/corpus/policy/$(basename "$f")"
  cp "$f" "$here/corpus/policy/configmap-$(basename "$f")"
done
echo "seeded $(ls "$here/corpus/review" | wc -l) review and $(ls "$here/corpus/policy" | wc -l) policy inputs"
