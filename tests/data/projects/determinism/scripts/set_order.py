"""Output that depends on the iteration order of a set of strings (PYTHONHASHSEED)."""

words = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"}
print(" ".join(words))
