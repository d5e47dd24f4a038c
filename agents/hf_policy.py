"""`HFPolicy`: batched sampling with transformers `generate` (KV cache, left padding).

Log-probs are those of the distribution actually sampled from. `generate` samples token
y_t ~ softmax(s_t) where s_t = processors(logits_t) are the processed scores (temperature,
top-k, top-p: filtered entries are -inf); with `output_scores=True` it returns exactly these s_t, so

    logprob_t = log_softmax(s_t)[y_t]          # s_t: (B, V) per step

which is log p(y_t) under the tempered, truncated and renormalised distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agents.policy import Completion, SamplingParams


class HFPolicy:
    """A `Policy` over a live transformers causal LM (no copy is made).

    During `generate` the model runs in eval mode under `torch.no_grad()` (no dropout, no graph);
    its previous train/eval mode is restored afterwards, so the trainer can keep using it.

    Args:
        model: A transformers causal LM (`GenerationMixin`), e.g. the trainer's policy.
        eos_token_ids: Ids that end a turn (e.g. `<|im_end|>`); unioned with `sampling.stop_token_ids`.
        pad_token_id: Id used for left padding and after a sequence has stopped.
        batch_size: Prompts per `model.generate` call (None = all at once).
    """

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        batch_size: int | None = None,
    ) -> None:
        if not eos_token_ids:
            raise ValueError(
                "HFPolicy: eos_token_ids is empty; pass the end-of-turn id(s), e.g. [tok.eos_token_id]"
            )
        self.model = model
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.batch_size = batch_size

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """Sample one completion per prompt; see the module docstring for the log-prob formula."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("HFPolicy.generate: every prompt needs at least one id")
        step = self.batch_size or len(prompts)
        out: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for lo in range(0, len(prompts), step):
                    out += self._generate_batch(prompts[lo : lo + step], sampling)
        finally:
            self.model.train(was_training)
        return out

    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # (B, L)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for b, p in enumerate(prompts):  # left padding: the last prompt id sits at column L-1
            input_ids[b, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[b, width - len(p) :] = 1
        stops = tuple(dict.fromkeys(self.eos_token_ids + tuple(sampling.stop_token_ids)))
        result = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            generation_config=self._generation_config(sampling, stops),
        )
        new = result.sequences[:, width:]  # (B, T)
        scores = torch.stack(result.scores, dim=1).float()  # (B, T, V) processed scores s_t
        logprobs = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return [
            self._trim(new[b].tolist(), logprobs[b].tolist(), stops, sampling.max_tokens)
            for b in range(len(prompts))
        ]

    def _generation_config(self, sampling: SamplingParams, stops: tuple[int, ...]) -> Any:
        from transformers import GenerationConfig

        # Fields left None are filled from model.generation_config (e.g. top_k=50), so the sampling
        # knobs are set explicitly. Rarer processors (min_p, suppress_tokens) are not forced off, as a
        # no-op processor costs time every step; if the model's config sets them they shape the
        # distribution, and the returned log-probs still describe it exactly (they are read from the
        # processed scores).
        return GenerationConfig(
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            min_new_tokens=0,
            max_new_tokens=sampling.max_tokens,
            num_beams=1,
            eos_token_id=list(stops),
            pad_token_id=self.pad_token_id,
            use_cache=True,
            return_dict_in_generate=True,
            output_scores=True,
        )

    @staticmethod
    def _trim(ids: list[int], logprobs: list[float], stops: tuple[int, ...], max_tokens: int) -> Completion:
        """Cut a row after its first stop id (kept); the rest is padding from the batch."""
        stop_set = set(stops)
        for t, tok in enumerate(ids[:max_tokens]):
            if tok in stop_set:
                return Completion(ids=ids[: t + 1], logprobs=logprobs[: t + 1], finish_reason="stop")
        n = min(len(ids), max_tokens)
        return Completion(ids=ids[:n], logprobs=logprobs[:n], finish_reason="length")
