#!/usr/bin/env bash
# expect_failure.sh REGEX COMMAND...: passes when COMMAND exits non-zero within the ctest timeout
# and its output (stdout + stderr) matches REGEX (grep -E).
set -u
regex=$1; shift
out=$("$@" 2>&1); code=$?
echo "$out" | tail -n 20
if [ "$code" -eq 0 ]; then echo "FAIL: exit code 0, expected non-zero"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "OK: exit code $code, message matches /$regex/"
