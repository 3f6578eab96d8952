"""Jobs on more than one node: the torchrun shape, compose files, Kubernetes objects."""
