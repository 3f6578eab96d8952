"""Where a build goes: plan, render, build context, manifest, and ``reprobuild image``."""
