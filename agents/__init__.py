"""agents: policies, chat rendering, the rollout loop and verified token trajectories.

Token-in/token-out: the ids a policy sampled are never re-tokenised; every message the env
injects is rendered as a delta of the chat template and appended with loss mask 0.
"""

from agents.episode import HISTORY_MODES, HistoryMode
from agents.errors import AgentsError, PromptTooLongError, TemplateError, TrajectoryError
from agents.hf_policy import HFPolicy
from agents.ledger import TokenLedger, check_trajectory
from agents.limits import RolloutLimits, limit_prompt
from agents.policy import Completion, Policy, SamplingParams
from agents.render import ChatRenderer
from agents.rollout import RolloutBatch, RolloutStats, rollout, rollout_batch
from agents.scripted import ScriptedPolicy
from agents.trajectory import Segment, Trajectory
from agents.turns import build_samples, split_turns
from agents.vllm_policy import VLLMPolicy

__all__ = [
    "HISTORY_MODES",
    "AgentsError",
    "ChatRenderer",
    "Completion",
    "HFPolicy",
    "HistoryMode",
    "Policy",
    "PromptTooLongError",
    "RolloutBatch",
    "RolloutLimits",
    "RolloutStats",
    "SamplingParams",
    "ScriptedPolicy",
    "Segment",
    "TemplateError",
    "TokenLedger",
    "Trajectory",
    "TrajectoryError",
    "VLLMPolicy",
    "build_samples",
    "check_trajectory",
    "limit_prompt",
    "rollout",
    "rollout_batch",
    "split_turns",
]
