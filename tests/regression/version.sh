#!/usr/bin/env bash
# gridtrain --version prints what a bug report needs, one line each: gridtrain's version and git
# commit, LibTorch, CUDA and NCCL or "CPU build", the MPI library, HDF5 and whether it is parallel,
# BLAS, the compiler; and a run's log begins with the same lines.
# Usage: version.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
out=$("$gridtrain" --version) || fail "gridtrain --version failed: $out"
echo "$out"
for pattern in "^gridtrain [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]{7,}(-dirty)?\)$" "^LibTorch: [0-9]+\.[0-9]+" \
               "^Devices: (CUDA [0-9]+\.[0-9]+ and NCCL [0-9.]+ \(GPU build\)|CPU build)" "^MPI: .+ \(MPI [0-9]\.[0-9]\)$" \
               "^HDF5: [0-9]+\.[0-9]+\.[0-9]+, parallel" "^BLAS: " "^Compiler: .+, C\+\+2[0-9]$"; do
  echo "$out" | grep -Eq "$pattern" || fail "--version lacks /$pattern/"
done
"$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" --data.path="$data" \
  --output.dir="$work/out" --train.steps=1 > /dev/null 2>&1 || fail "the run failed"
head -8 "$work/out/log.gridtrain" | tail -7 | diff - <(echo "$out") > /dev/null \
  || fail "the log's header differs from --version: $(head -8 "$work/out/log.gridtrain")"
echo "OK: --version and the log header"
