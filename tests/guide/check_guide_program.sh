#!/usr/bin/env bash
# Runs one of docs/guide.md's programs the way the guide says and checks what
# it prints: guide_plain alone, the others on 2 ranks under cohortrun. A
# training program must print three epochs with a falling loss; guide_errors
# must print the sum of rank + 1 over 2 ranks.
# Usage: check_guide_program.sh COHORTRUN PROGRAM
set -euo pipefail
cohortrun=$1 program=$2
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
case $(basename "$program") in
  guide_plain) out=$("$program" 2>&1) ;;
  *) out=$("$cohortrun" -np 2 "$program" 2>&1) ;;
esac || { echo "$out"; echo "FAIL: $(basename "$program") exited non-zero"; exit 1; }
echo "$out"
case $(basename "$program") in
  guide_errors)
    grep -q 'sum 3$' <<<"$out" || { echo "FAIL: expected 'sum 3'"; exit 1; } ;;
  *)
    losses=$(sed -n 's/.*epoch \([0-9]\): loss \([0-9.]*\)$/\1 \2/p' <<<"$out")
    [[ $(wc -l <<<"$losses") -eq 3 ]] || { echo "FAIL: expected 3 epochs (one printing rank)"; exit 1; }
    awk 'NR == 1 {first = $2} END {if (!($2 < first)) {print "FAIL: loss did not fall"; exit 1}}' <<<"$losses" ;;
esac
