"""A plain W&B training script: one run, a few logged steps."""

import wandb

run = wandb.init(project="reprobuild-test")
for step in range(5):
    run.log({"loss": 1.0 / (step + 1)})
run.finish()
