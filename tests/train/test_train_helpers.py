"""A tiny classifier and dataset shared by the training tests (no attnkit.models needed)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset


class TinyClassifier(nn.Module):
    """Embedding, dropout, masked mean over tokens, linear: forward(ids, lengths) -> logits."""

    def __init__(self, vocab: int = 20, dim: int = 8, classes: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(dim, classes)

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]  # (B, T)
        x = self.dropout(self.embedding(ids)) * mask[..., None]  # (B, T, D)
        return self.classifier(x.sum(1) / lengths[:, None].float())


class TokenDataset(Dataset):
    """Documents of random tokens; the label is whether token 1 occurs more often than token 2."""

    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            length = int(torch.randint(3, 9, (1,), generator=g))
            ids = torch.randint(1, 20, (length,), generator=g)
            label = int((ids == 1).sum() > (ids == 2).sum())
            self.items.append({"ids": ids, "label": torch.tensor(label)})
        self.lengths = [len(it["ids"]) for it in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.items[i]


def collate(batch: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    lengths = torch.tensor([len(b["ids"]) for b in batch])
    ids = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
    for i, b in enumerate(batch):
        ids[i, : len(b["ids"])] = b["ids"]
    return {"ids": ids, "lengths": lengths, "labels": torch.stack([b["label"] for b in batch])}
