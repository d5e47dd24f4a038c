"""A policy that replays fixed assistant turns: for tests and debugging of envs and the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.policy import Completion, SamplingParams


class ScriptedPolicy:
    """Replays `turns[k]` as the k-th assistant turn of every episode it is asked about.

    An episode is recognised by its ids: a prompt that extends an earlier prompt plus the turn
    returned for it is that episode's next turn; any other prompt starts a new episode at turn 0.
    So one instance serves `rollout` and `rollout_batch` alike. With `lockstep=True` the k-th
    `generate` call returns turn k for every prompt instead (every live episode of one rollout
    advances one turn per call), which also serves per-turn prompts that re-render the history and
    so do not extend the previous context; use one instance per rollout call then.

    Args:
        turns: Assistant turns, each a text (encoded with `tokenizer`) or a list of token ids
            (used verbatim, e.g. a non-canonical tokenisation).
        tokenizer: Needed when any turn is a text.
        append_eos: Append the tokenizer's eos id to text turns that do not already end with it.
        logprob: The log-prob reported for every replayed id.
        lockstep: Choose the turn by the number of `generate` calls, not by the prompt.

    A turn ends with finish_reason "stop" when its last id is a stop id (`sampling.stop_token_ids`
    or the tokenizer's eos), and "length" when `sampling.max_tokens` cut it.
    """

    def __init__(
        self,
        turns: Sequence[str | Sequence[int]],
        tokenizer: Any = None,
        *,
        append_eos: bool = True,
        logprob: float = 0.0,
        lockstep: bool = False,
    ) -> None:
        self.eos_id = getattr(tokenizer, "eos_token_id", None)
        self.turns = [self._to_ids(t, tokenizer, append_eos) for t in turns]
        self.logprob = logprob
        self.lockstep = lockstep
        self._episodes: dict[tuple[int, ...], int] = {}
        self.calls = 0
        """How many times `generate` was called (one per batched turn)."""

    def _to_ids(self, turn: str | Sequence[int], tokenizer: Any, append_eos: bool) -> list[int]:
        if not isinstance(turn, str):
            return [int(i) for i in turn]
        if tokenizer is None:
            raise ValueError(
                "ScriptedPolicy: text turns need a tokenizer; pass ScriptedPolicy(turns, tokenizer)"
            )
        ids = list(tokenizer(turn, add_special_tokens=False)["input_ids"])
        if append_eos and self.eos_id is not None and (not ids or ids[-1] != self.eos_id):
            ids.append(self.eos_id)
        return ids

    def _turn_of(self, prompt: list[int]) -> int:
        best, turn = -1, 0
        for key, k in self._episodes.items():
            if len(key) > best and len(key) <= len(prompt) and tuple(prompt[: len(key)]) == key:
                best, turn = len(key), k
        return turn

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """Return the scripted turn of each prompt's episode, cut to `sampling.max_tokens`."""
        self.calls += 1
        stops = set(sampling.stop_token_ids) | ({self.eos_id} if self.eos_id is not None else set())
        out = []
        for prompt in prompts:
            k = self.calls - 1 if self.lockstep else self._turn_of(prompt)
            if k >= len(self.turns):
                raise IndexError(
                    f"ScriptedPolicy: the script has {len(self.turns)} turns; turn {k} was requested"
                )
            ids = self.turns[k]
            for pos, tok in enumerate(ids):  # generation ends at the first stop id, as an engine would
                if tok in stops:
                    ids = ids[: pos + 1]
                    break
            cut = ids[: sampling.max_tokens]
            finish = "stop" if cut and cut[-1] in stops else "length"
            self._episodes[tuple(prompt) + tuple(cut)] = k + 1
            out.append(Completion(ids=list(cut), logprobs=[self.logprob] * len(cut), finish_reason=finish))
        return out
