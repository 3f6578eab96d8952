from importlib.metadata import version

from seqeval.metrics import f1_score

print("seqeval", version("seqeval"), f1_score([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]]))
