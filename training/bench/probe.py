"""The bench's per-step observer: all-episode entropy, step progress and counterfactual updates.

`StepObserver` is the trainer's `Run.on_batch` hook. Before each update it logs

    train/entropy_all = Σ_t H_t·m_t / Σ_t m_t over EVERY episode of the step (kept and dropped groups),
                        pre-update, sampled (loss-mask) tokens only, H at the rollout temperature

next to the gate's H̄ (`train/entropy`, kept groups only, the authors' definition). Every
`every`-th step with an update it also runs the counterfactual probe (the mechanism endpoint):

    for each variant v (dapo, stare-o1 at several W, stare-c2):
        copy model + AdamW state → one update on this step's batch with v (STARE gate forced on)
        ΔH_v   = H_probe(copy) − H_probe(model)         (token-mean entropy on the fixed probe episodes)
        ΔlogP_v = L_probe(copy) − L_probe(model)        (mean log-prob of the probe's correct episodes)

logged as `probe/dH/<v>` and `probe/dlogp/<v>`. The probe is a fixed set of held-out episodes
sampled once from the warm start (`sample_probe`), so ΔH has no sampling noise: it is what one
update of v does to the policy's entropy on contexts it was not trained on. The trunk model and
optimizer are never touched.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

import torch

import stare
from agents.trajectory import Trajectory
from training import runtime
from training.batch import Batch, collate
from training.logprobs import batch_logprobs
from training.update import update_policy
from training.weights import batch_weights


@dataclass(frozen=True)
class Variant:
    """One counterfactual update: a name for the report and the algorithm it applies."""

    name: str
    """e.g. `dapo`, `stare-o1-w2`, `stare-c2`."""
    algo: stare.AlgoConfig


def probe_variants(base: stare.AlgoConfig, ws: tuple[float, ...], top_ratio: float) -> list[Variant]:
    """Dapo (STARE off), STARE-O1 at each W on the top `top_ratio`, STARE-C2 (its preset W, M).

    Every variant keeps `base`'s clipping, aggregation and dynamic-sampling settings; only the
    STARE block differs. Names: `stare-o1-w2`, `stare-o1-w1.1`, ...
    """
    off = base.replace(stare=base.stare.replace(enabled=False))
    out = [Variant("dapo", off)]
    for w in ws:
        o1 = base.stare.replace(enabled=True, variant="O1", w=w, top_ratio=top_ratio, adaptive=False)
        out.append(Variant(f"stare-o1-w{w:g}", base.replace(stare=o1)))
    c2 = stare.PRESETS["stare-c2"].stare.replace(top_ratio=top_ratio, adaptive=False)
    out.append(Variant("stare-c2", base.replace(stare=c2)))
    return out


def probe_stats(
    model: Any, probe: Batch, correct: torch.Tensor, *, temperature: float, token_budget: int
) -> tuple[float, float]:
    """(token-mean entropy over the probe's sampled tokens, mean token log-prob over its correct episodes).

    Shapes: probe (B, R); correct (B,) bool; both means are over loss-mask tokens.
    """
    was_training = model.training
    model.eval()
    logp, entropy = batch_logprobs(model, probe, temperature, token_budget=token_budget)
    model.train(was_training)
    mask = probe.loss_mask
    correct_mask = mask * correct[:, None].float()
    return float(stare.masked_mean(entropy, mask)), float(stare.masked_mean(logp, correct_mask))


class StepObserver:
    """`Run.on_batch` hook of bench runs (see the module docstring)."""

    def __init__(
        self,
        *,
        label: str,
        probe: list[Trajectory] | None,
        variants: list[Variant],
        every: int,
        progress_every: int = 10,
    ) -> None:
        self.label, self.every, self.progress_every = label, every, progress_every
        self.variants = variants
        self.probe = probe or []
        self._probe_batch: Batch | None = None
        self._correct = torch.tensor([t.is_correct for t in self.probe], dtype=torch.bool)

    def __call__(self, run: Any, step: int, collected: Any, batch: Batch) -> dict[str, float]:
        """train/entropy_all every step; the counterfactual probe every `every`-th step with an update."""
        out = {"train/entropy_all": all_episode_entropy(run, collected.all)}
        if self.every and self.probe and step % self.every == 0 and collected.groups_kept > 0:
            out.update(self.counterfactuals(run, batch))
        if self.progress_every and step % self.progress_every == 0:
            acc = sum(t.is_correct for t in collected.all) / max(1, len(collected.all))
            print(
                f"[bench] {self.label}: step {step}/{run.cfg.train.steps}  acc {acc:.2f}  "
                f"H_all {out['train/entropy_all']:.3f}",
                file=sys.stderr,
                flush=True,
            )
        return out

    def _probe(self, run: Any) -> Batch:
        if self._probe_batch is None:
            self._probe_batch = collate(self.probe, torch.zeros(len(self.probe)), pad_id=run.pad_id)
        return self._probe_batch

    def counterfactuals(self, run: Any, batch: Batch) -> dict[str, float]:
        """`probe/dH/<v>`, `probe/dlogp/<v>` for every variant, from the current model and AdamW state."""
        cfg = run.cfg
        temperature, budget = cfg.rollout.temperature, cfg.train.micro_batch_tokens
        model = run.accelerator.unwrap_model(run.model)
        probe = self._probe(run)
        h0, l0 = probe_stats(model, probe, self._correct, temperature=temperature, token_budget=budget)
        old_logp, entropy = batch_logprobs(model, batch, temperature, token_budget=budget)
        full = batch.with_(old_log_probs=old_logp, entropy=entropy)
        state = _inner(run.optimizer).state_dict()
        out: dict[str, float] = {"probe/entropy": h0, "probe/logp_correct": l0}
        rng = torch.get_rng_state()
        settings = dataclasses.replace(run.update, fused=False, mini_batches=1, epochs=1)
        for variant in self.variants:
            twin = copy.deepcopy(model)
            optimizer, _ = runtime.make_optimizer(cfg, twin)
            optimizer.load_state_dict(state)
            controller = runtime.controller_for(variant.algo)
            controller.target_entropy = float("inf")  # gate forced on: the update STARE makes when gated
            controller.update(float(stare.masked_mean(entropy, batch.loss_mask)))
            weighted, _ = batch_weights(full, variant.algo, controller, tis_cap=0.0)
            update_policy(twin, optimizer, weighted, settings, algo=variant.algo, controller=controller,
                          accelerator=run.accelerator)
            h1, l1 = probe_stats(twin, probe, self._correct, temperature=temperature, token_budget=budget)
            out[f"probe/dH/{variant.name}"] = h1 - h0
            out[f"probe/dlogp/{variant.name}"] = l1 - l0
        torch.set_rng_state(rng)
        return out


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's wrapper (or the optimizer itself)."""
    return getattr(optimizer, "optimizer", optimizer)


def all_episode_entropy(run: Any, trajs: list[Trajectory]) -> float:
    """Token-mean pre-update entropy over the sampled tokens of every episode of the step."""
    batch = collate(trajs, torch.zeros(len(trajs)), pad_id=run.pad_id)
    model = run.accelerator.unwrap_model(run.model)
    was_training = model.training
    model.eval()
    _, entropy = batch_logprobs(
        model,
        batch,
        run.cfg.rollout.temperature,
        token_budget=run.cfg.train.micro_batch_tokens,
        by_length=run.cfg.train.sort_micro_batches,
    )
    model.train(was_training)
    return float(stare.masked_mean(entropy, batch.loss_mask))
