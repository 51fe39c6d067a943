#!/usr/bin/env bash
# sim_horovod.sh: Horovod's headline (Sergeev & Del Balso 2018; Horovod's
# README and docs/benchmarks) predicted by cohort-sim from published
# inputs, then cohort's own strategies in the same setting (issue 19).
#
# Usage: bench/sim_horovod.sh [--build-dir DIR] [--out DIR]
#
# Setting (bench/sim/horovod_2018.json): 128 servers x 4 Pascal GPUs,
# RoCE-capable 25 Gbit/s network (3.125e9 B/s per direction), batch 64 per
# GPU; models from bench/sim/cnn_models.py (VGG-16, ResNet-101, Inception V3:
# tensors and MACs from the architectures, P100 images/s from TensorFlow's
# published benchmarks). Horovod then: NCCL ring over all GPUs, 64 MiB
# fusion buffer, 5 ms cycle time, coordination by gather + broadcast to rank
# 0 every cycle.
#
# Prints, per model, efficiency at 4..512 GPUs for Horovod's setting and for
# the assumed link latencies and intra-server bandwidths around it
# (sensitivity), the published figures, then cohort's strategies; writes
# scaling PNGs to --out (default DIR/bench/results/sim_horovod).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
out_dir=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim_horovod.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out_dir=${out_dir:-$build_dir/bench/results/sim_horovod}
mkdir -p "$out_dir"
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j 2 --target cohort-sim >/dev/null
sim=$build_dir/tools/sim/cohort-sim
python3 "$repo/bench/sim/cnn_models.py" "$out_dir" >"$out_dir/models.txt"
cat "$out_dir/models.txt"
topo=$repo/bench/sim/horovod_2018.json
ranks=4,8,16,32,64,128,256,512
horovod=(--mode horovod --backend ring --fusion-threshold 64M --cycle-time-us 5000 --linger-us 1000000000
         --negotiation tree)

# Published efficiencies at 512 GPUs (README: 128 servers) and 128 GPUs
# (docs/benchmarks.md of late 2017: 32 servers x 4 Pascal GPUs, same network).
declare -A published=([resnet101]="128:90,512:90" [inception_v3]="128:90,512:90" [vgg16]="128:79,512:68")

# A topology variant: link latency (s) and intra-server bandwidth (B/s).
variant() {  # variant ALPHA INTRA_BW -> path
  local p=$out_dir/topology.a$1.b$2.json
  python3 - "$topo" "$1" "$2" "$p" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["links"]["network"]["alpha_s"] = float(sys.argv[2])
for k in ("intra", "shm"):
    t["links"][k]["bytes_per_s"] = float(sys.argv[3])
json.dump(t, open(sys.argv[4], "w"), indent=1)
PY
  echo "$p"
}

efficiency_at() {  # efficiency_at JSON RANKS
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.1f' % next(100*p['efficiency'] for p in d['predictions'] if p['ranks']==int(sys.argv[2])))" "$1" "$2"
}

