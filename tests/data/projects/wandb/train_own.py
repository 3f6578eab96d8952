"""A W&B training script with its own tags, config and group."""

import wandb

config = {"lr": 0.01, "layers": [64, 32], "optimizer": "adam"}
with wandb.init(
    project="reprobuild-test", tags=["baseline", "v2"], config=config, group="sweep-7"
) as run:
    for step in range(5):
        run.log({"loss": config["lr"] / (step + 1)})
