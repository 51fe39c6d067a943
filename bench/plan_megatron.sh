#!/usr/bin/env bash
# cohort-plan against Megatron-LM's published configurations (Narayanan et
# al. 2021, Table 1): for each GPT model of bench/plan/megatron_table1.json,
# the planner on DGX A100 nodes restricted to the published GPU count, once
# over every strategy and once over what Megatron-LM ran then (data
# parallelism by DDP and meshes, no ZeRO); its (tp, pp, dp, micro-batches)
# and predicted throughput per GPU against the published ones, and its
# prediction of the published configuration itself (its best micro-batch
# count) to tell the model's error from the choice. Inputs: bench/plan/
# (bench/plan/megatron_models.py writes them from the published figures;
# ACHIEVED=F sets the GPUs' kernels' fraction of the 312 TFLOP/s peak, 0.5).
#
# Usage: bench/plan_megatron.sh [--build-dir DIR]   (prints a markdown table)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "plan_megatron.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j 2 --target cohort-plan >/dev/null
plan=$build_dir/tools/plan/cohort-plan
cd "$repo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/plan/megatron_models.py "$work"
python3 - "$plan" "$work" <<'PY'
import json, subprocess, sys
plan, work = sys.argv[1], sys.argv[2]
rows = json.load(open(f"{work}/megatron_table1.json"))
print("| model | GPUs | published t, p, d: TFLOP/s/GPU | planner, Megatron's strategies: TFLOP/s/GPU | planner's prediction of the published t, p, d | planner, every strategy |")
print("|---|---:|---|---|---|---|")
def shape(p):
    if p["family"] == "mesh":
        m = p["mesh"]
        return f"t={m['tp']}, p={m['pp']}, d={m['dp']}, m={m['micro_batches']}{' +ZeRO-1' if m['zero'] else ''}"
    if p["family"] == "ddp":
        return f"t=1, p=1, d={p['np']}"
    return p["strategy"] + f" (d={p['np']})"
for r in rows:
    prof = json.load(open(f"{work}/megatron_{r['model']}.json"))
    flop = prof["flop_per_example"] * r["batch"]
    docs = []
    for strategies in (None, "ddp,mesh"):
        cmd = [plan, "--profile", f"{work}/megatron_{r['model']}.json", "--catalogue", f"{work}/megatron_dgx_a100.json",
               "--global-batch", str(r["batch"]), "--steps", "1", "--machines", str(r["gpus"] // 8),
               "--ranks-per-machine", "8", "--json", "-"]
        if strategies:
            cmd += ["--strategies", strategies]
        docs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    tflops = lambda p: flop / p["step_s"] / r["gpus"] / 1e12
    every, megatron = docs[0]["plans"][0], docs[1]["plans"][0]
    d = r["gpus"] // (r["tp"] * r["pp"])
    # The published shape as the planner predicts it: its fastest micro-batch count.
    published = None
    for p in docs[1]["plans"]:
        same = (p["family"] == "ddp" and r["tp"] == r["pp"] == 1) or (
            p["family"] == "mesh" and (p["mesh"]["tp"], p["mesh"]["pp"], p["mesh"]["dp"]) == (r["tp"], r["pp"], d))
        if same:
            published = p
            break
    if published is None:
        said = "not enumerated"
    elif not published["fits"]:
        said = "does not fit: " + published["why_not"]
    else:
        parts = published["parts"]
        top = sorted(parts, key=parts.get, reverse=True)[1]
        said = f"{shape(published)}: {tflops(published):.0f} ({top} {100 * parts[top] / published['step_s']:.0f}%)"
    parts = megatron["parts"]
    second = sorted(parts, key=parts.get, reverse=True)[1]
    print(f"| {r['model']} | {r['gpus']} | t={r['tp']}, p={r['pp']}, d={d}: {r['tflops_per_gpu']} | "
          f"{shape(megatron)}: {tflops(megatron):.0f} ({second} {100 * parts[second] / megatron['step_s']:.0f}%) | {said} | "
          f"{shape(every)}: {tflops(every):.0f} |")
PY
