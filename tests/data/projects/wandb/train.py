"""A plain W&B training script: one run, a few logged steps."""

import wandb

run = wandb.init(project="reprobuild-test")
for step in range(5):
    loss = 1.0 / (step + 1)
    run.log({"loss": loss})
    print(f"step {step} loss {loss}")
run.finish()
