"""
Networks
"""

from rl_replicas.networks.mlp import MLP

__all__ = ["MLP"]
