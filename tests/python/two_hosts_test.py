"""The "cohort" backend across hosts: two emulated hosts (network
namespaces of scripts/cluster.sh, each its own host to cohort) with two
ranks each, started by cohortrun over `ip netns exec`, env:// as a user
writes it. The group must span the hosts (communicator "hierarchical":
shared memory inside a host, Gloo between them), and its all_reduce,
all_gather and broadcast, and DDP over 10 steps, must equal what a gloo
group of the same ranks gives (float64).

    two_hosts_test.py SOURCE_DIR COHORTRUN
"""

import os
import subprocess
import sys
import tempfile

SOURCE, COHORTRUN = sys.argv[1], sys.argv[2]
CLUSTER = os.path.join(SOURCE, "scripts", "cluster.sh")
WORKER = r'''
import copy, os, sys, torch, torch.distributed as dist
import cohort
dist.init_process_group("cohort")
rank, size = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD
gloo = dist.new_group(backend="gloo")
def same(what, a, b):
    if not torch.equal(a, b):
        sys.exit(f"rank {rank}: {what}: cohort {a.tolist()} gloo {b.tolist()}")
if group.communicator != "hierarchical":
    sys.exit(f"rank {rank}: the group runs on {group.communicator}, not across hosts")
x = torch.arange(11, dtype=torch.float64) * (rank + 1) / 4
a, b = x.clone(), x.clone()
dist.all_reduce(a); dist.all_reduce(b, group=gloo); same("all_reduce", a, b)
ga, gb = [torch.empty_like(x) for _ in range(size)], [torch.empty_like(x) for _ in range(size)]
dist.all_gather(ga, x); dist.all_gather(gb, x, group=gloo); same("all_gather", torch.cat(ga), torch.cat(gb))
a, b = x.clone(), x.clone()
dist.broadcast(a, 3); dist.broadcast(b, 3, group=gloo); same("broadcast", a, b)
torch.manual_seed(rank)
base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
def train(pg):
    model = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base), process_group=pg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        g = torch.Generator().manual_seed(10 * step + rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(8, 8, generator=g, dtype=torch.float64)),
                                     torch.randn(8, 1, generator=g, dtype=torch.float64)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
got, want = train(group), train(gloo)
if (got - want).abs().max().item() > 1e-12:
    sys.exit(f"rank {rank}: DDP differs from gloo's by {(got - want).abs().max().item()}")
print(f"rank {rank} on {os.environ['COHORT_HOST']}: OK over {group.communicator}", flush=True)
dist.destroy_process_group(gloo)
dist.destroy_process_group()
'''

up = subprocess.run(["bash", CLUSTER, "up", "--hosts", "2", "--owner", str(os.getpid())], text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
if up.returncode != 0:
    sys.exit(f"FAIL: cluster.sh up: {up.stderr}")
info = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
prefix = info["prefix"]
try:
    hosts = [f"{prefix}-h0", f"{prefix}-h1"]
    bridge = info["bridge"].split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        run = subprocess.run([COHORTRUN, "-H", f"{hosts[0]}:2,{hosts[1]}:2", "--launch-template", "ip netns exec {host}",
                              "--store-addr", bridge, "--env", "GLOO_SOCKET_IFNAME=eth0",
                              "--env", f"PYTHONPATH={os.environ['PYTHONPATH']}", "/usr/bin/python3", script],
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=150,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    print(run.stdout)
    if run.returncode != 0 or run.stdout.count("OK over hierarchical") != 4:
        sys.exit(f"FAIL: exit {run.returncode}")
finally:
    subprocess.run(["bash", CLUSTER, "down", "--prefix", prefix])
print("two hosts OK")
