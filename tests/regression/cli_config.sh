#!/usr/bin/env bash
# `gridtrain config` prints the configuration a run resolves (defaults < deck < overrides) as
# the INI text the run records in its log, and refuses a bad override as a run would.
# Usage: cli_config.sh GRIDTRAIN PYTHON
set -u
gridtrain=$1 python=$2
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; exit 1; }
out=$("$gridtrain" config -i "$deck" --train.steps=7 2>&1) || fail "config exited non-zero: $out"
"$python" - "$out" <<'PY' || fail "config text: $out"
import configparser, sys
c = configparser.ConfigParser(interpolation=None)
c.read_string(sys.argv[1])
assert c.getint("train", "steps") == 7, "the override"           # CLI wins over the deck (30)
assert c.getint("model", "n_layer") == 2, "the deck's value"      # deck wins over the default
assert c.get("grid", "dp") == "auto", "a default"                 # key the deck leaves out
PY
bad=$("$gridtrain" config -i "$deck" --train.stpes=7 2>&1) && fail "a misspelled key was accepted: $bad"
echo "$bad" | grep -q "unknown key 'train.stpes'" || fail "no clear error for a misspelled key: $bad"
echo "OK: gridtrain config resolves defaults, deck and overrides"
