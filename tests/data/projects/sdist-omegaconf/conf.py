from omegaconf import OmegaConf

conf = OmegaConf.create({"model": {"lr": 0.001, "layers": [64, 32]}, "seed": 7})
print(OmegaConf.to_yaml(conf), end="")
print("omegaconf", OmegaConf.__module__.split(".")[0], "ok")
