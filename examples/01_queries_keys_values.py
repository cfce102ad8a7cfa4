"""Queries, keys and values: attention as a soft dictionary look-up.

A dictionary returns the value whose key equals the query. Attention returns a
*blend* of all values, each weighted by how well its key matches the query:

    weights = softmax(q · k_j over j),   out = sum_j weights_j v_j

Here three "facts" (keys) carry three values; a query close to the second key
gets back (almost) the second value.

    .venv/bin/python examples/01_queries_keys_values.py --out example_output

Try this: move the query to ``(1.0, 1.0)``, halfway between the first two
keys. Which weights come out equal? (Answer: the first two: ``q · k`` is 4 for
both.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

OUTPUTS = ["01_lookup.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    keys = torch.tensor([[4.0, 0.0], [0.0, 4.0], [-4.0, 0.0]])  # (Tk, D): three stored keys
    values = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # (Tk, Dv)
    query = torch.tensor([[0.2, 1.0]])  # (Tq, D): closest to the second key

    scores = query @ keys.T  # (Tq, Tk): one similarity per key
    weights = scores.softmax(dim=-1)  # (Tq, Tk): rows sum to 1
    result = weights @ values  # (Tq, Dv): the blended value
    show("query", query)
    show("keys", keys)
    show("values", values)
    show("scores = q k^T", scores)
    show("weights = softmax(scores)", weights)
    show("output = weights v", result)
    print("weights:", [round(w, 4) for w in weights[0].tolist()])
    assert int(weights.argmax()) == 1, "the query should match the second key best"

    # A sharper query (larger dot products) makes the look-up harder; a flat one blends more.
    lines = []
    for temperature in (0.25, 1.0, 4.0):
        w = (query @ keys.T / temperature).softmax(-1)[0]
        lines.append(f"temperature {temperature:>5}: weights {[round(x, 3) for x in w.tolist()]}")
        print(lines[-1])
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
