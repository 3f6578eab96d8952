"""
Samplers
"""

from rl_replicas.samplers.sampler import Sampler
from rl_replicas.samplers.batch_sampler import BatchSampler

__all__ = ["Sampler", "BatchSampler"]
