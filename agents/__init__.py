"""agents: policies, chat rendering, the rollout loop and verified token trajectories.

Token-in/token-out: the ids a policy sampled are never re-tokenised; every message the env
injects is rendered as a delta of the chat template and appended with loss mask 0.
"""

from agents.episode import RolloutLimits, limit_prompt
from agents.errors import AgentsError, PromptTooLongError, TemplateError, TrajectoryError
from agents.hf_policy import HFPolicy
from agents.ledger import TokenLedger, check_trajectory
from agents.policy import Completion, Policy, SamplingParams
from agents.render import ChatRenderer
from agents.rollout import RolloutBatch, RolloutStats, rollout, rollout_batch
from agents.scripted import ScriptedPolicy
from agents.trajectory import Segment, Trajectory
from agents.vllm_policy import VLLMPolicy

__all__ = [
    "AgentsError",
    "ChatRenderer",
    "Completion",
    "HFPolicy",
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
    "check_trajectory",
    "limit_prompt",
    "rollout",
    "rollout_batch",
]
