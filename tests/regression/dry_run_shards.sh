#!/usr/bin/env bash
# --dry-run and predict on a corpus in shard files, with model.vocab_size = 0: the vocabulary
# comes from the shards' metadata, as in training, for a shard directory and a glob alike, and
# the dry run's memory table (parameters per rank) equals the one of the same corpus in one file.
# Usage: dry_run_shards.sh GRIDTRAIN TEXT WORKDIR MPIEXEC
set -u
gridtrain=$1 text=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$gridtrain" prepare text --input "$text" --output "$work/shards" --shard-size 100000 > "$work/prepare.txt" 2>&1 \
  || fail "prepare: $(cat "$work/prepare.txt")"
"$gridtrain" prepare text --input "$text" --output "$work/one.h5" > "$work/prepare-one.txt" 2>&1 \
  || fail "prepare: $(cat "$work/prepare-one.txt")"
dry() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$1" --model.vocab_size=0 --dry-run 2>&1; }
table() { echo "$1" | awk '/^ +stage +parameters/ { getline; print $2; exit }'; }
want=$(table "$(dry "$work/one.h5")")
[[ -n $want ]] || fail "no memory table in the dry run on one file"
n=$(ls "$work"/shards/shard-*.h5 | wc -l)
((n > 1)) || fail "expected several shards, got $n"
for path in "$work/shards" "$work/shards/shard-*.h5"; do
  out=$(dry "$path") || fail "--dry-run with data.path = $path: $out"
  [[ $(table "$out") == "$want" ]] || fail "--dry-run with data.path = $path: parameters $(table "$out"), one file: $want"
  out=$("$gridtrain" predict -i "$deck" --ranks 2 --data.path="$path" --model.vocab_size=0 2>&1) \
    || fail "predict with data.path = $path: $out"
done
echo "OK: --dry-run and predict read the vocabulary of $n shards (directory and glob)"