echo
echo "## Horovod's setting: predicted scaling efficiency (%) against the published"
echo
echo "| model | 128 GPUs | 512 GPUs | published 128 / 512 | 512: alpha 5/20 us | 512: intra 6/16 GB/s |"
echo "|-------|---------:|---------:|--------------------:|------------------:|--------------------:|"
for m in resnet101 inception_v3 vgg16; do
  w=$out_dir/$m.json
  "$sim" predict --topology "$topo" --workload "$w" --ranks "$ranks" "${horovod[@]}" --json "$out_dir/$m.horovod.json" \
    >"$out_dir/$m.horovod.txt"
  lo=$out_dir/$m.alpha5.json hi=$out_dir/$m.alpha20.json
  "$sim" predict --topology "$(variant 5e-6 10e9)" --workload "$w" --ranks 512 "${horovod[@]}" --json "$lo" >/dev/null
  "$sim" predict --topology "$(variant 20e-6 10e9)" --workload "$w" --ranks 512 "${horovod[@]}" --json "$hi" >/dev/null
  slow=$out_dir/$m.intra6.json fast=$out_dir/$m.intra16.json
  "$sim" predict --topology "$(variant 10e-6 6e9)" --workload "$w" --ranks 512 "${horovod[@]}" --json "$slow" >/dev/null
  "$sim" predict --topology "$(variant 10e-6 16e9)" --workload "$w" --ranks 512 "${horovod[@]}" --json "$fast" >/dev/null
  p=${published[$m]}
  echo "| $m | $(efficiency_at "$out_dir/$m.horovod.json" 128) | $(efficiency_at "$out_dir/$m.horovod.json" 512) |" \
       "${p//,/ \/ } | $(efficiency_at "$lo" 512) / $(efficiency_at "$hi" 512) |" \
       "$(efficiency_at "$slow" 512) / $(efficiency_at "$fast" 512) |" | sed 's/[0-9]*://g'
done
"$sim" plot --out "$out_dir/horovod_512.png" --log-x --x-label GPUs \
  --title "Horovod 2018 setting: predicted (lines) and published (dots)" \
  --series "ResNet-101=$out_dir/resnet101.horovod.json" --series "Inception V3=$out_dir/inception_v3.horovod.json" \
  --series "VGG-16=$out_dir/vgg16.horovod.json" \
  --points "ResNet-101 published=128:90,512:90" --points "Inception V3 published=128:90,512:90" \
  --points "VGG-16 published=128:79,512:68"

echo
echo "## cohort's strategies in the same setting: predicted efficiency (%) at 64 / 512 GPUs"
echo
strategies=(
  "horovod 2018|${horovod[*]}"
  "cohort engine, ring|--mode horovod --backend ring"
  "cohort engine, hierarchical|--mode horovod --backend hierarchical"
  "hierarchical, fusion 64M|--mode horovod --backend hierarchical --fusion-threshold 64M"
  "hierarchical, fp16|--mode horovod --backend hierarchical --compression fp16"
  "DDP 25M buckets, ring|--mode ddp --backend ring"
  "DDP 25M buckets, hierarchical|--mode ddp --backend hierarchical"
  "DDP 4M buckets, hierarchical|--mode ddp --backend hierarchical --bucket-bytes 4M"
  "DDP 25M, hierarchical, fp16|--mode ddp --backend hierarchical --compression fp16"
)
header="| strategy |"
rule="|----------|"
for m in resnet101 inception_v3 vgg16; do header+=" $m |"; rule+="------:|"; done
echo "$header"
echo "$rule"
for s in "${strategies[@]}"; do
  name=${s%%|*}
  read -ra flags <<<"${s#*|}"
  line="| $name |"
  for m in resnet101 inception_v3 vgg16; do
    j=$out_dir/$m.$(tr ' ,' '__' <<<"$name").json
    "$sim" predict --topology "$topo" --workload "$out_dir/$m.json" --ranks 64,512 "${flags[@]}" --json "$j" >/dev/null
    line+=" $(efficiency_at "$j" 64) / $(efficiency_at "$j" 512) |"
  done
  echo "$line"
done
for m in resnet101 inception_v3 vgg16; do
  "$sim" plot --out "$out_dir/strategies_$m.png" --log-x --x-label GPUs --title "$m: cohort's strategies (predicted)" \
    --series "horovod 2018=$out_dir/$m.horovod_2018.json" \
    --series "engine, hierarchical=$out_dir/$m.cohort_engine__hierarchical.json" \
    --series "DDP 25M, hierarchical=$out_dir/$m.DDP_25M_buckets__hierarchical.json" \
    --series "DDP 25M, hier., fp16=$out_dir/$m.DDP_25M__hierarchical__fp16.json"
done
echo
echo "plots: $out_dir/horovod_512.png $out_dir/strategies_*.png"
