#!/usr/bin/env bash
# Every key that `gridtrain --help` lists is documented in docs/deck-reference.md, and every
# key documented there exists.
# Usage: deck_reference.sh GRIDTRAIN DOC
set -u
help_keys=$("$1" --help | grep -oE '^  --[a-z_]+\.[a-z_0-9]+' | sed 's/^  --//' | sort)
doc_keys=$(grep -oE '^\| `[a-z_]+\.[a-z_0-9]+`' "$2" | tr -d '|` ' | sort)
[ -n "$help_keys" ] || { echo "FAIL: --help lists no keys"; exit 1; }
if [ "$help_keys" != "$doc_keys" ]; then
  echo "FAIL: keys differ between --help (<) and $2 (>):"
  diff <(echo "$help_keys") <(echo "$doc_keys")
  exit 1
fi
echo "OK: $(echo "$help_keys" | wc -l) keys documented"
