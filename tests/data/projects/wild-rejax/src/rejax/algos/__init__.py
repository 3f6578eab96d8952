from .algorithm import Algorithm
from .dqn import DQN
from .iqn import IQN
from .mixins import (
    EpsilonGreedyMixin,
    NormalizeObservationsMixin,
    ReplayBufferMixin,
    TargetNetworkMixin,
    VectorizedEnvMixin,
)
from .ppo import PPO
from .pqn import PQN
from .sac import SAC
from .td3 import TD3


__all__ = [
    "DQN",
    "IQN",
    "PPO",
    "PQN",
    "SAC",
    "TD3",
    "Algorithm",
    "EpsilonGreedyMixin",
    "NormalizeObservationsMixin",
    "ReplayBufferMixin",
    "TargetNetworkMixin",
    "VectorizedEnvMixin",
]
