#!/usr/bin/env python3
"""Writes the cohort-plan inputs of the Megatron-LM comparison (bench/plan_megatron.sh):
one profile per GPT model of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21), Table 1, and the catalogue of DGX A100
nodes, from published figures only:

  - the models: layers l, hidden size h, heads a, global batch B; sequence s = 2048,
    vocabulary V = 51200 (the paper's);
  - FLOPs per iteration (the paper's eq. 3, with activation recomputation):
    96 B s l h^2 (1 + s / (6 h) + V / (16 l h)), so per example 96 s l h^2 (...);
  - parameters 12 l h^2 (1 + 13 / (12 h)) + (V + s) h; mixed precision with Adam:
    2 bytes of fp16 weights, 2 of fp16 gradients, 12 of fp32 master weights and moments per
    parameter (ZeRO's 16 bytes per parameter);
  - activations with full recomputation: each layer's input (2 s h bytes per example) and one
    layer's working set while it is recomputed (s h (34 + 5 a s / h) bytes, Korthikanti et al.
    2022);
  - tensor parallelism: 4 allreduces per layer (2 forward, 2 backward) of s h fp16 values per
    example; pipeline stages pass s h fp16 values per example each way;
  - a DGX A100 node: 8 GPUs of 312 TFLOP/s fp16 peak and 80 GB, NVLink/NVSwitch 300 GB/s per
    GPU and direction, 8 x 200 Gbit/s HDR InfiniBand (200 GB/s per node and direction).

The achieved fraction of peak of the GPUs' kernels is an input (ACHIEVED, 0.5 by default):
the published per-GPU throughputs include the pipeline bubble and communication, which the
planner predicts; it is not fitted to the table.
"""
import json
import os
import sys

S, V = 2048, 51200
ACHIEVED = float(os.environ.get("ACHIEVED", "0.5"))

# Table 1: billions of parameters, heads, hidden, layers, tp, pp, GPUs, batch, TFLOP/s per GPU.
TABLE1 = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("1T", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def profile(name, a, h, l):
    params = 12 * l * h * h * (1 + 13 / (12 * h)) + (V + S) * h
    flop = 96 * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h))
    layer = 12 * h * h + 13 * h
    return {
        "name": "gpt-" + name,
        # One example's step on the reference: times are relative (forward a third), the
        # machine's flop_per_s and flop_per_example set the scale.
        "workload": {
            "name": "gpt-" + name,
            "forward_s": 1.0 / 3,
            "backward_s": 2.0 / 3,
            "bytes_per_param": 2,
            "layers": [{"name": "embedding", "params": (V + S) * h, "backward_weight": 0.0}]
            + [{"name": "block%d" % i, "params": layer, "backward_weight": 1.0} for i in range(l)],
        },
        "batch_per_rank": 1,
        "flop_per_example": flop,
        "memory": {
            "parameter_bytes": 2 * params,
            "gradient_bytes": 2 * params,
            "optimizer_bytes": 12 * params,
            "activation_bytes_per_example": l * 2 * S * h + S * h * (34 + 5 * a * S / h),
        },
        "stages": {
            "layers": l,
            "heads": a,
            "boundary_bytes_per_example": 2 * S * h,
            "tp_bytes_per_example": 2 * S * h,
            "tp_allreduces_per_layer": 4,
            "program": "megatron_gpt",
        },
        "program": "megatron_gpt",
    }


def catalogue(max_gpus):
    return {
        "topology": {
            "links": {
                "shm": {"alpha_s": 5e-6, "bytes_per_s": 300e9},
                "intra": {"alpha_s": 5e-6, "bytes_per_s": 300e9},
            },
            "reduce_bytes_per_s": 1e12,
            "copy_bytes_per_s": 1e12,
        },
        "machine_types": [{
            "name": "dgx-a100",
            "cores": 128,
            "accelerators": 8,
            "memory_bytes": 2e12,
            "memory_bytes_per_rank": 80e9,
            "network_bytes_per_s": 8 * 200e9 / 8,
            "network_latency_s": 5e-6,
            "price_per_hour": 0,
            "available": max_gpus // 8,
            "flop_per_s": 312e12 * ACHIEVED,
        }],
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rows = []
    for name, a, h, l, tp, pp, gpus, batch, tflops in TABLE1:
        with open(os.path.join(out, "megatron_%s.json" % name), "w") as f:
            json.dump(profile(name, a, h, l), f, indent=1)
        rows.append({"model": name, "heads": a, "hidden": h, "layers": l, "tp": tp, "pp": pp, "gpus": gpus,
                     "batch": batch, "tflops_per_gpu": tflops})
    with open(os.path.join(out, "megatron_dgx_a100.json"), "w") as f:
        json.dump(catalogue(max(r["gpus"] for r in rows)), f, indent=1)
    with open(os.path.join(out, "megatron_table1.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
