"""
Optimizers
"""

from rl_replicas.optimizers.conjugate_gradient_optimizer import (
    ConjugateGradientOptimizer,
)

__all__ = ["ConjugateGradientOptimizer"]
