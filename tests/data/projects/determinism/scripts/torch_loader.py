"""A DataLoader with 2 worker processes and NumPy-random augmentation: a checksum per batch."""

import hashlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = np.random.normal(size=4).astype("float32")  # the worker's global NumPy RNG
        return torch.full((4,), float(i)) + torch.from_numpy(noise)


if __name__ == "__main__":
    loader = DataLoader(Noisy(), batch_size=8, shuffle=True, num_workers=2)
    for n, batch in enumerate(loader):
        print(n, hashlib.sha256(batch.numpy().tobytes()).hexdigest()[:16])
