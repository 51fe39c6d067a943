"""hvd.elastic on cohort's elastic membership: ranks killed mid-training, the
others go on, replacements join, and the final parameters equal those of one
process that trained on the same global batches.

    cohortrun -np 3 --min-np 2 --max-restarts 1 python3 tests/python/hvd_elastic.py \\
        --np 3 --kill 1:6:before --kill 2:14:after

float64 linear regression, SGD with momentum (optimizer state that a
newcomer must receive), a global batch of 12 rows per step split evenly over
the current world (12 divides by 2 and 3), DistributedOptimizer averaging
the gradients: a step's update is the global batch's whatever the world.
--kill SLOT:STEP:PHASE makes the first process of SLOT kill itself (SIGKILL)
at step STEP, "before" its gradients' allreduce (the others' step fails and
is redone from the last commit) or "after" its optimizer step, before the
commit (the others may commit the step or not: sync() takes the most
commits). While the world is smaller than --np, the ranks wait after each
commit for the launcher's replacement, so that it joins in this short job.

Rank 0 checks at the end: every step committed once, the parameters equal
the one-process replay (to 1e-9), the last steps ran on --np ranks and a
replacement (a second incarnation of a slot) took part; exit 1 otherwise.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import cohort.torch as hvd
from cohort import _C

ROWS, FEATURES, BATCH, STEPS = 96, 4, 12, 24

parser = argparse.ArgumentParser()
parser.add_argument("--np", type=int, required=True, help="the world's full size (cohortrun -np)")
parser.add_argument("--kill", action="append", default=[], help="SLOT:STEP:before|after")
args = parser.parse_args()

g = torch.Generator().manual_seed(0)
X = torch.randn(ROWS, FEATURES, generator=g, dtype=torch.float64)
Y = X @ torch.randn(FEATURES, 1, generator=g, dtype=torch.float64) + 0.1 * torch.randn(
    ROWS, 1, generator=g, dtype=torch.float64)


def global_rows(step):
    return torch.tensor([(step * BATCH + i) % ROWS for i in range(BATCH)])


def make_model():
    torch.manual_seed(1)
    model = torch.nn.Linear(FEATURES, 1).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


slot = int(os.environ.get("COHORT_ELASTIC_SLOT", "-1"))
incarnation = int(os.environ.get("COHORT_ELASTIC_INCARNATION", "0"))
kills = [(int(s), int(k), phase) for s, k, phase in (spec.split(":") for spec in args.kill)]


def maybe_kill(step, phase):
    if incarnation == 0 and (slot, step, phase) in kills:
        print(f"slot {slot} kills itself at step {step} ({phase})", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


hvd.init()
model, optimizer = make_model()
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0, sizes=[])


@hvd.elastic.run
def train(state):
    while state.step < STEPS:
        n, r = hvd.size(), hvd.rank()
        rows = global_rows(state.step).chunk(n)[r]
        maybe_kill(state.step, "before")
        state.optimizer.zero_grad()
        F.mse_loss(state.model(X[rows]), Y[rows]).backward()
        state.optimizer.step()
        maybe_kill(state.step, "after")
        state.sizes.append(n)
        state.step += 1
        state.commit()
        if hvd.size() < args.np and state.step < STEPS:
            # wait for the replacement, then take it in at once (collective)
            for _ in range(6000):
                if _C.membership_changed():
                    break
                time.sleep(0.02)
            state.check_host_updates()


train(state)
incarnations = hvd.allgather_object(incarnation)
if hvd.rank() == 0:
    ref, ref_opt = make_model()
    for step in range(STEPS):
        rows = global_rows(step)
        ref_opt.zero_grad()
        F.mse_loss(ref(X[rows]), Y[rows]).backward()
        ref_opt.step()
    print(f"steps {state.step}, world sizes {state.sizes}, incarnations {incarnations}", flush=True)
    problems = []
    if state.step != STEPS or len(state.sizes) != STEPS:
        problems.append(f"{len(state.sizes)} steps committed, expected {STEPS}")
    if state.sizes[-1] != args.np or max(incarnations) < 1:
        problems.append(f"the last step ran on {state.sizes[-1]} ranks of incarnations {incarnations}: "
                        f"no replacement joined")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if not torch.allclose(p.detach(), q.detach(), rtol=1e-9, atol=1e-12):
            problems.append(f"{name} {p.detach().flatten().tolist()} differs from the one-process "
                            f"{q.detach().flatten().tolist()}")
    if problems:
        print("hvd_elastic: " + "; ".join(problems), file=sys.stderr, flush=True)
        sys.exit(1)
    print("hvd_elastic: the parameters equal the one-process replay", flush=True)
