"""STARE's token weights + statistics vs a plain policy loss, a full-sort version and the reference's way;
then every baseline loss (forward + backward) against the plain DAPO loss.

Side by side in one run, on realistic micro-batches (8 × 4096 and 64 × 4096 tokens; vocabulary is
irrelevant: everything works on per-token log-probs). The first table gives median times, ratios,
host synchronisations per call (counted with `stare._syncs.count_host_syncs`) and µs per 1k tokens
(linearity); the second the median forward + backward time of each preset's policy loss
(`stare.algo_policy_loss`, plus the entropy bonus for adaptive-entropy) divided by DAPO's.

    .venv/bin/python benchmarks/bench_stare.py [--repeats 20] [--device cpu] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from stare import aggregate, algo_policy_loss, get_preset, policy_loss, token_weights_with_stats
from stare._syncs import count_host_syncs
from stare.weights import top_count


def make_batch(batch: int, length: int, *, device: str, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Log-probs (B, T), per-token advantages (B, T) zeroed on padding, mask (B, T) with ragged lengths.

    Groups of 8 with {0, 1} rewards; about a quarter of groups are all-equal (A = 0), as in GRPO.
    """
    gen = torch.Generator().manual_seed(seed)
    log_probs = -(torch.empty(batch, length).exponential_(3.0, generator=gen)).clamp(max=30.0)
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    rewards = (torch.rand(batch, generator=gen) < 0.5).float()
    adv = (rewards - 0.5) * torch.where(torch.rand(batch, generator=gen) < 0.25, 0.0, 2.0)
    adv = adv[:, None] * mask
    return log_probs.to(device), adv.to(device), mask.to(device)


def full_sort(log_probs: Tensor, adv: Tensor, mask: Tensor, *, top_ratio: float = 0.1, w: float = 1.1,
              m: float = 0.9) -> tuple[Tensor, dict[str, Tensor]]:
    """(b) Same result, but each subset's surprisals are fully sorted (O(N log N)) instead of top-k."""
    valid, s = mask > 0, -log_probs.detach()
    subsets = (valid & (adv > 0), valid & (adv < 0))
    n_pos, n_neg, n_valid = torch.stack([subsets[0].sum(), subsets[1].sum(), valid.sum()]).tolist()
    weights = torch.ones_like(adv)
    for subset, count, value in zip(subsets, (n_pos, n_neg), (w, m), strict=True):
        order = torch.where(subset, s, float("-inf")).reshape(-1).sort(descending=True).indices
        weights.view(-1)[order[:top_count(count, top_ratio)]] = value
    mean_weight = (weights * valid).sum() / max(1, n_valid)
    return weights, {"stare/mean_weight": mean_weight}


def reference_way(log_probs: Tensor, adv: Tensor, mask: Tensor, *, top_ratio: float = 0.1, w: float = 1.1,
                  m: float = 0.9) -> tuple[Tensor, dict[str, float]]:
    """(c) The reference's way (STARE_SPEC §1.2): boolean-index each candidate set, topk, scatter back,
    and read every statistic on the host (one sync each)."""
    valid, s = mask > 0, -log_probs.detach()
    weights = torch.ones_like(adv)
    chosen = []
    for subset, value in ((valid & (adv > 0), w), (valid & (adv < 0), m)):
        flat_s = s[subset]                                   # sync: output size depends on data
        k = top_count(flat_s.numel(), top_ratio)
        picked = torch.zeros_like(flat_s, dtype=torch.bool)
        if k:
            picked[flat_s.topk(k).indices] = True
        selected = torch.zeros_like(subset)
        selected[subset] = picked                            # sync: boolean index_put
        weights = torch.where(selected, torch.full_like(weights, value), weights)
        chosen.append(selected)
    n_valid = max(1, int(valid.sum().item()))
    stats = {"positive_candidate_ratio": (valid & (adv > 0)).sum().item() / n_valid,
             "negative_candidate_ratio": (valid & (adv < 0)).sum().item() / n_valid,
             "positive_reweight_ratio": chosen[0].sum().item() / n_valid,
             "negative_reweight_ratio": chosen[1].sum().item() / n_valid,
             "mean_weight": (weights * valid).sum().item() / n_valid}
    return weights, stats


def loss_fwd_bwd(log_probs: Tensor, adv: Tensor, mask: Tensor) -> Tensor:
    """(a) Plain dual-clip policy loss forward + backward over log-probs of the same shape."""
    leaf = log_probs.detach().requires_grad_(True)
    loss, _ = policy_loss(leaf, log_probs.detach(), adv, mask)
    loss.backward()
    return leaf.grad


