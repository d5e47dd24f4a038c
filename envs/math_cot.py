"""`stare/MathCoT-v0`: single-turn chain-of-thought math, graded on the final boxed answer."""

from __future__ import annotations

from collections.abc import Sequence

from envs.core import Grader, TextEnv
from tasks.task import Task


class MathCoTEnv(TextEnv):
    r"""Single-turn chain-of-thought math.

    ## Description
    One user prompt, one assistant answer. Short or long chain of thought is set by the task family
    (`short_cot`, `long_cot`) and by the generation budget the rollout loop gives the policy; the env
    itself is the same for both.

    ## Observation
    `reset` gives the optional system prompt and the user prompt (`prompt_template` with the task's
    problem). `step` returns no new messages: the episode is over after one turn.

    ## Action
    The assistant's full answer text. There are no tools (`info["tools"] == []`), so tool-call markup is
    just text and is graded like any other answer.

    ## Reward
    Accuracy in {0, 1} from `tasks.grade_task` on the answer (the last `\boxed{}`); a verifier timeout
    is its own grade status, never "wrong".

    ## Episode End
    Always terminated after the first step; never truncated.

    ## Arguments
    `dataset` (default "word-short-train"; a `tasks.load` name or a list of Task), `system_prompt`
    (default None), `prompt_template` (default None: the task's style from `tasks.format_prompt`, i.e. the
    reference "Please reason step by step, and put your final answer within \boxed{}." suffix), `grader`.

    ## Version History
    - v0: initial version.
    """

    def __init__(self, *, dataset: str | Sequence[Task] = "word-short-train",
                 system_prompt: str | None = None, prompt_template: str | None = None,
                 grader: Grader | str | None = None) -> None:
        super().__init__(dataset=dataset, grader=grader, system_prompt=system_prompt,
                         prompt_template=prompt_template, max_tool_turns=0)
