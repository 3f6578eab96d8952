"""Where a run or an image is checked: verify, diff, rebuild and what they compare."""