def timed(calls: dict[str, Callable[[], object]], repeats: int, device: str) -> dict[str, float]:
    """Median wall time of each call in ms, interleaved round-robin so machine load hits all alike."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for fn in calls.values():
        for _ in range(2):
            fn()
    sync()
    times: dict[str, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, fn in calls.items():
            start = time.perf_counter()
            fn()
            sync()
            times[key].append((time.perf_counter() - start) * 1e3)
    return {key: statistics.median(values) for key, values in times.items()}


HEADER = ("| B × T | STARE O1 (ms) | STARE C2 (ms) | (a) loss fwd+bwd (ms) | (b) full sort (ms) "
          "| (c) reference way (ms) | C2 / (a) | C2 / (b) | C2 / (c) | syncs: C2 / (b) / (c) "
          "| C2 µs per 1k tok | same ω |\n" + "|---" * 12 + "|")


def bench_shape(batch: int, length: int, repeats: int, device: str) -> str:
    """One Markdown row: median times, ratios, host syncs per call, per-token cost, agreement."""
    lp, adv, mask = make_batch(batch, length, device=device)
    calls = {
        "o1": lambda: token_weights_with_stats(lp, adv, mask, variant="O1"),
        "c2": lambda: token_weights_with_stats(lp, adv, mask, variant="C2"),
        "loss": lambda: loss_fwd_bwd(lp, adv, mask),
        "sort": lambda: full_sort(lp, adv, mask),
        "ref": lambda: reference_way(lp, adv, mask),
    }
    # Same ω as the reference's way (could differ only where surprisals tie at the k-th value).
    ref_w = calls["ref"]()[0]
    same = torch.equal(calls["c2"]()[0], ref_w) and torch.equal(calls["sort"]()[0], ref_w)
    syncs = {}
    for key in ("c2", "sort", "ref"):
        with count_host_syncs() as log:
            calls[key]()
        syncs[key] = log.count
    ms = timed(calls, repeats, device)
    c2 = ms["c2"]
    cells = [f"{batch} × {length}", *(f"{ms[k]:.2f}" for k in ("o1", "c2", "loss", "sort", "ref")),
             *(f"{c2 / ms[k]:.2f}" for k in ("loss", "sort", "ref")),
             f"{syncs['c2']} / {syncs['sort']} / {syncs['ref']}", f"{c2 * 1e3 / (batch * length / 1e3):.1f}",
             "yes" if same else "no"]
    return "| " + " | ".join(cells) + " |"


BASELINES = ("dr-grpo", "gspo", "cispo", "clip-cov", "kl-cov", "adaptive-entropy", "forking-tokens")
"""Presets timed against `dapo` in the second table."""


def preset_loss_fwd_bwd(name: str, log_probs: Tensor, adv: Tensor, mask: Tensor, entropy: Tensor) -> Tensor:
    """Forward + backward of one preset's policy loss over leaf log-probs (and leaf entropy for the bonus)."""
    algo = get_preset(name)
    leaf = log_probs.detach().requires_grad_(True)
    ent = entropy.detach().requires_grad_(algo.entropy_adaptive)
    loss, _ = algo_policy_loss(algo, leaf, log_probs.detach() - 0.01, adv, mask, entropy=ent)
    if algo.entropy_adaptive:
        loss = loss - 0.005 * aggregate(ent, mask, algo.loss_agg)
    loss.backward()
    return leaf.grad


LOSS_HEADER = ("| B × T | DAPO loss fwd+bwd (ms) | " + " | ".join(f"{n} / DAPO" for n in BASELINES) + " |\n"
               + "|---" * (len(BASELINES) + 2) + "|")


def bench_losses(batch: int, length: int, repeats: int, device: str) -> tuple[str, dict[str, float]]:
    """One Markdown row: DAPO's median fwd+bwd time and each baseline's time as a ratio of it."""
    lp, adv, mask = make_batch(batch, length, device=device)
    entropy = (-lp).clamp(max=5.0) + 0.1                               # any non-negative field will do
    calls = {name: (lambda n=name: preset_loss_fwd_bwd(n, lp, adv, mask, entropy))
             for name in ("dapo", *BASELINES)}
    ms = timed(calls, repeats, device)
    ratios = {name: ms[name] / ms["dapo"] for name in BASELINES}
    cells = [f"{batch} × {length}", f"{ms['dapo']:.2f}", *(f"{ratios[n]:.2f}" for n in BASELINES)]
    return "| " + " | ".join(cells) + " |", ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--shapes", default="8x4096,64x4096")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
          f"median of {args.repeats}")
    print(HEADER)
    for batch, length in shapes:
        print(bench_shape(batch, length, args.repeats, args.device), flush=True)
    print()
    print(LOSS_HEADER)
    for batch, length in shapes:
        print(bench_losses(batch, length, args.repeats, args.device)[0], flush=True)


if __name__ == "__main__":
    main()
